//! Work done once per test run, however many test processes need it: nextest runs every test
//! in a process of its own, so a `OnceLock` no longer spans the tests of a binary. [`per_run`]
//! takes an exclusive lock beside the output directory and does the work unless the directory
//! already says it was made for this run (`NEXTEST_RUN_ID`; outside nextest, this process).

use std::fs::{self, File};
use std::path::Path;

use nix::fcntl::{Flock, FlockArg};

/// The name of the file in the output directory that says which run made it.
const STAMP: &str = ".made-for-run";

/// This run's identity: nextest's run id, else this process's pid.
fn run_id() -> String {
    std::env::var("NEXTEST_RUN_ID").unwrap_or_else(|_| format!("pid {}", std::process::id()))
}

/// Runs `make` (which fills `dir`) unless `dir` was made for this run, holding an exclusive lock
/// on `dir.lock` meanwhile, so that the tests of one run that need `dir` wait for the first to
/// make it and then share it. `dir` is emptied before `make` runs.
///
/// # Panics
/// When the lock or the stamp cannot be taken or written, or when `make` panics (the stamp is
/// then not written, so the next test tries again).
pub fn per_run(dir: &Path, make: impl FnOnce()) {
    let lock_path = dir.with_extension("lock");
    if let Some(parent) = lock_path.parent() {
        fs::create_dir_all(parent).unwrap_or_else(|e| panic!("creating {}: {e}", parent.display()));
    }
    let file = File::create(&lock_path)
        .unwrap_or_else(|e| panic!("creating {}: {e}", lock_path.display()));
    let _lock = Flock::lock(file, FlockArg::LockExclusive)
        .unwrap_or_else(|(_, e)| panic!("locking {}: {e}", lock_path.display()));
    let id = run_id();
    let stamp = dir.join(STAMP);
    if fs::read_to_string(&stamp).is_ok_and(|made| made == id) {
        return;
    }
    let _ = fs::remove_dir_all(dir);
    make();
    fs::create_dir_all(dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    fs::write(&stamp, id).unwrap_or_else(|e| panic!("writing {}: {e}", stamp.display()));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_work_is_done_once_per_run() {
        let dir = std::env::temp_dir().join(format!("ck-once-test-{}", std::process::id()));
        let mut made = 0;
        per_run(&dir, || made += 1);
        per_run(&dir, || made += 1);
        assert_eq!(made, 1);
        fs::write(dir.join(STAMP), "another run").unwrap();
        per_run(&dir, || made += 1);
        assert_eq!(made, 2);
        fs::remove_dir_all(&dir).unwrap();
        fs::remove_file(dir.with_extension("lock")).unwrap();
    }
}
