//! Processes by pidfd: opening one, signalling through it (no pid-reuse race), and taking a
//! copy of one of the process's file descriptors (`pidfd_getfd`, how `--adopt` gets a worker's
//! listening socket).
use std::{
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd},
};

/// A pidfd for `pid`.
pub fn open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: raw syscall with integer arguments; returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this fd to us and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Sends `signal` to the process behind `pidfd`. A process that is already gone is not an error.
pub fn send_signal(pidfd: &OwnedFd, signal: nix::sys::signal::Signal) -> io::Result<()> {
    // SAFETY: raw syscall on a pidfd we own, with a null siginfo, as pidfd_send_signal(2) allows.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal as libc::c_int,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if rc < 0 {
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::ESRCH) {
            return Ok(());
        }
        return Err(err);
    }
    Ok(())
}

/// Resolves when the process behind `pidfd` has exited (a pidfd polls readable then), whether
/// or not it is our child.
pub async fn exited(pidfd: OwnedFd) -> io::Result<()> {
    // SAFETY: the AsyncFd owns the pidfd for its whole life, so the fd it registers stays open
    // (and is not reused) until the registration is dropped with it.
    let fd = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE)
    }?;
    let _ = fd.readable().await?;
    Ok(())
}

/// Waits for child `pid` (behind `pidfd`) to exit and reaps it: its exit status. For every
/// worker (`os::fork` starts them, and after `ck upgrade` an earlier image did): no runtime
/// knows them as its children.
pub async fn wait_child(pidfd: OwnedFd, pid: u32) -> io::Result<std::process::ExitStatus> {
    use std::os::unix::process::ExitStatusExt as _;
    exited(pidfd).await?;
    let mut status: libc::c_int = 0;
    // SAFETY: waitpid on our own child with a pointer to a local int; the child has exited
    // (its pidfd polled readable), so this does not block.
    let rc = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) };
    if rc <= 0 {
        return Err(io::Error::other(
            "exited, but its exit status was reaped elsewhere (unknown)",
        ));
    }
    Ok(std::process::ExitStatus::from_raw(status))
}

/// Waits (blocking) for the child behind `pidfd`, one cloned with no exit signal
/// (`os::fork::socket_in`), and reaps it: its exit code, or an error if a signal ended it.
pub fn wait_clone(pidfd: &OwnedFd) -> io::Result<i32> {
    loop {
        // SAFETY: a zeroed siginfo is a valid out-parameter for waitid.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid on a pidfd we own (P_PIDFD), with a pointer to a local siginfo;
        // `__WALL` is needed for a child whose exit signal is not SIGCHLD.
        let rc = unsafe {
            libc::waitid(
                libc::P_PIDFD,
                pidfd.as_raw_fd() as libc::id_t,
                &mut info,
                libc::WEXITED | libc::__WALL,
            )
        };
        if rc < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        // SAFETY: waitid filled a CLD_* record, whose status field these read.
        let (code, status) = unsafe { (info.si_code, info.si_status()) };
        return match code {
            libc::CLD_EXITED => Ok(status),
            _ => Err(io::Error::other(format!("ended by signal {status}"))),
        };
    }
}

/// Whether the process behind `pidfd` has exited (its pidfd polls readable then, zombie or
/// reaped), without waiting.
pub fn has_exited(pidfd: &OwnedFd) -> bool {
    use std::os::fd::AsFd as _;
    let mut fds = [nix::poll::PollFd::new(
        pidfd.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO).is_ok_and(|n| n > 0)
}

/// When process `pid` started, in clock ticks since boot (`/proc/PID/stat` field 22): with the
/// pid, it names one process for good (a reused pid has another start time).
pub fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields go on after the last `)`.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// A copy (close-on-exec) of file descriptor `fd` of the process behind `pidfd`: the same open
/// file, as `dup` would give inside that process. Needs ptrace rights over it (root).
pub fn get_fd(pidfd: &OwnedFd, fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: raw syscall with a pidfd we own and integer arguments; returns a new fd or -1.
    let copy = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
    if copy < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just installed this fd in our table and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(copy as RawFd) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_ticks_name_a_process() {
        let mine = start_ticks(std::process::id()).unwrap();
        assert_eq!(start_ticks(std::process::id()), Some(mine));
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let theirs = start_ticks(child.id()).unwrap();
        assert!(theirs >= mine);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(start_ticks(child.id()), None, "a reaped process has none");
    }

    #[test]
    fn copies_a_descriptor_of_a_process() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let pidfd = open(std::process::id()).unwrap();
        let copy = get_fd(&pidfd, listener.as_raw_fd()).unwrap();
        let inode = |fd: RawFd| std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap();
        assert_eq!(inode(copy.as_raw_fd()), inode(listener.as_raw_fd()));
        assert_ne!(copy.as_raw_fd(), listener.as_raw_fd());
    }
}
