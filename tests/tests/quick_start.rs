//! README's quick start, run as written (its ports replaced by free ones) through the docs
//! harness: a user's own Node app (`app.js` on `ck-listen`) under ck with four workers, read with
//! `ck status`, rolled by `ck reload` while a keep-alive load that never retries (as wrk) runs
//! across it, with 0 failed requests, then stopped with `ck stop --wait`.
//!
//! The section is the one under README's heading starting with "Quick start".
//! `CK_QUICK_START_FILE=PATH` reads another Markdown file instead (to try a draft).

use std::path::PathBuf;
use std::time::Duration;

use ck_tests::churn::{Background, SETTLE};
use ck_tests::docs::{self, Hooks, Markdown, Session, Step, StepKind};
use ck_tests::load::Mode;
use ck_tests::{READY_TIMEOUT, Status};

/// Workers the quick start runs (`ck run -w 4`).
const WORKERS: usize = 4;
/// Requests per second of the load across the reload (over `churn::CONNECTIONS` keep-alive
/// connections): well within what four Node workers answer on a busy two-core machine, so
/// the load measures the roll, not the machine.
const RATE: f64 = 400.0;

/// The hooks: `ck status` checked after each step that runs it, and a load started before the
/// step that runs `ck reload` and checked after it.
#[derive(Default)]
struct RollUnderLoad {
    load: Option<Background>,
    before_reload: Option<Status>,
    statuses: usize,
    reloads: usize,
    served: u64,
}

/// `ck status --json` in the page's environment.
fn status(session: &Session) -> Result<Status, String> {
    let out = ck_tests::sys::output_within(
        session.command("ck").args(["status", "--json"]),
        Duration::from_secs(20),
    )
    .ok_or("`ck status --json` did not answer within 20 s")?;
    serde_json::from_slice(&out.stdout).map_err(|e| {
        format!(
            "`ck status --json` printed no status ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Polls `ck status --json` until `WORKERS` slots are ready (a roll's last replacement may
/// still be settling when `ck reload` returns).
fn ready_fleet(session: &Session) -> Result<Status, String> {
    let deadline = std::time::Instant::now() + READY_TIMEOUT;
    loop {
        let status = status(session)?;
        if status.ready_count() == WORKERS && status.slots.len() == WORKERS {
            return Ok(status);
        }
        if std::time::Instant::now() > deadline {
            return Err(format!(
                "`ck status` should show {WORKERS} ready workers: {status:#?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `steps` with each shell block made of simple one-line commands split into one step per
/// line (same shell, same order, same text), so the load starts right before the line that
/// runs `ck reload` and is checked right after it, before the next line stops the fleet.
fn one_command_per_step(steps: Vec<Step>) -> Vec<Step> {
    let simple = |text: &str| {
        !text.lines().any(|l| {
            let l = l.trim_end();
            l.ends_with('\\') || l.contains("<<") || l.ends_with('{') || l.ends_with(" do")
        })
    };
    steps
        .into_iter()
        .flat_map(|step| {
            if step.kind != StepKind::Shell || !simple(&step.text) {
                return vec![step];
            }
            step.text
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
                .map(|(i, l)| Step {
                    // The fence's line, then the block's lines.
                    line: step.line + 1 + i,
                    text: format!("{l}\n"),
                    ..step.clone()
                })
                .collect()
        })
        .collect()
}

/// Whether `step` runs `ck CMD`.
fn runs(step: &Step, cmd: &str) -> bool {
    step.text
        .lines()
        .any(|l| l.trim_start().starts_with(&format!("ck {cmd}")))
}

impl Hooks for RollUnderLoad {
    fn before(&mut self, step: &Step, session: &mut Session) -> Result<(), String> {
        if !runs(step, "reload") {
            return Ok(());
        }
        let port = session
            .ports()
            .pairs()
            .first()
            .map(|(_, used)| *used)
            .ok_or("the quick start names no port before `ck reload`")?;
        self.before_reload = Some(ready_fleet(session)?);
        self.load = Some(Background::start_with(port, Mode::KeepAlive, false, RATE));
        // The load is under way when the roll starts.
        std::thread::sleep(SETTLE);
        Ok(())
    }

    fn after(&mut self, step: &Step, session: &mut Session) -> Result<(), String> {
        if runs(step, "status") {
            let status = ready_fleet(session)?;
            eprintln!(
                "quick start: `ck status` shows {} ready workers",
                status.ready_count()
            );
            self.statuses += 1;
        }
        if runs(step, "reload") {
            let load = self.load.take().ok_or("no load was started")?;
            std::thread::sleep(SETTLE);
            let after = ready_fleet(session);
            let report = load.finish_and_print("quick start reload");
            let after = after?;
            if report.failed() != 0 || report.ok == 0 || report.retried != 0 {
                return Err(format!(
                    "a keep-alive load without retries across `ck reload` must see answers and \
                     no failure: {}\n{:?}",
                    report.summary(),
                    report.errors
                ));
            }
            let before = self.before_reload.take().expect("set before the reload");
            if !after.worker_pids().is_disjoint(&before.worker_pids()) {
                return Err(format!(
                    "`ck reload` replaced every worker: before {:?}, after {:?}",
                    before.worker_pids(),
                    after.worker_pids()
                ));
            }
            self.reloads += 1;
            self.served += report.ok;
        }
        Ok(())
    }
}

#[test]
fn readme_quick_start_runs_a_node_app_on_four_workers_and_rolls_it_under_load_with_no_failure() {
    let root = docs::repo_root();
    let path = std::env::var_os("CK_QUICK_START_FILE")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("README.md"));
    let page = Markdown::read(&path);
    let shown = page.shown(&root);
    let steps = docs::section_steps(&page, "Quick start")
        .unwrap_or_else(|| panic!("{shown} has no heading starting with \"Quick start\""));
    let steps = one_command_per_step(steps);
    let all_text: String = steps
        .iter()
        .map(|s| s.text.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    for needed in [
        "ck run -w 4",
        "ck status",
        "ck reload",
        "ck stop --wait",
        "curl",
    ] {
        assert!(
            all_text.contains(needed),
            "{shown}'s quick start should run `{needed}`: its blocks are\n{all_text}"
        );
    }
    let mut hooks = RollUnderLoad::default();
    let report = docs::run_steps(&shown, &steps, &mut hooks);
    eprintln!("quick start: {}", report.summary());
    assert!(
        report.failures.is_empty(),
        "the quick start failed:\n{}",
        report.failures.join("\n")
    );
    assert_eq!(
        hooks.reloads, 1,
        "the quick start ran `ck reload` under load once"
    );
    assert!(hooks.statuses >= 1, "the quick start ran `ck status`");
    assert!(hooks.served > 0, "the load across `ck reload` was answered");
}
