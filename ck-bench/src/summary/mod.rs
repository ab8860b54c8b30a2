//! BENCHMARKS.md, drawn from the run records (`record.rs`), never typed: between
//! `<!-- bench:NAME -->` and `<!-- /bench:NAME -->` goes the method's figures (`method`) or a
//! scenario's latest record, each goal with "K/N runs met" over every record of the
//! current program ([`markdown`], [`tally`], [`history`]); everything outside the markers is
//! hand-written and kept as it is, and holds no figure ([`prose`]). `ck-bench summary` writes
//! the file; `--check` (and a unit test) fails when it is not what the committed records give,
//! when its prose has a typed figure, when it is longer than [`MAX_WORDS`], when a record was
//! ever removed, and in a shallow clone (naming the fix each time).

pub mod history;
mod markdown;
pub mod prose;
pub mod tally;

use std::fs;
use std::path::Path;

use anyhow::{Context as _, Result, bail};

use crate::record::{self, Record};
use history::Current;

/// The file the summary lives in, relative to the workspace root.
const SUMMARY: &str = "BENCHMARKS.md";
/// The most words BENCHMARKS.md may have (explanations that are not results belong in the
/// guide, `docs/src/`, or ARCHITECTURE.md).
pub const MAX_WORDS: usize = 3000;

/// Draws `<root>/BENCHMARKS.md` from `<root>/docs/bench/runs`, then checks it; with `check`,
/// compares instead of writing and fails on a difference.
pub fn run(root: &Path, check: bool) -> Result<()> {
    let path = root.join(SUMMARY);
    let text = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let records = Record::read_all(&root.join(record::RUNS_DIR))?;
    history::refuse_removed(root)?;
    let current = Current::read(root, &records)?;
    let drawn = regenerate(&text, &records, &current)?;
    if !check && drawn != text {
        fs::write(&path, &drawn).with_context(|| format!("writing {}", path.display()))?;
        println!("{SUMMARY}: drawn again from {}", record::RUNS_DIR);
    }
    prose::refuse_typed(&drawn)?;
    refuse_long(&drawn)?;
    if check {
        if drawn != text {
            bail!(
                "{} differs from what the records in {} give (a figure was typed in a block, a \
                 record changed, or ck's code changed since the records): run `cargo xtask bench \
                 summary` and commit the result",
                path.display(),
                record::RUNS_DIR
            );
        }
        println!("{SUMMARY}: every block matches the records, and the prose holds no figure");
    }
    Ok(())
}

/// Fails when `text` is longer than [`MAX_WORDS`] words.
fn refuse_long(text: &str) -> Result<()> {
    let words = text.split_whitespace().count();
    if words > MAX_WORDS {
        bail!(
            "{SUMMARY} has {words} words, more than {MAX_WORDS}: keep one block per scenario and \
             move explanations that are not results to the guide (docs/src/) or ARCHITECTURE.md"
        );
    }
    Ok(())
}

/// `text` with every `<!-- bench:NAME -->` ... `<!-- /bench:NAME -->` block filled from
/// `records` (`current`: which of them are runs of the current program).
pub fn regenerate(text: &str, records: &[(String, Record)], current: &Current) -> Result<String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("<!-- bench:") {
        let after_open = &rest[start + "<!-- bench:".len()..];
        let Some(close) = after_open.find(" -->") else {
            bail!("{SUMMARY}: a `<!-- bench:` marker is not closed with ` -->`");
        };
        let name = &after_open[..close];
        let open = format!("<!-- bench:{name} -->");
        let end_marker = format!("<!-- /bench:{name} -->");
        let body_start = start + open.len();
        let Some(end) = rest[body_start..].find(&end_marker) else {
            bail!("{SUMMARY}: `{open}` has no `{end_marker}` after it: add it");
        };
        let Some(body) = markdown::block(name, records, current) else {
            bail!(
                "{SUMMARY}: `{open}` names no scenario: use `method` or a scenario's name \
                 (`ck-bench --help` lists them)"
            );
        };
        out.push_str(&rest[..body_start]);
        out.push('\n');
        out.push_str(&body);
        out.push_str(&end_marker);
        rest = &rest[body_start + end + end_marker.len()..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests;
