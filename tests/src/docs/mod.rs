//! The docs that run: every shell block of README.md and the guide (`docs/src/**/*.md` but the
//! generated `docs/src/reference/`) runs as root in a shell of its own per page, console blocks'
//! output is compared with what the commands print, and the Markdown's links, anchors and
//! tables are checked. Used by `tests/tests/docs_run.rs`, `docs_links.rs` and
//! `quick_start.rs`.
//!
//! The conventions a page follows:
//! - ```` ```sh ```` (or `bash`, `shell`): run by bash (`set -euo pipefail`) in order with the
//!   page's other blocks, in ONE shell per page ([`session`]), in a fresh directory holding a
//!   copy of `examples/`, with the built `ck` first on `PATH`, `CK_RUN_DIR`/`CK_PIN_DIR` of
//!   the page's own and `NODE_PATH` at `packages/`. Ports 8080-8089 and 9090-9099 are replaced
//!   by free ports ([`ports`]). A fleet runs in the background (`ck run ... &`), and the page
//!   ends it with `ck stop --wait`: what it leaves running is killed and fails the page.
//! - ```` ```sh,norun: REASON ````: shown, not run; the reason is required.
//! - ```` ```console ````: each `$ cmd` runs in the page's shell; the lines after it are its
//!   output, compared masked ([`console`]).
//! - a block with `file=PATH` in its info string is written to PATH before later blocks run.
//! - other blocks are not run.

pub mod cleanup;
pub mod console;
pub mod links;
pub mod markdown;
pub mod plan;
pub mod ports;
pub mod run;
pub mod session;

use std::path::{Path, PathBuf};

pub use markdown::Markdown;
pub use plan::{Step, StepKind};
pub use run::{Hooks, NoHooks, PageReport, run_page, run_page_in, run_steps, run_steps_within};
pub use session::Session;

/// Where a page runs from: a checkout of the repository (its `examples/` are copied for the
/// page, its `packages/` are `NODE_PATH`) and the `ck` binary put first on the page's `PATH`.
#[derive(Clone, Debug)]
pub struct Checkout {
    /// The checkout's root directory.
    pub root: PathBuf,
    /// The `ck` binary the page runs.
    pub ck: PathBuf,
}

impl Checkout {
    /// This repository, with the `ck` the tests run ([`crate::ck_bin`]).
    pub fn this() -> Checkout {
        Checkout {
            root: repo_root(),
            ck: crate::ck_bin(),
        }
    }
}

/// The repository's root directory.
pub fn repo_root() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    root.canonicalize().unwrap_or(root)
}

/// Every `*.md` file under `dir`, recursively, sorted.
pub fn markdown_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(markdown_under(&path));
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// The pages whose blocks run: README.md, then `docs/src/**/*.md` but `docs/src/reference/`.
pub fn runnable_pages() -> Vec<PathBuf> {
    let root = repo_root();
    let reference = root.join("docs/src/reference");
    let mut pages = vec![root.join("README.md")];
    pages.extend(
        markdown_under(&root.join("docs/src"))
            .into_iter()
            .filter(|p| !p.starts_with(&reference)),
    );
    pages.retain(|p| p.is_file());
    pages
}

/// The steps of `page` inside the section whose heading starts with `heading` (case ignored),
/// up to the next heading of the same or a higher level; `None` when there is no such heading.
pub fn section_steps(page: &Markdown, heading: &str) -> Option<Vec<Step>> {
    let wanted = heading.to_lowercase();
    let (i, start) = page
        .headings
        .iter()
        .enumerate()
        .find(|(_, h)| h.text.to_lowercase().starts_with(&wanted))?;
    let end = page.headings[i + 1..]
        .iter()
        .find(|h| h.level <= start.level)
        .map_or(usize::MAX, |h| h.line);
    let plan = plan::plan(page);
    Some(
        plan.steps
            .into_iter()
            .filter(|s| s.line > start.line && s.line < end)
            .collect(),
    )
}
