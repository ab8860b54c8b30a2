//! `--slow-start DURATION`: a worker that joins a warm fleet (a roll's replacement, a scale-up,
//! the replacement of a crashed worker) gets a share of new connections that ramps from
//! [`FIRST_SHARE`] of a warm worker's to all of it over the window after it became ready, so a
//! cold cache or a JIT that has not compiled the hot paths yet is not handed a warm worker's
//! load at once.
//!
//! Weights live in the program's own list: the supervisor writes a ramping slot into the ready
//! list fewer times than a warm one (a warm slot [`full_weight`] times), and the program picks
//! positions of that list as it always does. So round-robin and hash spread by weight,
//! `least-queue` and `least-conn` draw their candidates by weight, and the program does no
//! more work per connection than without weights. When no slot ramps, each ready slot is
//! listed once, as without `--slow-start`. UDP groups build their Maglev table (new flows) from
//! the same list, so a ramping slot gets fewer new flows too; the `sticky` policy's table is
//! built from the plain set: slow start does not apply to it.
//!
//! In a roll the old slots serve on beside their replacements until the ramp is over, then
//! leave, and the next batch starts (`roll::faded`): the fleet never serves with less than its
//! capacity.
//!
//! A worker that keeps up ends its ramp early: from half its window on, each step at which
//! its load (connections waiting in its accept queue plus connections it holds open, both
//! counted by the kernel, smoothed over about a second) per unit of its share is no more than
//! a warm worker's moves its ramp [`SHORT_PACE`] steps on ([`Ramps`]). A worker that holds
//! as much as a warm one with a smaller share is as busy, so slower per request: it is not
//! warm yet and ramps at the window's pace. So a ramp that keeps up is over in
//! [`SHORT_END`] of the window; the first half is never shortened, as little load at a
//! tenth of a share says little.
//!
//! A slot ramps only while another ready slot is warm (ready for the whole window): when every
//! ready worker is new (a fleet's first boot, a roll of the whole fleet in one batch) there is
//! no warm capacity to lean on, and each gets its full share.
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ck_common::{ActiveSet, MAX_SLOTS};

use super::Lives;
use crate::supervisor::lifecycle::State;

/// A ramping worker's first share, of a warm worker's.
pub const FIRST_SHARE: f64 = 0.1;
/// While a slot ramps, the active set is written again this often.
pub const STEP: Duration = Duration::from_millis(100);
/// From half its window on, a step at which a ramping slot's load is no more than a warm
/// slot's on average moves its ramp this many steps on.
pub const SHORT_PACE: u32 = 4;
/// Where a ramp that keeps up ends, as a share of the window: half of it at the
/// window's pace, the other half at [`SHORT_PACE`].
pub const SHORT_END: f64 = 0.5 + 0.5 / SHORT_PACE as f64;
/// The most times one slot is listed.
const MAX_WEIGHT: u32 = 16;

/// How many times a warm slot is listed among `listed` ready slots when `others` other entries
/// (starting workers of the boot window, the fallback) share the list: at most
/// [`MAX_WEIGHT`], at least 1.
pub fn full_weight(listed: usize, others: usize) -> u32 {
    let room = (MAX_SLOTS as usize).saturating_sub(others);
    (room / listed.max(1)).clamp(1, MAX_WEIGHT as usize) as u32
}

/// The share of a warm worker's that a slot ready for `age` of a `window` gets.
pub fn share(age: Duration, window: Duration) -> f64 {
    if window.is_zero() || age >= window {
        return 1.0;
    }
    FIRST_SHARE + (1.0 - FIRST_SHARE) * age.as_secs_f64() / window.as_secs_f64()
}

/// A set as published: each ready slot listed by its weight.
#[derive(Debug, Clone)]
pub struct Weighted {
    /// The set with each ready slot listed by its weight (the set as given when none ramps).
    pub set: ActiveSet,
    /// Some slot still ramps: write the set again after [`STEP`].
    pub ramping: bool,
}

impl Weighted {
    /// `listed` as written, each ready slot weighing the times it is listed: a canary's.
    pub fn listing(listed: ActiveSet) -> Weighted {
        Weighted {
            set: listed,
            ramping: false,
        }
    }

    /// Each ready slot and its weight (the times it is listed), in the order of the list.
    pub fn weights(&self) -> Vec<(u32, u32)> {
        let mut weights: Vec<(u32, u32)> = Vec::new();
        for slot in &self.set.slots[..self.set.ready_len as usize] {
            match weights.iter_mut().find(|(s, _)| s == slot) {
                Some((_, w)) => *w += 1,
                None => weights.push((*slot, 1)),
            }
        }
        weights
    }

    /// `slot`'s weight: the times it is listed, 1 for a slot the ready list does not name.
    pub fn weight(&self, slot: u32) -> u32 {
        let ready = &self.set.slots[..self.set.ready_len as usize];
        (ready.iter().filter(|s| **s == slot).count() as u32).max(1)
    }

    /// A warm slot's weight: the most any slot is listed.
    pub fn full(&self) -> u32 {
        self.weights().iter().map(|(_, w)| *w).max().unwrap_or(1)
    }
}

/// How much of a step's new load a slot's smoothed load takes: about the last second's.
const SMOOTHING: f64 = 0.1;

/// Each ready slot's smoothed load and, for a ramping one, how far its ramp ran ahead of its
/// time since it became ready (steps at which it kept up, from half its window on).
#[derive(Debug, Clone, Default)]
pub struct Ramps {
    by_slot: BTreeMap<u32, Ramp>,
}

/// One ready slot's record.
#[derive(Debug, Clone, Copy)]
struct Ramp {
    /// When its worker became ready (another worker in the slot starts a new record).
    ready_at: Instant,
    /// How far its ramp ran ahead.
    ahead: Duration,
    /// Its early end was said.
    said: bool,
    /// Connections queued and open, smoothed over about a second (samples are small integers).
    load: f64,
}

impl Ramps {
    /// No ramp ran ahead.
    pub const NONE: Ramps = Ramps {
        by_slot: BTreeMap::new(),
    };

    /// How far `slot`'s ramp went at `now`: how long its worker has been ready, plus what
    /// keeping up added (None: not a ready worker, e.g. a starting one listed while the fleet
    /// boots).
    pub fn age(&self, lives: &Lives, slot: u32, now: Instant) -> Option<Duration> {
        let ready_at = ready_at(lives, slot)?;
        let ahead = match self.by_slot.get(&slot) {
            Some(r) if r.ready_at == ready_at => r.ahead,
            _ => Duration::ZERO,
        };
        Some(now.saturating_duration_since(ready_at) + ahead)
    }

    /// One [`STEP`] of the ramps at `now`: every ready slot's `load` (connections queued and
    /// open) is smoothed in; each slot past half its `window` and not done whose smoothed load
    /// per unit of its share is no more than the warm slots' mean moves [`SHORT_PACE`] steps
    /// on instead of one (none without a warm slot). Slots no longer ready (or ready again
    /// since) are forgotten. Returns the slots whose ramp ended early since the last step,
    /// each once (a roll waiting for them may go on).
    pub fn step(
        &mut self,
        lives: &Lives,
        now: Instant,
        window: Duration,
        load: impl Fn(u32) -> Option<u64>,
    ) -> Vec<u32> {
        self.by_slot
            .retain(|slot, r| ready_at(lives, *slot) == Some(r.ready_at));
        let mut ended = Vec::new();
        let mut warm = Vec::new();
        let mut ramping = Vec::new();
        for slot in lives.keys().copied() {
            let (Some(at), Some(age)) = (ready_at(lives, slot), self.age(lives, slot, now)) else {
                continue;
            };
            let Some(sample) = load(slot).map(|l| l as f64) else {
                continue;
            };
            let r = self.by_slot.entry(slot).or_insert(Ramp {
                ready_at: at,
                ahead: Duration::ZERO,
                said: false,
                load: sample,
            });
            r.load += (sample - r.load) * SMOOTHING;
            if age >= window {
                warm.push(r.load);
                // A ramp that ran ahead and is over now: said once.
                if !r.ahead.is_zero() && !std::mem::replace(&mut r.said, true) {
                    ended.push(slot);
                }
            } else if age >= window / 2 {
                ramping.push((slot, age));
            }
        }
        if warm.is_empty() {
            return ended;
        }
        // Per unit of share: a worker as busy as a warm one at a smaller share is slower per
        // request, not warm yet (at the same utilization a queue holds as much, whatever
        // the rate).
        let warm_mean = warm.iter().sum::<f64>() / warm.len() as f64;
        let step = STEP * (SHORT_PACE - 1);
        for (slot, age) in ramping {
            let bound = warm_mean * share(age, window);
            if let Some(r) = self.by_slot.get_mut(&slot).filter(|r| r.load <= bound) {
                r.ahead += step;
                // Over now: said at once, as no slot may ramp to step again.
                if age + step >= window && !std::mem::replace(&mut r.said, true) {
                    ended.push(slot);
                }
            }
        }
        ended
    }
}

/// When `slot`'s worker became ready (None: not a ready worker).
fn ready_at(lives: &Lives, slot: u32) -> Option<Instant> {
    match lives.get(&slot)?.state {
        State::Ready(run) => run.ready_at,
        _ => None,
    }
}

/// `set` (as the lifecycle builds it: ready slots first) weighted for `--slow-start window`
/// at `now`, each slot's ramp as far as `ramps` says.
pub fn weigh(
    set: &ActiveSet,
    lives: &Lives,
    ramps: &Ramps,
    now: Instant,
    window: Option<Duration>,
) -> Weighted {
    let ready_len = set.ready_len as usize;
    let ready: Vec<(u32, Option<Duration>)> = set.slots[..ready_len]
        .iter()
        .map(|slot| (*slot, ramps.age(lives, *slot, now)))
        .collect();
    let full = full_weight(ready_len, set.live_len as usize - ready_len);
    // Each ready slot listed once: the set as the lifecycle built it, every weight 1.
    let unweighted = |ramping| Weighted { set: *set, ramping };
    // Starting workers listed while the fleet boots: nothing is warm yet.
    let booting = ready.iter().any(|(_, age)| age.is_none());
    let Some(window) = window.filter(|w| !w.is_zero() && !booting) else {
        return unweighted(false);
    };
    let warm = ready
        .iter()
        .any(|(_, age)| age.is_some_and(|a| a >= window));
    let ramping = ready.iter().any(|(_, age)| age.is_some_and(|a| a < window));
    if !warm || !ramping {
        return unweighted(false);
    }
    let weights: Vec<(u32, u32)> = ready
        .iter()
        .map(|(slot, age)| {
            let share = share(age.unwrap_or(window), window);
            (
                *slot,
                // Rounded down: a cold worker is given no more than its share.
                ((f64::from(full) * share).floor() as u32).clamp(1, full),
            )
        })
        .collect();
    Weighted {
        set: expand(set, &weights, full),
        ramping: true,
    }
}

/// `set` with its ready list rewritten: round `r` (from 0 to `full`) lists every slot whose
/// weight is above `r`, so each round-robin pass over the list visits the slots interleaved.
fn expand(set: &ActiveSet, weights: &[(u32, u32)], full: u32) -> ActiveSet {
    let ready_len = set.ready_len as usize;
    let rest = &set.slots[ready_len..set.live_len as usize];
    let mut listed = Vec::with_capacity(set.slots.len());
    for round in 0..full {
        listed.extend(weights.iter().filter(|(_, w)| *w > round).map(|(s, _)| *s));
    }
    let mut out = ActiveSet::EMPTY;
    let ready = listed.len().min(out.slots.len() - rest.len());
    out.slots[..ready].copy_from_slice(&listed[..ready]);
    out.slots[ready..ready + rest.len()].copy_from_slice(rest);
    out.ready_len = ready as u32;
    out.live_len = (ready + rest.len()) as u32;
    out
}
