//! Rolling restart (`SIGHUP`, `ck reload`): per batch, start each replacement on a free slot,
//! wait until every one is ready, then flip them in and the old workers out in one active-set
//! publish; the old ones leave (their connections finish, see `leaving`), get SIGTERM, and their
//! sockets close (leftovers migrate) when they exit. The roll ends, and `ck reload` answers,
//! once every old worker has been told to stop. A replacement that exits or never becomes ready
//! aborts the roll; old workers keep serving.
use std::collections::VecDeque;

use tokio::sync::oneshot;

use super::{
    Supervisor,
    lifecycle::{Input, Life, State},
    slot::Slot,
};
use crate::control::Response;

/// A rolling restart in progress.
pub(super) struct Roll {
    /// Old slots not yet replaced.
    pending: VecDeque<u32>,
    /// The batch in flight: (old slot, replacement slot).
    batch: Vec<(u32, u32)>,
    /// Workers replaced so far.
    replaced: u32,
    /// Old slots flipped out: the roll ends once none of them is still `Leaving`.
    leaving: Vec<u32>,
    /// Who asked (`ck reload`); `None` for SIGHUP.
    reply: Option<oneshot::Sender<Response>>,
    /// A reload of the fleet (`ck reload`, SIGHUP), counted in `ck_reloads_total`; not the
    /// replacement of one worker (health, recycling).
    reload: bool,
}

impl Supervisor {
    /// Starts a rolling restart of every current worker.
    pub(super) fn begin_reload(&mut self, reply: Option<oneshot::Sender<Response>>) {
        // Slots without a worker restart with the new app anyway.
        let all = self
            .slots
            .values()
            .filter(|s| s.life.serving() && s.worker.is_some())
            .map(|s| s.index)
            .collect();
        self.begin_roll(all, reply, true);
    }

    /// A reload in progress: workers replaced so far, and in all (recycles are not reloads).
    pub(super) fn reload_progress(&self) -> Option<(u32, u32)> {
        let roll = self.roll.as_ref().filter(|r| r.reload)?;
        let total = roll.replaced as usize + roll.batch.len() + roll.pending.len();
        Some((roll.replaced, total as u32))
    }

    /// Starts a rolling restart of the workers of `pending` slots (`reload`: of the whole
    /// fleet, by `ck reload` or SIGHUP).
    pub(super) fn begin_roll(
        &mut self,
        pending: VecDeque<u32>,
        reply: Option<oneshot::Sender<Response>>,
        reload: bool,
    ) {
        let refuse = |reply: Option<oneshot::Sender<Response>>, why: &str| {
            tracing::warn!("reload refused: {why}");
            if let Some(reply) = reply {
                let _ = reply.send(Response::Error(why.to_string()));
            }
        };
        if self.stopping {
            return refuse(reply, "ck is stopping");
        }
        if self.roll.is_some() {
            return refuse(
                reply,
                "a rolling restart is already in progress; wait for it to end",
            );
        }
        tracing::info!(
            workers = pending.len(),
            batch = self.cfg.reload_batch,
            "rolling restart started"
        );
        // Spares run the old app: they go now, and new ones boot when the roll ends.
        self.retire_spares();
        self.roll = Some(Roll {
            pending,
            batch: Vec::new(),
            replaced: 0,
            leaving: Vec::new(),
            reply,
            reload,
        });
        self.next_batch();
    }

    /// Starts replacements for the next batch, or ends the roll when nothing is left.
    fn next_batch(&mut self) {
        loop {
            let Some(roll) = self.roll.as_mut() else {
                return;
            };
            if roll.batch.len() >= self.cfg.reload_batch as usize {
                return;
            }
            let Some(old) = roll.pending.pop_front() else {
                break;
            };
            // Skip slots that are gone or already leaving.
            if self.slots.get(&old).is_none_or(|s| !s.life.serving()) {
                continue;
            }
            let Some(new) = self.free_slot() else {
                self.abort_roll(old, "found no free slot for its replacement".into());
                return;
            };
            let life = Life {
                drained: self.slots.get(&old).is_some_and(|s| s.life.drained),
                ..Life::new(self.cfg.restart, true)
            };
            self.slots.insert(new, Slot::new(new, life));
            if let Some(roll) = self.roll.as_mut() {
                roll.batch.push((old, new));
            }
            tracing::info!(old_slot = old, slot = new, "starting replacement");
            if let Some(e) = self.apply(new, Input::Start).spawn_failure() {
                self.abort_roll(new, format!("could not start: {e:#}"));
                return;
            }
        }
        self.finish_when_left();
    }

    /// Ends the roll once no batch is in flight and every old worker it flipped out has been
    /// told to stop (or is gone): from then on no old worker takes a request but the last one
    /// on each of its keep-alive connections.
    pub(super) fn finish_when_left(&mut self) {
        let Some(roll) = self.roll.as_ref() else {
            return;
        };
        let leaving = roll.leaving.iter().any(|old| {
            self.slots
                .get(old)
                .is_some_and(|s| matches!(s.life.state, State::Leaving(_)))
        });
        if roll.batch.is_empty() && roll.pending.is_empty() && !leaving {
            let replaced = roll.replaced;
            self.finish_roll(Ok(format!("reloaded {replaced} worker(s)")));
        }
    }

    /// Called when a worker becomes ready: flips the batch in once all its replacements are.
    pub(super) fn roll_on_ready(&mut self, index: u32) {
        let Some(roll) = self.roll.as_ref() else {
            return;
        };
        if !roll.batch.iter().any(|(_, new)| *new == index) {
            return;
        }
        let all_ready = roll.batch.iter().all(|(_, new)| {
            self.slots
                .get(new)
                .is_some_and(|s| matches!(s.life.state, State::Ready(_)))
        });
        if !all_ready {
            return;
        }
        let batch = std::mem::take(&mut self.roll.as_mut().expect("roll").batch);
        // One batch: the replacements in and the old workers out in the same publish, and only
        // then SIGTERM to the old ones.
        let mut inputs = Vec::new();
        for (old, new) in &batch {
            inputs.push((*new, Input::FlipIn));
            inputs.push((*old, Input::Retire("replaced by a rolling restart".into())));
        }
        self.apply_all(inputs);
        if let Some(roll) = self.roll.as_mut() {
            roll.replaced += batch.len() as u32;
            roll.leaving.extend(batch.iter().map(|(old, _)| *old));
        }
        self.next_batch();
    }

    /// Whether `index` is a replacement of the batch in flight.
    pub(super) fn is_replacement(&self, index: u32) -> bool {
        self.roll
            .as_ref()
            .is_some_and(|r| r.batch.iter().any(|(_, new)| *new == index))
    }

    /// Aborts the roll because replacement `index` failed: every replacement of the batch is
    /// retired, the old workers stay.
    pub(super) fn abort_roll(&mut self, index: u32, why: String) {
        let Some(roll) = self.roll.as_mut() else {
            return;
        };
        let batch = std::mem::take(&mut roll.batch);
        let old = batch
            .iter()
            .find(|(_, new)| *new == index)
            .map_or(index, |(old, _)| *old);
        let retire = batch
            .iter()
            .map(|(_, new)| (*new, Input::Retire("rolling restart aborted".into())))
            .collect();
        self.apply_all(retire);
        self.finish_roll(Err(format!(
            "rolling restart aborted: the replacement for slot {old} (slot {index}) {why}; \
             the old workers keep serving"
        )));
    }

    /// Ends the roll and answers whoever asked.
    pub(super) fn finish_roll(&mut self, result: Result<String, String>) {
        let Some(roll) = self.roll.take() else {
            return;
        };
        self.replenish_spares();
        if roll.reload {
            match result {
                Ok(_) => self.reloads.ok += 1,
                Err(_) => self.reloads.aborted += 1,
            }
        }
        match &result {
            Ok(msg) => tracing::info!("rolling restart done: {msg}"),
            Err(msg) => tracing::error!("{msg}"),
        }
        if let Some(reply) = roll.reply {
            let _ = reply.send(match result {
                Ok(msg) => Response::Ok(msg),
                Err(msg) => Response::Error(msg),
            });
        }
    }
}
