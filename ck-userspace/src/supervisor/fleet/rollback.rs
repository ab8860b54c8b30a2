//! `ck rollback`: the release a reload replaced, kept alive out of the active set by
//! `--keep-previous` (each of its slots a standby with [`Life::kept`]), flipped back in, and the
//! release now serving retired through the leaving path (its connections finish first), all in
//! one batch of inputs, so in one publish: no moment in which neither release is selected. A
//! new reload retires the kept release before it starts ([`retire_kept`]): only the release
//! just before the current one is kept. Mid-roll, the release that leaves is what the roll
//! brought in (its flipped replacements and the batch in flight); the old workers it has not
//! reached yet serve on, and the roll ends.
use super::{Lives, roll::Roll};
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

/// The rollback of the fleet `lives` (during `roll`, of what it brought in so far), or why
/// there is none: a fleet without a kept release refuses it (`keep_previous`: whether ck runs
/// with `--keep-previous`, for the message), and so does a roll that has kept nothing yet.
pub fn plan(lives: &Lives, roll: Option<&Roll>, keep_previous: bool) -> Result<Plan, String> {
    let back: Vec<u32> = lives
        .iter()
        .filter(|(_, l)| kept(l))
        .map(|(i, _)| *i)
        .collect();
    if back.is_empty() && roll.is_some() {
        return Err(if keep_previous {
            "the rolling restart in progress has not flipped a batch in yet: nothing of the \
             previous release is out to put back; wait for its first batch, or for `ck reload` \
             to answer"
        } else {
            "a rolling restart is in progress and no previous release is kept (ck keeps one \
             only with --keep-previous DURATION): wait for it to end (`ck reload` answers then)"
        }
        .into());
    }
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
    let in_flight = roll
        .into_iter()
        .flat_map(|r| r.batch.iter().map(|(_, new)| *new));
    let leaving: Vec<u32> = match roll {
        // A reload's: what it brought in, its replacements flipped in so far.
        Some(r) if r.reload => r.replacements.clone(),
        // Else every serving slot (a recycle's replacement among them).
        _ => lives
            .iter()
            .filter(|(_, l)| l.serving())
            .map(|(i, _)| *i)
            .collect(),
    };
    let leaving: Vec<u32> = leaving
        .into_iter()
        .chain(in_flight)
        .filter(|i| lives.contains_key(i))
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
