//! Scenarios measured in rounds, interleaved: a scenario declares its contenders ([`Plan`]),
//! and the runner ([`Plan::run`]) calls its round function for round 1 of every contender,
//! then round 2, ..., the order of the contenders rotating from round to round (so that none
//! always runs first, or right after the same neighbour: [`Plan::order`]), and keeps every
//! round's figures
//! ([`RoundFigures`], recorded as they are). A table is then laid out from the rounds
//! ([`Layout`]): each figure as its median with the lowest and highest round, ratios taken
//! round by round, goals judged on the medians of the columns they name; failed requests are
//! kept by kind and summed over the rounds (`Figures::failures`, `Layout::failures`, with each
//! column's first errors noted: [`FailureNotes`]).
//!
//! With `--against REV` every contender that runs ck is measured on both builds in the same
//! rounds (the copy on REV's build is labelled `LABEL @REV`); with a control pair (`--no-bpf`
//! and no supervisor, [`Control`]) a run whose pair differs is void: its goals are not judged.
//!
//! A scenario, in short:
//!
//! ```text
//! let plan = bench.plan("udp-rate", ROUNDS, vec![Contender::ck("ck", &[]), ...])
//!     .control(Control::pair(NO_BPF, BARE, &[("rate", "answered datagrams/s")]));
//! let fleets = contender::start_all(bench, plan.contenders(), "udp-rate", &group)?;
//! let measured = plan.run(bench, |i, _contender, _round| {
//!     let mut f = Figures::new();
//!     f.set("rate", measure(&fleets[i])?);
//!     Ok(f)
//! })?;
//! contender::stop_all(bench, fleets)?;
//! let mut t = Layout::new(&measured, "udp-rate: ...");
//! t.values("answered datagrams/s", "rate", Unit::Rate("dgram/s"));
//! t.ratios("ck / --no-bpf", "rate", NO_BPF).goal(Goal::at_least(0.95));
//! Ok(measured.outcome(vec![t.finish()?]))
//! ```

pub mod contender;
mod failures;
mod layout;
pub mod stats;

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

use crate::table::Table;
use crate::{Bench, Outcome};
pub use contender::{App, BARE, Contender, Fleet, Group, Role};
pub use failures::FailureNotes;
pub use layout::{Goal, Layout};
use stats::Stat;

/// The label of `ck run --no-bpf` in the scenarios that have one contender of it.
pub const NO_BPF: &str = "ck --no-bpf";
/// How far apart the control pair may be: the median of its per-round ratios must be within.
pub const CONTROL_WITHIN: (f64, f64) = (0.97, 1.03);
/// The fewest rounds of a scenario with a ratio goal within 5 % of 1.
pub const ROUNDS_NEAR_ONE: usize = 7;
/// The fewest rounds of any scenario; allowed only when a round takes over
/// [`LONG_ROUND_SECS`].
pub const ROUNDS_LEAST: usize = 3;
/// A round longer than this (all contenders) may be one of only [`ROUNDS_LEAST`].
pub const LONG_ROUND_SECS: f64 = 60.0;

/// One contender's figures in one round, by key (`ka_rps`, `p99_ms`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures(BTreeMap<String, f64>);

impl Figures {
    /// No figure yet.
    pub fn new() -> Figures {
        Figures::default()
    }

    /// Sets the figure `key`.
    pub fn set(&mut self, key: &str, value: f64) -> &mut Figures {
        self.0.insert(key.to_string(), value);
        self
    }

    /// The figure `key`, if set.
    pub fn get(&self, key: &str) -> Option<f64> {
        self.0.get(key).copied()
    }
}

/// One round as recorded: the order the contenders ran in and each one's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundFigures {
    /// The contenders' labels, in the order they ran.
    pub order: Vec<String>,
    /// Per contender, its figures.
    pub figures: BTreeMap<String, BTreeMap<String, f64>>,
    /// How long the round took, all contenders, in seconds.
    pub seconds: f64,
}

/// The control pair of a throughput scenario: two contenders that should measure the same
/// (ck `--no-bpf` and the same workers with no supervisor), on figures where a noisy machine
/// shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Control {
    /// The numerator's label.
    pub over: String,
    /// The denominator's label.
    pub under: String,
    /// The figures compared (key, what the table calls it).
    pub keys: Vec<(String, String)>,
}

impl Control {
    /// `over` / `under` on each of `keys` (key, name).
    pub fn pair(over: &str, under: &str, keys: &[(&str, &str)]) -> Control {
        Control {
            over: over.to_string(),
            under: under.to_string(),
            keys: keys
                .iter()
                .map(|(k, n)| (k.to_string(), n.to_string()))
                .collect(),
        }
    }
}

/// What a scenario measures in rounds: its contenders (with `--against`, each ck one on both
/// builds), how many rounds, its control pair.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The scenario's name (progress lines).
    pub scenario: String,
    /// Rounds to run (`--rounds` overrides the scenario's count).
    pub rounds: usize,
    /// The scenario's own count.
    pub planned: usize,
    /// Whether this is a quick run (`--quick` or `--rounds`): its rounds are not checked
    /// against the scenario's count rules.
    pub quick: bool,
    contenders: Vec<Contender>,
    control: Option<Control>,
}

impl Plan {
    /// A plan of `rounds` rounds of `contenders`, each running `bin` (unless given its own); with `against` (a
    /// revision's label and its ck), each contender that runs ck is followed by its copy on
    /// that build.
    pub fn new(
        scenario: &str,
        rounds: usize,
        contenders: Vec<Contender>,
        bin: &std::path::Path,
        against: Option<(&str, &std::path::Path)>,
    ) -> Plan {
        let mut all = Vec::new();
        for mut c in contenders {
            // A contender given its own binary (`Contender::with_bin`) keeps it.
            let own = !c.bin.as_os_str().is_empty();
            if !own {
                c.bin = bin.to_path_buf();
            }
            let copy = against
                .filter(|_| c.runs_ck() && !own)
                .map(|(rev, bin)| Contender {
                    label: format!("{} @{rev}", c.label),
                    bin: bin.to_path_buf(),
                    build: Some(rev.to_string()),
                    ..c.clone()
                });
            all.push(c);
            all.extend(copy);
        }
        Plan {
            scenario: scenario.to_string(),
            rounds,
            planned: rounds,
            quick: false,
            contenders: all,
            control: None,
        }
    }

    /// With this control pair.
    pub fn control(mut self, control: Control) -> Plan {
        self.control = Some(control);
        self
    }

    /// The contenders as run, in column order.
    pub fn contenders(&self) -> &[Contender] {
        &self.contenders
    }

    /// The order of the contenders' indices in round `round` (0-based): rotated by one per
    /// round, so that each runs in every position; and reversed every other `n` rounds, so that
    /// each also follows every other (a rotation alone keeps who follows whom).
    pub fn order(&self, round: usize) -> Vec<usize> {
        let n = self.contenders.len();
        let rotated = (0..n).map(|k| (k + round) % n);
        match (round / n.max(1)) % 2 {
            0 => rotated.collect(),
            _ => rotated.rev().collect(),
        }
    }

    /// Runs the rounds: `round(index, contender, round)` for every contender of every round, in
    /// [`Plan::order`], each returning its figures; then judges the control pair.
    pub fn run(
        self,
        bench: &Bench,
        mut round: impl FnMut(usize, &Contender, usize) -> Result<Figures>,
    ) -> Result<Measured> {
        let mut rounds = Vec::new();
        let n = self.contenders.len();
        for r in 0..self.rounds {
            let started = Instant::now();
            let mut figures = BTreeMap::new();
            let order = self.order(r);
            for (k, &i) in order.iter().enumerate() {
                let c = &self.contenders[i];
                bench.progress(format_args!(
                    "{}: round {}/{}, {} ({}/{n})",
                    self.scenario,
                    r + 1,
                    self.rounds,
                    c.label,
                    k + 1
                ));
                let Figures(f) = round(i, c, r)?;
                figures.insert(c.label.clone(), f);
            }
            rounds.push(RoundFigures {
                order: order
                    .iter()
                    .map(|&i| self.contenders[i].label.clone())
                    .collect(),
                figures,
                seconds: started.elapsed().as_secs_f64(),
            });
        }
        Ok(Measured::new(self, rounds))
    }
}

/// What the rounds gave: the plan, every round's figures, and whether the run is void.
#[derive(Debug, Clone)]
pub struct Measured {
    /// The plan that ran.
    pub plan: Plan,
    /// Every round.
    pub rounds: Vec<RoundFigures>,
    /// The control pair's figures: what, and the per-round ratios' statistics.
    pub control: Vec<(String, Option<Stat>)>,
    /// Why the goals are not judged, when the control pair differed.
    pub void: Option<String>,
}

impl Measured {
    /// The rounds of `plan`, with the control pair judged.
    pub fn new(plan: Plan, rounds: Vec<RoundFigures>) -> Measured {
        let mut measured = Measured {
            plan,
            rounds,
            control: Vec::new(),
            void: None,
        };
        if let Some(c) = measured.plan.control.clone() {
            for (key, name) in &c.keys {
                let stat = Stat::of(&stats::ratios(
                    &measured.values(&c.over, key),
                    &measured.values(&c.under, key),
                ));
                let what = format!("{} / {}, {name}", c.over, c.under);
                let (low, high) = CONTROL_WITHIN;
                let outside = stat.is_none_or(|s| !s.median_within(low, high));
                if outside && measured.void.is_none() {
                    let median =
                        stat.map_or_else(|| "missing".into(), |s| format!("{:.2}", s.median));
                    measured.void = Some(format!(
                        "void: control pair {median} ({what}), outside {low}-{high}: the machine \
                         was too noisy"
                    ));
                }
                measured.control.push((what, stat));
            }
        }
        measured
    }

    /// The figure `key` of contender `label` in each round (`None` where it has none).
    pub fn values(&self, label: &str, key: &str) -> Vec<Option<f64>> {
        self.rounds
            .iter()
            .map(|r| r.figures.get(label).and_then(|f| f.get(key)).copied())
            .collect()
    }

    /// The statistics of `key` of `label` over the rounds.
    pub fn stat(&self, label: &str, key: &str) -> Option<Stat> {
        let values: Vec<f64> = self.values(label, key).into_iter().flatten().collect();
        Stat::of(&values)
    }

    /// The statistics of the per-round ratio `over` / `under` (labels) of `key`.
    pub fn ratio(&self, over: &str, under: &str, key: &str) -> Option<Stat> {
        Stat::of(&stats::ratios(
            &self.values(over, key),
            &self.values(under, key),
        ))
    }

    /// The statistics of the per-round difference `over` - `under` (labels) of `key`.
    pub fn difference(&self, over: &str, under: &str, key: &str) -> Option<Stat> {
        Stat::of(&stats::differences(
            &self.values(over, key),
            &self.values(under, key),
        ))
    }

    /// The sum of `key` of `label` over the rounds.
    pub fn total(&self, label: &str, key: &str) -> Option<f64> {
        let values: Vec<f64> = self.values(label, key).into_iter().flatten().collect();
        (!values.is_empty()).then(|| values.iter().sum())
    }

    /// The contender labelled `label`.
    pub fn contender(&self, label: &str) -> Option<&Contender> {
        self.plan.contenders.iter().find(|c| c.label == label)
    }

    /// The label of `label`'s copy on `--against`'s build, if there is one.
    pub fn against_of(&self, label: &str) -> Option<String> {
        let c = self.contender(label)?;
        let copy = self
            .plan
            .contenders
            .iter()
            .find(|o| o.build.is_some() && o.label.starts_with(&format!("{} @", c.label)))?;
        Some(copy.label.clone())
    }

    /// The mean length of a round, in seconds.
    pub fn round_seconds(&self) -> f64 {
        let n = self.rounds.len().max(1) as f64;
        self.rounds.iter().map(|r| r.seconds).sum::<f64>() / n
    }

    /// The scenario's result: `tables` and these rounds.
    pub fn outcome(self, tables: Vec<Table>) -> Outcome {
        Outcome {
            tables,
            rounds: self.rounds,
        }
    }
}

/// Checks a scenario's count of rounds against the rules that depend on its goals only: at
/// least [`ROUNDS_NEAR_ONE`] with a ratio goal within 5 % of 1 (`near_one`), and at least
/// [`ROUNDS_LEAST`] always.
pub fn check_round_count(scenario: &str, planned: usize, near_one: bool) -> Result<()> {
    if near_one && planned < ROUNDS_NEAR_ONE {
        bail!(
            "{scenario} has a ratio goal within 5 % of 1 and plans {planned} rounds: it needs at \
             least {ROUNDS_NEAR_ONE}"
        );
    }
    if planned < ROUNDS_LEAST {
        bail!("{scenario} plans {planned} rounds: every scenario needs at least {ROUNDS_LEAST}");
    }
    Ok(())
}

/// What is wrong with planning only [`ROUNDS_LEAST`] rounds that took `round_secs` each: that
/// few are for rounds over [`LONG_ROUND_SECS`]. `None` when nothing is. (Said in the table and
/// on stderr rather than failing: the rounds are measured by then.)
pub fn round_length_note(planned: usize, round_secs: f64) -> Option<String> {
    (planned <= ROUNDS_LEAST && round_secs <= LONG_ROUND_SECS).then(|| {
        format!(
            "{planned} rounds are for rounds over {LONG_ROUND_SECS:.0} s, and these took \
             {round_secs:.0} s: the scenario should plan more, shorter rounds"
        )
    })
}

#[cfg(test)]
mod tests;
