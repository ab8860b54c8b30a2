//! Every variant of every error enum of the library (and of `ck-worker`'s activation), rendered as `main` prints errors
//! (`anyhow::Error` with `{:#}`: the message, then each `source()` after `: `): each cause must
//! show exactly once. A cause belongs either in the message or in `source()`; both print it
//! twice, and the advice that follows it in the message then lands mid-line.
use std::{io, net::SocketAddr, path::PathBuf};

use ck_worker::activation::ActivationError;

use crate::{
    bpf::{BpfError, dump::DumpError, pins},
    metrics::server::MetricsError,
    os::{
        cgroup::CgroupError, instance::InstanceError, privileges::UserError, sockets::SocketError,
    },
    settings::{
        config_file::{ConfigFileError, Problem},
        run_config::{ConfigError, ListenAddr},
    },
};

/// The text of the cause each sample carries (an OS error, aya's or the kernel's).
const CAUSE: &str = "the disk caught fire";

/// An OS error that says [`CAUSE`].
fn os_error() -> io::Error {
    io::Error::other(CAUSE)
}

/// A chain of two, as aya's errors come: a step that failed and the OS error under it.
fn chain() -> anyhow::Error {
    anyhow::Error::new(os_error()).context("`bpf_obj_get` failed")
}

/// Samples of `$ty`, one per variant, each checked to be the variant it is listed as, and each
/// rendered through `anyhow::Error` with its label. The `match` without a wildcard does not
/// compile while a variant of `$ty` is missing from the list.
macro_rules! every_variant {
    ($ty:ident: $($variant:ident => $value:expr),+ $(,)?) => {{
        fn listed(e: &$ty) -> &'static str {
            match e {
                $($ty::$variant { .. } => stringify!($variant),)+
            }
        }
        vec![$({
            let e: $ty = $value;
            assert_eq!(listed(&e), stringify!($variant), "a sample listed as the wrong variant");
            (concat!(stringify!($ty), "::", stringify!($variant)), format!("{e:?}"), anyhow::Error::from(e))
        }),+]
    }};
}

/// One sample of every variant: (label, its `Debug`, the error).
fn samples() -> Vec<(&'static str, String, anyhow::Error)> {
    let addr = SocketAddr::from(([127, 0, 0, 1], 9100));
    let listen = ListenAddr::tcp4_any(8080);
    let path = PathBuf::from("/sys/fs/bpf/ck/web");
    let advice = "run with --no-bpf".to_string();
    let mut all = Vec::new();
    all.extend(every_variant!(MetricsError:
        InUse => MetricsError::InUse { addr, holder: " of pid 7 (nginx)".into() },
        Permission => MetricsError::Permission { addr },
        NotLocal => MetricsError::NotLocal { addr },
        Other => MetricsError::Other { addr, error: os_error() },
    ));
    all.extend(every_variant!(SocketError:
        InUse => SocketError::InUse { addr: listen, port: 8080, holder: String::new() },
        Permission => SocketError::Permission { addr: listen },
        NotLocal => SocketError::NotLocal { addr: listen },
        Other => SocketError::Other { addr: listen, error: os_error() },
    ));
    all.extend(every_variant!(InstanceError:
        AlreadyRunning => InstanceError::AlreadyRunning { name: "web".into() },
        RunDir => InstanceError::RunDir { path: "/run/ck".into(), error: os_error() },
    ));
    all.extend(every_variant!(CgroupError:
        NotMounted => CgroupError::NotMounted,
        Io => CgroupError::Io { what: "creating", path: path.clone(), error: os_error() },
    ));
    all.extend(every_variant!(UserError:
        UnknownUser => UserError::UnknownUser("www".into()),
        UnknownGroup => UserError::UnknownGroup("www".into()),
        NoGroup => UserError::NoGroup(1234),
        Malformed => UserError::Malformed,
        Lookup => UserError::Lookup(nix::errno::Errno::EIO),
    ));
    all.extend(every_variant!(ActivationError:
        NotActivated => ActivationError::NotActivated,
        MissingPid => ActivationError::MissingPid,
        WrongPid => ActivationError::WrongPid { listen_pid: "1".into(), our_pid: 2 },
        InvalidCount => ActivationError::InvalidCount("x".into()),
        NameCount => ActivationError::NameCount { names: 1, fds: 2 },
        BadFd => ActivationError::BadFd { fd: 3, name: "http".into(), error: os_error() },
    ));
    all.extend(every_variant!(DumpError:
        Missing => DumpError::Missing { what: "map `slots`".into(), path: "/x".into() },
        Open => DumpError::Open { path: "/x".into(), error: chain() },
        Layout => DumpError::Layout { path: "/x".into(), expected: "array", error: chain() },
        Read => DumpError::Read { path: "/x".into(), key: 1, error: chain() },
    ));
    all.extend(every_variant!(BpfError:
        NoBpffs => BpfError::NoBpffs(CAUSE.into()),
        Load => BpfError::Load { what: "loading".into(), error: chain(), advice },
        MapWrite => BpfError::MapWrite { map: "slots", error: chain() },
        Pin => pins::error(
            "creating pin directory",
            &path,
            io::Error::new(io::ErrorKind::PermissionDenied, CAUSE),
        ),
    ));
    all.extend(every_variant!(ConfigError:
        BadListen => ConfigError::BadListen("tcp://x".into()),
        ListenPortZero => ConfigError::ListenPortZero("tcp://0.0.0.0:0".into()),
        BadWorkers => ConfigError::BadWorkers(0),
        BadName => ConfigError::BadName("a.b".into()),
        DuplicateListen => ConfigError::DuplicateListen(listen),
        BadApp => ConfigError::BadApp { app: "./app".into(), reason: CAUSE.into() },
    ));
    all.extend(every_variant!(ConfigFileError:
        Read => ConfigFileError::Read { path: path.clone(), error: os_error() },
        NotToml => ConfigFileError::NotToml { path: path.clone(), message: CAUSE.into() },
        Invalid => ConfigFileError::Invalid {
            path: path.clone(),
            problems: vec![Problem { line: 2, key: "wokers".into(), message: CAUSE.into() }],
        },
    ));
    all
}

#[test]
fn every_error_shows_each_cause_once() {
    for (label, debug, error) in samples() {
        let shown = format!("{error:#}");
        let wanted = usize::from(debug.contains(CAUSE));
        assert_eq!(
            shown.matches(CAUSE).count(),
            wanted,
            "{label} shows its cause {} times: {shown}",
            shown.matches(CAUSE).count()
        );
        // Whatever `source()` holds must not be in the message already.
        let message = error.to_string();
        for cause in error.chain().skip(1) {
            assert!(
                !message.contains(&cause.to_string()),
                "{label} has its cause {cause:?} both in its message and as source(): {shown}"
            );
        }
    }
}
