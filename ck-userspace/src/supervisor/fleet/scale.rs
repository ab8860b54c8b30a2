//! A scale's decisions (`ck scale N`, `SIGTTIN` +1, `SIGTTOU` -1, a reloaded `workers`): how
//! many slots open, which retire (those that keep the least open first, see
//! [`retire_order`]), and which broken slots the smaller group now needs to keep trying.
//! Workers scaled away leave gracefully, never killed outright.
use super::{Lives, Shape, serving};
use crate::settings::run_config::{self, MAX_WORKERS};
use crate::supervisor::lifecycle::{Input, needed, retire_order};

/// Why the fleet cannot be scaled to `target` now, if so.
pub fn refusal(target: u32, stopping: bool, rolling: bool, shape: &Shape) -> Option<String> {
    let room = || {
        let keep = shape.keep_previous.is_some();
        run_config::check_room(target, shape.spares, shape.reload_batch, keep).err()
    };
    if stopping {
        Some("ck is stopping".into())
    } else if rolling {
        Some("a rolling restart is in progress; scale after it ends".into())
    } else if !(1..=MAX_WORKERS).contains(&target) {
        Some(format!(
            "{target} workers is out of range: give a number from 1 to {MAX_WORKERS}"
        ))
    } else {
        room()
    }
}

/// What a scale to `target` does.
#[derive(Debug, PartialEq, Eq)]
pub struct Scale {
    /// Serving slots now.
    pub from: u32,
    /// New slots to open.
    pub open: u32,
    /// The slots that leave, as inputs.
    pub retire: Vec<(u32, Input)>,
}

/// Scales the fleet of `lives` to `target` serving slots.
pub fn plan(lives: &Lives, target: u32) -> Scale {
    let from = serving(lives).len() as u32;
    let retire = retire_order(lives.iter().map(|(i, l)| (*i, *l)))
        .into_iter()
        .take(from.saturating_sub(target) as usize)
        .map(|index| (index, Input::Retire("scaled down".into())))
        .collect();
    Scale {
        from,
        open: target.saturating_sub(from),
        retire,
    }
}

/// After the fleet shrank: the broken slots that must turn half-open so that `--min-workers`
/// slots keep trying.
pub fn needed_after(lives: &Lives, min_workers: u32) -> Vec<(u32, Input)> {
    needed(lives.iter().map(|(i, l)| (*i, *l)), min_workers)
        .into_iter()
        .map(|index| (index, Input::Needed))
        .collect()
}

/// The whole host is out of rotation (`ck drain --all`): no slot is selected and every slot
/// with a worker is drained. A slot opened then starts drained.
pub fn host_drained(lives: &Lives) -> bool {
    let mut workers = lives
        .values()
        .filter(|l| l.state.run().is_some())
        .peekable();
    !lives.values().any(|l| l.selectable())
        && workers.peek().is_some()
        && workers.all(|l| l.drained)
}

/// The inputs that open a new serving slot: start it, drained first while the host is.
pub fn opening(index: u32, host_drained: bool) -> Vec<(u32, Input)> {
    let mut inputs = vec![(index, Input::Start)];
    if host_drained {
        inputs.insert(0, (index, Input::Drain(true)));
    }
    inputs
}
