//! `--adopt` in an instance an earlier image began with tags (see `conn_hook`; a new one counts
//! on the workers' cgroups, `worker_cgroups`): a worker's own listening socket is tagged for
//! the kernel's connection counts
//! (`conn_tags`, see `conns`) when it binds the group's port, by the group's
//! `ck_tag_bind4`/`ck_tag_bind6` program on the instance's cgroup: the slot comes from the
//! worker's cgroup (`bind_slots`, written before the worker starts). A socket is then counted
//! from its first connection, also those it takes before the supervisor adopts it (when it
//! founds its group, the kernel hashes every connection to it until then).
//!
//! The link is ck's (not pinned): across `ck upgrade`, or while a dead ck is away, a worker
//! that binds anew is tagged when it is adopted, as before this hook.
use std::{
    collections::BTreeMap,
    fs::File,
    net::SocketAddr,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
};

use anyhow::Context as _;
use aya::{
    Ebpf,
    maps::{Array, HashMap, MapData},
    programs::{CgroupAttachMode, CgroupSockAddr, links::FdLink},
};
use ck_common::BindGroup;

/// One group's bind tagger, attached.
pub struct BindTagger {
    /// Worker cgroup id -> slot.
    slots: HashMap<MapData, u64, u32>,
    /// The ids written, by cgroup directory (read when written: gone with the directory).
    ids: BTreeMap<PathBuf, u64>,
    /// Keep the programs attached.
    _links: Vec<FdLink>,
}

impl BindTagger {
    /// Loads the tagger from `ebpf` (the group's object: its `conn_tags` is the group's),
    /// writes `addr`'s port and family to `bind_group`, and attaches it to the cgroup `dir`:
    /// for binds of `addr`'s family, or (`any_family`: no other group of the instance has the
    /// port) of either.
    pub fn attach(
        ebpf: &mut Ebpf,
        dir: &Path,
        addr: SocketAddr,
        any_family: bool,
    ) -> anyhow::Result<BindTagger> {
        let (program, family) = match addr {
            SocketAddr::V4(_) => ("ck_tag_bind4", libc::AF_INET),
            SocketAddr::V6(_) => ("ck_tag_bind6", libc::AF_INET6),
        };
        let programs: &[&str] = match any_family {
            true => &["ck_tag_bind4", "ck_tag_bind6"],
            false => &[program],
        };
        let family = if any_family { 0 } else { family };
        let mut group: Array<MapData, BindGroup> = super::object::take(ebpf, "bind_group")?;
        group
            .set(
                0,
                BindGroup {
                    port: addr.port(),
                    family: family as u16,
                },
                0,
            )
            .context("writing bind_group")?;
        let slots = super::object::take(ebpf, "bind_slots")?;
        let cgroup = File::open(dir).with_context(|| format!("opening {}", dir.display()))?;
        let mut links = Vec::new();
        for name in programs {
            let program: &mut CgroupSockAddr = ebpf
                .program_mut(name)
                .with_context(|| format!("program {name} missing"))?
                .try_into()
                .context("not a cgroup/bind program")?;
            program
                .load()
                .with_context(|| format!("the kernel refused {name}"))?;
            let id = program
                // Through a bpf link, which takes no mode flags: links of one attach type
                // always run side by side (the --adopt hooks' bind programs too).
                .attach(&cgroup, CgroupAttachMode::Single)
                .context("attaching to the instance's cgroup")?;
            links.push(
                program
                    .take_link(id)
                    .context("taking the link")?
                    .try_into()
                    .context("the kernel made no bpf link (Linux 5.7+)")?,
            );
        }
        Ok(BindTagger {
            slots,
            ids: BTreeMap::new(),
            _links: links,
        })
    }

    /// Sockets the processes of the cgroup `dir` bind to the group's port count for `slot`.
    pub fn add(&mut self, dir: &Path, slot: u32) -> anyhow::Result<()> {
        let id = cgroup_id(dir)?;
        self.slots
            .insert(id, slot, 0)
            .context("writing bind_slots")?;
        self.ids.insert(dir.to_path_buf(), id);
        Ok(())
    }

    /// The cgroup `dir` is going: its entry leaves.
    pub fn remove(&mut self, dir: &Path) {
        if let Some(id) = self.ids.remove(dir) {
            let _ = self.slots.remove(&id);
        }
    }
}

/// A cgroup v2 directory's id, as `bpf_get_current_cgroup_id` returns it: its inode number.
fn cgroup_id(dir: &Path) -> anyhow::Result<u64> {
    Ok(std::fs::metadata(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .ino())
}
