//! The property test's model of the OS as the executor's [`World`]: every effect checks, when
//! it runs, what the invariants say must hold then (listed slots have open sockets, nothing is
//! signalled while ready-listed nor closed or forgotten while listed, no spawn on a retiring
//! slot, a leaving worker signalled only once what it was given is done), and changes the
//! model's sockets, workers and timers as the real one would.
use std::time::{Duration, Instant};

use super::{Later, Model};
use crate::supervisor::lifecycle::*;
use crate::supervisor::{
    executor::{World, decisions::FleetEvent},
    fleet::{self, Core, Shape},
};

/// The model of the OS the supervisor's executor acts on; every effect checks what the
/// invariants say must hold when it runs.
impl World for Model {
    type SpawnError = String;

    fn lives(&self) -> impl Iterator<Item = (u32, &Life)> + Clone {
        self.lives.iter().map(|(i, l)| (*i, l))
    }

    fn life_mut(&mut self, index: u32) -> Option<&mut Life> {
        self.lives.get_mut(&index)
    }

    fn settings(&self) -> &Settings {
        &self.settings
    }

    fn now(&self) -> Instant {
        self.now
    }

    fn random(&self) -> f64 {
        0.5
    }

    fn stopping(&self) -> bool {
        self.stopping
    }

    fn maps_pending(&self) -> bool {
        self.maps_pending
    }

    fn exited(&mut self, index: u32) {
        if let Some(id) = self.os_worker.remove(&index) {
            assert!(self.dead.insert(id), "worker {id}'s exit handled twice");
        }
        self.os_adopting.remove(&index);
        self.udp.gone(index);
    }

    fn note(&mut self, _: u32, _: Note) {}

    fn install(&mut self, index: u32) {
        assert!(
            self.os_adopting.remove(&index),
            "slot {index}: installing sockets it did not adopt"
        );
        if self.os_open.insert(index, true) == Some(true) {
            self.os_replaced.insert(index);
        }
    }

    fn publish(&mut self) {
        let lives = self.lives.iter().map(|(i, l)| (*i, l));
        let (set, _) =
            fleet::spread::chosen_set(&mut self.core.spread, lives, self.stopping, self.now);
        for index in &set.slots[..set.live_len as usize] {
            assert_eq!(
                self.os_open.get(index),
                Some(&true),
                "slot {index} published with its socket not in the maps"
            );
        }
        self.published = set;
        let leaving = self
            .lives
            .iter()
            .filter(|(_, l)| matches!(l.state, State::Leaving(_)));
        for (index, _) in leaving {
            self.udp.flipped_out(*index);
        }
    }

    fn signal(&mut self, index: u32, sig: Sig) {
        assert!(
            self.os_worker.contains_key(&index),
            "signal to slot {index} without a worker"
        );
        assert!(
            !self.listed(index).0,
            "slot {index} signalled while in the ready list"
        );
        if sig == Sig::Term {
            self.udp.signalled(index, self.now, self.stopping);
        }
    }

    fn close_sockets(&mut self, index: u32) {
        assert!(
            !self.listed(index).1,
            "slot {index} closed while in the active set"
        );
        assert_eq!(
            self.os_open.insert(index, false),
            Some(true),
            "closing closed slot {index}"
        );
        self.udp.closed(index);
    }

    fn close_replaced(&mut self, index: u32) {
        assert!(
            self.os_replaced.remove(&index),
            "slot {index}: nothing replaced"
        );
    }

    fn forget(&mut self, index: u32) {
        assert!(!self.listed(index).1, "slot {index} removed while listed");
        assert!(
            !self.os_worker.contains_key(&index),
            "slot {index} removed with a worker"
        );
        self.lives.remove(&index);
        self.os_open.remove(&index);
        self.members.remove(&index);
        self.udp.gone(index);
    }

    fn spawn(&mut self, index: u32) -> Result<u64, String> {
        let life = &self.lives[&index];
        assert!(
            life.serving() || life.standby,
            "spawn on retiring slot {index}"
        );
        let was_open = self.os_open.get(&index) == Some(&true);
        if let Some(at_open) = self.fail_next_spawn.take() {
            self.os_open.insert(index, was_open || !at_open);
            return Err("spawn failed".into());
        }
        if !self.settings.adopt {
            self.os_open.insert(index, true);
        }
        let id = self.next_id;
        self.next_id += 1;
        self.os_worker.insert(index, id);
        Ok(id)
    }

    fn socket_open(&self, index: u32) -> bool {
        self.os_open.get(&index) == Some(&true)
    }

    fn arm(&mut self, index: u32, timer: Timer, _: Duration, epoch: u64) {
        self.timers.push((index, timer, epoch));
    }

    fn open(&mut self, index: u32, life: Life) {
        assert!(
            self.lives.insert(index, life).is_none(),
            "slot {index} opened twice"
        );
    }

    fn core(&self) -> &Core {
        &self.core
    }

    fn core_mut(&mut self) -> &mut Core {
        &mut self.core
    }

    fn fleet(&mut self) -> (&mut Core, fleet::Lives<'_>) {
        let lives = self.lives.iter().map(|(i, l)| (*i, l)).collect();
        (&mut self.core, lives)
    }

    fn shape(&self) -> Shape {
        self.shape.clone()
    }

    /// The supervisor's `SpareDue` comes back through the event loop; a delayed one is the
    /// test's `Op::SpareDue` after `Op::Wait`.
    fn fleet_event(&mut self, event: FleetEvent) {
        match event {
            FleetEvent::SpareDue => self.queue.push_back(Later::SpareDue),
            FleetEvent::RollWaits(left) => self.roll_next_at = Some(self.now + left),
            FleetEvent::CanaryJudged { window, canary } => {
                self.verdicts.push((self.now + window, canary))
            }
            _ => {}
        }
    }

    /// A canary worker that falters withdraws the canary (from the event loop, as the
    /// supervisor sends it).
    fn faltered(&mut self, index: u32, why: String) {
        self.queue.push_back(Later::Faltered(index, why));
    }

    /// No program counts here.
    fn selected(&self, _: u32) -> u64 {
        0
    }

    /// A stopping root's members retire with it (`retire_members`); readiness and a roll's
    /// progress go to the event loop, as the supervisor sends them.
    fn batch_done(&mut self, ready: Vec<u32>, stopping: Vec<u32>) {
        let members: Vec<(u32, Input)> = self
            .members
            .iter()
            .filter(|(_, root)| stopping.contains(root))
            .map(|(member, _)| (*member, Input::Retire("its worker is stopping".into())))
            .collect();
        if !members.is_empty() {
            self.apply(members);
        }
        self.queue.extend(ready.into_iter().map(Later::Ready));
        if self.core.roll.is_some() {
            self.queue.push_back(Later::RollCheck);
        }
    }
}
