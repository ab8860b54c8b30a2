//! Rolling restart (`SIGHUP`, `ck reload`): per batch, start each replacement on a free slot,
//! wait until every one is ready, then flip them in and the old workers out in one active-set
//! publish; the old ones leave (their connections finish, see `leaving`), get SIGTERM, and their
//! sockets close (leftovers migrate) when they exit. The roll ends, and `ck reload` answers,
//! once every old worker has been told to stop. A replacement that exits or never becomes ready
//! aborts the roll; old workers keep serving. The decisions are the fleet core's
//! ([`crate::supervisor::fleet::roll`]), run by the fleet executor; this file answers and counts.
use std::collections::VecDeque;

use tokio::sync::oneshot;

use crate::control::Response;
use crate::supervisor::{Supervisor, executor::fleet as run_fleet, fleet};

impl Supervisor {
    /// Starts a rolling restart of every current worker.
    pub(in crate::supervisor) fn begin_reload(&mut self, reply: Option<oneshot::Sender<Response>>) {
        let all = fleet::roll::reload_targets(&fleet::lives(self.lives()));
        self.begin_roll(all, reply, true);
    }

    /// Starts a rolling restart of the workers of `pending` slots (`reload`: of the whole
    /// fleet, by `ck reload` or SIGHUP); `reply` is answered when it ends.
    pub(in crate::supervisor) fn begin_roll(
        &mut self,
        pending: VecDeque<u32>,
        reply: Option<oneshot::Sender<Response>>,
        reload: bool,
    ) {
        if let Some(why) = fleet::roll::refusal(self.stopping, self.ops.core.roll.is_some()) {
            tracing::warn!("reload refused: {why}");
            if let Some(reply) = reply {
                let _ = reply.send(Response::Error(why.to_string()));
            }
            return;
        }
        self.ops.roll_reply = reply;
        let _ = run_fleet::begin_roll(self, pending, reload);
    }
}
