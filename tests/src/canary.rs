//! Canary rolls seen from outside: `ck reload --canary` run on a thread (it answers when the
//! roll ends), the status once the canary is judged, and a withdrawal under a load that never
//! retries, with what it must keep: the current release in the active set at every poll, its
//! workers serving after, `ck reload` failing with the reason, and no more failed requests
//! than connections the canary was sent.
use std::collections::BTreeSet;
use std::process::Output;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::churn::{Background, SETTLE};
use crate::ck::{ck_bin, ck_output};
use crate::http::metrics_text;
use crate::load::Mode;
use crate::sys::TempDir;
use crate::{Ck, READY_TIMEOUT, Status, app::script, start};

/// `ck reload ARGS...` of `ck`'s instance, on a thread (it answers when the roll ends).
pub fn reload(ck: &Ck, args: &[&str]) -> JoinHandle<Output> {
    let mut all = vec!["reload".to_string(), "--name".into(), ck.name().into()];
    all.extend(args.iter().map(|a| a.to_string()));
    std::thread::spawn(move || {
        let args: Vec<&str> = all.iter().map(String::as_str).collect();
        ck_output(&args)
    })
}

/// The status once the canary is judged: its slots.
pub fn judged(ck: &mut Ck) -> (Status, BTreeSet<u32>) {
    let status = ck
        .wait_status("the canary judged", READY_TIMEOUT, |s| {
            s.canary.as_deref().is_some_and(|c| c.starts_with("judged"))
        })
        .expect("the canary goes in");
    let slots = status
        .slots
        .iter()
        .filter(|s| s.canary)
        .map(|s| s.slot)
        .collect();
    (status, slots)
}

/// The connections a canary was sent before a limit withdrew it, as `ck reload`'s error
/// names them (`(N new connections were sent to it)`).
pub fn sent_before_withdrawal(err: &str) -> Option<u64> {
    let (head, _) = err.split_once(" new connections were sent to it")?;
    head.rsplit('(').next()?.trim().parse().ok()
}

/// A bad release and how it must be withdrawn.
pub struct BadRelease<'a> {
    /// The test's name (its ck instance and temp directory).
    pub what: &'a str,
    /// Shell lines the new release's app runs first (e.g. a `kill -9 $$` in 2 s).
    pub prelude: &'a str,
    /// `ck demo-worker` options of the new release (the current one is a plain demo worker).
    pub demo: &'a str,
    /// Workers of the fleet (`-w`).
    pub workers: usize,
    /// More `ck run` options (`-w` and the app are given).
    pub run: &'a [&'a str],
    /// `ck reload` options (the canary's).
    pub reload: &'a [&'a str],
    /// Words `ck reload`'s error names the reason by.
    pub reason: &'a str,
}

/// Deploys `bad` as a canary of a fleet of demo workers under a new-connection load
/// that never retries, and checks its withdrawal. Returns (failed requests, connections
/// selected for the canary).
pub fn withdrawn(bad: &BadRelease<'_>) -> (u64, u64) {
    let dir = TempDir::new(bad.what);
    let marker = dir.path().join("bad-release");
    let body = format!(
        "if [ -e '{marker}' ]; then\n{prelude}\nexec '{ck}' demo-worker {demo}\nfi\n\
         exec '{ck}' demo-worker",
        marker = marker.display(),
        prelude = bad.prelude,
        demo = bad.demo,
        ck = ck_bin().display()
    );
    let app = script(&dir, "app.sh", &body);
    let app = app.to_str().expect("UTF-8 temp path");
    let workers = bad.workers.to_string();
    let mut args = vec!["-w", &workers, "--metrics", "127.0.0.1:0"];
    args.extend(bad.run);
    args.extend(["--", app]);
    let (mut ck, port) = start(bad.what, &args).expect("start ck");
    let before = ck.wait_ready(bad.workers, READY_TIMEOUT).expect("ready");
    let old = before.worker_pids();
    let old_slots: BTreeSet<u32> = before.slots.iter().map(|s| s.slot).collect();
    let load = Background::start_without_retry(port, Mode::NewConnection);
    std::thread::sleep(SETTLE);
    std::fs::write(&marker, b"").expect("the marker");
    let reloading = reload(&ck, bad.reload);
    let (_, canary) = judged(&mut ck);
    let mut selected = 0;
    while !reloading.is_finished() {
        let s = ck.status().expect("status");
        // The current release never leaves the active set.
        assert!(
            old_slots.iter().all(|slot| s.active.contains(slot)),
            "{s:#?}"
        );
        let on_canary = s.slots.iter().filter(|x| canary.contains(&x.slot));
        selected = selected.max(on_canary.map(|x| x.selected).sum::<u64>());
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = reloading.join().expect("the reload");
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("canary withdrawn"), "{err}");
    assert!(err.contains(bad.reason), "{err}");
    // ck names how many connections the canary was sent when a limit withdraws it: the
    // polls above may have missed the last ones.
    let selected = selected.max(sent_before_withdrawal(&err).unwrap_or(0));
    std::thread::sleep(SETTLE);
    let report = load.finish_and_print(bad.what);
    let failed = report.failed();
    eprintln!("{failed} failed; {selected} selected for the canary; {err}");
    assert!(
        failed <= selected,
        "{failed} failed, {selected} selected for the canary"
    );
    // The canary's workers leave once what they were given is done (a stalled one, once it
    // wakes): then only the current release is left.
    let after = ck
        .wait_status("only the current release", READY_TIMEOUT, |s| {
            s.worker_pids() == old
        })
        .expect("the canary's workers leave");
    assert!(after.canary.is_none() && !after.reloading, "{after:#?}");
    let metrics = metrics_text(after.metrics.as_deref().expect("--metrics"));
    for line in [
        "ck_canaries_total{verdict=\"withdrawn\"} 1\n",
        "ck_canaries_total{verdict=\"promoted\"} 0\n",
        "ck_canary_share 0.0\n",
    ] {
        assert!(metrics.contains(line), "no {line:?} in {metrics}");
    }
    (failed, selected)
}
