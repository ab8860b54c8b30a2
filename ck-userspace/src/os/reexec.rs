//! Re-executing ck in place (`ck upgrade`): the system-call edge. Chosen descriptors are kept
//! across `execve` (close-on-exec cleared on exactly those), the serialized state travels in a
//! memfd whose number the new image finds in [`HANDOVER_ENV`], the signals ck handles are
//! blocked across the exec (a signal that arrives meanwhile stays pending until the new image
//! has its handlers), and the new image takes the inherited descriptors back.
use std::{
    ffi::{CString, OsString},
    io::{self, Read as _, Seek as _, Write as _},
    os::{
        fd::{AsFd, BorrowedFd, FromRawFd as _, OwnedFd, RawFd},
        unix::ffi::OsStringExt as _,
    },
    path::Path,
};

use nix::{
    fcntl::{FcntlArg, FdFlag, fcntl},
    sys::signal::{SigSet, SigmaskHow, Signal, sigprocmask},
};

/// The environment variable that gives the new image the descriptor of its handover state.
pub const HANDOVER_ENV: &str = "CK_HANDOVER_FD";

/// The signals ck handles: blocked from just before `execve` until the new image's handlers
/// are installed, so none of them takes its default action (most end the process) meanwhile.
pub const HANDLED: [Signal; 6] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGUSR2,
    Signal::SIGTTIN,
    Signal::SIGTTOU,
];

fn handled() -> SigSet {
    let mut set = SigSet::empty();
    for signal in HANDLED {
        set.add(signal);
    }
    set
}

/// Blocks [`HANDLED`] in the calling thread (the mask survives `execve`).
pub fn block_handled() -> io::Result<()> {
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&handled()), None).map_err(io::Error::from)
}

/// Unblocks [`HANDLED`]: signals that arrived while blocked are delivered now.
pub fn unblock_handled() -> io::Result<()> {
    sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&handled()), None).map_err(io::Error::from)
}

/// Keeps `fd` open across `execve` (`keep`) or closes it there (the default of every
/// descriptor ck opens).
pub fn keep_across_exec(fd: BorrowedFd<'_>, keep: bool) -> io::Result<()> {
    let flags = if keep {
        FdFlag::empty()
    } else {
        FdFlag::FD_CLOEXEC
    };
    fcntl(fd, FcntlArg::F_SETFD(flags))
        .map(drop)
        .map_err(io::Error::from)
}

/// A memfd holding `bytes`, read from its start, kept across `execve`.
pub fn state_memfd(bytes: &[u8]) -> io::Result<OwnedFd> {
    let fd = nix::sys::memfd::memfd_create(c"ck-handover", nix::sys::memfd::MFdFlags::empty())?;
    let mut file = std::fs::File::from(fd);
    file.write_all(bytes)?;
    file.rewind()?;
    Ok(OwnedFd::from(file))
}

/// Everything in the handover memfd.
pub fn read_state(fd: OwnedFd) -> io::Result<Vec<u8>> {
    let mut file = std::fs::File::from(fd);
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Takes ownership of descriptor `fd`, inherited across `execve` from the image that handed
/// over, and sets close-on-exec on it again (so workers spawned later do not inherit it).
pub fn inherited(fd: RawFd) -> io::Result<OwnedFd> {
    if fd < 3 {
        return Err(io::Error::other(format!(
            "descriptor {fd} is not a handed-over one"
        )));
    }
    // SAFETY: F_GETFD only reads the descriptor's flags; it fails with EBADF when `fd` is not
    // open, which is checked before anything takes ownership of it.
    let open = unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0;
    if !open {
        return Err(io::Error::other(format!(
            "descriptor {fd} named in the handover is not open"
        )));
    }
    // SAFETY: `fd` is open (checked above) and was handed over to this image: the handover
    // lists each descriptor once and nothing else in this process owns it.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    keep_across_exec(owned.as_fd(), false)?;
    Ok(owned)
}

/// Replaces this process's image with `program` (same pid), with `args` (`argv[1..]`) and
/// ck's environment plus [`HANDOVER_ENV`]`=state`. Returns only on failure. The caller has
/// cleared close-on-exec on every descriptor to keep and blocked [`HANDLED`].
pub fn exec(program: &Path, args: &[OsString], state: RawFd) -> io::Error {
    let cstr = |bytes: Vec<u8>| CString::new(bytes).map_err(io::Error::other);
    let run = || -> io::Result<std::convert::Infallible> {
        let path = cstr(program.as_os_str().to_owned().into_vec())?;
        let mut argv = vec![path.clone()];
        for arg in args {
            argv.push(cstr(arg.clone().into_vec())?);
        }
        let mut env = Vec::new();
        for (key, value) in std::env::vars_os() {
            if key == HANDOVER_ENV {
                continue;
            }
            let mut entry = key.into_vec();
            entry.push(b'=');
            entry.extend(value.into_vec());
            env.push(cstr(entry)?);
        }
        env.push(cstr(format!("{HANDOVER_ENV}={state}").into_bytes())?);
        nix::unistd::execve(&path, &argv, &env).map_err(io::Error::from)
    };
    match run() {
        Ok(never) => match never {},
        Err(e) => e,
    }
}
