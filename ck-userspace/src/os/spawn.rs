//! Starting a worker with the systemd socket-activation protocol and signalling it by pidfd.
//!
//! The child runs `/proc/self/exe exec-worker APP ARGS...` (a trampoline inside ck's own binary)
//! that sets `LISTEN_PID` to its own pid and then execs APP, so `LISTEN_PID` is right without
//! touching the environment between fork and exec. Its sockets are placed at fds 3.. before exec.
//! The process itself is started by [`crate::os::fork`] (born in its cgroup).
use std::{
    collections::BTreeMap,
    ffi::{CString, OsStr, OsString},
    io,
    os::fd::{AsFd as _, AsRawFd as _, OwnedFd, RawFd},
    os::unix::{ffi::OsStringExt as _, process::CommandExt as _},
};

use crate::{os::fork, settings::run_config::AppSpec};

/// Most listen groups one worker can receive.
pub const MAX_GROUPS: usize = 16;

/// What a new worker gets.
pub struct SpawnSpec<'a> {
    /// The program and its arguments.
    pub app: &'a AppSpec,
    /// Its slot (`CK_SLOT`).
    pub slot: u32,
    /// Unique id of this worker in the instance (`CK_WORKER_ID`).
    pub worker_id: u64,
    /// `--udp-mode quic`: the server ID its QUIC connection IDs carry (`CK_QUIC_SERVER_ID`, hex).
    pub quic_server_id: Option<String>,
    /// Listening sockets, in group order: they become fds 3, 4, ...
    pub fds: Vec<RawFd>,
    /// Group names for `LISTEN_FDNAMES`.
    pub fd_names: Vec<String>,
    /// Value of `NOTIFY_SOCKET`.
    pub notify_socket: String,
    /// Value of `WATCHDOG_USEC`, when heartbeats are on.
    pub watchdog_usec: Option<u64>,
    /// The worker's cgroup: the child is born there (or, on kernels before 5.7, moves itself
    /// there before it execs), so the whole tree it starts lives in that cgroup.
    pub cgroup: Option<&'a crate::os::cgroup::WorkerCgroup>,
    /// `--adopt`: the worker binds the port itself, gets `PORT` instead of inherited sockets,
    /// and runs APP directly (no `LISTEN_*` variables).
    pub adopt_port: Option<u16>,
    /// `--adopt`: every listen address of the instance (`CK_LISTEN`, space-separated: TCP ones
    /// as `HOST:PORT`, UDP ones as `udp://HOST:PORT`), for apps that serve several groups.
    pub adopt_listen: Vec<String>,
    /// The open-file limit ck was started with, given back to the worker (ck raised its own).
    pub fd_limit: Option<crate::os::fd_limit::FdLimit>,
    /// `--user`: the worker takes this user's groups, group and uid and drops every capability
    /// before exec (after joining its cgroup, which is ck's).
    pub user: Option<&'a crate::os::privileges::WorkerUser>,
    /// SIGTERM the worker when ck dies (`PR_SET_PDEATHSIG`); off with `--survive-supervisor`.
    pub pdeathsig: bool,
    /// `--worker-output capture`: the write ends of its stdout and stderr pipes (else it
    /// inherits ck's).
    pub output: Option<[OwnedFd; 2]>,
    /// Further descriptors it holds, placed after its sockets (not counted in `LISTEN_FDS`):
    /// with `--survive-supervisor`, the read ends of its own output pipes, so that its writes
    /// never meet a pipe without a reader (SIGPIPE) while no ck runs.
    pub keep_fds: Vec<RawFd>,
}

/// Most further descriptors ([`SpawnSpec::keep_fds`]) a worker can hold.
pub const MAX_KEPT: usize = 2;

/// A started worker.
pub struct Spawned {
    /// Its pid.
    pub pid: u32,
    /// A pidfd for signalling it (and waiting for it: [`crate::os::pidfd::wait_child`])
    /// without pid-reuse races.
    pub pidfd: OwnedFd,
    /// Whether it exec'd (the trampoline or, with `--adopt`, APP).
    pub exec: ExecOutcome,
}

/// Whether a worker exec'd, told after [`spawn`] returned: the caller does not wait for it.
pub struct ExecOutcome {
    report: fork::ExecReport,
    /// `--user` as given, for the hint on a permission error.
    user: Option<String>,
}

impl ExecOutcome {
    /// Resolves once the worker exec'd (`Ok`) or failed to (the error, with the fix for a
    /// `--user` that may not execute it; the worker then exits 127).
    pub async fn result(self) -> io::Result<()> {
        self.report
            .result()
            .await
            .map_err(|e| match (self.user, e.kind()) {
                (Some(user), io::ErrorKind::PermissionDenied) => io::Error::new(
                    e.kind(),
                    format!(
                        "{e} (as --user {user}: the app, and ck's own binary that starts it, \
                         must be executable by that user, and their directories searchable)"
                    ),
                ),
                _ => e,
            })
    }
}

/// Spawns a worker with [`crate::os::fork`]: born in its cgroup (`clone3` with
/// `CLONE_INTO_CGROUP`), so neither ck's loop nor the child waits for a cgroup migration, and
/// ck does not wait for the child's exec either ([`Spawned::exec`] tells how it went).
pub fn spawn(spec: SpawnSpec<'_>) -> io::Result<Spawned> {
    if spec.fds.len() > MAX_GROUPS {
        return Err(io::Error::other(format!(
            "at most {MAX_GROUPS} listen addresses are supported"
        )));
    }
    if spec.keep_fds.len() > MAX_KEPT {
        return Err(io::Error::other(format!(
            "at most {MAX_KEPT} further descriptors can be kept"
        )));
    }
    let exec = exec_of(&spec)?;
    let stdin = std::fs::File::open("/dev/null")?;
    let cgroup_dir = spec
        .cgroup
        .map(|c| std::fs::File::open(c.dir()))
        .transpose()?;
    let cgroup = match (spec.cgroup, &cgroup_dir) {
        (Some(c), Some(dir)) => fork::Cgroup::Into(dir.as_fd(), c.procs_file()),
        _ => fork::Cgroup::Parent,
    };
    // Held open until the child has its copies (closed here after the spawn).
    let output = spec.output;
    let output_fds = output.as_ref().map(|[o, e]| [o.as_raw_fd(), e.as_raw_fd()]);
    let mut fds = spec.fds;
    fds.extend(spec.keep_fds.iter().copied());
    let fd_limit = spec.fd_limit;
    // Decided here: the comparison reads ck's groups, which allocates.
    let user = spec.user.map(|u| (u.clone(), !u.is_ck_itself()));
    let pdeathsig = spec.pdeathsig;
    let supervisor = std::process::id() as libc::pid_t;
    // In the child, in this order (its cgroup it was born in): the open-file limit, the user,
    // the fds at 3.. and the parent-death signal. Raw system calls only.
    let mut setup = move || {
        if let Some(limit) = fd_limit {
            crate::os::fd_limit::restore_in_child(limit)?;
        }
        // Before `place_fds`: a change of credentials clears the parent-death signal.
        if let Some((user, switch_ids)) = &user {
            crate::os::privileges::switch_in_child(user, *switch_ids)?;
        }
        // Before `place_fds`, whose dup2 onto 3.. could close a pipe's write end.
        if let Some(output) = output_fds {
            output_to_pipes(output)?;
        }
        place_fds(&fds, supervisor, pdeathsig)
    };
    let child = fork::spawn(&exec, cgroup, stdin.as_fd(), &mut setup)?;
    drop(output);
    Ok(Spawned {
        pid: child.pid,
        pidfd: child.pidfd,
        exec: ExecOutcome {
            report: child.exec,
            user: spec.user.map(|u| u.spec.clone()),
        },
    })
}

/// The program, arguments and environment of the worker `spec` describes: ck's environment
/// with the activation protocol's variables set (and stale ones removed).
fn exec_of(spec: &SpawnSpec<'_>) -> io::Result<fork::Exec> {
    let mut env: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
    for stale in [
        "LISTEN_PID",
        "LISTEN_FDS",
        "LISTEN_FDNAMES",
        "WATCHDOG_USEC",
        "WATCHDOG_PID",
        crate::os::reexec::HANDOVER_ENV,
    ] {
        env.remove(OsStr::new(stale));
    }
    let mut set = |key: &str, value: String| {
        env.insert(key.into(), value.into());
    };
    let (path, mut argv): (OsString, Vec<OsString>) = match spec.adopt_port {
        Some(port) => {
            set("PORT", port.to_string());
            set("CK_LISTEN", spec.adopt_listen.join(" "));
            let program = spec.app.program.clone().into_os_string();
            (program.clone(), vec![program])
        }
        None => {
            set("LISTEN_FDS", spec.fds.len().to_string());
            set("LISTEN_FDNAMES", spec.fd_names.join(":"));
            let trampoline = OsString::from("/proc/self/exe");
            let argv = ["exec-worker", "--"].map(OsString::from);
            let mut all = vec![trampoline.clone()];
            all.extend(argv);
            all.push(spec.app.program.clone().into_os_string());
            (trampoline, all)
        }
    };
    argv.extend(spec.app.args.iter().map(OsString::from));
    set("NOTIFY_SOCKET", spec.notify_socket.clone());
    set("CK_SLOT", spec.slot.to_string());
    set("CK_WORKER_ID", spec.worker_id.to_string());
    if let Some(id) = &spec.quic_server_id {
        set("CK_QUIC_SERVER_ID", id.clone());
    }
    if let Some(usec) = spec.watchdog_usec {
        set("WATCHDOG_USEC", usec.to_string());
    }
    let envp = env
        .into_iter()
        .map(|(key, value)| {
            let mut entry = key;
            entry.push("=");
            entry.push(value);
            c_string(entry)
        })
        .collect::<io::Result<_>>()?;
    let argv = argv.into_iter().map(c_string).collect::<io::Result<_>>()?;
    Ok(fork::Exec::new(c_string(path)?, argv, envp))
}

/// `s` as a C string; a NUL inside is an error naming it.
fn c_string(s: OsString) -> io::Result<CString> {
    CString::new(s.into_vec()).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{:?} holds a NUL byte, which no program argument or environment variable can",
                String::from_utf8_lossy(&e.into_vec())
            ),
        )
    })
}

/// In the child: makes the pipes' write ends `[stdout, stderr]` its fds 1 and 2
/// (`--worker-output capture`). Raw system calls only.
fn output_to_pipes([stdout, stderr]: [RawFd; 2]) -> io::Result<()> {
    for (fd, target) in [(stdout, 1), (stderr, 2)] {
        // SAFETY: dup2 of an fd the parent holds open onto 1 or 2; returns -1 on error.
        if unsafe { libc::dup2(fd, target) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// In the child: moves `fds` (the sockets, then the kept descriptors) to 3, 4, ... (clearing
/// close-on-exec there) and, with `pdeathsig`,
/// asks for SIGTERM should the supervisor die, so no worker outlives it.
fn place_fds(fds: &[RawFd], supervisor: libc::pid_t, pdeathsig: bool) -> io::Result<()> {
    let n = fds.len() as libc::c_int;
    let mut tmp: [RawFd; MAX_GROUPS + MAX_KEPT] = [-1; MAX_GROUPS + MAX_KEPT];
    // First copy every fd above the target range so dup2 never overwrites a source.
    for (i, fd) in fds.iter().enumerate() {
        // SAFETY: fcntl on an fd we own; returns a new fd or -1.
        let t = unsafe { libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, 3 + n) };
        if t < 0 {
            return Err(io::Error::last_os_error());
        }
        tmp[i] = t;
    }
    for (i, t) in tmp.iter().take(fds.len()).enumerate() {
        // SAFETY: dup2 onto fd 3+i; the new fd does not have close-on-exec set.
        if unsafe { libc::dup2(*t, 3 + i as libc::c_int) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: prctl with integer arguments only.
    if pdeathsig && unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: getppid cannot fail. If the supervisor already died we were re-parented: stop.
    if unsafe { libc::getppid() } != supervisor {
        // ESRCH ("no such process"): errors here carry an errno only (nothing is allocated).
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    Ok(())
}

/// The `exec-worker` trampoline: runs in the worker process, sets `LISTEN_PID` to its own pid
/// and replaces itself with the application. Returns only on failure.
pub fn exec_worker(program: OsString, args: Vec<OsString>) -> io::Error {
    let mut cmd = std::process::Command::new(&program);
    cmd.args(args)
        .env("LISTEN_PID", std::process::id().to_string());
    let err = cmd.exec();
    io::Error::new(
        err.kind(),
        format!("cannot exec {}: {err}", program.to_string_lossy()),
    )
}
