//! Foreign members of a group: another process of the same user that binds a group's port with
//! `SO_REUSEPORT` joins the kernel's group. The program never selects it (it selects explicitly,
//! from ck's sockets only), but it is a mistake worth naming: ck lists every listener on the
//! port that is not one of its own sockets, from the kernel (sock_diag), in `ck status` and in
//! the log.
use std::collections::BTreeSet;

use crate::supervisor::{groups::Groups, inputs::Inputs, slots::SlotTable};
use crate::{control::ForeignListener, os::sock_diag};

/// Listeners on the groups' ports that are not ck's sockets, as the kernel reports them now.
pub(in crate::supervisor) fn listeners(groups: &Groups, table: &SlotTable) -> Vec<ForeignListener> {
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
        let addr = group.addr.addr;
        let found = match sock_diag::listeners(addr.port(), addr.is_ipv6()) {
            Ok(found) => found,
            Err(e) => {
                tracing::debug!(group = %group.name, "listing listeners failed: {e}");
                continue;
            }
        };
        for listener in found.into_iter().filter(|l| !own.contains(&l.inode)) {
            // A worker's own socket not adopted yet (--adopt) is no foreigner.
            if table.holder_in_fleet(listener.inode).is_some() {
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
    /// Logs foreign listeners that appeared or went away since the last look.
    pub(in crate::supervisor) fn watch_foreign(&mut self, groups: &Groups, table: &SlotTable) {
        let now = listeners(groups, table);
        let inodes: BTreeSet<u64> = now.iter().map(|f| f.inode).collect();
        for f in now.iter().filter(|f| !self.foreign_seen.contains(&f.inode)) {
            tracing::warn!(
                group = %f.group,
                addr = %f.addr,
                inode = f.inode,
                pid = ?f.pid,
                command = ?f.command,
                "a socket that is not ck's listens on the group's port (it joined the \
                 SO_REUSEPORT group); ck never steers connections to it: stop that process"
            );
        }
        for gone in self.foreign_seen.difference(&inodes) {
            tracing::info!(inode = gone, "the foreign listener is gone");
        }
        self.foreign_seen = inodes;
    }
}
