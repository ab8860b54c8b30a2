//! Starting a child process without waiting on the kernel: `clone3` with `CLONE_PIDFD` (its
//! pidfd comes with it, no pid-reuse window) and, for a worker, `CLONE_INTO_CGROUP`, so the
//! child is born in its cgroup. Moving a process into a cgroup afterwards (a write to
//! `cgroup.procs`) takes the kernel's cgroup thread-group lock for writing, and the first such
//! write after a quiet period waits for an RCU grace period (~12-15 ms here), during which the
//! parent's `spawn` (and so ck's event loop) waits for the child. Kernels without
//! `CLONE_INTO_CGROUP` (before 5.7) get `fork` and the child's own write to `cgroup.procs`.
//!
//! The child is a copy of a multi-threaded process: until `execve` it makes only raw system
//! calls (no allocation, no lock, nothing that thinks other threads exist: glibc's and musl's
//! `setuid` would signal the parent's threads), reports a failure as its errno through a
//! close-on-exec pipe, and `_exit`s. The parent does not wait for it: it reads that pipe later,
//! without blocking ([`ExecReport`]), until it closes (the exec happened) or carries an errno.
use std::{
    ffi::{CStr, CString},
    io,
    os::fd::{AsRawFd as _, BorrowedFd, FromRawFd as _, OwnedFd, RawFd},
};

/// `CLONE_INTO_CGROUP` (linux/sched.h; not in every libc).
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `struct clone_args` (linux/sched.h), up to `cgroup` (`CLONE_ARGS_SIZE_VER2`).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// What to execute: everything built before the clone, so the child allocates nothing.
pub struct Exec {
    path: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
}

impl Exec {
    /// `path` run with `argv` (its first element is `argv[0]`) in the environment `envp`
    /// (`KEY=VALUE` strings).
    pub fn new(path: CString, argv: Vec<CString>, envp: Vec<CString>) -> Exec {
        Exec { path, argv, envp }
    }
}

/// Where the child is born.
pub enum Cgroup<'a> {
    /// In the parent's cgroup.
    Parent,
    /// In this cgroup: its directory (for `CLONE_INTO_CGROUP`) and its `cgroup.procs` (for
    /// the fallback's write).
    Into(BorrowedFd<'a>, &'a CStr),
}

/// A started child.
pub struct Child {
    /// Its pid.
    pub pid: u32,
    /// Its pidfd.
    pub pidfd: OwnedFd,
    /// Whether it got as far as its exec (read later, off the caller's path).
    pub exec: ExecReport,
}

/// The read end of the child's report pipe: closed empty by a successful exec, or an errno
/// from a child that failed before (which then exits 127).
pub struct ExecReport(OwnedFd);

impl ExecReport {
    /// Waits for the exec without blocking the thread: `Err` with the child's errno if it
    /// failed.
    pub async fn result(self) -> io::Result<()> {
        // SAFETY: the AsyncFd owns the pipe for its whole life, so the fd it registers stays
        // open (and is not reused) until the registration is dropped with it.
        let fd = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(self.0, tokio::io::Interest::READABLE)
        }?;
        loop {
            let mut guard = fd.readable().await?;
            match guard.try_io(|fd| read_report(fd.get_ref())) {
                Ok(result) => return result,
                Err(_would_block) => continue,
            }
        }
    }

    /// The same, blocking the calling thread.
    pub fn wait(self) -> io::Result<()> {
        set_nonblocking(&self.0, false)?;
        read_report(&self.0)
    }
}

fn set_nonblocking(fd: &OwnedFd, on: bool) -> io::Result<()> {
    // SAFETY: fcntl on an fd we own, with integer arguments.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    let flags = match on {
        true => flags | libc::O_NONBLOCK,
        false => flags & !libc::O_NONBLOCK,
    };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Starts `exec` in a new child process, after `setup` has run in the child (only raw system
/// calls, no allocation: it runs in a copy of a multi-threaded process). The child gets its
/// own process group, `stdin` as fd 0, an empty signal mask and SIGPIPE's default action.
/// Returns at once: the parent waits neither for the child's setup nor for its exec; whether
/// the exec happened is [`Child::exec`]'s to tell (a child that failed exits 127).
pub fn spawn(
    exec: &Exec,
    cgroup: Cgroup<'_>,
    stdin: BorrowedFd<'_>,
    setup: &mut dyn FnMut() -> io::Result<()>,
) -> io::Result<Child> {
    let argv: Vec<*const libc::c_char> = exec
        .argv
        .iter()
        .map(|a| a.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let envp: Vec<*const libc::c_char> = exec
        .envp
        .iter()
        .map(|e| e.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let (report_read, report_write) = pipe()?;
    let mut pidfd: libc::c_int = -1;
    let mut args = CloneArgs {
        flags: libc::CLONE_PIDFD as u64,
        pidfd: &mut pidfd as *mut libc::c_int as u64,
        exit_signal: libc::SIGCHLD as u64,
        ..CloneArgs::default()
    };
    if let Cgroup::Into(dir, _) = cgroup {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = dir.as_raw_fd() as u64;
    }
    // SAFETY: clone3 with a valid `clone_args` of the size passed, without CLONE_VM: like
    // fork, it returns 0 in a child with a copy of our memory and the child's pid here.
    let mut rc = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &mut args as *mut CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    let mut join = None;
    if rc < 0 {
        let err = io::Error::last_os_error();
        if !matches!(
            err.raw_os_error(),
            Some(libc::ENOSYS | libc::E2BIG | libc::EINVAL)
        ) {
            return Err(err);
        }
        // An older kernel: fork, and the child joins its cgroup itself.
        join = match cgroup {
            Cgroup::Into(_, procs) => Some(procs),
            Cgroup::Parent => None,
        };
        // SAFETY: fork; the child only runs `child` below, which makes raw system calls.
        rc = unsafe { libc::fork() } as libc::c_long;
        pidfd = -1;
    }
    if rc == 0 {
        // SAFETY: we are the child; `child` never returns.
        unsafe {
            child(
                exec,
                &argv,
                &envp,
                join,
                stdin.as_raw_fd(),
                report_write.as_raw_fd(),
                setup,
            )
        }
    }
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let pid = rc as u32;
    drop(report_write);
    let pidfd = match pidfd {
        // SAFETY: clone3 stored a new pidfd that nothing else owns.
        fd if fd >= 0 => unsafe { OwnedFd::from_raw_fd(fd) },
        _ => crate::os::pidfd::open(pid)?,
    };
    set_nonblocking(&report_read, true)?;
    Ok(Child {
        pid,
        pidfd,
        exec: ExecReport(report_read),
    })
}

/// A new socket (`socket(2)`'s `domain`, `kind`, `protocol`; close-on-exec) created in the
/// cgroup `cgroup` (a directory's fd): a socket belongs to the cgroup of the process that
/// creates it, for good, and cgroup BPF programs run for it there. A short-lived child born in
/// that cgroup (`clone3`'s `CLONE_INTO_CGROUP`) sharing this process's fd table
/// (`CLONE_FILES`) creates it on a descriptor reserved here, and exits; the calling thread
/// waits for it (`CLONE_VFORK`, then its pidfd). The child sends no `SIGCHLD` (exit signal 0), so
/// no reaper of ck's workers meets it. Fails on kernels without `CLONE_INTO_CGROUP` (5.7).
pub fn socket_in(
    cgroup: BorrowedFd<'_>,
    domain: libc::c_int,
    kind: libc::c_int,
    protocol: libc::c_int,
) -> io::Result<OwnedFd> {
    // The descriptor the child puts the socket on: reserved here, so nothing else takes it.
    let reserved = std::fs::File::open("/dev/null")?;
    let target: RawFd = reserved.as_raw_fd();
    let mut pidfd: libc::c_int = -1;
    let mut args = CloneArgs {
        flags: (libc::CLONE_PIDFD | libc::CLONE_FILES | libc::CLONE_VFORK) as u64
            | CLONE_INTO_CGROUP,
        pidfd: &mut pidfd as *mut libc::c_int as u64,
        exit_signal: 0,
        cgroup: cgroup.as_raw_fd() as u64,
        ..CloneArgs::default()
    };
    // SAFETY: clone3 with a valid `clone_args` of the size passed, without CLONE_VM: like
    // fork, it returns 0 in a child with a copy of our memory (and, CLONE_FILES, our fd table).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &mut args as *mut CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if rc == 0 {
        // The child: raw system calls only (see the module's comment), then `_exit` with 0 or
        // the errno (< 256).
        // SAFETY: integer arguments; `target` is open in the table shared with the parent,
        // whose thread waits (CLONE_VFORK) until this exits.
        unsafe {
            let fd = libc::socket(domain, kind | libc::SOCK_CLOEXEC, protocol);
            if fd < 0 || libc::dup3(fd, target, libc::O_CLOEXEC) < 0 {
                libc::_exit(*libc::__errno_location() & 0xff);
            }
            libc::close(fd);
            libc::_exit(0)
        }
    }
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: clone3 stored a new pidfd that nothing else owns.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    let code = crate::os::pidfd::wait_clone(&pidfd)?;
    if code != 0 {
        return Err(io::Error::from_raw_os_error(code));
    }
    Ok(OwnedFd::from(reserved))
}

/// A close-on-exec pipe: (read end, write end).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1 as RawFd; 2];
    // SAFETY: pipe2 fills the two-int array it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 just returned these fds; nothing else owns them.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `Err` with the errno the child wrote before it exited, `Ok` once the pipe closed empty
/// (the exec); `WouldBlock` while neither happened on a non-blocking pipe.
fn read_report(pipe: &OwnedFd) -> io::Result<()> {
    let mut buf = [0u8; 4];
    loop {
        // SAFETY: reads at most 4 bytes into a local buffer from a pipe we own.
        let n = unsafe { libc::read(pipe.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        match n {
            4 => return Err(io::Error::from_raw_os_error(i32::from_ne_bytes(buf))),
            n if n < 0 => {
                let err = io::Error::last_os_error();
                if err.kind() != io::ErrorKind::Interrupted {
                    return Err(err);
                }
            }
            // 0: closed by the exec. A short read cannot happen (4 bytes are atomic in a pipe).
            _ => return Ok(()),
        }
    }
}

/// The child, up to `execve`; on any failure, writes errno to `report` and exits 127.
///
/// # Safety
/// Only in a child just cloned or forked: it never returns.
unsafe fn child(
    exec: &Exec,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
    join: Option<&CStr>,
    stdin: RawFd,
    report: RawFd,
    setup: &mut dyn FnMut() -> io::Result<()>,
) -> ! {
    let result: io::Result<()> = (|| {
        if let Some(procs) = join {
            join_cgroup(procs)?;
        }
        setup()?;
        // SAFETY: raw system calls with integer arguments and local, initialised sigsets.
        unsafe {
            if libc::setpgid(0, 0) < 0 || libc::dup2(stdin, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            libc::execve(exec.path.as_ptr(), argv.as_ptr(), envp.as_ptr());
        }
        Err(io::Error::last_os_error())
    })();
    let errno = result
        .err()
        .and_then(|e| e.raw_os_error())
        .unwrap_or(libc::EINVAL);
    let bytes = errno.to_ne_bytes();
    // SAFETY: writes 4 bytes from a local array to the pipe's write end, then exits without
    // running anything of the parent's (no atexit handlers, no destructors).
    unsafe {
        libc::write(report, bytes.as_ptr().cast(), bytes.len());
        libc::_exit(127)
    }
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

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd as _;

    use super::*;

    fn exec(argv: &[&str], env: &[&str]) -> Exec {
        let c = |s: &&str| CString::new(*s).unwrap();
        Exec::new(
            c(&argv[0]),
            argv.iter().map(c).collect(),
            env.iter().map(c).collect(),
        )
    }

    /// Starts `argv` with `setup`, and returns its exec's result and its wait status.
    fn run(
        argv: &[&str],
        env: &[&str],
        setup: &mut dyn FnMut() -> io::Result<()>,
    ) -> (io::Result<()>, libc::c_int) {
        let null = std::fs::File::open("/dev/null").unwrap();
        let child = spawn(&exec(argv, env), Cgroup::Parent, null.as_fd(), setup).unwrap();
        let exec = child.exec.wait();
        let mut status = 0;
        // SAFETY: waitpid on our own child with a pointer to a local int.
        let rc = unsafe { libc::waitpid(child.pid as libc::pid_t, &mut status, 0) };
        assert_eq!(rc, child.pid as libc::pid_t);
        (exec, status)
    }

    /// The child runs the program with exactly the given environment, in a process group of
    /// its own, and its exit status is ours to reap.
    #[test]
    fn a_child_execs_with_its_environment_and_own_process_group() {
        // /proc/PID/stat: pid (comm) state ppid pgrp ...
        let script = r#"read -r _ _ _ _ pgrp _ < /proc/$$/stat
            [ "$CK_TEST" = yes ] && [ -z "$HOME" ] && [ "$pgrp" = $$ ] && exit 7"#;
        let env = ["CK_TEST=yes", "PATH=/usr/bin:/bin"];
        let (exec, status) = run(&["/bin/sh", "-c", script], &env, &mut || Ok(()));
        exec.unwrap();
        assert!(libc::WIFEXITED(status), "{status:#x}");
        assert_eq!(libc::WEXITSTATUS(status), 7);
    }

    /// A program that cannot be executed, or a setup that fails in the child, is reported
    /// with its errno, and that child exits 127.
    #[test]
    fn a_failed_exec_or_setup_is_reported_and_the_child_exits_127() {
        let (exec, status) = run(&["/nonexistent/ck-test"], &[], &mut || Ok(()));
        let err = exec.expect_err("no such program");
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT), "{err}");
        assert_eq!(libc::WEXITSTATUS(status), 127);
        let mut fail = || Err(io::Error::from_raw_os_error(libc::EPERM));
        let (exec, status) = run(&["/bin/true"], &[], &mut fail);
        let err = exec.expect_err("setup failed");
        assert_eq!(err.raw_os_error(), Some(libc::EPERM), "{err}");
        assert_eq!(libc::WEXITSTATUS(status), 127);
    }
}
