//! Pure views over every slot's [`Life`]: the active set the program chooses from, and the
//! [`Context`] facts one slot's transition needs about the others.
use std::time::Instant;

use ck_common::ActiveSet;

use super::{state::Life, step::Context};

/// Which list of the active set a slot belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tier {
    /// Selected for new connections.
    Ready,
    /// A worker with an open socket that is not selectable (starting, drained, unhealthy,
    /// stopping): chosen only while no slot is ready, so connections wait in its queue.
    Live,
    /// No worker, socket kept open (held): chosen only while no worker has an open socket.
    Held,
    /// Socket closed: never chosen.
    Out,
}

/// The slot's tier.
pub fn tier(life: &Life) -> Tier {
    if !life.socket_open {
        Tier::Out
    } else if life.selectable() {
        Tier::Ready
    } else if life.state.run().is_some() {
        Tier::Live
    } else {
        Tier::Held
    }
}

/// The active set for `slots` (index, life): the slots chosen for new connections first
/// (`ready_len`): the ready ones, and with `booting` the fleet's starting ones after them (the
/// boot window, `fleet::spread`); then the fallback: the other live slots, or when there is
/// none, held ones (`live_len`). While `stopping`, the set is empty: new connections are
/// refused rather than queued on workers that are leaving.
pub fn active_set<'a>(
    slots: impl Iterator<Item = (u32, &'a Life)> + Clone,
    stopping: bool,
    booting: bool,
) -> ActiveSet {
    let mut set = ActiveSet::EMPTY;
    if stopping {
        return set;
    }
    let mut len = 0;
    let chosen_booting = |life: &Life| booting && life.booting();
    let mut push = |wanted: &dyn Fn(&Life) -> bool, len: &mut usize| {
        for (index, life) in slots.clone() {
            if wanted(life) && *len < set.slots.len() {
                set.slots[*len] = index;
                *len += 1;
            }
        }
    };
    push(&|l| tier(l) == Tier::Ready, &mut len);
    push(&chosen_booting, &mut len);
    let ready_len = len;
    push(&|l| tier(l) == Tier::Live && !chosen_booting(l), &mut len);
    if len == ready_len {
        push(&|l| tier(l) == Tier::Held, &mut len);
    }
    set.ready_len = ready_len as u32;
    set.live_len = len as u32;
    set
}

impl Context {
    /// The facts slot `index` needs about the other slots of `slots`.
    pub fn of<'a>(
        index: u32,
        slots: impl Iterator<Item = (u32, &'a Life)>,
        now: Instant,
        random: f64,
        stopping: bool,
        maps_pending: bool,
    ) -> Context {
        let mut context = Context {
            now,
            random,
            stopping,
            others_open: 0,
            others_trying: 0,
            maps_pending,
        };
        for (_, life) in slots.filter(|(i, _)| *i != index) {
            if life.serving() && life.socket_open {
                context.others_open += 1;
            }
            if life.trying() {
                context.others_trying += 1;
            }
        }
        context
    }
}

/// The serving slots of `slots` in the order they should leave when the fleet shrinks: those
/// that keep nothing open (no worker, socket closed) first, then held ones, then workers that
/// are not selected, then ready ones; the highest index first within each. Shrinking in this
/// order never closes the last open socket of the group while a serving slot remains.
pub fn retire_order<'a>(slots: impl Iterator<Item = (u32, &'a Life)>) -> Vec<u32> {
    let mut serving: Vec<(Tier, u32)> = slots
        .filter(|(_, life)| life.serving())
        .map(|(index, life)| (tier(life), index))
        .collect();
    serving.sort_by(|a, b| b.cmp(a));
    serving.into_iter().map(|(_, index)| index).collect()
}

/// Slots whose open breaker must turn half-open so that at least `min_workers` serving slots
/// (or all of them, when fewer) keep trying: after the fleet shrank around a broken slot.
pub fn needed<'a>(
    slots: impl Iterator<Item = (u32, &'a Life)> + Clone,
    min_workers: u32,
) -> Vec<u32> {
    let serving = slots.clone().filter(|(_, l)| l.serving()).count();
    let trying = slots.clone().filter(|(_, l)| l.trying()).count();
    let short = (min_workers as usize).min(serving).saturating_sub(trying);
    slots
        .filter(|(_, l)| l.serving() && !l.trying())
        .map(|(index, _)| index)
        .take(short)
        .collect()
}
