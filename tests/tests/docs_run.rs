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

/// Runs `text` as a page named `name` and returns its report.
fn run_text(name: &str, text: &str) -> PageReport {
    let page = Markdown::parse(Path::new(name), text.to_string());
    docs::run_page(&page, name, &mut NoHooks)
}

/// The harness itself: one shell per page (variables, files and background jobs carry over),
/// the page's environment, ports substituted and mapped back, masked console output, and
/// each way a page breaks the conventions reported with its line.
#[test]
fn the_harness_runs_a_page_as_one_shell_and_reports_each_broken_convention() {
    let good = run_text(
        "good.md",
        "# Good\n\n```txt file=notes/a.txt\nport 8080\n```\n\n```sh\nv=1\nsleep 60 &\necho $! > job.pid\ntest -d examples && command -v ck\ntest -n \"$CK_RUN_DIR\" && test -n \"$CK_PIN_DIR\" && test -n \"$NODE_PATH\"\ntest \"$(cat notes/a.txt)\" != \"port 80\"\"80\"\n```\n\n```console\n$ echo \"v=$v port 8080 pid $(cat job.pid)\"\nv=1 port 8080 pid 123\n$ printf 'a\\nb  c\\nd\\n'\na\n...\nd\n$ false\n```\n\n```sh,norun: needs a cluster\nkubectl apply\n```\n\n```sh\nkill $(cat job.pid)\n```\n",
    );
    assert!(good.failures.is_empty(), "{:#?}", good.failures);
    assert_eq!((good.ran, good.skipped), (6, 1), "{good:#?}");

    let failing = run_text(
        "bad.md",
        "# Bad\n\n```sh\necho before\nfalse\necho after\n```\n\n```sh\necho never\n```\n",
    );
    assert_eq!(failing.failures.len(), 1, "{:#?}", failing.failures);
    let msg = &failing.failures[0];
    assert!(
        msg.starts_with("bad.md:3: the block failed with exit status 1"),
        "{msg}"
    );
    assert!(
        msg.contains("before") && !msg.contains("    after"),
        "{msg}"
    );
    assert_eq!(failing.ran, 1, "the page stops at the failing block");

    let wrong = run_text(
        "wrong.md",
        "```console\n$ echo 'slot 1 ready'\nslot 1 starting\n$ echo ok\nok\n```\n\n```sh,norun\nx\n```\n",
    );
    assert_eq!(wrong.failures.len(), 2, "{:#?}", wrong.failures);
    assert!(
        wrong.failures.iter().any(|f| f
            .starts_with("wrong.md:2: `echo 'slot 1 ready'` printed something other")
            && f.contains("slot 1 starting")
            && f.contains("slot 1 ready")),
        "{:#?}",
        wrong.failures
    );
    assert!(
        wrong
            .failures
            .iter()
            .any(|f| f.starts_with("wrong.md:8: ") && f.contains("norun: REASON")),
        "{:#?}",
        wrong.failures
    );

    let leaves = run_text("leaves.md", "```sh\nsleep 300 &\n```\n");
    assert_eq!(leaves.failures.len(), 1, "{:#?}", leaves.failures);
    assert!(
        leaves.failures[0].contains("leaves `sleep 300`")
            && leaves.failures[0].contains("ck stop --wait"),
        "{:#?}",
        leaves.failures
    );
}

/// A page that does not finish in its time is stopped, with the step it was in.
#[test]
fn a_page_that_hangs_is_stopped_at_its_time_limit() {
    let page = Markdown::parse(
        Path::new("hangs.md"),
        "```sh\necho start\n```\n\n```sh\nsleep 600\n```\n".to_string(),
    );
    let steps = docs::plan::plan(&page).steps;
    let started = std::time::Instant::now();
    let report = docs::run_steps_within(
        "hangs.md",
        &steps,
        &mut NoHooks,
        std::time::Duration::from_secs(2),
    );
    assert!(
        report.failures[0].starts_with("hangs.md:5: the page ran out of time"),
        "{:#?}",
        report.failures
    );
    assert!(
        report
            .failures
            .iter()
            .any(|f| f.contains("leaves `sleep 600`")),
        "{:#?}",
        report.failures
    );
    eprintln!("stopped after {:?}", started.elapsed());
}
