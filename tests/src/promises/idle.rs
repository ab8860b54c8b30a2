//! What an idle ck costs: a fleet of two demo workers nobody connects to, measured from the
//! kernel's per-thread schedstat over every thread of ck (`crate::cpu`): after
//! [`IDLE_SETTLE`], [`IDLE_WINDOWS`] windows of [`IDLE_WINDOW`], whose median CPU must stay
//! within [`IDLE_CORE_PERCENT`] of a core and whose median wake-ups within
//! [`IDLE_WAKEUPS_PER_SECOND`]. [`measure`] returns the measure and [`IdleCost::verdict`]
//! says whether it keeps the promise ([`Bounds::All`]), or its wake-ups alone
//! ([`Bounds::WakeupsOnly`], what the debug build is held to beside other tests). Every
//! configuration is measured side by side with a self-test ck that burns [`SELF_TEST_BURN`]
//! per window on purpose, which the check must fail ([`idle_fleets_keep`]).
use std::time::Duration;

use ck::supervisor::IDLE_BURN_ENV;

use super::figures::{IDLE_CORE_PERCENT, IDLE_WAKEUPS_PER_SECOND, IDLE_WINDOW, IDLE_WINDOWS};
use crate::ck::Ck;
use crate::cpu::{Spent, spent_over};
use crate::{READY_TIMEOUT, start_ready_with_env};

/// How long an idle fleet is left alone before it is measured: ck's own start (the exit
/// watch's loading, the first canaries, the sampler slowing to its quiet pace) is over.
pub const IDLE_SETTLE: Duration = Duration::from_secs(5);
/// What the self-test's ck burns per [`IDLE_WINDOW`] on top of its idle cost: twice the whole
/// budget of a window, so a check that lets it pass is broken.
pub const SELF_TEST_BURN: Duration = Duration::from_millis(20);

/// The configurations the idle promise covers: the default policy (round-robin), every other
/// policy (least-queue and least-conn sample queues and counts on the same ticks), and the
/// baseline without the program.
pub const CONFIGURATIONS: [(&str, &[&str]); 6] = [
    ("idle", &[]),
    ("idle-lq", &["--policy", "least-queue"]),
    ("idle-lc", &["--policy", "least-conn"]),
    ("idle-hash", &["--policy", "hash"]),
    ("idle-sticky", &["--policy", "sticky"]),
    ("idle-nobpf", &["--no-bpf"]),
];

/// ck's CPU a window may cost: [`IDLE_CORE_PERCENT`] of one core over [`IDLE_WINDOW`].
pub fn cpu_budget() -> Duration {
    IDLE_WINDOW.mul_f64(IDLE_CORE_PERCENT / 100.0)
}

/// ck's wake-ups a window may have: [`IDLE_WAKEUPS_PER_SECOND`] over [`IDLE_WINDOW`].
pub fn wakeup_budget() -> u64 {
    IDLE_WAKEUPS_PER_SECOND * IDLE_WINDOW.as_secs()
}

/// Which of the promise's bounds a check holds an idle ck to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bounds {
    /// CPU and wake-ups: the promise, on the release build (`cargo xtask promises`).
    All,
    /// Wake-ups alone: they count what ck does (its ticks, canaries, scans), the same in a
    /// debug build and on a busy machine, while the CPU each one costs is not (a debug build
    /// spends several times the release build's).
    WakeupsOnly,
}

/// What an idle ck spent in each window.
#[derive(Clone, Debug)]
pub struct IdleCost {
    /// What it was (name and arguments), for messages.
    pub what: String,
    /// Each window's CPU time and wake-ups, in order.
    pub windows: Vec<Spent>,
}

impl IdleCost {
    /// The median CPU time of the windows.
    pub fn median_cpu(&self) -> Duration {
        median(self.windows.iter().map(|w| w.cpu).collect())
    }

    /// The median wake-ups of the windows.
    pub fn median_wakeups(&self) -> u64 {
        median(self.windows.iter().map(|w| w.wakeups).collect())
    }

    /// The median CPU time as % of one core.
    pub fn core_percent(&self) -> f64 {
        self.median_cpu().as_secs_f64() / IDLE_WINDOW.as_secs_f64() * 100.0
    }

    /// The median wake-ups per second.
    pub fn wakeups_per_second(&self) -> f64 {
        self.median_wakeups() as f64 / IDLE_WINDOW.as_secs_f64()
    }

    /// One line: the medians against the promise, and every window.
    pub fn describe(&self) -> String {
        let windows: Vec<String> = self
            .windows
            .iter()
            .map(|w| format!("{:.2?}/{} wake-ups", w.cpu, w.wakeups))
            .collect();
        format!(
            "{}: median {:.3} % of a core (at most {IDLE_CORE_PERCENT} %), {:.1} wake-ups a \
             second (at most {IDLE_WAKEUPS_PER_SECOND}); windows of {IDLE_WINDOW:?}: {}",
            self.what,
            self.core_percent(),
            self.wakeups_per_second(),
            windows.join(", ")
        )
    }

    /// Whether the medians keep within `bounds`: `Ok` with the description, or `Err` saying
    /// which bound they pass.
    pub fn verdict(&self, bounds: Bounds) -> Result<String, String> {
        let mut over = Vec::new();
        if bounds == Bounds::All && self.median_cpu() > cpu_budget() {
            over.push(format!(
                "CPU {:.2?} a window, over {:.2?}",
                self.median_cpu(),
                cpu_budget()
            ));
        }
        if self.median_wakeups() > wakeup_budget() {
            over.push(format!(
                "{} wake-ups a window, over {}",
                self.median_wakeups(),
                wakeup_budget()
            ));
        }
        if over.is_empty() {
            Ok(self.describe())
        } else {
            Err(format!("{} — {}", self.describe(), over.join("; ")))
        }
    }
}

/// The median of `values` (the upper one of an even count).
fn median<T: Ord + Copy>(mut values: Vec<T>) -> T {
    values.sort();
    values[values.len() / 2]
}

/// Measures `ck` (a ready fleet nobody connects to) idle: waits until its exit watch is loaded
/// (with the program), lets it settle for [`IDLE_SETTLE`], then reads its threads over
/// [`IDLE_WINDOWS`] windows of [`IDLE_WINDOW`] without talking to it.
pub fn measure(ck: &mut Ck, what: &str) -> IdleCost {
    if !ck.no_bpf() {
        ck.wait_status("the exit watch loaded", READY_TIMEOUT, |s| {
            s.exits_watched.is_some()
        })
        .expect("wait for the status");
    }
    std::thread::sleep(IDLE_SETTLE);
    let windows = (0..IDLE_WINDOWS)
        .map(|_| {
            spent_over(ck.pid(), IDLE_WINDOW)
                .unwrap_or_else(|| panic!("ck ({what}) exited while idle:\n{}", ck.log()))
        })
        .collect();
    IdleCost {
        what: what.to_string(),
        windows,
    }
}

/// One idle fleet to measure: its name, ck's arguments and ck's environment.
struct Fleet<'a> {
    what: &'a str,
    args: &'a [&'a str],
    env: Vec<(&'a str, &'a str)>,
}

/// Starts every fleet (two demo workers each) and measures them idle side by side, one thread
/// each: idle fleets do not load the machine, and each ck's CPU and wake-ups are read from its
/// own threads, so the windows of one do not count another's. Returns each ck with its cost,
/// in order.
fn idle_costs(fleets: &[Fleet]) -> Vec<(Ck, IdleCost)> {
    std::thread::scope(|scope| {
        let threads: Vec<_> = fleets
            .iter()
            .map(|fleet| {
                scope.spawn(move || {
                    let (mut ck, _port, _status) =
                        start_ready_with_env(fleet.what, 2, fleet.args, &fleet.env)
                            .expect("start a ready ck");
                    let cost = measure(&mut ck, &format!("ck {:?}", fleet.args));
                    (ck, cost)
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

/// Every configuration of [`CONFIGURATIONS`] idle keeps the promise's `bounds`, and the
/// self-test's ck, whose event loop burns [`SELF_TEST_BURN`] per window on purpose (the test
/// switch `CK_TEST_IDLE_BURN_US`, in microseconds a second), fails the whole promise
/// ([`Bounds::All`]): all measured side by side (panics naming every check that does not
/// hold, with its ck's log).
pub fn idle_fleets_keep(bounds: Bounds) {
    let per_second = SELF_TEST_BURN.as_micros() / u128::from(IDLE_WINDOW.as_secs());
    let burn = per_second.to_string();
    let burning = Fleet {
        what: "idle-burn",
        args: &[],
        env: vec![(IDLE_BURN_ENV, &burn)],
    };
    let fleets: Vec<Fleet> = std::iter::once(burning)
        .chain(CONFIGURATIONS.iter().map(|&(what, args)| Fleet {
            what,
            args,
            env: Vec::new(),
        }))
        .collect();
    let measured = idle_costs(&fleets);
    let ((burn_ck, burn_cost), idle) = measured.split_first().expect("the self-test's fleet");
    let mut broken = Vec::new();
    if !burn_ck.log().contains(IDLE_BURN_ENV) {
        broken.push(format!(
            "ck did not take the test switch {IDLE_BURN_ENV}:\n{}",
            burn_ck.log()
        ));
    }
    match burn_cost.verdict(Bounds::All) {
        Err(why) => {
            eprintln!("idle-burn: the check fails a ck burning {SELF_TEST_BURN:?} a window: {why}")
        }
        Ok(said) => broken.push(format!(
            "the idle check passed a ck that burns {SELF_TEST_BURN:?} a window on purpose: \
             {said}"
        )),
    }
    for ((ck, cost), fleet) in idle.iter().zip(&fleets[1..]) {
        match cost.verdict(bounds) {
            Ok(said) => eprintln!("{}: {said}", fleet.what),
            Err(why) => broken.push(format!(
                "an idle ck costs more than README promises: {why}\n{}",
                ck.log()
            )),
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n\n"));
}

/// The promise: the self-test and every configuration of [`CONFIGURATIONS`], held to its CPU
/// and its wake-ups.
pub fn idle_fleets_are_cheap() {
    idle_fleets_keep(Bounds::All);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(windows: &[(u64, u64)]) -> IdleCost {
        IdleCost {
            what: "test".into(),
            windows: windows
                .iter()
                .map(|&(ms, wakeups)| Spent {
                    cpu: Duration::from_millis(ms),
                    wakeups,
                })
                .collect(),
        }
    }

    #[test]
    fn the_budgets_are_the_promise_over_a_window() {
        assert_eq!(cpu_budget(), Duration::from_millis(10));
        assert_eq!(wakeup_budget(), 100);
    }

    #[test]
    fn the_median_window_is_held_to_the_promise() {
        assert!(
            cost(&[(3, 20), (50, 900), (4, 30)])
                .verdict(Bounds::All)
                .is_ok()
        );
        let costly = cost(&[(12, 20), (3, 20), (11, 30)]);
        let over = costly.verdict(Bounds::All).unwrap_err();
        assert!(over.contains("CPU"), "{over}");
        assert!(costly.verdict(Bounds::WakeupsOnly).is_ok());
        let woken = cost(&[(3, 101), (3, 150), (3, 20)]);
        for bounds in [Bounds::All, Bounds::WakeupsOnly] {
            let why = woken.verdict(bounds).unwrap_err();
            assert!(why.contains("wake-ups a window"), "{why}");
        }
    }

    #[test]
    fn the_self_test_burns_more_than_a_window_may_cost() {
        assert!(SELF_TEST_BURN > cpu_budget());
    }
}
