//! Foreign members of a group: another process of the same user that binds a group's port with
//! `SO_REUSEPORT` joins the kernel's group, and so does a worker that binds it a second time by
//! itself. The program never selects such a socket (it selects explicitly, from ck's sockets
//! only), but it is a mistake worth naming: ck lists every listener on the port that is not one
//! of its own sockets, from the kernel (sock_diag), in `ck status` and in the log, which names
//! the worker's slot when a worker opened it.
use std::collections::BTreeSet;

use crate::settings::run_config::RunConfig;
use crate::supervisor::{
    groups::Groups,
    inputs::{Inputs, listens::Listens},
    slots::SlotTable,
};
use crate::{control::ForeignListener, os::sock_diag};

/// Listeners on the groups' ports that are not ck's sockets, in `listens`.
pub(in crate::supervisor) fn listeners(
    cfg: &RunConfig,
    groups: &Groups,
    table: &SlotTable,
    listens: &Listens,
) -> Vec<ForeignListener> {
    let mut foreign = Vec::new();
    // sock_diag lists TCP listeners: a UDP group's port is not looked at.
    let tcp = groups.iter().enumerate().filter(|(_, g)| !g.addr.is_udp());
    for (position, group) in tcp {
        let own: BTreeSet<u64> = table
            .slots
            .values()
            .filter_map(|s| s.sockets.get(position))
            .filter_map(|s| sock_diag::inode_of(s).ok())
            .collect();
        for listener in listens.on_group(group).filter(|l| !own.contains(&l.inode)) {
            // With --adopt, a worker's own socket not adopted yet is no foreigner.
            if cfg.adopt && table.holder_in_fleet(listener.inode).is_some() {
                continue;
            }
            let holder = sock_diag::holder_of(listener.inode);
            foreign.push(ForeignListener {
                group: group.name.clone(),
                addr: listener.addr.to_string(),
                inode: listener.inode,
                uid: listener.uid,
                pid: holder.as_ref().map(|(pid, _)| *pid),
                command: holder.map(|(_, comm)| comm),
            });
        }
    }
    foreign
}

impl Inputs {
    /// Logs the foreign listeners in `now` that appeared or went away since the last look,
    /// naming the worker's slot when a worker's process holds one.
    pub(in crate::supervisor) fn watch_foreign(
        &mut self,
        now: &[ForeignListener],
        table: &SlotTable,
    ) {
        let inodes: BTreeSet<u64> = now.iter().map(|f| f.inode).collect();
        for f in now.iter().filter(|f| !self.foreign_seen.contains(&f.inode)) {
            match table.holder_in_fleet(f.inode) {
                Some((slot, pid, fd)) => tracing::warn!(
                    group = %f.group,
                    addr = %f.addr,
                    inode = f.inode,
                    slot,
                    pid,
                    fd,
                    "the worker opened a socket of its own on the group's port with \
                     SO_REUSEPORT (it joined the group beside the socket ck passed it); ck never \
                     steers connections to it: serve only the socket ck passes (fd 3, \
                     LISTEN_FDS), or let ck adopt the worker's own with --adopt"
                ),
                None => tracing::warn!(
                    group = %f.group,
                    addr = %f.addr,
                    inode = f.inode,
                    pid = ?f.pid,
                    command = ?f.command,
                    "a socket that is not ck's listens on the group's port (it joined the \
                     SO_REUSEPORT group); ck never steers connections to it: stop that process"
                ),
            }
        }
        for gone in self.foreign_seen.difference(&inodes) {
            tracing::info!(inode = gone, "the foreign listener is gone");
        }
        self.foreign_seen = inodes;
    }
}
