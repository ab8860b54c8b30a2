//! Readiness seen from the worker itself, for apps that never say `READY=1` (Node cannot send
//! datagrams on unix sockets; most servers never do): a worker is accepting when one of its
//! processes has its listening socket in an epoll set (`/proc/PID/fdinfo` of its epoll fds lists
//! the socket's inode), or has a thread blocked in `accept`/`accept4` on it
//! (`/proc/PID/task/TID/syscall`). Both are read from `/proc`, no cooperation needed.
use std::fs;

/// How the worker showed it accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accepting {
    /// Its listening socket is in one of its epoll sets (event-loop servers: Node, Go, nginx).
    Epoll,
    /// A thread is blocked in `accept` on it (thread-per-connection and forking servers).
    Accept,
}

impl Accepting {
    /// Why the worker counts as ready, for logs.
    pub fn reason(self) -> &'static str {
        match self {
            Accepting::Epoll => "its listening socket is in its epoll set (accepting)",
            Accepting::Accept => "a thread of it waits in accept() on its listening socket",
        }
    }
}

/// `accept` and `accept4` syscall numbers of this architecture.
#[cfg(target_arch = "x86_64")]
const ACCEPT_SYSCALLS: [u64; 2] = [43, 288];
#[cfg(target_arch = "aarch64")]
const ACCEPT_SYSCALLS: [u64; 2] = [202, 242];
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const ACCEPT_SYSCALLS: [u64; 2] = [u64::MAX, u64::MAX];

/// Whether any of `pids` accepts on a socket whose inode is in `inodes`.
pub fn accepting(pids: &[u32], inodes: &[u64]) -> Option<Accepting> {
    if inodes.is_empty() {
        return None;
    }
    pids.iter().find_map(|pid| {
        if polls_any(*pid, inodes) {
            Some(Accepting::Epoll)
        } else if blocked_in_accept(*pid, inodes) {
            Some(Accepting::Accept)
        } else {
            None
        }
    })
}

/// The inode of `/proc/PID/fd/FD` if it is a socket.
fn socket_inode(pid: u32, fd: &str) -> Option<u64> {
    let link = fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()?;
    link.to_str()?
        .strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// Whether one of `pid`'s epoll fds watches a socket of `inodes`.
fn polls_any(pid: u32, inodes: &[u64]) -> bool {
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        let is_epoll =
            fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == "anon_inode:[eventpoll]");
        is_epoll
            && fs::read_to_string(format!(
                "/proc/{pid}/fdinfo/{}",
                fd.file_name().to_string_lossy()
            ))
            .is_ok_and(|info| epoll_targets(&info).any(|ino| inodes.contains(&ino)))
    })
}

/// The inodes an epoll fdinfo lists (`tfd: ... ino:HEX ...` lines).
fn epoll_targets(fdinfo: &str) -> impl Iterator<Item = u64> + '_ {
    fdinfo
        .lines()
        .filter(|l| l.starts_with("tfd:"))
        .filter_map(|l| {
            let hex = l.split_whitespace().find_map(|w| w.strip_prefix("ino:"))?;
            u64::from_str_radix(hex, 16).ok()
        })
}

/// Whether a thread of `pid` is blocked in `accept`/`accept4` on a socket of `inodes`.
fn blocked_in_accept(pid: u32, inodes: &[u64]) -> bool {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().any(|task| {
        let Ok(syscall) = fs::read_to_string(task.path().join("syscall")) else {
            return false;
        };
        let mut fields = syscall.split_whitespace();
        let number = fields.next().and_then(|n| n.parse::<u64>().ok());
        let fd = fields
            .next()
            .and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok());
        match (number, fd) {
            (Some(n), Some(fd)) if ACCEPT_SYSCALLS.contains(&n) => {
                socket_inode(pid, &fd.to_string()).is_some_and(|ino| inodes.contains(&ino))
            }
            _ => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use std::{net::TcpListener, os::fd::AsFd as _, time::Duration};

    use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};

    use super::*;
    use crate::os::sock_diag::inode_of;

    #[test]
    fn parses_epoll_fdinfo() {
        let info = "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\n\
                    tfd:        5 events:       19 data:                5  pos:0 ino:9d64 sdev:8\n\
                    tfd:        7 events:       19 data:                7  pos:0 ino:1a sdev:8\n";
        assert_eq!(epoll_targets(info).collect::<Vec<_>>(), [0x9d64, 0x1a]);
    }

    #[test]
    fn sees_a_listener_in_an_epoll_set() {
        let me = std::process::id();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let inode = inode_of(&listener).unwrap();
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).unwrap();
        assert_ne!(accepting(&[me], &[inode]), Some(Accepting::Epoll));
        epoll
            .add(listener.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, 1))
            .unwrap();
        assert_eq!(accepting(&[me], &[inode]), Some(Accepting::Epoll));
    }

    #[test]
    fn sees_a_thread_blocked_in_accept() {
        let me = std::process::id();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let inode = inode_of(&listener).unwrap();
        let waiter = std::thread::spawn(move || listener.accept().map(drop));
        let mut seen = None;
        for _ in 0..500 {
            seen = accepting(&[me], &[inode]);
            if seen.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let _ = std::net::TcpStream::connect(addr);
        waiter.join().unwrap().unwrap();
        assert_eq!(seen, Some(Accepting::Accept));
    }
}
