//! What listens on the host, as the kernel says at one look ([`Listens`]: every TCP listener,
//! from sock_diag, with the cgroup that created it), and what the workers listen on by
//! themselves: every worker is born in a cgroup of its own, so a listener created in that
//! cgroup is the worker's own, not one ck passed it. Three mistakes of hurried servers show
//! here, each read from the kernel at every look, never remembered:
//! - a worker that listens on a port of its own and never accepts on the socket ck passed it
//!   (fd 3): it stays starting until `--ready-timeout`; the fix is `--adopt --port THAT_PORT`;
//! - a worker that closed the socket ck passed it (its processes hold no copy, `/proc/PID/fd`),
//!   with or without a listener of its own: the same, named so;
//! - a worker that binds a group's port a second time with `SO_REUSEPORT`: its socket joins the
//!   group, ck never steers to it (`foreign` names it with its slot).
//!
//! A ready worker's listener on a port of no group (an admin or metrics port) is no mistake:
//! `Inputs::watch_listeners` logs it once, since ck neither steers, drains nor counts
//! connections there. Nor is a worker that calls `listen()` again on the socket ck passed it
//! (Node does, with 511; gunicorn with 2048), but the backlog then is the worker's: one below
//! [`SMALL_BACKLOG`] (`listen(fd, 1)` or `listen(fd, 5)` in an old example) drops connections
//! under a burst, and is logged once with the kernel's number.
use std::{collections::BTreeSet, net::SocketAddr, time::Duration};

use crate::os::sock_diag::{self, Listener};
use crate::settings::run_config::RunConfig;
use crate::supervisor::{
    groups::{Group, Groups},
    inputs::{Inputs, foreign},
    lifecycle::State,
    slots::{SlotTable, slot::Slot},
};

/// Every TCP listener of the host at one look.
pub(in crate::supervisor) struct Listens(Vec<Listener>);

/// A listener a worker opened by itself.
#[derive(Debug, PartialEq, Eq)]
pub(in crate::supervisor) struct OwnListener {
    /// The worker's slot.
    pub slot: u32,
    /// The worker's pid.
    pub pid: u32,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its inode.
    pub inode: u64,
    /// The group whose port and family it binds (it joined that `SO_REUSEPORT` group), if any.
    pub group: Option<String>,
}

/// A starting worker past `--ready-grace` that cannot become ready by accepting on the socket
/// ck passed it: it closed that socket, or it listens on a port of its own instead.
#[derive(Debug, PartialEq, Eq)]
pub(in crate::supervisor) struct NotServing {
    /// Its slot.
    pub slot: u32,
    /// Its pid.
    pub pid: u32,
    /// How long it has been starting.
    pub starting_for: Duration,
    /// Its processes hold none of the sockets ck passed it.
    pub closed: bool,
    /// Where it listens by itself, on ports of no group.
    pub own: Vec<SocketAddr>,
    /// The first group's address and the fd it was passed on (3).
    pub passed: (SocketAddr, u32),
}

/// A backlog this small drops a burst's connections (until their SYN is sent again, a second
/// later): Node's 511, Python's 128 and the frameworks' larger ones are not.
const SMALL_BACKLOG: u32 = 64;

/// A slot's socket whose backlog its worker lowered below [`SMALL_BACKLOG`] (it called
/// `listen()` on it again).
#[derive(Debug, PartialEq, Eq)]
pub(in crate::supervisor) struct LoweredBacklog {
    /// The slot.
    pub slot: u32,
    /// Its worker's pid.
    pub pid: u32,
    /// Where the socket listens.
    pub addr: SocketAddr,
    /// Its backlog now, as the kernel holds it.
    pub backlog: u32,
}

impl Listens {
    /// The listeners as the kernel lists them now (none, logged at debug, if it cannot).
    pub fn now() -> Listens {
        match sock_diag::all_listeners() {
            Ok(all) => Listens(all),
            Err(e) => {
                tracing::debug!("listing the host's listeners failed: {e}");
                Listens(Vec::new())
            }
        }
    }

    /// The listeners on `group`'s port in its family.
    pub fn on_group<'a>(&'a self, group: &'a Group) -> impl Iterator<Item = &'a Listener> + 'a {
        let addr = group.addr.addr;
        self.0
            .iter()
            .filter(move |l| l.addr.port() == addr.port() && l.addr.is_ipv6() == addr.is_ipv6())
    }

    /// The listeners the workers opened by themselves (created in a worker's cgroup; members
    /// of `--adopt`'s forking servers are their root's).
    pub fn own(&self, groups: &Groups, table: &SlotTable) -> Vec<OwnListener> {
        let workers: Vec<(u64, u32, u32)> = table
            .slots
            .values()
            .filter(|s| s.life.member_of.is_none())
            .filter_map(|s| {
                let worker = s.worker.as_ref()?;
                let id = worker.cgroup.as_ref()?.id().ok()?;
                Some((id, s.index, worker.pid))
            })
            .collect();
        let tcp: Vec<&Group> = groups.tcp().collect();
        self.0
            .iter()
            .filter_map(|l| {
                let (_, slot, pid) = workers.iter().find(|(id, ..)| Some(*id) == l.cgroup)?;
                let group = tcp.iter().find(|g| {
                    g.addr.addr.port() == l.addr.port() && g.addr.addr.is_ipv6() == l.addr.is_ipv6()
                });
                Some(OwnListener {
                    slot: *slot,
                    pid: *pid,
                    addr: l.addr,
                    inode: l.inode,
                    group: group.map(|g| g.name.clone()),
                })
            })
            .collect()
    }

    /// The starting workers past `--ready-grace` that closed the sockets ck passed them or
    /// listen on a port of their own (never with `--adopt`, where workers bind their own).
    pub fn not_serving(
        &self,
        cfg: &RunConfig,
        groups: &Groups,
        table: &SlotTable,
    ) -> Vec<NotServing> {
        if cfg.adopt {
            return Vec::new();
        }
        let Some(first) = groups.tcp().next() else {
            return Vec::new();
        };
        let own = self.own(groups, table);
        table
            .slots
            .values()
            .filter_map(|slot| {
                let starting_for = starting_for(slot)?;
                if starting_for < cfg.ready_grace {
                    return None;
                }
                let pid = slot.worker.as_ref()?.pid;
                let mine: Vec<SocketAddr> = own
                    .iter()
                    .filter(|o| o.slot == slot.index && o.group.is_none())
                    .map(|o| o.addr)
                    .collect();
                let closed = closed_its_sockets(slot, table);
                (closed || !mine.is_empty()).then_some(NotServing {
                    slot: slot.index,
                    pid,
                    starting_for,
                    closed,
                    own: mine,
                    passed: (first.addr.addr, 3),
                })
            })
            .collect()
    }
}

impl Listens {
    /// The slots whose socket (one ck made and passed) has a backlog below [`SMALL_BACKLOG`]
    /// and ck's (never with `--adopt`, where the worker's own `listen()` sets it).
    pub fn lowered_backlogs(&self, cfg: &RunConfig, table: &SlotTable) -> Vec<LoweredBacklog> {
        if cfg.adopt {
            return Vec::new();
        }
        let small = crate::os::sockets::backlog().min(SMALL_BACKLOG);
        table
            .slots
            .values()
            .filter_map(|slot| {
                let pid = slot.worker.as_ref()?.pid;
                slot.sockets.iter().find_map(|socket| {
                    let inode = sock_diag::inode_of(socket).ok()?;
                    let listener = self.0.iter().find(|l| l.inode == inode)?;
                    (listener.backlog < small).then_some(LoweredBacklog {
                        slot: slot.index,
                        pid,
                        addr: listener.addr,
                        backlog: listener.backlog,
                    })
                })
            })
            .collect()
    }
}

/// How long the slot's worker has been starting (None: it is not starting).
fn starting_for(slot: &Slot) -> Option<Duration> {
    match slot.life.state {
        State::Starting(run) => Some(run.started.elapsed()),
        _ => None,
    }
}

/// Whether no process of the slot's worker holds any of the sockets ck passed it (read from
/// `/proc/PID/fd`; false when that cannot be read).
fn closed_its_sockets(slot: &Slot, table: &SlotTable) -> bool {
    let pids = table.tree_pids(slot.index);
    let inodes: Vec<u64> = slot
        .sockets
        .iter()
        .filter_map(|s| sock_diag::inode_of(s).ok())
        .collect();
    let readable = pids
        .iter()
        .any(|pid| std::fs::read_dir(format!("/proc/{pid}/fd")).is_ok());
    readable
        && !inodes.is_empty()
        && inodes
            .iter()
            .all(|inode| sock_diag::fd_of(*inode, &pids).is_none())
}

impl NotServing {
    /// What the worker did and the fix, for `ck status`'s DEGRADED line and the log.
    pub fn describe(&self) -> String {
        let (addr, fd) = self.passed;
        let own = self
            .own
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        let fix = match self.own.first() {
            Some(port) => format!(
                "run it with `--adopt --port {}` (ck then adopts the socket it binds), or make \
                 it serve fd {fd} (LISTEN_FDS)",
                port.port()
            ),
            None => format!("make it serve fd {fd} (LISTEN_FDS) and keep it open"),
        };
        let did = match (self.closed, own.is_empty()) {
            (true, true) => format!("closed the socket ck passed it (fd {fd}, {addr})"),
            (true, false) => format!(
                "closed the socket ck passed it (fd {fd}, {addr}) and listens on {own} of its own"
            ),
            (false, _) => format!(
                "listens on {own} of its own and has not accepted on the socket ck passed it \
                 (fd {fd}, {addr})"
            ),
        };
        format!(
            "slot {} (pid {}): its worker {did}, starting for {:.1}s: ck cannot steer \
             connections to a socket it did not pass, and the worker is stopped at \
             --ready-timeout; {fix}",
            self.slot,
            self.pid,
            self.starting_for.as_secs_f64()
        )
    }
}

impl Inputs {
    /// One look at what listens (every second): logs the foreign listeners on the groups'
    /// ports that appeared or went away, each worker's listener on a port of no group once,
    /// each worker that cannot serve the socket ck passed it once (a warning with the fix), and
    /// each worker that lowered its socket's backlog to a small one once.
    pub(in crate::supervisor) fn watch_listeners(
        &mut self,
        cfg: &RunConfig,
        groups: &Groups,
        table: &SlotTable,
    ) {
        let listens = Listens::now();
        self.watch_foreign(&foreign::listeners(cfg, groups, table, &listens), table);
        let own = listens.own(groups, table);
        let now: BTreeSet<u64> = own.iter().map(|o| o.inode).collect();
        for o in own.iter().filter(|o| o.group.is_none()) {
            if self.own_seen.contains(&o.inode) {
                continue;
            }
            tracing::info!(
                slot = o.slot,
                pid = o.pid,
                addr = %o.addr,
                "the worker also listens on a port of its own, which is none of ck's groups: \
                 connections there are not steered, drained or counted by ck"
            );
        }
        self.own_seen = now;
        let stuck = listens.not_serving(cfg, groups, table);
        let pids: BTreeSet<u32> = stuck.iter().map(|s| s.pid).collect();
        for s in stuck
            .iter()
            .filter(|s| !self.not_serving_seen.contains(&s.pid))
        {
            tracing::warn!(slot = s.slot, pid = s.pid, "DEGRADED: {}", s.describe());
        }
        self.not_serving_seen = pids;
        let lowered = listens.lowered_backlogs(cfg, table);
        let pids: BTreeSet<u32> = lowered.iter().map(|l| l.pid).collect();
        for l in lowered
            .iter()
            .filter(|l| !self.backlog_seen.contains(&l.pid))
        {
            tracing::warn!(
                slot = l.slot,
                pid = l.pid,
                addr = %l.addr,
                backlog = l.backlog,
                ck_backlog = crate::os::sockets::backlog(),
                "the worker called listen() again on the socket ck passed it and lowered its \
                 backlog to a small one: connections beyond that many waiting to be accepted are \
                 dropped until their SYN is sent again (1 s, 3 s, ...); drop that listen() call, \
                 or give it a larger backlog"
            );
        }
        self.backlog_seen = pids;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn not_serving(closed: bool, own: &[&str]) -> NotServing {
        NotServing {
            slot: 1,
            pid: 42,
            starting_for: Duration::from_millis(2500),
            closed,
            own: own.iter().map(|a| a.parse().unwrap()).collect(),
            passed: ("0.0.0.0:8080".parse().unwrap(), 3),
        }
    }

    #[test]
    fn a_worker_that_does_not_serve_fd_3_is_named_with_what_it_did_and_the_fix() {
        let own_port = not_serving(false, &["127.0.0.1:9000"]).describe();
        for words in [
            "slot 1 (pid 42)",
            "listens on 127.0.0.1:9000 of its own",
            "has not accepted on the socket ck passed it (fd 3, 0.0.0.0:8080)",
            "starting for 2.5s",
            "`--adopt --port 9000`",
        ] {
            assert!(own_port.contains(words), "{words}: {own_port}");
        }
        let closed = not_serving(true, &["127.0.0.1:9000"]).describe();
        assert!(
            closed.contains("closed the socket ck passed it (fd 3, 0.0.0.0:8080) and listens on"),
            "{closed}"
        );
        let only_closed = not_serving(true, &[]).describe();
        assert!(
            only_closed.contains("make it serve fd 3 (LISTEN_FDS) and keep it open")
                && !only_closed.contains("--adopt"),
            "{only_closed}"
        );
    }
}
