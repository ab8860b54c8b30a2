//! One running `ck run` per name: its run-time files (`/run/ck/<name>.sock`, `<name>.lock`,
//! `<name>.state`) and the lock that tells a live instance from the leftovers of a crashed one.
use std::{
    fs::{self, File, OpenOptions},
    os::unix::fs::{DirBuilderExt, OpenOptionsExt},
    path::{Path, PathBuf},
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
    control_in(&run_dir(), name)
}

/// Lock file of instance `name`.
pub fn lock_path(name: &str) -> PathBuf {
    lock_in(&run_dir(), name)
}

/// The `--survive-supervisor` state file of instance `name`.
pub fn state_path(name: &str) -> PathBuf {
    run_dir().join(format!("{name}.state"))
}

/// Control socket of instance `name` in the run directory `dir`.
fn control_in(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.sock"))
}

/// Lock file of instance `name` in the run directory `dir`.
fn lock_in(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.lock"))
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
    #[error("cannot use {path}: {error}; run as root or set CK_RUN_DIR to a writable directory")]
    RunDir {
        /// The path.
        path: String,
        /// The OS error (part of the message, not a separate cause).
        error: std::io::Error,
    },
}

/// The claim on a name, held for the instance's lifetime; released (and its files removed) on
/// drop. The kernel drops the lock when the process dies, so a crash leaves no live claim.
pub struct InstanceLock {
    lock_file: PathBuf,
    control: PathBuf,
    _lock: Flock<File>,
}

impl InstanceLock {
    /// Claims `name`, or fails when a live instance holds it.
    ///
    /// The lock is taken on the file the path names *now*: an instance that exits unlinks its
    /// lock file while it still holds the lock, so a starter that opened that file just before
    /// could lock an unlinked inode while a third locks the new file. Such a lock is dropped
    /// and taken again on the file at the path.
    pub fn acquire(name: &str) -> Result<InstanceLock, InstanceError> {
        Self::acquire_in(&run_dir(), name)
    }

    /// [`InstanceLock::acquire`] with the run directory `dir`.
    fn acquire_in(dir: &Path, name: &str) -> Result<InstanceLock, InstanceError> {
        let io_err = |error| InstanceError::RunDir {
            path: dir.display().to_string(),
            error,
        };
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .map_err(io_err)?;
        let path = lock_in(dir, name);
        loop {
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .mode(0o600)
                .open(&path)
                .map_err(io_err)?;
            let lock = Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|_| {
                InstanceError::AlreadyRunning {
                    name: name.to_string(),
                }
            })?;
            if still_at(&lock, &path).map_err(io_err)? {
                return Ok(InstanceLock {
                    lock_file: path,
                    control: control_in(dir, name),
                    _lock: lock,
                });
            }
        }
    }
}

/// Whether the locked `file` is still the one at `path` (not unlinked or replaced meanwhile).
fn still_at(file: &File, path: &Path) -> std::io::Result<bool> {
    use std::os::unix::fs::MetadataExt as _;
    let held = file.metadata()?;
    match fs::metadata(path) {
        Ok(now) => Ok(now.dev() == held.dev() && now.ino() == held.ino()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

impl InstanceLock {
    /// The lock file's descriptor (the lock belongs to its open file), for `ck upgrade` to
    /// hand over.
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd as _;
        self._lock.as_fd()
    }

    /// Takes the lock on `name` back from `fd`, inherited from the image `ck upgrade`
    /// replaced: the lock is that open file's, so locking it again succeeds at once.
    pub fn inherit(name: &str, fd: std::os::fd::OwnedFd) -> Result<InstanceLock, InstanceError> {
        let dir = run_dir();
        let lock = Flock::lock(File::from(fd), FlockArg::LockExclusiveNonblock).map_err(|_| {
            InstanceError::AlreadyRunning {
                name: name.to_string(),
            }
        })?;
        Ok(InstanceLock {
            lock_file: lock_in(&dir, name),
            control: control_in(&dir, name),
            _lock: lock,
        })
    }
}

impl Drop for InstanceLock {
    fn drop(&mut self) {
        // Both go while the lock is still held (it is released when `_lock` drops, after this).
        let _ = fs::remove_file(&self.control);
        let _ = fs::remove_file(&self.lock_file);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn temp_dir(what: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ck-instance-{what}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_second_claim_fails_while_the_first_lives_and_succeeds_after() {
        let dir = temp_dir("second");
        let first = InstanceLock::acquire_in(&dir, "web").unwrap();
        assert!(matches!(
            InstanceLock::acquire_in(&dir, "web"),
            Err(InstanceError::AlreadyRunning { .. })
        ));
        drop(first);
        assert!(!dir.join("web.lock").exists(), "the lock file is removed");
        let again = InstanceLock::acquire_in(&dir, "web").unwrap();
        drop(again);
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Threads claim and release one name as fast as they can; with the lock-then-unlink race,
    /// two of them would hold it at once now and then.
    #[test]
    fn never_two_holders_while_claims_and_releases_race() {
        let dir = temp_dir("race");
        let holders = AtomicUsize::new(0);
        let claims = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        if let Ok(lock) = InstanceLock::acquire_in(&dir, "race") {
                            let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                            assert_eq!(now, 1, "two instances hold the name at once");
                            claims.fetch_add(1, Ordering::Relaxed);
                            // Hold it a moment, so a second holder would overlap.
                            std::thread::sleep(std::time::Duration::from_micros(20));
                            holders.fetch_sub(1, Ordering::SeqCst);
                            drop(lock);
                        }
                    }
                });
            }
        });
        assert!(claims.load(Ordering::Relaxed) > 0);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_lock_on_an_unlinked_file_is_not_the_file_at_the_path() {
        let dir = temp_dir("unlinked");
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.lock");
        let file = File::create(&path).unwrap();
        assert!(still_at(&file, &path).unwrap());
        fs::remove_file(&path).unwrap();
        assert!(!still_at(&file, &path).unwrap());
        File::create(&path).unwrap();
        assert!(!still_at(&file, &path).unwrap());
        fs::remove_dir_all(&dir).unwrap();
    }
}
