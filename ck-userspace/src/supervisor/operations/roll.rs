//! Rolling restart (`SIGHUP`, `ck reload`): per batch, start each replacement on a free slot,
//! wait until every one is ready, then flip them in and the old workers out in one active-set
//! publish; the old ones leave (their connections finish, see `leaving`), get SIGTERM, and their
//! sockets close (leftovers migrate) when they exit. The roll ends, and `ck reload` answers,
//! once every old worker has been told to stop. A replacement that exits or never becomes ready
//! aborts the roll; old workers keep serving. The decisions are the fleet core's
//! ([`crate::supervisor::fleet::roll`]), run by the fleet executor; this file says whether one may start, and keeps who to answer.
use tokio::sync::oneshot;

use crate::control::Response;
use crate::supervisor::{fleet, operations::Operations};

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
}
