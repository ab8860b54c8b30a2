//! The connection counter on the slots' cgroups (`conn_hook::ConnHook::Slots`): each slot's
//! listening sockets are created in a cgroup of their own (`os::cgroup::slot_place`), and a
//! connection is born in its listener's cgroup. `ck_conns_ops` is attached to each slot's cgroup
//! as its first socket is made, and that cgroup's value in the `slot_cgroups` cgroup storage
//! names the slot, so the program knows a connection's slot with no tag on the socket (a tag
//! is a socket storage the kernel copies into every connection and frees at its close).
//!
//! Each attachment's link is pinned beside the maps (`conns_ops_s<slot>`), so counting goes on
//! while ck execs a new image (`ck upgrade`) or is dead (`--survive-supervisor`). A new image
//! attaches its own program to a slot's cgroup, then replaces the pin: both run for a moment,
//! which a connection's mark (its `BPF_SOCK_OPS_STATE_CB_FLAG`) makes harmless.
use std::{
    collections::BTreeSet,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
};

use anyhow::Context as _;
use aya::{Ebpf, maps::MapData};
use ck_common::SlotCgroup;

use super::cgroup_attach::{take_storage, write_slot};
use super::conn_hook::{SLOT_PIN_PREFIX, attach_sock_ops, pin_replacing, sock_ops_program};

/// One group's counter on its slots' cgroups.
pub struct SlotCgroups {
    /// The `slot_cgroups` cgroup storage.
    storage: MapData,
    /// The group's `sockets` cgroup, whose children are its slots'.
    sockets: PathBuf,
    /// The group's name, part of each slot cgroup's.
    group: String,
    /// The group's pin directory.
    pin_dir: PathBuf,
    /// The slots whose cgroup this image attached to.
    attached: BTreeSet<u32>,
}

impl SlotCgroups {
    /// Loads `ck_conns_ops` from `ebpf` (attached later, one slot at a time: [`Self::count`])
    /// and takes the storage map.
    pub fn start(
        ebpf: &mut Ebpf,
        pin_dir: &Path,
        sockets: &Path,
        group: &str,
    ) -> anyhow::Result<SlotCgroups> {
        sock_ops_program(ebpf)?
            .load()
            .context("the kernel refused the sock_ops program")?;
        let storage = take_storage(ebpf)?;
        Ok(SlotCgroups {
            storage,
            sockets: sockets.to_path_buf(),
            group: group.to_string(),
            pin_dir: pin_dir.to_path_buf(),
            attached: BTreeSet::new(),
        })
    }

    /// The cgroup of `slot`'s sockets.
    fn dir(&self, slot: u32) -> PathBuf {
        self.sockets
            .join(crate::os::cgroup::slot_place(&self.group, slot))
    }

    /// Makes the kernel count the connections of `slot`'s sockets (made in its cgroup): the
    /// program attached there, once per image, its link pinned (replacing an earlier image's),
    /// and the slot written in the cgroup's storage.
    pub fn count(&mut self, ebpf: &mut Ebpf, slot: u32) -> anyhow::Result<()> {
        if self.attached.contains(&slot) {
            return Ok(());
        }
        let dir = self.dir(slot);
        let link = attach_sock_ops(sock_ops_program(ebpf)?, &dir)?;
        // The cgroup's storage exists once a program using it is attached there.
        let id = std::fs::metadata(&dir)
            .with_context(|| format!("reading the id of {}", dir.display()))?
            .ino();
        let value = SlotCgroup {
            slot_plus_one: slot + 1,
            ..SlotCgroup::default()
        };
        write_slot(&self.storage, id, value)
            .with_context(|| format!("writing slot {slot} in the storage of {}", dir.display()))?;
        pin_replacing(
            link,
            &self.pin_dir.join(format!("{SLOT_PIN_PREFIX}{slot}")),
            true,
        )?;
        self.attached.insert(slot);
        Ok(())
    }
}
