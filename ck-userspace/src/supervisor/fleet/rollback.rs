//! `ck rollback`: the release a reload replaced, kept alive out of the active set by
//! `--keep-previous` (each of its slots a standby with [`Life::kept`]), flipped back in, and the
//! release now serving retired through the leaving path (its connections finish first), all in
//! one batch of inputs, so in one publish: no moment in which neither release is selected. A
//! new reload retires the kept release before it starts ([`retire_kept`]): only the release
//! just before the current one is kept.
use super::Lives;
use crate::supervisor::lifecycle::{Input, Life};

/// What a rollback does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The batch: the kept slots flipped in, the serving ones retired.
    pub inputs: Vec<(u32, Input)>,
    /// The kept slots that serve again.
    pub back: Vec<u32>,
    /// The slots of the release that leaves.
    pub leaving: Vec<u32>,
}

/// The words of a retired slot's log line.
pub const WHY: &str = "rolled back (ck rollback)";

/// A kept worker of the previous release that is still alive.
fn kept(life: &Life) -> bool {
    life.kept.is_some() && life.state.run().is_some()
}

/// The rollback of the fleet `lives`, or why there is none: `rolling` (a roll in flight)
/// refuses it, and so does a fleet without a kept release (`keep_previous`: whether ck runs
/// with `--keep-previous`, for the message).
pub fn plan(lives: &Lives, rolling: bool, keep_previous: bool) -> Result<Plan, String> {
    if rolling {
        return Err(
            "a rolling restart is in progress: wait for it to end (`ck reload` \
                    answers then), then run `ck rollback`"
                .into(),
        );
    }
    let back: Vec<u32> = lives
        .iter()
        .filter(|(_, l)| kept(l))
        .map(|(i, _)| *i)
        .collect();
    if back.is_empty() {
        return Err(if keep_previous {
            "no previous release is kept: none was replaced by a reload yet, its \
             --keep-previous window ended, or a newer reload replaced it; deploy the old \
             code and run `ck reload` instead"
                .into()
        } else {
            "no previous release is kept: ck keeps one only with --keep-previous DURATION \
             (e.g. --keep-previous 10m); to go back now, deploy the old code and run `ck reload`"
                .into()
        });
    }
    let leaving: Vec<u32> = lives
        .iter()
        .filter(|(_, l)| l.serving())
        .map(|(i, _)| *i)
        .collect();
    let inputs = back
        .iter()
        .map(|i| (*i, Input::FlipIn))
        .chain(leaving.iter().map(|i| (*i, Input::Retire(WHY.into()))))
        .collect();
    Ok(Plan {
        inputs,
        back,
        leaving,
    })
}

/// A reload is about to replace the fleet: the release kept from the reload before leaves
/// first (only the release just before the current one is kept).
pub fn retire_kept(lives: &Lives) -> Vec<(u32, Input)> {
    lives
        .iter()
        .filter(|(_, l)| l.kept.is_some())
        .map(|(i, _)| {
            let why = "a newer reload replaces the kept release";
            (*i, Input::Retire(why.into()))
        })
        .collect()
}
