//! The invariants of ARCHITECTURE.md, the fleet's among them, checked on the model after every
//! step of the property test.
use super::Model;
use crate::supervisor::lifecycle::{Life, State};

impl Model {
    /// The invariants of ARCHITECTURE.md, checked after every step.
    pub(super) fn check(&mut self) {
        self.opened_once |= self.lives.values().any(|l| l.serving() && l.socket_open);
        let set = &self.published;
        for (position, index) in set.slots[..set.live_len as usize].iter().enumerate() {
            let life = &self.lives[index];
            assert_eq!(
                self.os_open.get(index),
                Some(&true),
                "slot {index} listed with its socket closed"
            );
            // Chosen: ready, or starting while the fleet boots beside a ready worker.
            if position < set.ready_len as usize {
                let booting = life.booting()
                    && self.core.spread.is_open()
                    && self.lives.values().any(|l| l.selectable());
                assert!(
                    life.selectable() || booting,
                    "slot {index} in the ready list: {life:?}"
                );
            }
        }
        for (index, life) in &self.lives {
            assert_eq!(
                life.socket_open,
                self.os_open.get(index) == Some(&true),
                "slot {index}: socket flag vs OS"
            );
            assert_eq!(
                life.state.run().map(|r| r.id),
                self.os_worker.get(index).copied(),
                "slot {index}: worker"
            );
            assert!(
                !(life.standby
                    && matches!(life.state, State::Waiting | State::Held | State::Broken))
            );
        }
        if self.stopping {
            assert_eq!(set.live_len, 0);
            assert!(self.core.roll.is_none(), "a roll outlived the shutdown");
            return;
        }
        let serving: Vec<&Life> = self.lives.values().filter(|l| l.serving()).collect();
        assert!(!serving.is_empty(), "the fleet lost every serving slot");
        assert!(
            !self.opened_once || serving.iter().any(|l| l.socket_open),
            "the group emptied: {:#?}",
            self.lives
        );
        let trying = serving.iter().filter(|l| l.trying()).count();
        assert!(
            trying >= (self.settings.min_workers as usize).min(serving.len()),
            "the breaker took the group below --min-workers: {:#?}",
            self.lives
        );
        if set.live_len == 0 {
            assert!(
                self.lives.values().all(|l| !l.socket_open),
                "open sockets but nothing listed"
            );
        }
        // Never an empty ready list while a worker is ready to be selected.
        assert!(
            set.ready_len > 0 || !self.lives.values().any(|l| l.selectable()),
            "a worker is ready but the ready list is empty: {:#?}",
            self.lives
        );
        // Spares and a kept release are never selected; a kept slot is a standby with a
        // worker, never a spare.
        for (index, life) in &self.lives {
            assert!(
                !((life.spare || life.kept.is_some()) && self.listed(*index).0),
                "spare or kept slot {index} in the ready list"
            );
            assert!(
                life.kept.is_none() || (life.standby && !life.spare && life.state.run().is_some()),
                "kept slot {index} without its worker or not a standby: {life:?}"
            );
        }
        self.check_roll();
    }

    /// A roll never has more than `--reload-batch` old workers out before their replacements
    /// are in: the batch in flight is at most that long, its old slots still serve, and its
    /// replacements are standbys nothing retired (a scale-down among them). A reload waits only
    /// for revived slots that have a worker.
    fn check_roll(&self) {
        let Some(roll) = &self.core.roll else {
            return;
        };
        // A canary's batch is its size (its old workers serve on until the verdict).
        let limit = match &roll.canary {
            Some(canary) => canary.size,
            None => self.shape.reload_batch as usize,
        };
        assert!(
            roll.batch.len() <= limit,
            "batch {:?} over --reload-batch {} (or the canary's size)",
            roll.batch,
            self.shape.reload_batch
        );
        // A canary's workers are selected beside old workers that all still serve.
        for (old, new) in roll.canary.iter().flat_map(|c| &c.pairs) {
            let gone_or = |i: &u32, f: &dyn Fn(&Life) -> bool| self.lives.get(i).is_none_or(f);
            assert!(
                gone_or(old, &|l| !l.leaving()),
                "canary's old slot {old} left early"
            );
            assert!(
                gone_or(new, &|l| l.canary && !l.serving()),
                "canary slot {new}"
            );
        }
        // A canary's worker that went in (and is not withdrawn) is the roll's to judge: no
        // readiness event may make the roll forget it (its verdict would never come).
        let judged = |l: &Life| l.canary && !l.leaving() && !matches!(l.state, State::Stopping(..));
        for (index, life) in self.lives.iter().filter(|(_, l)| judged(l)) {
            assert!(
                roll.canary.as_ref().is_some_and(|c| c.has(*index)),
                "canary slot {index} ({:?}) is not in the roll's canary: {:?}",
                life.state,
                roll.canary
            );
        }
        // A revived slot the roll still waits for has its fresh worker: its death settles it.
        for (index, revival) in &roll.revived {
            if *revival == crate::supervisor::fleet::roll::Revival::Starting {
                assert!(
                    self.lives
                        .get(index)
                        .is_some_and(|l| l.state.run().is_some()),
                    "revived slot {index} waited for without a worker: {:#?}",
                    self.lives
                );
            }
        }
        for (old, new) in &roll.batch {
            let old_life = &self.lives[old];
            assert!(
                old_life.serving(),
                "old slot {old} out before its replacement {new} is in: {old_life:?}"
            );
            let new_life = &self.lives[new];
            assert!(
                new_life.standby && !new_life.leaving() && !new_life.spare,
                "replacement {new} of slot {old} retired or flipped in mid-batch: {new_life:?}"
            );
        }
    }
}
