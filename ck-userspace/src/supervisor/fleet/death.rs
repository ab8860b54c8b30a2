//! A worker's death, decided for the whole fleet: a ready spare takes the dead serving slot's
//! place (in one batch: the spare flipped in, the dead slot superseded), else the dead slot
//! steps its own exit (its crash rule: restart now, back off, hold the group's last socket,
//! open the breaker). A spare that died unused slows the next one; a roll's replacement that
//! died aborts the roll.
use super::{Core, Lives, Shape, roll};
use crate::supervisor::lifecycle::{Input, Life, State};

/// A worker's death, as `supervisor::inputs::exits` reads it from the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Death {
    /// Killed by a signal only others send (`inputs::exits::killed_from_outside`).
    pub outside: bool,
    /// Words for a roll's abort, should the worker be one of its replacements.
    pub why: String,
    /// How it ended, as `ck status` shows it (`exit 3`): for a reload's answer, should the
    /// worker be one it started on a slot that had crashed.
    pub how: String,
}

/// What one death comes to.
#[derive(Debug)]
pub struct Aftermath {
    /// The batch for the slot machines: the take-over, or the dead slot's exit.
    pub inputs: Vec<(u32, Input)>,
    /// The spare that took the dead slot's place (a new spare is due).
    pub took_over: Option<u32>,
    /// The dead worker was a spare: the next spare waits (see [`super::spares::Pacing`]).
    pub spare_lost: bool,
    /// The dead worker was a replacement of the roll's batch: the roll aborts.
    pub aborts_roll: bool,
}

/// Decides the death of slot `index`'s worker (`outside`: killed by a signal only others
/// send, [`Death::outside`]); None if the slot is gone.
pub fn decide(
    index: u32,
    outside: bool,
    lives: &Lives,
    core: &Core,
    shape: &Shape,
    stopping: bool,
) -> Option<Aftermath> {
    let dead = *lives.get(&index)?;
    if !stopping && shape.spares > 0 {
        let spares = lives.iter().filter(|(_, l)| l.spare).map(|(i, l)| (*i, *l));
        if let Some(batch) = succession((index, dead), spares) {
            return Some(Aftermath {
                took_over: Some(batch[0].0),
                inputs: batch.into(),
                spare_lost: false,
                aborts_roll: false,
            });
        }
    }
    Some(Aftermath {
        inputs: vec![(index, Input::Exited { outside })],
        took_over: None,
        spare_lost: dead.spare,
        aborts_roll: core.roll.as_ref().is_some_and(|r| roll::replaces(r, index)),
    })
}

/// The batch in which the first ready spare of `spares` takes the place of `dead`, whose worker
/// died unasked: the spare flipped in (drained if the dead slot was), the dead slot superseded.
/// None when the dead slot was not serving or was stopping anyway, or no spare is ready.
pub fn succession<'a>(
    dead: (u32, &Life),
    mut spares: impl Iterator<Item = (u32, &'a Life)>,
) -> Option<[(u32, Input); 2]> {
    let (index, dead) = dead;
    if !dead.serving() || matches!(dead.state, State::Stopping(..)) {
        return None;
    }
    let (spare, _) = spares.find(|(_, life)| matches!(life.state, State::Ready(_)))?;
    Some([
        (
            spare,
            Input::TakeOver {
                drained: dead.drained,
            },
        ),
        (index, Input::Superseded),
    ])
}
