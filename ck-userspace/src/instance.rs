//! One running `ck run` per name: its run-time files (`/run/ck/<name>.sock`, `<name>.lock`) and
//! the lock that tells a live instance from the leftovers of a crashed one.
use std::{
    fs::{self, File, OpenOptions},
    os::unix::fs::{DirBuilderExt, OpenOptionsExt},
    path::PathBuf,
};

use nix::fcntl::{Flock, FlockArg};

/// Directory of control sockets and locks: `$CK_RUN_DIR`, else `/run/ck`.
pub fn run_dir() -> PathBuf {
    std::env::var_os("CK_RUN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/run/ck"))
}

/// Control socket of instance `name`.
pub fn control_path(name: &str) -> PathBuf {
    run_dir().join(format!("{name}.sock"))
}

fn lock_path(name: &str) -> PathBuf {
    run_dir().join(format!("{name}.lock"))
}

/// Why an instance could not claim its name.
#[derive(Debug, thiserror::Error)]
pub enum InstanceError {
    /// Another live instance holds the name.
    #[error(
        "a ck instance named {name:?} is already running (see `ck status --name {name}`); \
         stop it with `ck stop --name {name}` or pick another --name"
    )]
    AlreadyRunning {
        /// The name.
        name: String,
    },
    /// The run directory is not usable.
    #[error("cannot use {path}: {source}; run as root or set CK_RUN_DIR to a writable directory")]
    RunDir {
        /// The path.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// The claim on a name, held for the instance's lifetime; released (and its files removed) on
/// drop. The kernel drops the lock when the process dies, so a crash leaves no live claim.
pub struct InstanceLock {
    name: String,
    _lock: Flock<File>,
}

impl InstanceLock {
    /// Claims `name`, or fails when a live instance holds it.
    pub fn acquire(name: &str) -> Result<InstanceLock, InstanceError> {
        let dir = run_dir();
        let io_err = |source| InstanceError::RunDir {
            path: dir.display().to_string(),
            source,
        };
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&dir)
            .map_err(io_err)?;
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(lock_path(name))
            .map_err(io_err)?;
        let lock = Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|_| {
            InstanceError::AlreadyRunning {
                name: name.to_string(),
            }
        })?;
        Ok(InstanceLock {
            name: name.to_string(),
            _lock: lock,
        })
    }
}

impl Drop for InstanceLock {
    fn drop(&mut self) {
        let _ = fs::remove_file(control_path(&self.name));
        let _ = fs::remove_file(lock_path(&self.name));
    }
}
