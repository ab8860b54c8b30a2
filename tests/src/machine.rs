//! What a measurement ran on, for the benchmarks' records and the promises' first line: the
//! machine ([`Machine`]: CPUs, kernel, CPU model), the tree being measured ([`Tree`]: its
//! commit and the tracked files that differ from it), the 1-minute load average, and all of it
//! on one line ([`machine_line`]).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

/// The machine a run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// CPUs available to the run.
    pub cpus: usize,
    /// `/proc/sys/kernel/osrelease`.
    pub kernel: String,
    /// The first `model name` of `/proc/cpuinfo`.
    pub cpu: String,
}

impl Machine {
    /// This machine.
    pub fn here() -> Machine {
        let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
        let kernel = fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|k| k.trim().to_string())
            .unwrap_or_else(|_| "?".into());
        let cpu = fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|info| {
                info.lines()
                    .find_map(|l| l.strip_prefix("model name"))
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_string())
            })
            .unwrap_or_else(|| "?".into());
        Machine { cpus, kernel, cpu }
    }
}

/// The tree being measured: its commit and the tracked files that differ from it.
#[derive(Debug, Clone, PartialEq)]
pub struct Tree {
    /// `git rev-parse --short=10 HEAD`, `?` outside a git checkout.
    pub commit: String,
    /// `git status --porcelain --untracked-files=no`, one path a line.
    pub changed: Vec<String>,
}

impl Tree {
    /// Whether a file other than the bench's own output (BENCHMARKS.md and docs/bench/, which a
    /// recorded run rewrites) differs from the commit.
    pub fn dirty(&self) -> bool {
        self.changed
            .iter()
            .any(|p| p != "BENCHMARKS.md" && !p.starts_with("docs/bench/"))
    }

    /// The workspace's tree now.
    pub fn now() -> Tree {
        Tree::of(&workspace_root())
    }

    /// The tree of the git checkout at `dir`.
    pub fn of(dir: &Path) -> Tree {
        let git = |args: &[&str]| {
            Command::new("git")
                .args(args)
                .current_dir(dir)
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
        };
        let commit = git(&["rev-parse", "--short=10", "HEAD"])
            .map(|c| c.trim().to_string())
            .unwrap_or_else(|| "?".into());
        // --no-optional-locks: `git status` must not refresh the index, which ck's build script
        // watches (a refreshed index would rebuild ck before the next bench).
        let changed = git(&[
            "--no-optional-locks",
            "status",
            "--porcelain",
            "--untracked-files=no",
        ])
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.get(3..).map(str::to_string))
        .collect();
        Tree { commit, changed }
    }
}

/// The workspace root: the parent of this crate's directory.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// The 1-minute load average, from `/proc/loadavg`.
pub fn load_average() -> Option<f64> {
    fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A load average as text, `?` when unknown.
pub fn load_text(load: Option<f64>) -> String {
    load.map_or_else(|| "?".into(), |l| format!("{l:.2}"))
}

/// One line describing what is measured where: the machine's CPUs, kernel and CPU model, the
/// commit of the tree (`+changes` when it differs from it) and the 1-minute load average.
pub fn machine_line() -> String {
    let m = Machine::here();
    let tree = Tree::now();
    let changes = if tree.dirty() { "+changes" } else { "" };
    format!(
        "machine: nproc={}, kernel {}, CPU {}; commit {}{changes}; load average {}",
        m.cpus,
        m.kernel,
        m.cpu,
        tree.commit,
        load_text(load_average())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bench_output_does_not_make_the_tree_dirty() {
        let tree = |changed: &[&str]| Tree {
            commit: "x".into(),
            changed: changed.iter().map(|c| c.to_string()).collect(),
        };
        assert!(!tree(&["BENCHMARKS.md", "docs/bench/reload-latency.svg"]).dirty());
        assert!(tree(&["BENCHMARKS.md", "ck-userspace/src/main.rs"]).dirty());
    }

    #[test]
    fn machine_line_names_the_kernel_and_the_load() {
        assert!(!Machine::here().kernel.is_empty());
        let line = machine_line();
        assert!(
            line.contains("kernel") && line.contains("load average"),
            "{line}"
        );
    }

    #[test]
    fn the_tree_has_a_commit() {
        assert_ne!(Tree::now().commit, "?");
    }
}
