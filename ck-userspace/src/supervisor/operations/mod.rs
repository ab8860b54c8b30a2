//! The operations: roll, scale, spares, recycle, drain, the quiet wait, reconfigure, leaving
//! and boot priority. The rule: each asks the fleet core ([`super::fleet`]) what to do and
//! feeds its decisions to the executor; none changes a slot's state by itself.

pub(super) mod boot_priority;
pub(super) mod drain;
pub(super) mod leaving;
pub(super) mod quiet;
pub(super) mod reconfigure;
pub(super) mod recycle;
pub(super) mod roll;
pub(super) mod scale;
pub(super) mod spares;

use tokio::sync::oneshot;

use crate::supervisor::fleet;
use crate::{control::Response, metrics};

/// The operations' state.
pub(in crate::supervisor) struct Operations {
    /// The fleet core's state: the roll in flight, the spares' pacing.
    pub core: fleet::Core,
    /// The numbers the fleet core decides with (from `cfg`).
    pub shape: fleet::Shape,
    /// Who asked for the roll in flight (`ck reload`), answered when it ends.
    pub roll_reply: Option<oneshot::Sender<Response>>,
    /// Rolling restarts that ended, by result (for `/metrics`).
    pub reloads: metrics::ReloadCounts,
    /// `--config`: the file `ck reload` reads again.
    pub config: Option<reconfigure::ConfigSource>,
    /// A stop's quiet wait, and the traffic seen per group (`quiet`).
    pub quiet: quiet::Quiet,
}
