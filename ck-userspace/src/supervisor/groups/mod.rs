//! The listen groups and their BPF state. The rule: a socket joins a group's `sockets` map
//! only through [`Group::join`] (which attaches the program when it founds the group); the
//! maps are written only by the publish (`publish`) and the program's loading (`steering`).
//! Methods here take the slot table they read as an argument; nothing here takes the
//! supervisor.

pub(super) mod canary;
pub(super) mod held;
pub(super) mod publish;
pub(super) mod steering;

use anyhow::Context;
use ck_common::{SlotInfo, SlotState, SlotStats};
use socket2::Socket;

use crate::bpf::{BpfError, BpfGroup};
use crate::os::cgroup::WorkerCgroup;
use crate::settings::run_config::ListenAddr;

/// One listen group at run time.
pub(crate) struct Group {
    /// Its address.
    pub(in crate::supervisor) addr: ListenAddr,
    /// Its name (`tcp4-8080`).
    pub(in crate::supervisor) name: String,
    /// Its program and maps, once loaded.
    pub(in crate::supervisor) bpf: Option<BpfGroup>,
    /// After an upgrade, until `bpf` is loaded: the pinned counters (see `status`).
    pub(in crate::supervisor) pinned_stats: Option<crate::bpf::PinnedStats>,
    /// The last canary's verdict.
    pub(in crate::supervisor) steering: steering::SteeringCheck,
}

/// Every listen group, in the order of the `--listen` options (a slot's sockets are in the same
/// order). What is read or written across all groups at once is a method here.
#[derive(Default)]
pub(crate) struct Groups(pub(in crate::supervisor) Vec<Group>);

impl std::ops::Deref for Groups {
    type Target = Vec<Group>;
    fn deref(&self) -> &Vec<Group> {
        &self.0
    }
}

impl std::ops::DerefMut for Groups {
    fn deref_mut(&mut self) -> &mut Vec<Group> {
        &mut self.0
    }
}

impl<'a> IntoIterator for &'a Groups {
    type Item = &'a Group;
    type IntoIter = std::slice::Iter<'a, Group>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<'a> IntoIterator for &'a mut Groups {
    type Item = &'a mut Group;
    type IntoIter = std::slice::IterMut<'a, Group>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter_mut()
    }
}

impl Groups {
    /// Slot `index` is gone: out of every group's `sockets` map, its counters zeroed and its
    /// record cleared for the next user of the index.
    pub fn forget(&mut self, index: u32) {
        for group in self.0.iter_mut() {
            if let Some(bpf) = &mut group.bpf {
                bpf.remove(index);
                bpf.reset_stats(index);
                if let Err(e) = bpf.write_slot(index, &SlotInfo::default()) {
                    tracing::error!(group = %group.name, "{e}");
                }
            }
        }
    }

    /// `least-conn`'s sampled counts of the slots `indices`, written to every group's program.
    pub fn sample_connections(&mut self, indices: &[u32]) {
        for group in self.0.iter_mut() {
            if let Some(bpf) = &mut group.bpf
                && let Err(e) = bpf.sample_connections(indices.iter().copied())
            {
                tracing::warn!(group = %group.addr, "writing least-conn's sampled counts: {e}");
            }
        }
    }

    /// The TCP groups (connections, accept queues and probes are theirs).
    pub fn tcp(&self) -> impl Iterator<Item = &Group> {
        self.0.iter().filter(|g| !g.addr.is_udp())
    }

    /// Datagrams the UDP groups' programs counted for slot `index`, over every route (None: no
    /// UDP group has its program loaded).
    pub fn datagrams_of(&self, index: u32) -> Option<u64> {
        self.0
            .iter()
            .filter_map(|g| g.bpf.as_ref()?.udp())
            .map(|maps| maps.stats(index).total())
            .reduce(|a, b| a + b)
    }

    /// Whether some group is a UDP group.
    pub fn any_udp(&self) -> bool {
        self.0.iter().any(|g| g.addr.is_udp())
    }

    /// The state word of `index`: from its record in the `slots` map when BPF is on.
    pub fn state_word(&self, index: u32, shown: SlotState) -> String {
        let kernel = self
            .first()
            .and_then(|g| g.bpf.as_ref()?.read_slot(index))
            .and_then(|info| SlotState::from_code(info.state));
        kernel.unwrap_or(shown).name().to_string()
    }

    /// `index`'s counters, summed over every group (the pinned ones after an upgrade, until
    /// the program is loaded).
    pub fn slot_stats(&self, index: u32) -> SlotStats {
        let mut total = SlotStats::default();
        for group in &self.0 {
            match (&group.bpf, &group.pinned_stats) {
                (Some(bpf), _) => total.add(&bpf.stats(index)),
                // After an upgrade, until the program is loaded: the pinned counters.
                (None, Some(pinned)) => total.add(&pinned.stats(index)),
                (None, None) => {}
            }
        }
        total
    }

    /// Open connections of `index` as the kernel counts them, summed over every TCP group (None
    /// where it does not count them).
    pub fn kernel_connections_of(&self, index: u32) -> Option<u64> {
        self.tcp()
            .map(|g| g.bpf.as_ref()?.connections(index))
            .sum::<Option<i64>>()
            .map(|n| n.max(0) as u64)
    }

    /// Whether every group's program is loaded (steering may still be unverified).
    pub fn bpf_loaded(&self) -> bool {
        !self.0.is_empty() && self.0.iter().all(|g| g.bpf.is_some())
    }

    /// Whether the last canary of every group was steered by the program.
    pub fn steering_verified(&self) -> bool {
        self.bpf_loaded() && self.0.iter().all(|g| g.steering.attached == Some(true))
    }

    /// Whether some group steers by samples: least-queue by sampled depths (its program cannot
    /// read the exact ones) or least-conn by sampled counts (its program cannot sum them): only
    /// then must queues (and counts) be sampled every `--sample-interval`.
    pub fn steers_by_samples(&self) -> bool {
        self.0
            .iter()
            .any(|g| g.bpf.as_ref().is_some_and(|b| b.steers_by_samples()))
    }

    /// `--adopt`: sockets the processes of `cgroup` bind to a group's port count for `slot`
    /// from their first connection (see `bpf::bind_tags`).
    pub fn bind_cgroup(&mut self, cgroup: &WorkerCgroup, slot: u32) {
        for bpf in self.0.iter_mut().filter_map(|g| g.bpf.as_mut()) {
            bpf.bind_slot(cgroup.dir(), slot);
        }
    }

    /// `--adopt`: the worker cgroup is going (see [`Groups::bind_cgroup`]).
    pub fn unbind_cgroup(&mut self, cgroup: &WorkerCgroup) {
        for bpf in self.0.iter_mut().filter_map(|g| g.bpf.as_mut()) {
            bpf.unbind_slot(cgroup.dir());
        }
    }

    /// Whether `socket` (`what`, for the error) listens on group `position`'s port (for a UDP
    /// group: is a datagram socket bound to it).
    pub fn check_listening(
        &self,
        position: usize,
        socket: &Socket,
        what: &str,
    ) -> anyhow::Result<()> {
        let group = &self.0[position];
        let local = socket
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .with_context(|| format!("{what} is not an inet socket"))?;
        // A UDP group's socket never listens: bound to the port, a datagram socket.
        let serving = match group.addr.is_udp() {
            true => socket.r#type().is_ok_and(|t| t == socket2::Type::DGRAM),
            false => socket.is_listener().unwrap_or(false),
        };
        anyhow::ensure!(
            local.port() == group.addr.addr.port() && serving,
            "{what} is not {} {} (it is {local})",
            if group.addr.is_udp() {
                "bound to"
            } else {
                "listening on"
            },
            group.addr
        );
        Ok(())
    }
}

/// How a socket's place in the `sockets` map is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::supervisor) enum Join {
    /// Tagged before it listened (a socket ck opened): placed only.
    Tagged,
    /// Tagged and placed (an adopted socket, or maps loaded fresh).
    Fresh,
    /// Placed unless the pinned map holds it already (after an upgrade or a take-back).
    Resumed,
}

impl Group {
    /// Puts `socket` in slot `index`'s place in the `sockets` map (`how`), and attaches the
    /// program through it when it `founds` the group (the group's first socket: attachment
    /// belongs to the group, and a group founded anew has no program). Without the program,
    /// nothing to do. Both are tried; the first error is returned.
    pub(in crate::supervisor) fn join(
        &mut self,
        index: u32,
        socket: &Socket,
        how: Join,
        founds: bool,
    ) -> Result<(), BpfError> {
        let Some(bpf) = &mut self.bpf else {
            return Ok(());
        };
        let placed = match how {
            Join::Tagged => bpf.place(index, socket),
            Join::Fresh => bpf.insert(index, socket),
            Join::Resumed => bpf.insert_if_absent(index, socket),
        };
        if founds {
            bpf.attach(socket)?;
            tracing::info!(group = %self.name, slot = index, "BPF program attached to the group");
        }
        placed
    }
}
