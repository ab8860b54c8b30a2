//! ck's open-file limit: raised to the hard limit for ck itself (every worker's sockets, pidfds,
//! notify sockets and control clients are ck's fds), and put back for the workers, which get the
//! limit ck was started with (programs that use `select()` break above 1024 fds).
use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// The open-file limit ck was started with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FdLimit {
    /// Soft limit.
    pub soft: u64,
    /// Hard limit.
    pub hard: u64,
}

/// Raises ck's soft `RLIMIT_NOFILE` to its hard limit and returns the limit it had before (to
/// hand to the workers), or `None` when the limit cannot be read.
pub fn raise() -> Option<FdLimit> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft < hard
        && let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard)
    {
        tracing::warn!(soft, hard, error = %e, "cannot raise the open-file limit");
    }
    Some(FdLimit { soft, hard })
}

/// In a forked child before exec: sets `RLIMIT_NOFILE` back to `limit`. Async-signal-safe (one
/// system call, no allocation).
pub fn restore_in_child(limit: FdLimit) -> std::io::Result<()> {
    let rlim = libc::rlimit {
        rlim_cur: limit.soft,
        rlim_max: limit.hard,
    };
    // SAFETY: setrlimit reads the struct it is given and nothing else.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &rlim) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raise_returns_the_limit_before_and_leaves_soft_at_hard() {
        let (soft0, hard0) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        let before = raise().unwrap();
        assert_eq!(
            before,
            FdLimit {
                soft: soft0,
                hard: hard0
            }
        );
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        assert_eq!((soft, hard), (hard0, hard0));
        setrlimit(Resource::RLIMIT_NOFILE, soft0, hard0).unwrap();
    }
}
