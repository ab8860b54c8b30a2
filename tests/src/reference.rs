//! The generated reference: `ck reference DIR` (Markdown and JSON Schemas) and `ck man DIR`
//! (man pages) written by a real `ck` into a fresh tree, and compared file by file with the
//! committed `docs/src/reference/` and `docs/man/`. Used by `cargo xtask docs` (to write and to
//! `--check`) and by `tests/tests/reference.rs`.
use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::Command,
};

/// The generated directories, relative to `docs/` (and to a fresh tree).
pub const DIRS: [&str; 2] = ["src/reference", "man"];

/// What to run to bring the committed pages up to date.
pub const FIX: &str = "run `cargo xtask docs` and commit docs/src/reference and docs/man";

/// Writes the reference with the `ck` binary `ck` into `root/src/reference` and `root/man`
/// (each emptied first).
pub fn generate(ck: &Path, root: &Path) -> Result<(), String> {
    for (dir, command) in DIRS.iter().zip(["reference", "man"]) {
        let dir = root.join(dir);
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .map_err(|e| format!("emptying {}: {e}", dir.display()))?;
        }
        let out = Command::new(ck)
            .arg(command)
            .arg(&dir)
            .output()
            .map_err(|e| format!("running {}: {e}", ck.display()))?;
        if !out.status.success() {
            return Err(format!(
                "`{} {command} {}` failed: {}",
                ck.display(),
                dir.display(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    Ok(())
}

/// One file that differs between the committed tree and a fresh one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stale {
    /// Its path relative to `docs/`.
    pub path: PathBuf,
    /// `differs`, `missing` (not committed) or `left over` (no longer generated).
    pub how: &'static str,
}

fn files(root: &Path) -> BTreeSet<PathBuf> {
    let mut found = BTreeSet::new();
    for dir in DIRS {
        if let Ok(entries) = std::fs::read_dir(root.join(dir)) {
            for entry in entries.flatten() {
                if entry.path().is_file() {
                    found.insert(Path::new(dir).join(entry.file_name()));
                }
            }
        }
    }
    found
}

/// The files of the generated directories that differ between `committed` (`docs/`) and
/// `fresh` (a tree [`generate`] wrote).
pub fn compare(committed: &Path, fresh: &Path) -> Vec<Stale> {
    let old = files(committed);
    let new = files(fresh);
    let mut stale = Vec::new();
    for path in old.union(&new) {
        let how = match (old.contains(path), new.contains(path)) {
            (true, false) => "left over",
            (false, true) => "missing",
            _ if std::fs::read(committed.join(path)).ok()
                != std::fs::read(fresh.join(path)).ok() =>
            {
                "differs"
            }
            _ => continue,
        };
        stale.push(Stale {
            path: path.clone(),
            how,
        });
    }
    stale
}

/// A report of `stale` files: each named, the unified diff of those that differ (by `diff`,
/// when installed), and [`FIX`].
pub fn report(committed: &Path, fresh: &Path, stale: &[Stale]) -> String {
    let mut text = String::from("the generated reference is stale:\n");
    for s in stale {
        text.push_str(&format!("  docs/{} ({})\n", s.path.display(), s.how));
    }
    for s in stale.iter().filter(|s| s.how == "differs") {
        if let Ok(out) = Command::new("diff")
            .arg("-u")
            .arg(committed.join(&s.path))
            .arg(fresh.join(&s.path))
            .output()
        {
            text.push_str(&String::from_utf8_lossy(&out.stdout));
        }
    }
    text.push_str(FIX);
    text
}
