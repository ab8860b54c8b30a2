//! `cargo xtask docs`: regenerates the reference from the built `ck` (`ck reference` into
//! `docs/src/reference/`, `ck man` into `docs/man/`) and builds the mdBook in `docs/` into
//! `target/book` (mdbook installed with `cargo install mdbook --locked` when missing).
//! `--check` writes the reference into a scratch tree instead and fails, naming each stale
//! file, when it differs from the committed one.
use std::path::Path;

use anyhow::{Context as _, Result, bail};
use ck_tests::reference;

use crate::cmd;

/// `cargo xtask docs [--check]` with the built `ck` at `ck`; `docs` is the workspace's `docs/`
/// and `target` the cargo target directory.
pub fn run(ck: &Path, docs: &Path, target: &Path, check: bool) -> Result<()> {
    if check {
        let fresh = target.join("docs-check");
        reference::generate(ck, &fresh).map_err(anyhow::Error::msg)?;
        let stale = reference::compare(docs, &fresh);
        if !stale.is_empty() {
            bail!("{}", reference::report(docs, &fresh, &stale));
        }
        eprintln!("xtask: docs/src/reference and docs/man are up to date");
        return Ok(());
    }
    reference::generate(ck, docs).map_err(anyhow::Error::msg)?;
    eprintln!(
        "xtask: wrote docs/src/reference and docs/man with {}",
        ck.display()
    );
    if !docs.join("book.toml").exists() {
        eprintln!(
            "xtask: no docs/book.toml yet: built only the reference (docs/src/reference, \
             docs/man), not the book"
        );
        return Ok(());
    }
    let mdbook = ensure_mdbook()?;
    let book = target.join("book");
    cmd::run(
        cmd::command(&mdbook)
            .arg("build")
            .arg(docs)
            .arg("--dest-dir")
            .arg(&book),
        "see mdbook's output above (a broken SUMMARY.md entry or a missing page)",
    )?;
    eprintln!(
        "xtask: the book is in {}",
        book.join("index.html").display()
    );
    Ok(())
}

/// mdbook on PATH or in cargo's bin directory, installed when missing.
fn ensure_mdbook() -> Result<std::path::PathBuf> {
    if let Some(found) = cmd::find_program("mdbook", &[]) {
        return Ok(found);
    }
    eprintln!("xtask: installing mdbook (cargo install mdbook --locked, takes a few minutes)");
    cmd::run(
        cmd::cargo().args(["install", "mdbook", "--locked"]),
        "see the cargo output above; installing mdbook needs access to crates.io",
    )?;
    cmd::find_program("mdbook", &[])
        .context("`cargo install mdbook` succeeded but mdbook is not in cargo's bin directory")
}
