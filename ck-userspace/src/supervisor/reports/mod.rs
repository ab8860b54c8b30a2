//! The reports: `ck status`, `/metrics` and the service manager. The rule: what they say is
//! read from the kernel and the maps when asked; the fields here only say where to tell it.
//! Each report's entry (`ck status`, a scrape or `/readyz`, the service manager's update)
//! takes a [`View`], which lends every other part read-only: a report cannot change the fleet
//! it describes. The questions they ask (`reads`, `degraded`, a canary's line) take only the
//! parts they read.

pub(super) mod degraded;
pub(super) mod notes;
pub(super) mod reads;
pub(super) mod scrape;
pub(super) mod status;
pub(super) mod systemd;
pub(super) mod udp_rates;

use std::time::Instant;

use crate::settings::run_config::RunConfig;
use crate::supervisor::{
    continuity::Continuity, groups::Groups, inputs::Inputs, lifecycle::Settings,
    operations::Operations, slots::SlotTable,
};

/// What the reports need beside the kernel and the maps.
pub(in crate::supervisor) struct Reports {
    /// When the instance started (its first image).
    pub started: Instant,
    /// The ready list last published (for log lines only; status reads the map).
    pub last_ready: Vec<u32>,
    /// Where `--metrics` listens (for `ck status`).
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// The service manager ck tells its state (`NOTIFY_SOCKET`), if any.
    pub systemd: Option<systemd::Notifier>,
    /// The fleet may have changed since the service manager was last told (set by every
    /// publish and canary; the state itself is read from the kernel when telling).
    pub systemd_due: bool,
    /// Recent readings of the UDP groups' datagram counters, for their rates.
    pub udp_rates: udp_rates::UdpRates,
}

impl Reports {
    /// The maps were published with `set`: the service manager is due to hear, and a change
    /// of the ready list is logged (an empty one, while workers live, as a warning).
    pub fn published(&mut self, set: &ck_common::ActiveSet) {
        let ready: Vec<u32> = set.slots[..set.ready_len as usize].to_vec();
        if ready.is_empty() && !self.last_ready.is_empty() && set.live_len > 0 {
            tracing::warn!(
                live = set.live_len,
                "no ready and healthy worker left: new connections wait in the queues of the \
                 other open sockets"
            );
        }
        if ready != self.last_ready {
            tracing::debug!(active = ?ready, fallback = ?&set.slots[ready.len()..set.live_len as usize], "active set");
            self.last_ready = ready;
        }
        self.systemd_due = true;
    }
}

/// What the reports read: every other part, borrowed read-only, so a report cannot change the
/// fleet it describes (`Supervisor::view`).
#[derive(Clone, Copy)]
pub(in crate::supervisor) struct View<'a> {
    pub cfg: &'a RunConfig,
    pub settings: &'a Settings,
    /// ck is shutting down.
    pub stopping: bool,
    pub table: &'a SlotTable,
    pub groups: &'a Groups,
    pub inputs: &'a Inputs,
    pub ops: &'a Operations,
    pub continuity: &'a Continuity,
}
