//! The supervisor's end of `NOTIFY_SOCKET`: one datagram socket per worker (abstract address, so
//! nothing is left on disk), so a message is attributed to its worker by the socket it came in
//! on. An abstract name can be guessed by any process in the network namespace, so the socket
//! asks the kernel for each sender's credentials (`SO_PASSCRED`) and a message counts only when
//! its sender is the worker or a process of the worker's tree ([`Speakers`]).
use std::{
    io, os::fd::AsRawFd as _, os::linux::net::SocketAddrExt, os::unix::net::SocketAddr,
    path::PathBuf,
};

use nix::sys::socket::{
    ControlMessageOwned, MsgFlags, UnixCredentials, recvmsg, setsockopt, sockopt,
};
use tokio::{io::Interest, net::UnixDatagram};

/// A message a worker sent (one datagram can carry several, one per line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotifyMsg {
    /// `READY=1`: serve me.
    Ready,
    /// `STOPPING=1`: stop sending me connections.
    Stopping,
    /// `WATCHDOG=1`: still alive.
    Watchdog,
    /// `STATUS=...`: free text for `ck status`.
    Status(String),
    /// Anything else (`MAINPID=`, `EXTEND_TIMEOUT_USEC=`, ...): proves the worker speaks the
    /// protocol.
    Other,
}

/// Parses one datagram.
pub fn parse(datagram: &[u8]) -> Vec<NotifyMsg> {
    String::from_utf8_lossy(datagram)
        .lines()
        .filter(|l| !l.is_empty())
        .map(|line| match line.split_once('=') {
            Some(("READY", "1")) => NotifyMsg::Ready,
            Some(("STOPPING", "1")) => NotifyMsg::Stopping,
            Some(("WATCHDOG", "1")) => NotifyMsg::Watchdog,
            Some(("STATUS", text)) => NotifyMsg::Status(text.to_string()),
            _ => NotifyMsg::Other,
        })
        .collect()
}

/// A bound notify socket and the value of `NOTIFY_SOCKET` that reaches it.
pub struct NotifySocket {
    /// The value for the worker's `NOTIFY_SOCKET` (`@` + abstract name).
    pub env_value: String,
    /// The socket to read (shared: the reader task reads it, the supervisor peeks at it).
    pub socket: std::sync::Arc<UnixDatagram>,
}

/// Whether a message waits on `socket`, unread (without reading it).
pub fn pending(socket: &UnixDatagram) -> bool {
    let mut byte = [std::mem::MaybeUninit::new(0u8)];
    // The socket is non-blocking (tokio's): an empty queue answers WouldBlock.
    socket2::SockRef::from(socket).peek(&mut byte).is_ok()
}

impl NotifySocket {
    /// Binds a fresh abstract socket for worker `worker` (unique in the instance) on `slot` of
    /// instance `name`.
    pub fn bind(name: &str, slot: u32, worker: u64) -> io::Result<NotifySocket> {
        let abstract_name = format!("ck/{name}/{}/{slot}/{worker}", std::process::id());
        Self::bind_abstract(abstract_name)
    }

    /// Binds the socket a worker's `NOTIFY_SOCKET` (`env_value`, `@` + abstract name) names
    /// again: a ck that takes back the workers of one that died (`--survive-supervisor`).
    pub fn rebind(env_value: &str) -> io::Result<NotifySocket> {
        let name = env_value
            .strip_prefix('@')
            .ok_or_else(|| io::Error::other(format!("{env_value} is not an abstract address")))?;
        Self::bind_abstract(name.to_string())
    }

    fn bind_abstract(abstract_name: String) -> io::Result<NotifySocket> {
        let addr = SocketAddr::from_abstract_name(abstract_name.as_bytes())?;
        let std_socket = std::os::unix::net::UnixDatagram::bind_addr(&addr)?;
        std_socket.set_nonblocking(true)?;
        setsockopt(&std_socket, sockopt::PassCred, &true)?;
        Ok(NotifySocket {
            env_value: format!("@{abstract_name}"),
            socket: std::sync::Arc::new(UnixDatagram::from_std(std_socket)?),
        })
    }
}

/// A worker's notify socket inherited from the image `ck upgrade` replaced (bound, with
/// `SO_PASSCRED` set, messages queued meanwhile still in it).
pub fn inherit(fd: std::os::fd::OwnedFd) -> io::Result<std::sync::Arc<UnixDatagram>> {
    let std_socket = std::os::unix::net::UnixDatagram::from(fd);
    std_socket.set_nonblocking(true)?;
    Ok(std::sync::Arc::new(UnixDatagram::from_std(std_socket)?))
}

/// Receives one datagram into `buf`: its length and the pid of the process that sent it (as the
/// kernel tells, `SCM_CREDENTIALS`; None if it did not).
pub async fn recv(socket: &UnixDatagram, buf: &mut [u8]) -> io::Result<(usize, Option<u32>)> {
    socket
        .async_io(Interest::READABLE, || {
            let mut iov = [io::IoSliceMut::new(buf)];
            // Room for the credentials only: descriptors a sender passes do not fit and are
            // closed by the kernel.
            let mut space = nix::cmsg_space!(UnixCredentials);
            let msg = recvmsg::<()>(
                socket.as_raw_fd(),
                &mut iov,
                Some(&mut space),
                MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_CMSG_CLOEXEC,
            )?;
            let pid = msg.cmsgs()?.find_map(|c| match c {
                ControlMessageOwned::ScmCredentials(cred) => u32::try_from(cred.pid()).ok(),
                _ => None,
            });
            Ok((msg.bytes, pid))
        })
        .await
}

/// The processes that may speak for one worker on its notify socket: the worker, and every
/// process of its tree (in its cgroup, or descended from it).
#[derive(Clone, Debug)]
pub struct Speakers {
    /// The worker's pid.
    pub worker: u32,
    /// Its cgroup's directory, where it has one.
    pub cgroup: Option<PathBuf>,
}

impl Speakers {
    /// Whether a message from `sender` counts.
    pub fn allow(&self, sender: Option<u32>) -> bool {
        let Some(pid) = sender else {
            return false;
        };
        pid == self.worker
            || self
                .cgroup
                .as_ref()
                .is_some_and(|dir| crate::os::cgroup::pids_in(dir).contains(&pid))
            || descends_from(pid, self.worker)
    }
}

/// Whether process `pid` is a descendant of `ancestor` (walking `/proc/PID/stat`'s parent
/// field up to init). False when `pid` is gone.
fn descends_from(pid: u32, ancestor: u32) -> bool {
    let mut pid = pid;
    for _ in 0..64 {
        match parent_of(pid) {
            Some(parent) if parent == ancestor => return true,
            Some(parent) if parent > 1 => pid = parent,
            _ => return false,
        }
    }
    false
}

/// The parent of `pid` (`/proc/PID/stat`, the field after the command name, which may hold
/// spaces and parentheses: the last `)` ends it).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_messages() {
        assert_eq!(
            parse(b"READY=1\nSTATUS=serving\nMAINPID=4\n"),
            vec![
                NotifyMsg::Ready,
                NotifyMsg::Status("serving".into()),
                NotifyMsg::Other
            ]
        );
        assert_eq!(parse(b"STOPPING=1"), vec![NotifyMsg::Stopping]);
        assert_eq!(parse(b"READY=0"), vec![NotifyMsg::Other]);
    }

    #[tokio::test]
    async fn receives_from_abstract_address() {
        let n = NotifySocket::bind("unit-test", 1, 1).unwrap();
        let client = std::os::unix::net::UnixDatagram::unbound().unwrap();
        let name = n.env_value.trim_start_matches('@');
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        client.send_to_addr(b"READY=1", &addr).unwrap();
        let mut buf = [0u8; 64];
        let (len, sender) = recv(&n.socket, &mut buf).await.unwrap();
        assert_eq!(parse(&buf[..len]), vec![NotifyMsg::Ready]);
        assert_eq!(
            sender,
            Some(std::process::id()),
            "the kernel names the sender"
        );
    }

    #[test]
    fn speakers_are_the_worker_and_its_descendants() {
        let me = std::process::id();
        let parent = parent_of(me).unwrap();
        let only_me = Speakers {
            worker: me,
            cgroup: None,
        };
        assert!(only_me.allow(Some(me)));
        assert!(
            !only_me.allow(Some(parent)),
            "an ancestor is not the worker's tree"
        );
        assert!(!only_me.allow(None), "no credentials, no trust");
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        assert!(
            only_me.allow(Some(child.id())),
            "a child speaks for its worker"
        );
        let parents = Speakers {
            worker: parent,
            cgroup: None,
        };
        assert!(parents.allow(Some(child.id())), "so does a grandchild");
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
