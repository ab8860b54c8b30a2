//! The worker's side of systemd socket activation (`LISTEN_FDS`) and readiness notification
//! (`NOTIFY_SOCKET`): what a program started by `ck run` (or by systemd) calls to take the
//! sockets it was handed and to tell its supervisor when it is ready or stopping.
//!
//! Used by the demo worker ([`crate::demo`]) and by Rust servers that depend on this crate
//! (`examples/activation.rs`, and `examples/rust` at the workspace root).
use std::{
    io,
    os::{
        fd::{FromRawFd, OwnedFd, RawFd},
        linux::net::SocketAddrExt,
        unix::net::{SocketAddr, UnixDatagram},
    },
    time::Duration,
};

/// The first file descriptor the protocol passes (`SD_LISTEN_FDS_START`); the others follow it.
pub const LISTEN_FDS_START: RawFd = 3;

/// Why [`listen_fds`] could not hand over the sockets.
#[derive(Debug, thiserror::Error)]
pub enum ActivationError {
    /// `LISTEN_FDS` is absent: the program was not socket-activated.
    #[error(
        "this program expects to be started by `ck run` (or systemd socket activation); \
         LISTEN_FDS is not set"
    )]
    NotActivated,
    /// `LISTEN_FDS` is set but `LISTEN_PID` is not.
    #[error(
        "LISTEN_FDS is set but LISTEN_PID is not, so the sockets cannot be known to be ours; \
         start this program with `ck run` (or systemd socket activation)"
    )]
    MissingPid,
    /// `LISTEN_PID` names another process: the variables were inherited, not meant for us.
    #[error(
        "LISTEN_PID is {listen_pid} but this process is {our_pid}: the sockets were handed to \
         another process (were the variables inherited through a wrapper that forked?); \
         start this program directly with `ck run` or exec it from the wrapper"
    )]
    WrongPid {
        /// The value of `LISTEN_PID`.
        listen_pid: String,
        /// Our process id.
        our_pid: u32,
    },
    /// `LISTEN_FDS` (the value held) is not a count of descriptors.
    #[error("LISTEN_FDS={0:?} is not a valid count (expected a non-negative integer)")]
    InvalidCount(String),
    /// `LISTEN_FDNAMES` does not have one name per descriptor.
    #[error("LISTEN_FDNAMES has {names} names but LISTEN_FDS is {fds}; they must match")]
    NameCount {
        /// How many names `LISTEN_FDNAMES` has.
        names: usize,
        /// The value of `LISTEN_FDS`.
        fds: usize,
    },
    /// One of the passed descriptors is not open, or could not be marked close-on-exec.
    #[error("file descriptor {fd} from LISTEN_FDS ({name}) is unusable: {error}")]
    BadFd {
        /// The descriptor.
        fd: RawFd,
        /// Its name from `LISTEN_FDNAMES`.
        name: String,
        /// What `fcntl` said (part of the message, not a separate cause).
        error: io::Error,
    },
}

/// Takes the sockets passed by systemd-style socket activation, with their names.
///
/// Checks that `LISTEN_PID` is this process, reads the count `n` from `LISTEN_FDS` and the
/// colon-separated names from `LISTEN_FDNAMES` (each `"unknown"` when it is unset), then returns
/// descriptors `3..3+n`, each marked close-on-exec so children do not inherit it. The three
/// variables are removed from the environment whatever the outcome, so children do not
/// mistake them for their own and a second call returns [`ActivationError::NotActivated`].
///
/// Call this once, at the start of `main`, before any thread is started: it modifies the
/// environment, which is not safe while other threads may read it.
///
/// # Errors
/// See [`ActivationError`]; each message tells the user what to do.
pub fn listen_fds() -> Result<Vec<(String, OwnedFd)>, ActivationError> {
    let var = |name| std::env::var(name).ok();
    let parsed = parse_listen_env(
        var("LISTEN_PID").as_deref(),
        var("LISTEN_FDS").as_deref(),
        var("LISTEN_FDNAMES").as_deref(),
        std::process::id(),
    );
    for name in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        // SAFETY: the documented contract of `listen_fds` is that it runs at the start of the
        // program, before any other thread exists that could read the environment concurrently.
        unsafe { std::env::remove_var(name) };
    }
    let mut fds = Vec::new();
    for (fd, name) in parsed? {
        if let Err(error) = set_cloexec(fd) {
            return Err(ActivationError::BadFd { fd, name, error });
        }
        // SAFETY: the protocol hands descriptors 3..3+n to this process (LISTEN_PID checked),
        // `set_cloexec` just proved this one open, and we take ownership exactly once: the
        // variables that describe it are gone, so no later call can wrap it again.
        fds.push((name, unsafe { OwnedFd::from_raw_fd(fd) }));
    }
    Ok(fds)
}

/// Checks the activation variables (given as values) and lists the descriptors and names.
fn parse_listen_env(
    listen_pid: Option<&str>,
    listen_fds: Option<&str>,
    listen_fdnames: Option<&str>,
    our_pid: u32,
) -> Result<Vec<(RawFd, String)>, ActivationError> {
    let count = listen_fds.ok_or(ActivationError::NotActivated)?;
    let listen_pid = listen_pid.ok_or(ActivationError::MissingPid)?;
    if listen_pid.trim().parse::<u32>() != Ok(our_pid) {
        return Err(ActivationError::WrongPid {
            listen_pid: listen_pid.to_string(),
            our_pid,
        });
    }
    let invalid = || ActivationError::InvalidCount(count.to_string());
    let n: usize = count.trim().parse().map_err(|_| invalid())?;
    let last = RawFd::try_from(n)
        .ok()
        .and_then(|n| LISTEN_FDS_START.checked_add(n))
        .ok_or_else(invalid)?;
    let names = parse_fd_names(listen_fdnames, n)?;
    Ok((LISTEN_FDS_START..last).zip(names).collect())
}

/// Splits `LISTEN_FDNAMES` into `n` names; `"unknown"` for each when it is unset.
fn parse_fd_names(listen_fdnames: Option<&str>, n: usize) -> Result<Vec<String>, ActivationError> {
    let Some(joined) = listen_fdnames else {
        return Ok(vec!["unknown".to_string(); n]);
    };
    if n == 0 && joined.is_empty() {
        return Ok(Vec::new());
    }
    let names: Vec<String> = joined.split(':').map(str::to_string).collect();
    if names.len() != n {
        return Err(ActivationError::NameCount {
            names: names.len(),
            fds: n,
        });
    }
    Ok(names)
}

/// Sets `FD_CLOEXEC` on `fd` (the only descriptor flag), failing with `EBADF` if it is not open.
fn set_cloexec(fd: RawFd) -> io::Result<()> {
    // SAFETY: F_SETFD takes an integer argument and only changes the close-on-exec flag of
    // `fd`; on a descriptor that is not open it fails with EBADF, so any integer is fine.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sends readiness and status messages to the supervisor over `NOTIFY_SOCKET` (`sd_notify`).
///
/// Without `NOTIFY_SOCKET` every method does nothing and succeeds, so the same program runs
/// with or without a supervisor.
#[derive(Debug)]
pub struct Notifier {
    target: Option<(UnixDatagram, SocketAddr)>,
}

impl Notifier {
    /// Connects to the socket named by `NOTIFY_SOCKET`, or makes a no-op notifier when the
    /// variable is unset or empty. The variable is left in place.
    ///
    /// # Errors
    /// When the value is not a valid socket address (too long, or neither an absolute path nor
    /// `@abstract`), or no datagram socket can be created.
    pub fn from_env() -> io::Result<Notifier> {
        match std::env::var_os("NOTIFY_SOCKET") {
            Some(value) if !value.is_empty() => {
                let value = value.into_string().map_err(|v| {
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("NOTIFY_SOCKET={v:?} is not valid UTF-8"),
                    )
                })?;
                Notifier::new(&value)
            }
            _ => Ok(Notifier::disabled()),
        }
    }

    /// A notifier that sends to `notify_socket`, in `NOTIFY_SOCKET` syntax: an absolute path,
    /// or `@name` for a Linux abstract socket.
    ///
    /// # Errors
    /// As for [`Notifier::from_env`].
    pub fn new(notify_socket: &str) -> io::Result<Notifier> {
        let addr = if let Some(name) = notify_socket.strip_prefix('@') {
            SocketAddr::from_abstract_name(name.as_bytes())?
        } else if notify_socket.starts_with('/') {
            SocketAddr::from_pathname(notify_socket)?
        } else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("NOTIFY_SOCKET={notify_socket:?} is neither an absolute path nor @name"),
            ));
        };
        let socket = UnixDatagram::unbound()?;
        // A supervisor that stops reading must not hang us forever.
        socket.set_write_timeout(Some(Duration::from_secs(1)))?;
        Ok(Notifier {
            target: Some((socket, addr)),
        })
    }

    /// A notifier that sends nothing.
    pub fn disabled() -> Notifier {
        Notifier { target: None }
    }

    /// Whether messages go anywhere (`NOTIFY_SOCKET` was set).
    pub fn is_enabled(&self) -> bool {
        self.target.is_some()
    }

    /// Sends `msg` as one datagram: one or more `KEY=VALUE` lines, e.g. `"READY=1\nSTATUS=up"`.
    ///
    /// # Errors
    /// When the datagram cannot be sent (supervisor gone, or not reading for a second).
    pub fn notify(&self, msg: &str) -> io::Result<()> {
        match &self.target {
            Some((socket, addr)) => socket.send_to_addr(msg.as_bytes(), addr).map(drop),
            None => Ok(()),
        }
    }

    /// Sends `READY=1`: the supervisor may now send us connections.
    ///
    /// # Errors
    /// As for [`Notifier::notify`].
    pub fn ready(&self) -> io::Result<()> {
        self.notify("READY=1")
    }

    /// Sends `STOPPING=1`: we are shutting down; send no more connections.
    ///
    /// # Errors
    /// As for [`Notifier::notify`].
    pub fn stopping(&self) -> io::Result<()> {
        self.notify("STOPPING=1")
    }

    /// Sends `STATUS=<status>`: one line of free text shown by `ck status`. Line breaks in
    /// `status` are replaced by spaces, since each line of a message is a separate assignment.
    ///
    /// # Errors
    /// As for [`Notifier::notify`].
    pub fn status(&self, status: &str) -> io::Result<()> {
        self.notify(&format!("STATUS={}", status.replace(['\n', '\r'], " ")))
    }

    /// Sends `WATCHDOG=1`: we are still alive.
    ///
    /// # Errors
    /// As for [`Notifier::notify`].
    pub fn watchdog(&self) -> io::Result<()> {
        self.notify("WATCHDOG=1")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The variables as they would be for process 4242.
    fn parse(pid: Option<&str>, fds: Option<&str>, names: Option<&str>) -> Vec<(RawFd, String)> {
        parse_listen_env(pid, fds, names, 4242).unwrap()
    }

    fn reject(pid: Option<&str>, fds: Option<&str>, names: Option<&str>) -> ActivationError {
        parse_listen_env(pid, fds, names, 4242).unwrap_err()
    }

    #[test]
    fn parses_names_and_counts() {
        let fds = parse(Some("4242"), Some("2"), Some("web:admin"));
        assert_eq!(fds, [(3, "web".into()), (4, "admin".into())]);
        let fds = parse(Some("4242"), Some("2"), None);
        assert_eq!(fds, [(3, "unknown".into()), (4, "unknown".into())]);
        assert_eq!(parse(Some("4242"), Some("0"), None), []);
        assert_eq!(parse(Some("4242"), Some("0"), Some("")), []);
        assert_eq!(parse_fd_names(Some("a::c"), 3).unwrap(), ["a", "", "c"]);
        assert_eq!(parse_fd_names(Some(""), 1).unwrap(), [""]);
    }

    #[test]
    fn rejects_bad_environments() {
        let msg = reject(None, None, None).to_string();
        assert!(msg.contains("`ck run`") && msg.contains("LISTEN_FDS is not set"));
        assert!(matches!(
            reject(None, Some("1"), None),
            ActivationError::MissingPid
        ));
        let msg = reject(Some("1"), Some("1"), None).to_string();
        assert!(
            msg.contains("LISTEN_PID is 1 but this process is 4242"),
            "{msg}"
        );
        let msg = reject(Some("4242"), Some("x"), None).to_string();
        assert!(msg.contains("LISTEN_FDS=\"x\""), "{msg}");
        for bad in ["-1", "99999999999"] {
            let err = reject(Some("4242"), Some(bad), None);
            assert!(matches!(err, ActivationError::InvalidCount(_)));
        }
        let err = reject(Some("4242"), Some("2"), Some("web"));
        assert!(matches!(
            err,
            ActivationError::NameCount { names: 1, fds: 2 }
        ));
    }

    #[test]
    fn notifier_sends_to_path_and_abstract_sockets() {
        let dir = std::env::temp_dir().join(format!("ck-notify-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let by_path = UnixDatagram::bind(&path).unwrap();
        let name = format!("ck-notify-test/{}", std::process::id());
        let by_name =
            UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap())
                .unwrap();
        let mut buf = [0u8; 256];
        for (socket, value) in [
            (&by_path, path.to_str().unwrap().to_string()),
            (&by_name, format!("@{name}")),
        ] {
            let notifier = Notifier::new(&value).unwrap();
            assert!(notifier.is_enabled());
            notifier.ready().unwrap();
            notifier.status("a\nb").unwrap();
            notifier.stopping().unwrap();
            notifier.watchdog().unwrap();
            for want in ["READY=1", "STATUS=a b", "STOPPING=1", "WATCHDOG=1"] {
                let n = socket.recv(&mut buf).unwrap();
                assert_eq!(&buf[..n], want.as_bytes());
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(Notifier::new("relative/path").is_err());
        let off = Notifier::disabled();
        assert!(!off.is_enabled());
        off.ready().unwrap();
    }

    /// Runs itself again in a fresh process whose fd 3 is a listener, with the variables set as
    /// `ck run` sets them (bash's `$$` is the pid that `exec` keeps); that process (the child
    /// role, chosen by `CK_TEST_ACTIVATION_ADDR`) takes the socket with `listen_fds()`.
    #[test]
    fn listen_fds_takes_passed_socket() {
        if let Ok(addr) = std::env::var("CK_TEST_ACTIVATION_ADDR") {
            return child_takes_listen_fds(&addr);
        }
        use nix::fcntl::{FcntlArg, FdFlag, fcntl};
        use std::os::fd::AsRawFd;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        fcntl(&listener, FcntlArg::F_SETFD(FdFlag::empty())).unwrap();
        let test = concat!(module_path!(), "::listen_fds_takes_passed_socket");
        let test = test.split_once("::").map_or(test, |(_, rest)| rest);
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(r#"exec 3<&"$CK_TEST_FD" && LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=web exec "$0" "$@""#)
            .arg(std::env::current_exe().unwrap())
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env("CK_TEST_FD", listener.as_raw_fd().to_string())
            .env("CK_TEST_ACTIVATION_ADDR", listener.local_addr().unwrap().to_string())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("child ok: web"), "{stdout}");
    }

    /// The child role of [`listen_fds_takes_passed_socket`].
    fn child_takes_listen_fds(addr: &str) {
        let fds = listen_fds().unwrap();
        assert_eq!(fds.len(), 1);
        let (name, fd) = fds.into_iter().next().unwrap();
        let flags = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_GETFD).unwrap();
        assert_ne!(flags & libc::FD_CLOEXEC, 0);
        let listener = std::net::TcpListener::from(fd);
        assert_eq!(listener.local_addr().unwrap().to_string(), addr);
        for var in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
            assert!(std::env::var_os(var).is_none(), "{var} still set");
        }
        assert!(matches!(listen_fds(), Err(ActivationError::NotActivated)));
        println!("child ok: {name}");
    }
}
