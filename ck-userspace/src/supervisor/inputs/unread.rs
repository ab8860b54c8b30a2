//! Workers that accept connections and do not read them: established connections on a group's
//! port whose receive queue has held a request the worker has not read for longer than the
//! stall timeout. The kernel says it (sock_diag: each connection's receive queue and the time
//! since its last data arrived, `tcpi_last_data_recv`); which worker holds each such
//! connection is read from its processes' fds (`/proc/PID/fd`), only when there is one. Read
//! for `ck status` when asked, never remembered: the queue moves on (or the clients give up)
//! and the line goes with it.
use std::{collections::BTreeMap, time::Duration};

use crate::os::sock_diag;
use crate::settings::run_config::RunConfig;
use crate::supervisor::{groups::Groups, slots::SlotTable};

/// One worker's connections that hold requests it has not read.
#[derive(Debug, PartialEq, Eq)]
pub(in crate::supervisor) struct Unanswered {
    /// Its slot.
    pub slot: u32,
    /// Its pid.
    pub pid: u32,
    /// How many of its connections hold unread requests older than `after`.
    pub connections: usize,
    /// The longest wait among them.
    pub longest: Duration,
    /// How long an unread request waited at least to count.
    pub after: Duration,
}

/// How long a request must wait unread to count: the stall timeout, or its default when stall
/// detection is off.
fn patience(cfg: &RunConfig) -> Duration {
    cfg.health
        .stall_timeout
        .unwrap_or(crate::settings::defaults::STALL_TIMEOUT)
}

/// The workers holding connections whose requests have waited unread longer than the stall
/// timeout, by slot.
pub(in crate::supervisor) fn unanswered(
    cfg: &RunConfig,
    groups: &Groups,
    table: &SlotTable,
) -> Vec<Unanswered> {
    let after = patience(cfg);
    let ports: Vec<u16> = groups.tcp().map(|g| g.addr.addr.port()).collect();
    let stale: Vec<(u64, Duration)> = match sock_diag::unread(&ports) {
        Ok(found) => found
            .into_iter()
            .filter(|u| u.inode != 0)
            .filter_map(|u| Some((u.inode, u.since_data?)))
            .filter(|(_, waited)| *waited >= after)
            .collect(),
        Err(e) => {
            tracing::debug!("listing unread connections failed: {e}");
            return Vec::new();
        }
    };
    if stale.is_empty() {
        return Vec::new();
    }
    let mut by_slot: BTreeMap<u32, Unanswered> = BTreeMap::new();
    for (slot, pids) in table.worker_trees() {
        let Some(pid) = table.worker(slot).map(|w| w.pid) else {
            continue;
        };
        let held: Vec<u64> = pids
            .iter()
            .flat_map(|p| sock_diag::socket_inodes(*p))
            .collect();
        for (_, waited) in stale.iter().filter(|(inode, _)| held.contains(inode)) {
            let entry = by_slot.entry(slot).or_insert(Unanswered {
                slot,
                pid,
                connections: 0,
                longest: Duration::ZERO,
                after,
            });
            entry.connections += 1;
            entry.longest = entry.longest.max(*waited);
        }
    }
    by_slot.into_values().collect()
}

impl Unanswered {
    /// What the worker does and the fix, for `ck status`'s DEGRADED line.
    pub fn describe(&self) -> String {
        format!(
            "slot {} (pid {}): its worker does not answer: {} connection(s) it accepted hold a \
             request it has not read for more than {:?} (the longest {:.1}s); clients wait \
             until they time out: make it read and answer every connection it accepts (one \
             that blocks on one client needs a thread or an event loop per connection)",
            self.slot,
            self.pid,
            self.connections,
            self.after,
            self.longest.as_secs_f64()
        )
    }
}
