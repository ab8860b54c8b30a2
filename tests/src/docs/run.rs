//! Running a page's steps in its [`Session`]: shell blocks (a failure ends the page), console
//! commands (output compared, masked), `file=` blocks; with [`Hooks`] around each step, and a
//! report naming the page, the line, the command, and the expected and actual text.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use super::Checkout;
use super::console;
use super::markdown::Markdown;
use super::plan::{self, Step, StepKind};
use super::session::{Outcome, Session};

/// How long one page may take, unless `CK_DOCS_TIMEOUT` (seconds) says otherwise.
pub const PAGE_TIMEOUT: Duration = Duration::from_secs(180);

/// The page timeout in force: `CK_DOCS_TIMEOUT` seconds, else [`PAGE_TIMEOUT`].
pub fn page_timeout() -> Duration {
    std::env::var("CK_DOCS_TIMEOUT")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(PAGE_TIMEOUT, Duration::from_secs)
}

/// Code run around each step of a page (e.g. a load started before `ck reload` and checked
/// after it). An `Err` fails the page with that message and ends it.
pub trait Hooks {
    /// Called before `step` runs (after its ports are substituted).
    fn before(&mut self, _step: &Step, _session: &mut Session) -> Result<(), String> {
        Ok(())
    }
    /// Called after `step` ran without failing the page.
    fn after(&mut self, _step: &Step, _session: &mut Session) -> Result<(), String> {
        Ok(())
    }
}

/// No hooks.
#[derive(Debug, Default)]
pub struct NoHooks;

impl Hooks for NoHooks {}

/// How a page went.
#[derive(Debug, Clone, Default)]
pub struct PageReport {
    /// The page's path as shown (relative to the repository).
    pub page: String,
    /// Steps run (shell blocks, console commands, files written).
    pub ran: usize,
    /// Blocks not run (`norun: REASON`).
    pub skipped: usize,
    /// Its failures, each a complete message.
    pub failures: Vec<String>,
}

impl PageReport {
    /// One line: `page: N steps run, M skipped, K failed`.
    pub fn summary(&self) -> String {
        format!(
            "{}: {} steps run, {} blocks not run (norun), {} failed",
            self.page,
            self.ran,
            self.skipped,
            self.failures.len()
        )
    }
}

/// Runs every step of `page` (a Markdown file); `shown` is its path for messages.
pub fn run_page(page: &Markdown, shown: &str, hooks: &mut dyn Hooks) -> PageReport {
    run_page_in(&Checkout::this(), page, shown, hooks)
}

/// Like [`run_page`], from `checkout` (another clone of the repository, its own `ck`).
pub fn run_page_in(
    checkout: &Checkout,
    page: &Markdown,
    shown: &str,
    hooks: &mut dyn Hooks,
) -> PageReport {
    let plan = plan::plan(page);
    let mut report = steps_in(checkout, shown, &plan.steps, hooks, page_timeout());
    report.skipped = plan.skipped.len();
    report
        .failures
        .extend(plan.errors.iter().map(|e| format!("{shown}:{e}")));
    report
}

/// Runs `steps` of the page `shown` in one new session, then ends it.
pub fn run_steps(shown: &str, steps: &[Step], hooks: &mut dyn Hooks) -> PageReport {
    run_steps_within(shown, steps, hooks, page_timeout())
}

/// [`run_steps`] with the page's time limit given.
pub fn run_steps_within(
    shown: &str,
    steps: &[Step],
    hooks: &mut dyn Hooks,
    timeout: Duration,
) -> PageReport {
    steps_in(&Checkout::this(), shown, steps, hooks, timeout)
}

/// Runs `steps` of the page `shown` from `checkout` in one new session within `timeout`.
fn steps_in(
    checkout: &Checkout,
    shown: &str,
    steps: &[Step],
    hooks: &mut dyn Hooks,
    timeout: Duration,
) -> PageReport {
    let mut report = PageReport {
        page: shown.to_string(),
        ..PageReport::default()
    };
    if steps.is_empty() {
        return report;
    }
    let label = Path::new(shown)
        .file_stem()
        .map_or("page".into(), |s| s.to_string_lossy().into_owned());
    let mut session = Session::start_in(checkout, &label, timeout);
    for (i, step) in steps.iter().enumerate() {
        let go_on = run_step(shown, step, &steps[..i], &mut session, hooks, &mut report);
        report.ran += 1;
        if !go_on {
            break;
        }
    }
    for problem in session.finish() {
        report.failures.push(format!("{shown}: {problem}"));
    }
    report
}

/// Runs one step; `false` when the page cannot go on.
fn run_step(
    shown: &str,
    step: &Step,
    earlier: &[Step],
    session: &mut Session,
    hooks: &mut dyn Hooks,
    report: &mut PageReport,
) -> bool {
    let at = format!("{shown}:{}", step.line);
    let text = session.ports().substitute(&step.text);
    if let Err(e) = hooks.before(step, session) {
        report.failures.push(format!("{at}: {e}"));
        return false;
    }
    match &step.kind {
        StepKind::File { path } => {
            if let Err(e) = session.write_file(path, &text) {
                report.failures.push(format!("{at}: {e}"));
                return false;
            }
        }
        StepKind::Shell => {
            let (outcome, output) = session.run(&text, true);
            if outcome != Outcome::Done(0) {
                let mut msg = format!("{at}: {}\n", what_happened(&outcome));
                section(&mut msg, "block", &step.text);
                section(&mut msg, "its output", &output);
                background_logs(&mut msg, earlier, session);
                report.failures.push(msg);
                return false;
            }
        }
        StepKind::Console {
            expected,
            background,
        } => {
            let (outcome, output) = session.run(&text, false);
            let Outcome::Done(status) = outcome else {
                let mut msg = format!("{at}: {}\n", what_happened(&outcome));
                section(&mut msg, "command", &format!("$ {}", step.text));
                section(&mut msg, "its output", &output);
                background_logs(&mut msg, earlier, session);
                report.failures.push(msg);
                return false;
            };
            if let Some(msg) = compare(&at, step, expected, *background, status, &output) {
                report.failures.push(msg);
            }
        }
    }
    if let Err(e) = hooks.after(step, session) {
        report.failures.push(format!("{at}: {e}"));
        return false;
    }
    true
}

/// The failure message of a console command whose output differs from the page's, if it
/// does.
fn compare(
    at: &str,
    step: &Step,
    expected: &[String],
    background: bool,
    status: i32,
    output: &str,
) -> Option<String> {
    let actual: Vec<&str> = output.lines().collect();
    let mut msg = String::new();
    if background {
        // What a background job prints arrives while later commands run.
        if console::masked_lines(expected)
            .iter()
            .all(|l| l.trim() == "...")
        {
            return None;
        }
        let _ = writeln!(
            msg,
            "{at}: `{}` runs in the background: its output arrives while later commands run \
             and cannot be shown as its output here (move it to a text block)",
            step.text
        );
    } else if console::matches(expected, &actual) {
        return None;
    } else {
        let _ = writeln!(
            msg,
            "{at}: `{}` printed something other than the page shows (exit status {status}; \
             compared with every run of digits as 0 and of blanks as one space; a `...` line \
             stands for any lines)",
            step.text
        );
    }
    section(&mut msg, "the page shows", &expected.join("\n"));
    section(&mut msg, "it printed", output);
    Some(msg)
}

/// What an unfinished step's outcome means.
fn what_happened(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Done(status) => format!("the block failed with exit status {status}"),
        Outcome::ShellExited(Some(status)) => {
            format!("the block failed with exit status {status} (bash runs with set -euo pipefail)")
        }
        Outcome::ShellExited(None) => "the page's bash was killed during the block".to_string(),
        Outcome::TimedOut => "the page ran out of time in this step and was stopped (the \
             limit is CK_DOCS_TIMEOUT seconds, 180 by default); a command that waits needs a \
             bound (`ck status --wait --timeout 30s`), and a fleet runs in the background \
             (`ck run ... &`)"
            .to_string(),
    }
}

/// Appends `title:` and `body` indented to `msg`.
fn section(msg: &mut String, title: &str, body: &str) {
    let _ = writeln!(msg, "  {title}:");
    if body.trim().is_empty() {
        let _ = writeln!(msg, "    (nothing)");
    }
    for line in body.trim_end().lines() {
        let _ = writeln!(msg, "    {line}");
    }
}

/// Appends the last lines that the page's earlier shell blocks printed (their background
/// jobs, `ck run ... &`, keep writing there) to `msg`.
fn background_logs(msg: &mut String, earlier: &[Step], session: &Session) {
    const TAIL: usize = 25;
    // Steps are numbered from 1 in the order run; file steps do not run in the shell.
    let mut n = 0;
    for step in earlier {
        if matches!(step.kind, StepKind::File { .. }) {
            continue;
        }
        n += 1;
        let output = session.output(n);
        if output.trim().is_empty() {
            continue;
        }
        let lines: Vec<&str> = output.lines().collect();
        let tail = lines[lines.len().saturating_sub(TAIL)..].join("\n");
        section(
            msg,
            &format!("the last lines printed by the block at line {}", step.line),
            &tail,
        );
    }
}
