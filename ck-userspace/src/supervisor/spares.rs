//! Hot spares (`--spares N`): N extra workers booted and ready but never selected (standby
//! slots). When a serving worker dies, a ready spare takes its place in the same publish (the
//! dead slot leaves instead of restarting), so the fleet has its full capacity again at once
//! rather than after a boot, and a new spare boots in the background. Spares run the current
//! app: a rolling restart retires them first and boots new ones when it ends. A spare that dies
//! before it is used is replaced after a growing delay (100 ms doubling to 10 s).
use std::time::{Duration, Instant};

use super::{
    Event, Supervisor,
    lifecycle::{Input, Life, State},
    slot::Slot,
};

/// Delay before the first replacement of a spare that died unused.
const FIRST_DELAY: Duration = Duration::from_millis(100);
/// Longest such delay.
const MAX_DELAY: Duration = Duration::from_secs(10);

/// The batch in which the first ready spare of `spares` takes the place of `dead`, whose worker
/// died unasked: the spare flipped in (drained if the dead slot was), the dead slot superseded.
/// None when the dead slot was not serving or was stopping anyway, or no spare is ready.
pub(super) fn succession<'a>(
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

impl Supervisor {
    fn spare_count(&self) -> u32 {
        self.slots.values().filter(|s| s.spare).count() as u32
    }

    /// Boots spares until there are `--spares` (not while stopping, rolling, or backing off).
    pub(super) fn replenish_spares(&mut self) {
        if self.stopping || self.roll.is_some() || self.cfg.spares == 0 {
            return;
        }
        if self.spare_due.is_some_and(|due| Instant::now() < due) {
            return;
        }
        while self.spare_count() < self.cfg.spares {
            let Some(index) = self.free_slot() else {
                return;
            };
            let mut slot = Slot::new(index, Life::new(self.cfg.restart, true));
            slot.spare = true;
            self.slots.insert(index, slot);
            tracing::info!(slot = index, "starting a spare");
            if self.apply(index, Input::Start).spawn_failure().is_some() {
                return self.spare_failed();
            }
        }
    }

    /// A spare died before it was used (or could not start): try again after a growing delay.
    pub(super) fn spare_failed(&mut self) {
        let delay = FIRST_DELAY
            .saturating_mul(1 << self.spare_failures.min(7))
            .min(MAX_DELAY);
        self.spare_failures += 1;
        self.spare_due = Some(Instant::now() + delay);
        tracing::warn!(
            delay_ms = delay.as_millis() as u64,
            "a spare died before it was used: next spare after a delay"
        );
        super::tasks::send_after(&self.events, delay, Event::SpareDue);
    }

    /// A spare became ready: spares boot fine again.
    pub(super) fn spare_ready(&mut self, index: u32) {
        if self.slots.get(&index).is_some_and(|s| s.spare) {
            self.spare_failures = 0;
            self.spare_due = None;
        }
    }

    /// The serving worker of `index` died (unasked): if a spare is ready, it takes the slot's
    /// place (flipped in, and the dead slot leaves, in one publish). Returns whether it did.
    pub(super) fn take_over(&mut self, index: u32) -> bool {
        if self.stopping || self.cfg.spares == 0 {
            return false;
        }
        let Some(dead) = self.slots.get(&index) else {
            return false;
        };
        let spares = self
            .slots
            .values()
            .filter(|s| s.spare)
            .map(|s| (s.index, &s.life));
        let Some(batch) = succession((index, &dead.life), spares) else {
            return false;
        };
        let spare = batch[0].0;
        if let Some(slot) = self.slots.get_mut(&spare) {
            slot.spare = false;
        }
        tracing::info!(
            slot = spare,
            replaced = index,
            "a spare takes the place of the dead worker"
        );
        self.apply_all(batch.into());
        // A new spare boots from the event loop, after the other exits already queued (a
        // second dead worker gets the second spare first).
        let _ = self.events.send(Event::SpareDue);
        true
    }

    /// Retires every spare (a rolling restart is starting: they run the old app).
    pub(super) fn retire_spares(&mut self) {
        let spares: Vec<(u32, Input)> = self
            .slots
            .values()
            .filter(|s| s.spare)
            .map(|s| {
                (
                    s.index,
                    Input::Retire("spares are replaced by the rolling restart".into()),
                )
            })
            .collect();
        if !spares.is_empty() {
            self.apply_all(spares);
        }
    }
}
