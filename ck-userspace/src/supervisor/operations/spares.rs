//! Hot spares (`--spares N`): N extra workers booted and ready but never selected (standby
//! slots). When a serving worker dies, a ready spare takes its place in the same publish (the
//! dead slot leaves instead of restarting), so the fleet has its full capacity again at once
//! rather than after a boot, and a new spare boots in the background. Spares run the current
//! app: a rolling restart retires them first and boots new ones when it ends. A spare that dies
//! before it is used is replaced after a growing delay (100 ms doubling to 10 s). The decisions
//! are the fleet core's ([`crate::supervisor::fleet::spares`], [`crate::supervisor::fleet::death`]).
use std::time::Duration;

use crate::supervisor::{Event, Supervisor, executor::fleet as run_fleet};

impl Supervisor {
    /// Boots spares until there are `--spares` (not while stopping, rolling, or backing off).
    pub(in crate::supervisor) fn replenish_spares(&mut self) {
        run_fleet::replenish_spares(self);
    }

    /// A spare died before it was used (or could not start): the next after `delay`.
    pub(in crate::supervisor) fn spare_lost(&mut self, delay: Duration) {
        tracing::warn!(
            delay_ms = delay.as_millis() as u64,
            "a spare died before it was used: next spare after a delay"
        );
        crate::supervisor::tasks::send_after(&self.events, delay, Event::SpareDue);
    }
}
