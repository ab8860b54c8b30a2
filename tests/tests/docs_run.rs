//! The docs that run: every shell block of README.md and of the guide (`docs/src/**/*.md` but
//! the generated `docs/src/reference/`) runs as root, one bash per page, in the page's order; every
//! console block's commands run and their output is compared with what the page shows (digits
//! and blank runs masked); what a page leaves running fails it. Conventions: `ck_tests::docs`.
//!
//! `CK_DOCS_PAGE=SUBSTRING` runs only the pages whose path contains it (e.g.
//! `CK_DOCS_PAGE=runtimes/node cargo xtask test -- --test docs_run`); `CK_DOCS_JOBS` pages run
//! at once (default 2); `CK_DOCS_TIMEOUT` seconds per page (default 180).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ck_tests::docs::{self, Markdown, NoHooks, PageReport};

/// The pages to run: all, or those `CK_DOCS_PAGE` names.
fn pages() -> Vec<PathBuf> {
    let all = docs::runnable_pages();
    assert!(
        all.iter().any(|p| p.ends_with("README.md")),
        "README.md not found under {}",
        docs::repo_root().display()
    );
    match std::env::var("CK_DOCS_PAGE") {
        Ok(filter) if !filter.is_empty() => {
            let chosen: Vec<PathBuf> = all
                .iter()
                .filter(|p| p.to_string_lossy().contains(&filter))
                .cloned()
                .collect();
            assert!(
                !chosen.is_empty(),
                "CK_DOCS_PAGE={filter} matches none of the pages: {all:#?}"
            );
            chosen
        }
        _ => all,
    }
}

/// Runs one page with no hooks.
fn run(path: &Path) -> PageReport {
    let root = docs::repo_root();
    let page = Markdown::read(path);
    let shown = page.shown(&root);
    eprintln!("docs: running {shown}");
    let report = docs::run_page(&page, &shown, &mut NoHooks);
    eprintln!("docs: {}", report.summary());
    report
}

#[test]
fn every_shell_block_of_the_docs_runs_and_every_console_block_shows_what_it_prints() {
    let pages = pages();
    let jobs: usize = std::env::var("CK_DOCS_JOBS")
        .ok()
        .and_then(|j| j.parse().ok())
        .filter(|j| *j >= 1)
        .unwrap_or(2);
    let queue = Mutex::new(pages.iter());
    let reports = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                loop {
                    let next = queue.lock().expect("queue").next();
                    let Some(path) = next else { break };
                    let report = run(path);
                    reports.lock().expect("reports").push(report);
                }
            });
        }
    });
    let mut reports = reports.into_inner().expect("reports");
    reports.sort_by(|a, b| a.page.cmp(&b.page));
    let ran: usize = reports.iter().map(|r| r.ran).sum();
    let skipped: usize = reports.iter().map(|r| r.skipped).sum();
    let failed: Vec<&PageReport> = reports.iter().filter(|r| !r.failures.is_empty()).collect();
    eprintln!("docs: summary");
    for report in &reports {
        eprintln!("  {}", report.summary());
    }
    eprintln!(
        "docs: {} pages, {ran} steps run, {skipped} blocks not run (norun), {} pages failed",
        reports.len(),
        failed.len()
    );
    assert!(ran > 0, "no step of the docs ran: {reports:#?}");
    let failures: Vec<&String> = failed.iter().flat_map(|r| &r.failures).collect();
    assert!(
        failures.is_empty(),
        "{} failures in the docs:\n\n{}",
        failures.len(),
        failures
            .iter()
            .map(|f| f.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
}
