//! Readiness seen from the worker itself, for apps that never say `READY=1` (Node cannot send
//! datagrams on unix sockets; most servers never do): a worker is accepting when one of its
//! processes has its listening socket in an epoll set (`/proc/PID/fdinfo` of its epoll fds lists
//! the socket's inode), or has a thread blocked on it in `accept`/`accept4`, `poll`, `ppoll`,
//! `select` or `pselect6`, or for a UDP socket in `recvfrom`/`recvmsg`/`recvmmsg` (`/proc/PID/task/TID/syscall`, and the `pollfd` array or `fd_set` in
//! the worker's memory: [`waits`]). All read from `/proc`, no cooperation needed.
use std::fs;

mod waits;

/// How the worker showed it accepts: its epoll set, or the system call a thread of it waits
/// in (`waits` reads them by these names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accepting {
    /// Its listening socket is in one of its epoll sets (event-loop servers: Node, Go, nginx).
    Epoll,
    /// A thread is blocked in `accept` on it (thread-per-connection and forking servers).
    Accept,
    /// A thread waits in `poll` for it (JVMs, PHP, C servers, Python's `select.poll`).
    Poll,
    /// A thread waits in `ppoll` for it (`poll` on aarch64, Ruby's single-fd waits).
    Ppoll,
    /// A thread waits in `select` for it.
    Select,
    /// A thread waits in `pselect6` for it (glibc's `select`, Ruby's `IO.select`: puma).
    Pselect6,
    /// A thread waits in `recvfrom`, `recvmsg` or `recvmmsg` on it (a UDP server).
    Receive,
}

impl Accepting {
    /// Why the worker counts as ready, for logs.
    pub fn reason(self) -> &'static str {
        match self {
            Accepting::Epoll => "its listening socket is in its epoll set (accepting)",
            Accepting::Accept => "a thread of it waits in accept() on its listening socket",
            Accepting::Poll => "a thread of it waits in poll() on its listening socket",
            Accepting::Ppoll => "a thread of it waits in ppoll() on its listening socket",
            Accepting::Select => "a thread of it waits in select() on its listening socket",
            Accepting::Pselect6 => "a thread of it waits in pselect6() on its listening socket",
            Accepting::Receive => {
                "a thread of it waits in recvmsg() or recvfrom() on its UDP socket"
            }
        }
    }
}

/// Why ck cannot see whether `pids` accept (see [`accepting`]), if it cannot for any of them:
/// then only `READY=1` or the grace can say a silent worker is ready.
pub fn undetectable(pids: &[u32]) -> Option<String> {
    let mut why = None;
    for pid in pids {
        match waits::unreadable(*pid) {
            None => return None,
            Some(reason) => why = why.or(Some(reason)),
        }
    }
    why
}

/// Whether any of `pids` accepts on a socket whose inode is in `inodes`.
pub fn accepting(pids: &[u32], inodes: &[u64]) -> Option<Accepting> {
    if inodes.is_empty() {
        return None;
    }
    pids.iter().find_map(|pid| {
        if polls_any(*pid, inodes) {
            Some(Accepting::Epoll)
        } else {
            waiting_thread(*pid, inodes)
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

/// The call a thread of `pid` waits in for a connection on a socket of `inodes`, if one does.
fn waiting_thread(pid: u32, inodes: &[u64]) -> Option<Accepting> {
    let listening: Vec<i32> = fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .flatten()
        .filter_map(|fd| {
            let name = fd.file_name();
            let name = name.to_str()?;
            socket_inode(pid, name)
                .filter(|ino| inodes.contains(ino))
                .and_then(|_| name.parse().ok())
        })
        .collect();
    if listening.is_empty() {
        return None;
    }
    fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
        .find_map(|task| waits::waiting_on(pid, task.file_name().to_str()?, &listening))
}

#[cfg(test)]
mod tests {
    use std::{
        net::TcpListener,
        os::fd::{AsFd as _, AsRawFd as _, FromRawFd as _},
        time::Duration,
    };

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

    /// What `accepting` sees while a thread runs `wait` on a fresh listener's fd (up to 1 s),
    /// then wakes the thread with a connection.
    fn seen_while(wait: fn(i32)) -> Option<Accepting> {
        let me = std::process::id();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let inode = inode_of(&listener).unwrap();
        let fd = listener.as_raw_fd();
        let waiter = std::thread::spawn(move || wait(fd));
        let mut seen = None;
        for _ in 0..500 {
            seen = accepting(&[me], &[inode]);
            if seen.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let _ = std::net::TcpStream::connect(addr);
        waiter.join().unwrap();
        drop(listener);
        seen
    }

    #[test]
    fn sees_a_thread_blocked_in_accept() {
        let accept = |fd| {
            // SAFETY: `fd` is the test's listener, open until the thread is joined.
            let listener = unsafe { std::mem::ManuallyDrop::new(TcpListener::from_raw_fd(fd)) };
            listener.accept().unwrap();
        };
        assert_eq!(seen_while(accept), Some(Accepting::Accept));
    }

    #[test]
    fn sees_a_thread_blocked_in_recv_from_on_a_udp_socket() {
        let me = std::process::id();
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = socket.local_addr().unwrap();
        let inode = inode_of(&socket).unwrap();
        let receiver = socket.try_clone().unwrap();
        let waiter = std::thread::spawn(move || {
            let mut buf = [0u8; 16];
            receiver.recv_from(&mut buf).unwrap();
        });
        let mut seen = None;
        for _ in 0..500 {
            seen = accepting(&[me], &[inode]);
            if seen.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        client.send_to(b"x", addr).unwrap();
        waiter.join().unwrap();
        assert_eq!(seen, Some(Accepting::Receive));
    }

    #[test]
    fn sees_a_thread_waiting_in_poll() {
        let poll = |fd| {
            let mut fds = [
                libc::pollfd {
                    fd: 0,
                    events: 0,
                    revents: 0,
                },
                libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: `fds` is a valid array of 2 pollfds for the whole call.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, 5000) };
            assert_eq!(n, 1);
        };
        assert_eq!(seen_while(poll), Some(Accepting::Poll));
    }

    #[test]
    fn sees_a_thread_waiting_in_select() {
        let select = |fd| {
            // SAFETY: an all-zero fd_set is an empty one; FD_SET gets an fd below FD_SETSIZE.
            let mut read: libc::fd_set = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            unsafe { libc::FD_SET(fd, &mut read) };
            let mut timeout = libc::timeval {
                tv_sec: 5,
                tv_usec: 0,
            };
            let (null, nfds) = (std::ptr::null_mut(), fd + 1);
            // SAFETY: `read` and `timeout` outlive the call; the other sets are null.
            let n = unsafe { libc::select(nfds, &mut read, null, null, &mut timeout) };
            assert_eq!(n, 1);
        };
        // glibc implements select() with pselect6 on aarch64 and on current x86_64 builds.
        assert!(matches!(
            seen_while(select),
            Some(Accepting::Select | Accepting::Pselect6)
        ));
    }

    #[test]
    fn a_poll_on_other_fds_is_no_sign() {
        let me = std::process::id();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let inode = inode_of(&listener).unwrap();
        let (read, write) = nix::unistd::pipe().unwrap();
        let fd = read.as_raw_fd();
        let waiter = std::thread::spawn(move || {
            let mut fds = [libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            }];
            // SAFETY: `fds` is a valid array of 1 pollfd for the whole call.
            unsafe { libc::poll(fds.as_mut_ptr(), 1, 5000) };
        });
        std::thread::sleep(Duration::from_millis(100));
        let seen = accepting(&[me], &[inode]);
        nix::unistd::write(&write, b"x").unwrap();
        waiter.join().unwrap();
        assert_eq!(seen, None);
    }

    #[test]
    fn ck_can_see_its_own_threads() {
        assert_eq!(undetectable(&[std::process::id()]), None);
    }
}
