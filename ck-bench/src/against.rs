//! `--against REV`: another revision's release `ck`, built in a git worktree under
//! `target/against/` (its own target directory there, shared by every revision so that their
//! dependencies are built once), copied to `target/against/ck-COMMIT` and the worktree removed;
//! a revision already built is reused. The scenarios in rounds then measure every contender
//! that runs ck on both builds, interleaved.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, bail};

use crate::paths::{self, describe};

/// Another build of ck to measure beside the current one.
#[derive(Debug, Clone, PartialEq)]
pub struct Against {
    /// Its commit, abbreviated (10 hex digits): the `@REV` of its columns.
    pub rev: String,
    /// Its release `ck`.
    pub bin: PathBuf,
}

/// The release `ck` of revision `rev` (a commit, branch or tag of this repository), built
/// unless it already was.
pub fn prepare(rev: &str) -> Result<Against> {
    let root = paths::workspace_root()?;
    let commit = git_out(
        root,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{rev}^{{commit}}"),
        ],
    )
    .with_context(|| {
        format!(
            "--against {rev}: no such commit here (a commit, branch or tag; `git fetch` \
                 first if it is someone else's)"
        )
    })?;
    let short: String = commit.chars().take(10).collect();
    let dir = paths::target_dir()?.join("against");
    let bin = dir.join(format!("ck-{short}"));
    if bin.is_file() {
        eprintln!("ck-bench: --against {rev}: reusing {}", bin.display());
        return Ok(Against { rev: short, bin });
    }
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let tree = dir.join(format!("tree-{short}"));
    let worktree = Worktree::add(root, &tree, &commit)?;
    eprintln!(
        "ck-bench: --against {rev}: building its release ck in {}",
        tree.display()
    );
    let mut cargo = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cargo
        .current_dir(&tree)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .args(["build", "--release", "-p", "ck-userspace", "--bin", "ck"]);
    paths::run(
        &mut cargo,
        "see the compiler output above (`cargo xtask bench` sets up the toolchain first)",
    )?;
    let built = dir.join("target/release/ck");
    fs::copy(&built, &bin)
        .with_context(|| format!("copying {} to {}", built.display(), bin.display()))?;
    drop(worktree);
    Ok(Against { rev: short, bin })
}

/// A git worktree of one commit, removed when dropped.
struct Worktree {
    root: PathBuf,
    dir: PathBuf,
}

impl Worktree {
    /// Adds a detached worktree of `commit` at `dir` (replacing one left there).
    fn add(root: &Path, dir: &Path, commit: &str) -> Result<Worktree> {
        let dir_text = dir.to_string_lossy();
        if dir.exists() {
            let _ = git_out(root, &["worktree", "remove", "--force", &dir_text]);
            let _ = fs::remove_dir_all(dir);
        }
        git_out(root, &["worktree", "add", "--detach", &dir_text, commit])?;
        Ok(Worktree {
            root: root.to_path_buf(),
            dir: dir.to_path_buf(),
        })
    }
}

impl Drop for Worktree {
    fn drop(&mut self) {
        let dir = self.dir.to_string_lossy();
        if git_out(&self.root, &["worktree", "remove", "--force", &dir]).is_err() {
            eprintln!(
                "ck-bench: could not remove the worktree {dir}: `git worktree remove --force {dir}`"
            );
        }
    }
}

/// `git ARGS` in `dir`: its standard output, trimmed; an error naming the command and what git
/// said when it fails.
pub fn git_out(dir: &Path, args: &[&str]) -> Result<String> {
    let mut git = Command::new("git");
    git.current_dir(dir).args(args);
    let out = git
        .output()
        .with_context(|| format!("could not run `{}`", describe(&git)))?;
    if !out.status.success() {
        bail!(
            "`{}` failed ({}): {}",
            describe(&git),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_revision_is_named_with_the_fix() {
        let err = prepare("no-such-branch-of-ck").unwrap_err();
        let text = format!("{err:#}");
        assert!(
            text.contains("--against no-such-branch-of-ck: no such commit"),
            "{text}"
        );
    }

    #[test]
    fn a_worktree_is_removed_when_dropped() {
        let root = paths::workspace_root().unwrap();
        let dir = std::env::temp_dir().join(format!("ck-bench-worktree-{}", std::process::id()));
        let head = git_out(root, &["rev-parse", "HEAD"]).unwrap();
        let tree = Worktree::add(root, &dir, &head).unwrap();
        assert!(dir.join("Cargo.toml").is_file());
        drop(tree);
        assert!(!dir.exists());
        let list = git_out(root, &["worktree", "list"]).unwrap();
        assert!(!list.contains(&*dir.to_string_lossy()), "{list}");
    }
}
