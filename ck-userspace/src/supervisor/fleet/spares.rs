//! The spares' decisions (`--spares N`): how many to boot now, the pacing after one died
//! unused (100 ms doubling to 10 s), and which spares a roll retires (they run the old app).
//! The succession (a ready spare taking a dead worker's place) is part of [`super::death`].
use std::time::{Duration, Instant};

use super::{Lives, Shape};
use crate::supervisor::lifecycle::Input;

/// Delay before the first replacement of a spare that died unused.
pub const FIRST_DELAY: Duration = Duration::from_millis(100);
/// Longest such delay.
pub const MAX_DELAY: Duration = Duration::from_secs(10);

/// When the next spare may boot.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pacing {
    /// Spares that died unused in a row.
    pub failures: u32,
    /// Not before then.
    pub due: Option<Instant>,
}

impl Pacing {
    /// A spare died unused (or could not start): the next waits longer. Returns the delay.
    pub fn failed(&mut self, now: Instant) -> Duration {
        let delay = FIRST_DELAY
            .saturating_mul(1 << self.failures.min(7))
            .min(MAX_DELAY);
        self.failures += 1;
        self.due = Some(now + delay);
        delay
    }

    /// A spare became ready: spares boot fine again.
    pub fn ready(&mut self) {
        *self = Pacing::default();
    }
}

/// How many spares to boot now: up to `--spares`, not while stopping, rolling (spares run the
/// current app: they boot again when the roll ends) or backing off.
pub fn wanted(
    lives: &Lives,
    shape: &Shape,
    pacing: &Pacing,
    now: Instant,
    stopping: bool,
    rolling: bool,
) -> u32 {
    if stopping || rolling || pacing.due.is_some_and(|due| now < due) {
        return 0;
    }
    let have = lives.values().filter(|l| l.spare).count() as u32;
    shape.spares.saturating_sub(have)
}

/// A roll is starting: every spare retires (it runs the old app).
pub fn retire_all(lives: &Lives) -> Vec<(u32, Input)> {
    lives
        .iter()
        .filter(|(_, l)| l.spare)
        .map(|(index, _)| {
            (
                *index,
                Input::Retire("spares are replaced by the rolling restart".into()),
            )
        })
        .collect()
}
