//! The Markdown of the docs, checked without running anything: every relative link points to a
//! file that exists and every `#anchor` to a heading there; every table is whole (no line
//! starting with `|` outside a table) and every row as wide as its header; the user docs never
//! name the development history (`issue 12`, `round 3`, `session`). Each failure says
//! `FILE:LINE: what`.

use std::path::PathBuf;

use ck_tests::docs::links::{self, Pages};
use ck_tests::docs::{self, Markdown};

/// The files whose links and tables are checked: README.md, ARCHITECTURE.md, BENCHMARKS.md,
/// CONTRIBUTING.md, CHANGELOG.md, deploy/README.md and docs/src/** (those that exist).
fn linked_docs() -> Vec<PathBuf> {
    let files = existing(&[
        "README.md",
        "ARCHITECTURE.md",
        "BENCHMARKS.md",
        "CONTRIBUTING.md",
        "CHANGELOG.md",
        "deploy/README.md",
    ]);
    assert!(
        files.iter().any(|f| f.ends_with("README.md")),
        "README.md not found under {}",
        docs::repo_root().display()
    );
    files
}

/// The docs for people who run ck (no development history there): README.md, docs/src/**,
/// BENCHMARKS.md, CHANGELOG.md, CONTRIBUTING.md.
fn user_docs() -> Vec<PathBuf> {
    existing(&[
        "README.md",
        "BENCHMARKS.md",
        "CHANGELOG.md",
        "CONTRIBUTING.md",
    ])
}

/// `names` (relative to the repository) and every Markdown file under docs/src, those that
/// exist.
fn existing(names: &[&str]) -> Vec<PathBuf> {
    let root = docs::repo_root();
    let mut files: Vec<PathBuf> = names.iter().map(|f| root.join(f)).collect();
    files.extend(docs::markdown_under(&root.join("docs/src")));
    files.retain(|f| f.is_file());
    files
}

/// Fails with every message of `failures`, one a line.
fn assert_none(what: &str, checked: usize, failures: &[String]) {
    eprintln!(
        "{what}: {checked} files checked, {} failures",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} {what} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_relative_link_and_anchor_points_somewhere() {
    let root = docs::repo_root();
    let files = linked_docs();
    let mut pages = Pages::new();
    let failures: Vec<String> = files
        .iter()
        .flat_map(|f| links::check_links(f, &root, &mut pages))
        .collect();
    assert_none("link", files.len(), &failures);
}

#[test]
fn every_table_is_whole_and_every_row_as_wide_as_its_header() {
    let root = docs::repo_root();
    let files = linked_docs();
    let failures: Vec<String> = files
        .iter()
        .flat_map(|f| links::check_tables(&Markdown::read(f), &root))
        .collect();
    assert_none("table", files.len(), &failures);
}

#[test]
fn the_user_docs_never_name_the_development_history() {
    let root = docs::repo_root();
    let files = user_docs();
    let failures: Vec<String> = files
        .iter()
        .flat_map(|f| links::check_history(&Markdown::read(f), &root))
        .collect();
    assert_none("history", files.len(), &failures);
}
