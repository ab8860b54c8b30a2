//! Starting a worker with the systemd socket-activation protocol and signalling it by pidfd.
//!
//! The child runs `/proc/self/exe exec-worker APP ARGS...` (a trampoline inside ck's own binary)
//! that sets `LISTEN_PID` to its own pid and then execs APP, so `LISTEN_PID` is right without
//! touching the environment between fork and exec. Its sockets are placed at fds 3.. before exec.
use std::{
    ffi::{CStr, CString, OsString},
    io,
    os::fd::{OwnedFd, RawFd},
    os::unix::process::CommandExt as _,
    process::Stdio,
};

use crate::settings::run_config::AppSpec;

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
    /// Listening sockets, in group order: they become fds 3, 4, ...
    pub fds: Vec<RawFd>,
    /// Group names for `LISTEN_FDNAMES`.
    pub fd_names: Vec<String>,
    /// Value of `NOTIFY_SOCKET`.
    pub notify_socket: String,
    /// Value of `WATCHDOG_USEC`, when heartbeats are on.
    pub watchdog_usec: Option<u64>,
    /// The `cgroup.procs` file of the worker's cgroup: the child moves itself there before it
    /// execs, so the whole tree it starts lives in that cgroup.
    pub cgroup_procs: Option<CString>,
    /// `--adopt`: the worker binds the port itself, gets `PORT` instead of inherited sockets,
    /// and runs APP directly (no `LISTEN_*` variables).
    pub adopt_port: Option<u16>,
    /// `--adopt`: every listen address of the instance (`CK_LISTEN`, space-separated), for apps
    /// that serve several groups.
    pub adopt_listen: Vec<std::net::SocketAddr>,
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
    /// The child, to wait on.
    pub child: tokio::process::Child,
    /// Its pid.
    pub pid: u32,
    /// A pidfd for signalling it without pid-reuse races.
    pub pidfd: OwnedFd,
}

/// Spawns a worker.
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
    let mut cmd = match spec.adopt_port {
        Some(port) => {
            let mut cmd = tokio::process::Command::new(&spec.app.program);
            let listen: Vec<String> = spec.adopt_listen.iter().map(|a| a.to_string()).collect();
            cmd.args(&spec.app.args)
                .env("PORT", port.to_string())
                .env("CK_LISTEN", listen.join(" "));
            cmd
        }
        None => {
            let mut cmd = tokio::process::Command::new("/proc/self/exe");
            cmd.arg("exec-worker")
                .arg("--")
                .arg(&spec.app.program)
                .args(&spec.app.args)
                .env("LISTEN_FDS", spec.fds.len().to_string())
                .env("LISTEN_FDNAMES", spec.fd_names.join(":"));
            cmd
        }
    };
    cmd.env_remove("LISTEN_PID")
        .env("NOTIFY_SOCKET", &spec.notify_socket)
        .env("CK_SLOT", spec.slot.to_string())
        .env("CK_WORKER_ID", spec.worker_id.to_string())
        .env_remove("WATCHDOG_USEC")
        .env_remove("WATCHDOG_PID")
        .env_remove(crate::os::reexec::HANDOVER_ENV)
        .stdin(Stdio::null())
        .process_group(0);
    if let Some([stdout, stderr]) = spec.output {
        cmd.stdout(Stdio::from(stdout)).stderr(Stdio::from(stderr));
    }
    if spec.adopt_port.is_some() {
        cmd.env_remove("LISTEN_FDS").env_remove("LISTEN_FDNAMES");
    }
    if let Some(usec) = spec.watchdog_usec {
        cmd.env("WATCHDOG_USEC", usec.to_string());
    }
    let mut fds = spec.fds;
    fds.extend(spec.keep_fds);
    let cgroup = spec.cgroup_procs;
    let fd_limit = spec.fd_limit;
    // Decided here: the comparison reads ck's groups, which allocates.
    let user = spec.user.map(|u| (u.clone(), !u.is_ck_itself()));
    let pdeathsig = spec.pdeathsig;
    let supervisor = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the forked child before exec and only makes async-signal-safe
    // system calls (open, write, close, fcntl, dup2, prctl, getppid, setrlimit, setgroups,
    // setgid, setuid, capset); it allocates nothing (`fds`, the cgroup path and the user were
    // built before the fork).
    unsafe {
        cmd.pre_exec(move || {
            if let Some(procs) = &cgroup {
                join_cgroup(procs)?;
            }
            if let Some(limit) = fd_limit {
                crate::os::fd_limit::restore_in_child(limit)?;
            }
            // Before `place_fds`: a change of credentials clears the parent-death signal.
            if let Some((user, switch_ids)) = &user {
                crate::os::privileges::switch_in_child(user, *switch_ids)?;
            }
            place_fds(&fds, supervisor, pdeathsig)
        });
    }
    let child = cmd.spawn().map_err(|e| match (spec.user, e.kind()) {
        (Some(user), io::ErrorKind::PermissionDenied) => io::Error::new(
            e.kind(),
            format!(
                "{e} (as --user {}: the app, and ck's own binary that starts it, must be \
                 executable by that user, and their directories searchable)",
                user.spec
            ),
        ),
        _ => e,
    })?;
    let pid = child
        .id()
        .ok_or_else(|| io::Error::other("worker exited before its pid was read"))?;
    let pidfd = crate::os::pidfd::open(pid)?;
    Ok(Spawned { child, pid, pidfd })
}

/// In a child before exec: moves the calling process into the cgroup whose `cgroup.procs` is
/// `procs` (writing "0" there moves the writer). Async-signal-safe: open, write, close.
pub fn join_cgroup(procs: &CStr) -> io::Result<()> {
    // SAFETY: open with a NUL-terminated path and flags; returns an fd or -1.
    let fd = unsafe { libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: writes one byte from a static buffer to the fd we just opened.
    let written = unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) };
    let err = io::Error::last_os_error();
    // SAFETY: closes the fd we opened.
    unsafe { libc::close(fd) };
    if written != 1 {
        return Err(err);
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
        return Err(io::Error::other("supervisor exited"));
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
