//! What git says about the records: which of them are runs of the current program ([`Current`]:
//! a record counts for a scenario when its commit has no diff to HEAD under ck's code —
//! [`CK_CODE`] — and the scenario's own source files, and its list of uncommitted changes names
//! none of them), and which records were ever removed ([`removed_records`]: none may be). A
//! shallow clone cannot tell: it is refused, naming the fix.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Result, bail};

use crate::against::git_out;
use crate::record::{RUNS_DIR, Record};
use crate::scenario::Scenario;

/// ck's code: a change under these makes every earlier record a run of another program.
pub const CK_CODE: [&str; 3] = ["ck-common/", "ck-ebpf/", "ck-userspace/src/"];

/// The files that changed between each record's commit and HEAD, among ck's code and the
/// scenarios' sources.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Current {
    /// Per commit (as records name it): the files of ck's code or of a scenario that differ
    /// from HEAD; `None` when git does not know the commit.
    pub changed_since: BTreeMap<String, Option<Vec<String>>>,
}

impl Current {
    /// Asks git about the commit of every record, in the checkout at `root`; fails, naming the
    /// fix, in a shallow clone.
    pub fn read(root: &Path, records: &[(String, Record)]) -> Result<Current> {
        refuse_shallow(root)?;
        let mut changed_since = BTreeMap::new();
        for (_, record) in records {
            if changed_since.contains_key(&record.commit) {
                continue;
            }
            let known = git_out(
                root,
                &["cat-file", "-e", &format!("{}^{{commit}}", record.commit)],
            );
            let changed = match known {
                Err(_) => None,
                Ok(_) => {
                    let mut args = vec!["diff", "--name-only", &record.commit, "HEAD", "--"];
                    args.extend(CK_CODE);
                    args.push("ck-bench/src/scenarios/");
                    let out = git_out(root, &args)?;
                    Some(out.lines().map(str::to_string).collect())
                }
            };
            changed_since.insert(record.commit.clone(), changed);
        }
        Ok(Current { changed_since })
    }

    /// Whether `record` is a run of the current program for `scenario`: its commit has no diff
    /// to HEAD under ck's code and the scenario's sources, and it had no uncommitted change
    /// there.
    pub fn counts(&self, record: &Record, scenario: &str) -> bool {
        let sources = Scenario::named(scenario).map_or(&[][..], Scenario::sources);
        let matters = |file: &String| {
            CK_CODE.iter().any(|dir| file.starts_with(dir)) || sources.iter().any(|s| file == s)
        };
        let committed = match self.changed_since.get(&record.commit) {
            Some(Some(changed)) => !changed.iter().any(matters),
            _ => false,
        };
        committed && !record.changed.iter().any(matters)
    }
}

/// Fails, naming the fix, when the checkout at `root` is a shallow clone (the records' commits
/// are not all there to compare with HEAD, and the count of runs would be wrong).
pub fn refuse_shallow(root: &Path) -> Result<()> {
    if git_out(root, &["rev-parse", "--is-shallow-repository"])? == "true" {
        bail!(
            "this clone is shallow: the records' commits cannot be compared with HEAD to count \
             the runs of the current code; run `git fetch --unshallow` (then again)"
        );
    }
    Ok(())
}

/// The records ever removed from the records' directory, per git's history of the checkout at
/// `root` (`git log --diff-filter=D`).
pub fn removed_records(root: &Path) -> Result<Vec<String>> {
    let out = git_out(
        root,
        &[
            "log",
            "--diff-filter=D",
            "--name-only",
            "--format=",
            "--",
            RUNS_DIR,
        ],
    )?;
    Ok(out
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
}

/// Fails, naming the fix, when a record was ever removed.
pub fn refuse_removed(root: &Path) -> Result<()> {
    let removed = removed_records(root)?;
    if !removed.is_empty() {
        bail!(
            "records were removed from {RUNS_DIR}: {}; records are never removed (a run that \
             missed its goal counts as much as one that met it): restore each with `git checkout \
             COMMIT^ -- FILE`, COMMIT being the one that removed it (`git log --diff-filter=D -- \
             {RUNS_DIR}`)",
            removed.join(", ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests;
