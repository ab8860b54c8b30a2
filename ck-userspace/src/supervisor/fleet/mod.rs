//! The fleet core: the decisions above one slot, as pure functions (no tokio, no OS). Each
//! takes the fleet's state (every slot's [`Life`], the roll in flight, the spares' pacing) and
//! an event, and returns the inputs for the slot machines ([`crate::supervisor::lifecycle`]):
//!
//! - a death ([`death`]): a ready spare takes over, else the slot's own crash rule (restart
//!   now, back off, hold the last socket, open the breaker); a lost spare slows the next one;
//!   a lost replacement aborts the roll;
//! - a roll ([`roll`]): which old slot gets a replacement next, the flip once the whole batch
//!   is ready, the abort, the end;
//! - a canary ([`canary`]): a reload's first batch judged beside the current release, at a
//!   share of new connections, then promoted or withdrawn;
//! - a rollback ([`rollback`]): the release a reload replaced, kept by `--keep-previous`,
//!   flipped back in and the current one retired, in one batch;
//! - a scale ([`scale`]): how many slots open, which retire, which broken slots the group now
//!   needs;
//! - the spares ([`spares`]): how many to boot, the pacing after one died unused, the
//!   succession;
//! - a leave ([`leave`]): when a retired worker that served gets its stop signal (its
//!   connections done, what its UDP sockets held at the flip read), and when a stopping one
//!   has gone quiet (`--udp-linger`);
//! - slow start ([`slow_start`]): a worker joining a warm fleet is listed by a weight that
//!   ramps up;
//! - the boot window ([`spread`]): while the fleet boots, its starting workers are chosen beside
//!   the ready ones.
//!
//! The supervisor's fleet executor (`executor::decisions`) runs these decisions through the slot
//! executor; the property test runs that same code on its model of the OS. Boot priority and
//! the quiet wait decide nothing about slots: each lives whole in `operations`.
use std::collections::BTreeMap;

use super::lifecycle::Life;
use crate::settings::restart_policy::RestartPolicy;

pub mod canary;
pub mod death;
pub mod leave;
pub mod roll;
pub mod rollback;
pub mod scale;
pub mod slow_start;
pub mod spares;
pub mod spread;

#[cfg(test)]
mod rollback_tests;
#[cfg(test)]
mod slow_start_tests;
#[cfg(test)]
mod spares_tests;
#[cfg(test)]
mod tests;

/// The numbers the fleet's decisions are made with (from the run's configuration).
#[derive(Clone, Debug)]
pub struct Shape {
    /// `--reload-batch`: replacements a roll starts at once.
    pub reload_batch: u32,
    /// `--spares`: standby workers kept booted.
    pub spares: u32,
    /// `--min-workers`: slots that keep trying whatever their breaker says.
    pub min_workers: u32,
    /// The restart policy new slots get.
    pub restart: RestartPolicy,
    /// `--keep-previous`: how long a reload's old workers are kept for `ck rollback`.
    pub keep_previous: Option<std::time::Duration>,
    /// `--slow-start`: how long a worker joining a warm fleet ramps up; a roll starts its
    /// next batch once the last one's ramp is over.
    pub slow_start: Option<std::time::Duration>,
}

/// The fleet's state above the slots: the roll in flight, the spares' pacing, the boot window.
#[derive(Debug, Default)]
pub struct Core {
    /// The rolling restart in flight, if any.
    pub roll: Option<roll::Roll>,
    /// When the next spare may boot.
    pub spares: spares::Pacing,
    /// Whether the fleet is booting, and since when a worker is ready.
    pub spread: spread::Spread,
    /// `--slow-start`: how far ramps whose queue stayed empty ran ahead.
    pub ramps: slow_start::Ramps,
}

/// Every slot's life, by index: what each decision reads.
pub type Lives<'a> = BTreeMap<u32, &'a Life>;

/// The lives of `slots` as a map the decisions read.
pub fn lives<'a>(slots: impl Iterator<Item = (u32, &'a Life)>) -> Lives<'a> {
    slots.collect()
}

/// The last slot index is never given to a worker: its probe source port is the steering
/// canary's (see `steering`).
pub const CANARY_SLOT: u32 = ck_common::MAX_SLOTS - 1;

/// The lowest slot index not in use, if one is left.
pub fn free_slot(lives: &Lives) -> Option<u32> {
    (0..CANARY_SLOT).find(|i| !lives.contains_key(i))
}

/// Slots that count towards the fleet's size (not leaving, not a standby, not a member).
pub fn serving(lives: &Lives) -> Vec<u32> {
    lives
        .iter()
        .filter(|(_, life)| life.serving())
        .map(|(index, _)| *index)
        .collect()
}
