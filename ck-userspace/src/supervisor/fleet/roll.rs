//! A rolling restart's decisions: per batch of at most `--reload-batch` old slots, which get a
//! replacement next; the flip, once every replacement of the batch is ready (the replacements
//! in and the old workers out in one batch, so in one publish); the abort when a replacement
//! fails (every replacement of the batch retires, the old workers stay); and the end, once no
//! batch is in flight and no old worker it flipped out is still leaving.
//!
//! A reload also means fresh workers now where the fleet has none: every serving slot without
//! a worker (waiting out a boot-crash backoff, holding the group's last socket, or with its
//! breaker open) is revived at once, with no backoff or cool-down waited, and the reload
//! answers once each of them is ready or has failed again ([`Revival`], [`outcome`]).
use std::{
    collections::{BTreeMap, VecDeque},
    time::{Duration, Instant},
};

use super::{Lives, Shape, slow_start::Ramps};
use crate::supervisor::lifecycle::{Input, Life, State};

/// A rolling restart in flight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roll {
    /// Old slots not yet replaced.
    pub pending: VecDeque<u32>,
    /// The batch in flight: (old slot, replacement slot).
    pub batch: Vec<(u32, u32)>,
    /// Workers replaced so far.
    pub replaced: u32,
    /// Old slots flipped out: the roll ends once none of them is still `Leaving`.
    pub leaving: Vec<u32>,
    /// Replacements flipped in: with `--slow-start` the next batch waits for their ramp.
    pub flipped: Vec<u32>,
    /// Every replacement this roll flipped in: the release `ck rollback` takes out mid-roll.
    pub replacements: Vec<u32>,
    /// `ck reload --canary`: the canary, until its verdict.
    pub canary: Option<super::canary::CanaryRoll>,
    /// `--slow-start`: the old slots of the batch flipped in last, still serving beside their
    /// replacements while those ramp up; they leave (or are kept) once the ramp is over
    /// ([`faded`]), so the fleet never serves with less than its capacity.
    pub fading: Vec<u32>,
    /// A reload of the fleet (`ck reload`, SIGHUP), counted in `ck_reloads_total`; not the
    /// replacement of one worker (health, recycling).
    pub reload: bool,
    /// Slots the reload revived (see [`revive`]), and how each fresh worker is doing.
    pub revived: BTreeMap<u32, Revival>,
}

/// How a slot a reload revived is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revival {
    /// Its fresh worker starts.
    Starting,
    /// Its fresh worker became ready.
    Ready,
    /// Its fresh worker died (or could not start) before it was ready: how.
    Failed(String),
}

/// Why a roll cannot start now, if so.
pub fn refusal(stopping: bool, rolling: bool) -> Option<&'static str> {
    if stopping {
        Some("ck is stopping")
    } else if rolling {
        Some("a rolling restart is already in progress; wait for it to end")
    } else {
        None
    }
}

/// The old slots a reload replaces: every serving slot that runs a worker (slots without one
/// are revived instead: [`revive_targets`]).
pub fn reload_targets(lives: &Lives) -> VecDeque<u32> {
    lives
        .iter()
        .filter(|(_, l)| l.serving() && l.state.run().is_some())
        .map(|(index, _)| *index)
        .collect()
}

/// The slots a reload revives: serving slots without a worker (waiting out a backoff, holding
/// the group's last socket, or with the breaker open), whatever their crash memory says.
pub fn revive_targets(lives: &Lives) -> Vec<u32> {
    lives
        .iter()
        .filter(|(_, l)| {
            l.serving() && matches!(l.state, State::Waiting | State::Held | State::Broken)
        })
        .map(|(index, _)| *index)
        .collect()
}

/// A roll of `pending`, nothing started yet.
pub fn begin(pending: VecDeque<u32>, reload: bool) -> Roll {
    Roll {
        pending,
        batch: Vec::new(),
        replaced: 0,
        leaving: Vec::new(),
        flipped: Vec::new(),
        replacements: Vec::new(),
        canary: None,
        fading: Vec::new(),
        reload,
        revived: BTreeMap::new(),
    }
}

/// The reload revives `targets` (see [`revive_targets`]): the inputs that start their fresh
/// workers now.
pub fn revive(roll: &mut Roll, targets: &[u32]) -> Vec<(u32, Input)> {
    roll.revived
        .extend(targets.iter().map(|index| (*index, Revival::Starting)));
    targets
        .iter()
        .map(|index| (*index, Input::Revive))
        .collect()
}

/// Revived slot `index`'s worker is ready; whether the slot was one the roll waits for.
pub fn revived_ready(roll: &mut Roll, index: u32) -> bool {
    settle(roll, index, Revival::Ready)
}

/// Revived slot `index`'s worker died or could not start (`why`) before it was ready; whether
/// the slot was one the roll waits for.
pub fn revival_failed(roll: &mut Roll, index: u32, why: String) -> bool {
    settle(roll, index, Revival::Failed(why))
}

fn settle(roll: &mut Roll, index: u32, how: Revival) -> bool {
    match roll.revived.get_mut(&index) {
        Some(now @ Revival::Starting) => {
            *now = how;
            true
        }
        _ => false,
    }
}

/// What the roll does next.
#[derive(Debug)]
pub enum Next {
    /// Start a replacement for old slot `old` with this life, on a free slot.
    Start {
        /// The slot it replaces.
        old: u32,
        /// The replacement's life: a standby, drained if the old slot is.
        life: Box<Life>,
    },
    /// The batch is full: wait for it to flip.
    Wait,
    /// `--slow-start`: the replacements flipped in last still ramp up; go on after this.
    Ramp(Duration),
    /// Nothing is pending: the roll may end (see [`done`]).
    Empty,
}

/// Takes the next old slot to replace from `roll.pending` (skipping slots that are gone or
/// already leaving), while the batch has room and (with `--slow-start`) no replacement flipped
/// in still ramps up at `now`.
pub fn next(roll: &mut Roll, lives: &Lives, ramps: &Ramps, shape: &Shape, now: Instant) -> Next {
    // A canary's batch is its size, and nothing more starts until its verdict.
    let limit = match &roll.canary {
        Some(canary) if canary.judging() => return Next::Wait,
        Some(canary) => canary.size,
        None => shape.reload_batch as usize,
    };
    if roll.batch.len() >= limit {
        return Next::Wait;
    }
    let waits = !roll.pending.is_empty() || !roll.fading.is_empty();
    if let Some(left) = ramp_left(roll, lives, ramps, shape, now).filter(|_| waits) {
        return Next::Ramp(left);
    }
    while let Some(old) = roll.pending.pop_front() {
        let Some(life) = lives.get(&old).filter(|l| l.serving()) else {
            continue;
        };
        return Next::Start {
            old,
            life: Box::new(Life {
                drained: life.drained,
                ..Life::new(shape.restart, true)
            }),
        };
    }
    Next::Empty
}

/// `--slow-start`: once the replacements flipped in last are done ramping up at `now`, the old
/// slots that served beside them leave (or, for a reload with `keep`, are kept): their inputs.
/// None while they ramp or when nothing fades.
pub fn faded(
    roll: &mut Roll,
    lives: &Lives,
    ramps: &Ramps,
    shape: &Shape,
    now: Instant,
) -> Option<Vec<(u32, Input)>> {
    if roll.fading.is_empty() || ramp_left(roll, lives, ramps, shape, now).is_some() {
        return None;
    }
    let old = std::mem::take(&mut roll.fading);
    Some(out_inputs(roll, old, shape.keep_previous))
}

/// The inputs that take `old` slots out of the fleet: kept for `keep` after a reload
/// (`--keep-previous`), else retired, which the roll then waits for.
fn out_inputs(roll: &mut Roll, old: Vec<u32>, keep: Option<Duration>) -> Vec<(u32, Input)> {
    match keep.filter(|_| roll.reload) {
        Some(window) => old.into_iter().map(|i| (i, Input::Keep(window))).collect(),
        None => {
            roll.leaving.extend(&old);
            let why = || Input::Retire("replaced by a rolling restart".into());
            old.into_iter().map(|i| (i, why())).collect()
        }
    }
}

/// How long the replacements flipped in still ramp up (`--slow-start`) at the window's pace,
/// if one does (a ramp whose queue stays empty ends sooner: `slow_start::Ramps`).
fn ramp_left(
    roll: &Roll,
    lives: &Lives,
    ramps: &Ramps,
    shape: &Shape,
    now: Instant,
) -> Option<Duration> {
    let window = shape.slow_start?;
    roll.flipped
        .iter()
        .filter_map(|slot| ramps.age(lives, *slot, now))
        .filter_map(|age| window.checked_sub(age))
        .filter(|left| !left.is_zero())
        .max()
}

/// Whether `index` is a replacement of the batch in flight, or a canary worker.
pub fn replaces(roll: &Roll, index: u32) -> bool {
    roll.batch.iter().any(|(_, new)| *new == index)
        || roll.canary.as_ref().is_some_and(|c| c.has(index))
}

/// The canary's verdict, at its window's end: its workers are promoted and become the roll's
/// first batch (the old workers they replace leave, or are kept), and the roll goes on. None
/// when no canary is judged.
pub fn promote(roll: &mut Roll, shape: &Shape) -> Option<Vec<(u32, Input)>> {
    let canary = roll.canary.take_if(|c| c.judging())?;
    let (old, new): (Vec<u32>, Vec<u32>) = canary.pairs.into_iter().unzip();
    roll.replaced += new.len() as u32;
    roll.replacements.extend(&new);
    let mut inputs: Vec<(u32, Input)> = new.iter().map(|i| (*i, Input::Promote)).collect();
    inputs.extend(out_inputs(roll, old, shape.keep_previous));
    Some(inputs)
}

/// Slot `index` became ready: once every replacement of the batch is, the batch flips (the
/// replacements in, the old slots out, in one batch of inputs). The old slots of a reload
/// are kept for `--keep-previous` (see [`super::rollback`]), else they retire; with
/// `--slow-start` they serve on beside their replacements until those are done ramping up
/// ([`faded`]). None while it waits, and once the batch has flipped: several replacements
/// ready before the first of their readiness events is handled each ask, and only the first
/// flips (a canary's second ask would otherwise flip an empty batch and forget its workers).
pub fn flip(
    roll: &mut Roll,
    lives: &Lives,
    index: u32,
    shape: &Shape,
) -> Option<Vec<(u32, Input)>> {
    if roll.batch.is_empty() || !replaces(roll, index) {
        return None;
    }
    let all_ready = roll.batch.iter().all(|(_, new)| {
        lives
            .get(new)
            .is_some_and(|l| matches!(l.state, State::Ready(_)))
    });
    if !all_ready {
        return None;
    }
    let batch = std::mem::take(&mut roll.batch);
    // A canary goes in beside the current release, which keeps serving until the verdict.
    if let Some(canary) = roll.canary.as_mut() {
        let inputs = batch.iter().map(|(_, new)| (*new, Input::FlipInCanary));
        let inputs = inputs.collect();
        canary.pairs = batch;
        return Some(inputs);
    }
    roll.replaced += batch.len() as u32;
    roll.flipped = batch.iter().map(|(_, new)| *new).collect();
    roll.replacements.extend(&roll.flipped);
    let old: Vec<u32> = batch.iter().map(|(old, _)| *old).collect();
    let mut inputs: Vec<(u32, Input)> =
        batch.iter().map(|(_, new)| (*new, Input::FlipIn)).collect();
    if shape.slow_start.is_some() {
        roll.fading = old;
    } else {
        inputs.extend(out_inputs(roll, old, shape.keep_previous));
    }
    Some(inputs)
}

/// The batch's replacement `index` failed: every replacement of the batch retires (the old
/// workers stay), and so does a canary's every worker. Returns the inputs and the old slot
/// `index` was to replace.
pub fn abort(roll: &mut Roll, index: u32) -> (Vec<(u32, Input)>, u32) {
    let mut batch = std::mem::take(&mut roll.batch);
    if let Some(canary) = roll.canary.take() {
        batch.extend(canary.pairs);
    }
    let old = batch
        .iter()
        .find(|(_, new)| *new == index)
        .map_or(index, |(old, _)| *old);
    let retire = batch
        .iter()
        .map(|(_, new)| (*new, Input::Retire("rolling restart aborted".into())))
        .collect();
    (retire, old)
}

/// The roll is over: no batch in flight, nothing pending, every old worker it flipped out has
/// been told to stop (or is gone), so no old worker takes a request but the last one on each
/// of its keep-alive connections, and every slot it revived is ready or has failed again.
pub fn done(roll: &Roll, lives: &Lives) -> bool {
    let leaving = roll.leaving.iter().any(|old| {
        lives
            .get(old)
            .is_some_and(|l| matches!(l.state, State::Leaving(_)))
    });
    let reviving = roll.revived.values().any(|r| *r == Revival::Starting);
    roll.batch.is_empty()
        && roll.pending.is_empty()
        && roll.fading.is_empty()
        && roll.canary.is_none()
        && !leaving
        && !reviving
}

/// What a roll that is [`done`] answers: the workers it replaced and, after a reload that
/// revived slots, how many it restarted and how many still fail (an error, naming each).
pub fn outcome(roll: &Roll) -> Result<String, String> {
    let replaced = format!("reloaded {} worker(s)", roll.replaced);
    if roll.revived.is_empty() {
        return Ok(replaced);
    }
    let failed: Vec<String> = roll
        .revived
        .iter()
        .filter_map(|(index, r)| match r {
            Revival::Failed(why) => Some(format!("slot {index}: {why}")),
            _ => None,
        })
        .collect();
    let restarted = format!(
        "{replaced} and restarted {} crashed slot(s) at once",
        roll.revived.len()
    );
    match failed.len() {
        0 => Ok(format!("{restarted}: all ready")),
        n => Err(format!(
            "{restarted}: {n} still fail ({}); the workers' output in ck's log says why",
            failed.join("; ")
        )),
    }
}

/// A reload in progress: workers replaced so far, and in all.
pub fn progress(roll: &Roll) -> (u32, u32) {
    let total = roll.replaced as usize + roll.batch.len() + roll.pending.len();
    (roll.replaced, total as u32)
}
