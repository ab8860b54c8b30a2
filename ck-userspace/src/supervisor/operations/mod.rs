//! The operations: recycle, drain, the quiet wait, reconfigure, boot priority and the
//! canary's watch, and
//! who to answer about a roll (its decisions are the fleet core's, `fleet::roll`; scaling and
//! spares are the fleet core's and the executor's alone: see `operate`).
//! The rule: each plans from the fleet's state and the fleet core ([`super::fleet`]) and
//! returns its plan (inputs, an answer, a reason to stop); the supervisor's top (`operate`)
//! feeds it to the executor. None changes a slot's state by itself.

pub(super) mod boot_priority;
pub(super) mod canary_watch;
pub(super) mod drain;
pub(super) mod quiet;
pub(super) mod reconfigure;
pub(super) mod recycle;

use tokio::sync::oneshot;

use crate::supervisor::fleet;
use crate::{control::Response, metrics};

/// The operations' state.
pub(in crate::supervisor) struct Operations {
    /// The fleet core's state: the roll in flight, the spares' pacing, the boot window.
    pub core: fleet::Core,
    /// Who asked for the roll in flight (`ck reload`), answered when it ends.
    pub roll_reply: Option<oneshot::Sender<Response>>,
    /// Rolling restarts that ended, by result (for `/metrics`).
    pub reloads: metrics::ReloadCounts,
    /// Canaries judged to the end, by verdict (for `/metrics`).
    pub canaries: metrics::CanaryCounts,
    /// `--config`: the file `ck reload` reads again.
    pub config: Option<reconfigure::ConfigSource>,
    /// A stop's quiet wait, and the traffic seen per group (`quiet`).
    pub quiet: quiet::Quiet,
    /// `--slow-start`: the next writing of the ramping weights is already due.
    pub slow_start_due: bool,
    /// The canary judged, watched against its limits (None: no canary, or no limit).
    pub canary_watch: Option<canary_watch::CanaryWatch>,
    /// `ck rollback`s asked while the program of this image still loads (after an upgrade or
    /// a take-back): done, and answered, once it steers (`steer`), so that the answer means
    /// the flip took effect.
    pub rollbacks_waiting: Vec<oneshot::Sender<Response>>,
}

impl Operations {
    /// Whether a roll may start now (ck not stopping, no roll in flight); else says why in the
    /// log and to `reply`. When it may, `reply` is kept, answered when the roll ends.
    pub(in crate::supervisor) fn roll_may_start(
        &mut self,
        stopping: bool,
        reply: Option<oneshot::Sender<Response>>,
    ) -> bool {
        if let Some(why) = fleet::roll::refusal(stopping, self.core.roll.is_some()) {
            tracing::warn!("reload refused: {why}");
            if let Some(reply) = reply {
                let _ = reply.send(Response::Error(why.to_string()));
            }
            return false;
        }
        self.roll_reply = reply;
        true
    }

    /// A reload in progress: workers replaced so far, and in all (recycles are not reloads).
    pub fn reload_progress(&self) -> Option<(u32, u32)> {
        let roll = self.core.roll.as_ref().filter(|r| r.reload)?;
        Some(fleet::roll::progress(roll))
    }

    /// A roll ended: counted, logged, and answered to whoever asked.
    pub fn roll_ended(&mut self, roll: fleet::roll::Roll, result: Result<String, String>) {
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
        if let Some(reply) = self.roll_reply.take() {
            let _ = reply.send(match result {
                Ok(msg) => Response::Ok(msg),
                Err(msg) => Response::Error(msg),
            });
        }
    }
}
