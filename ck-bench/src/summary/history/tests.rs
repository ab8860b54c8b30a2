//! Against real git repositories in temporary directories: which records count, removed
//! records, shallow clones.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;
use crate::record::tests::sample;

/// A new git repository in a temporary directory, removed when dropped.
struct Repo(PathBuf);

impl Repo {
    fn new(what: &str) -> Repo {
        let dir = std::env::temp_dir().join(format!("ck-bench-{what}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let repo = Repo(dir);
        repo.git(&["init", "--quiet", "--initial-branch=main"]);
        repo
    }

    fn git(&self, args: &[&str]) -> String {
        let out = Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .current_dir(&self.0)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Writes `file` and commits it; returns the commit, abbreviated as records name it.
    fn commit(&self, file: &str, text: &str) -> String {
        let path = self.0.join(file);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
        self.git(&["add", "-A"]);
        self.git(&["commit", "--quiet", "-m", file]);
        self.git(&["rev-parse", "--short=10", "HEAD"])
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Repo {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A record of `reload` (the sample's scenario) made at `commit`, with `changed` uncommitted.
fn record_at(commit: &str, changed: &[&str]) -> (String, Record) {
    let mut r = sample();
    r.commit = commit.to_string();
    r.changed = changed.iter().map(|c| c.to_string()).collect();
    (r.file_name(), r)
}

#[test]
fn a_record_counts_while_ck_and_its_scenario_are_unchanged() {
    let repo = Repo::new("history-counts");
    let first = repo.commit("ck-userspace/src/lib.rs", "one");
    let docs = repo.commit("README.md", "docs only");
    let second = repo.commit("ck-userspace/src/lib.rs", "two");
    let bench = repo.commit("ck-bench/src/scenarios/reload.rs", "the scenario changed");
    let other = repo.commit("ck-bench/src/scenarios/stall.rs", "another scenario");
    let records = vec![
        record_at(&first, &[]),
        record_at(&docs, &[]),
        record_at(&second, &[]),
        record_at(&bench, &[]),
        record_at(&other, &[]),
        record_at(&other, &["ck-ebpf/src/main.rs"]),
        record_at("0123456789", &[]),
    ];
    let current = Current::read(repo.path(), &records).unwrap();
    let counted: Vec<bool> = records
        .iter()
        .map(|(_, r)| current.counts(r, "reload"))
        .collect();
    // Before ck's last change, before the scenario's, at HEAD (another scenario's change does
    // not matter), dirty in ck's code, unknown to git.
    assert_eq!(counted, [false, false, false, true, true, false, false]);
    // For stall, its own change since `bench` matters.
    assert!(!current.counts(&records[3].1, "stall"));
    assert!(current.counts(&records[4].1, "stall"));
}

#[test]
fn a_removed_record_is_named_with_the_fix() {
    let repo = Repo::new("history-removed");
    repo.commit("docs/bench/runs/2026-01-01-000000-a.json", "{}");
    repo.commit("docs/bench/runs/2026-01-02-000000-b.json", "{}");
    assert!(refuse_removed(repo.path()).is_ok());
    repo.git(&["rm", "--quiet", "docs/bench/runs/2026-01-01-000000-a.json"]);
    repo.git(&["commit", "--quiet", "-m", "drop a run that missed"]);
    assert_eq!(
        removed_records(repo.path()).unwrap(),
        ["docs/bench/runs/2026-01-01-000000-a.json"]
    );
    let err = refuse_removed(repo.path()).unwrap_err().to_string();
    assert!(
        err.contains("2026-01-01-000000-a.json") && err.contains("git checkout COMMIT^ -- FILE"),
        "{err}"
    );
}

#[test]
fn a_shallow_clone_is_refused_naming_the_fix() {
    let repo = Repo::new("history-deep");
    repo.commit("a", "1");
    repo.commit("a", "2");
    let clone =
        std::env::temp_dir().join(format!("ck-bench-history-shallow-{}", std::process::id()));
    let _ = fs::remove_dir_all(&clone);
    let url = format!("file://{}", repo.path().display());
    let status = Command::new("git")
        .args(["clone", "--quiet", "--depth", "1", &url])
        .arg(&clone)
        .status()
        .unwrap();
    assert!(status.success());
    let records = vec![record_at("0123456789", &[])];
    let counted = Current::read(&clone, &records).map(|_| ());
    fs::remove_dir_all(&clone).unwrap();
    let err = counted.unwrap_err().to_string();
    assert!(
        err.contains("shallow") && err.contains("`git fetch --unshallow`"),
        "{err}"
    );
    assert!(refuse_shallow(repo.path()).is_ok());
}
