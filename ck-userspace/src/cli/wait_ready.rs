//! `ck status --wait`: the status of an instance once every slot is ready, asked again every
//! 50 ms while the instance is not there yet (found as [`Finder`] says: by name, by its ck's
//! pid, or the only one) or its slots are still coming; an error naming what is not ready
//! after `--timeout`.
use std::time::{Duration, Instant};

use anyhow::bail;
use ck::control::{StatusReport, instances::Which};

use super::{
    control::status_of,
    finder::{Finder, POLL},
};

/// Whether slot `s` is where a settled fleet has it: a ready worker, a hot spare standing by,
/// or a slot `ck drain` holds out (its worker up and ready for when it is put back).
fn settled(s: &ck::control::SlotReport) -> bool {
    match s.state.as_str() {
        "ready" => true,
        "standby" => s.spare,
        "draining" => s.drained,
        _ => false,
    }
}

/// What keeps `report`'s fleet from being ready, one item per slot (`slot 2 starting (pid
/// 812)`), plus the workers not started yet; empty when every slot is settled and the instance
/// runs its target worker count.
pub fn unready(report: &StatusReport) -> Vec<String> {
    let slots = || report.slots.iter().filter(|s| s.member_of.is_none());
    let mut why: Vec<String> = slots()
        .filter(|s| !settled(s))
        .map(|s| {
            let pid = s
                .pid
                .map_or("no worker".to_string(), |p| format!("pid {p}"));
            let exit = s
                .last_exit
                .as_ref()
                .map_or(String::new(), |e| format!(", last exit: {e}"));
            format!("slot {} {} ({pid}{exit})", s.slot, s.state)
        })
        .collect();
    let running = slots().filter(|s| !s.spare && settled(s)).count() as u32;
    let coming = slots().filter(|s| !s.spare && !settled(s)).count() as u32;
    let missing = report.workers.saturating_sub(running + coming);
    if missing > 0 {
        why.push(format!(
            "{missing} of {} worker(s) not started yet",
            report.workers
        ));
    }
    why
}

/// `ck status --wait`: the status of the instance `which` names once it answers and every
/// slot is ready, asking again every 50 ms (no instance may be running yet: its run directory
/// may not even exist); an error naming what is not ready after `timeout`, or at once when its
/// ck exits or several instances make `which` ambiguous.
pub fn wait_ready(which: Which, timeout: Duration) -> anyhow::Result<Box<StatusReport>> {
    let began = Instant::now();
    let mut finder = Finder::new(which)?;
    let mut last: Option<anyhow::Result<Box<StatusReport>>> = None;
    // The ck of the instance, once it answered: its exit ends the wait.
    let mut supervisor: Option<(u32, std::os::fd::OwnedFd)> = None;
    loop {
        if let Some(name) = finder.poll()? {
            let answer = status_of(&name);
            if let Ok(report) = &answer {
                if report.stopping {
                    bail!(
                        "ck instance {:?} is stopping: its slots will not become ready; start \
                         it again with `ck run`",
                        report.name
                    );
                }
                if unready(report).is_empty() {
                    return answer;
                }
                if supervisor.is_none() {
                    supervisor = ck::os::pidfd::open(report.pid)
                        .ok()
                        .map(|fd| (report.pid, fd));
                }
            }
            if let Some((pid, fd)) = &supervisor
                && ck::os::pidfd::has_exited(fd)
            {
                bail!(
                    "ck instance {name:?} (ck pid {pid}) exited before every slot was ready: its \
                     log (its stderr) says why; fix that and start it again"
                );
            }
            last = Some(answer);
        }
        if began.elapsed() >= timeout {
            bail!(match &last {
                Some(last) => not_ready(last, timeout),
                None => finder.not_found(timeout),
            });
        }
        std::thread::sleep(POLL);
    }
}

/// The error of `ck status --wait` at its timeout once the instance was found: the slots not
/// ready and their states, or why it did not answer, and the fix.
fn not_ready(last: &anyhow::Result<Box<StatusReport>>, timeout: Duration) -> String {
    match last {
        Ok(report) => format!(
            "ck instance {:?} is not ready after {timeout:?}: {}; look at the workers' output \
             in ck's log (its stderr) for why they do not start or do not listen, or wait \
             longer with --timeout",
            report.name,
            unready(report).join(", ")
        ),
        Err(e) => format!(
            "the ck instance did not answer within {timeout:?} (last try: {e:#}); is `ck run` \
             running, with the same --name and CK_RUN_DIR? Look at its log (its stderr), or \
             wait longer with --timeout"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::unready;
    use serde_json::{Value, json};

    /// A slot: `(slot, state)`, with `extra` fields over the defaults.
    fn slot(index: u32, state: &str, extra: Value) -> Value {
        let mut s = json!({
            "slot": index, "pid": 100 + index, "state": state, "drained": false, "uptime_ms": 1,
            "restarts": 0, "generation": 1, "selected": 0, "fallbacks": 0, "migrated": 0,
            "breaker": "closed", "queue_depth": 0, "probe_hits": 0, "spare": false,
        });
        s.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        s
    }

    /// A report of `workers` target workers with `slots`.
    fn report(workers: u32, slots: Vec<Value>) -> ck::control::StatusReport {
        serde_json::from_value(json!({
            "name": "web", "pid": 7, "bpf": true, "steering": [], "policy": "round-robin",
            "groups": ["tcp4-8080"], "listen": ["0.0.0.0:8080"], "probe_port_base": 19800,
            "uptime_ms": 1, "active": [], "fallback": [], "degraded": [], "foreign": [],
            "min_workers": 1, "adopt": false, "dropped": 0, "stopping": false,
            "reloading": false, "migration": true, "workers": workers, "slots": slots,
        }))
        .expect("a valid report")
    }

    #[test]
    fn a_fleet_is_ready_when_every_slot_is_and_all_workers_run() {
        let none = json!({});
        let all = report(
            2,
            vec![slot(0, "ready", none.clone()), slot(1, "ready", none)],
        );
        assert!(unready(&all).is_empty());
        assert_eq!(
            unready(&report(2, vec![])),
            ["2 of 2 worker(s) not started yet"]
        );
    }

    #[test]
    fn starting_and_crashed_slots_are_named_with_their_state() {
        let r = report(
            3,
            vec![
                slot(0, "ready", json!({})),
                slot(1, "starting", json!({})),
                slot(2, "restarting", json!({"pid": null, "last_exit": "exit 1"})),
            ],
        );
        assert_eq!(
            unready(&r),
            [
                "slot 1 starting (pid 101)",
                "slot 2 restarting (no worker, last exit: exit 1)"
            ]
        );
    }

    #[test]
    fn drained_slots_and_standing_spares_count_as_settled_a_leaving_one_does_not() {
        let settled = report(
            2,
            vec![
                slot(0, "ready", json!({})),
                slot(1, "draining", json!({"drained": true})),
                slot(2, "standby", json!({"spare": true})),
            ],
        );
        assert!(unready(&settled).is_empty());
        let rolling = report(
            2,
            vec![
                slot(0, "ready", json!({})),
                slot(1, "draining", json!({})),
                slot(2, "ready", json!({})),
            ],
        );
        assert_eq!(unready(&rolling), ["slot 1 draining (pid 101)"]);
    }
}
