//! `--adopt`: the connection counter on the workers' cgroups (`conn_hook::ConnHook::Workers`).
//! A worker binds its own listening socket, in its own cgroup (`w<id>` under the instance's),
//! and a connection is born in its listener's cgroup. Before the worker starts, `ck_conns_ops`
//! is attached to its cgroup, and that cgroup's value in the `slot_cgroups` cgroup storage
//! names the worker's slot and the group's port and family: the program counts that port's
//! connections for the slot (a worker may listen on other ports, and each group's program is
//! attached there), with no tag on the socket.
//!
//! Each attachment is made without a link (`cgroup_attach::attach_sock_ops_for_life`): it
//! lasts as long as the worker's cgroup, which the kernel keeps after ck removes it while a
//! connection created there is open, so a connection that closes after its worker exited still
//! leaves the count. The program itself is pinned beside the maps (`conns_ops_workers`), which
//! says that the group counts so (to `ck status`, and to a new image after `ck upgrade`, which
//! attaches its own program to the running workers' cgroups too: both run there until those
//! workers go, which a connection's mark, its `BPF_SOCK_OPS_STATE_CB_FLAG`, makes harmless).
use std::{
    collections::BTreeMap,
    net::SocketAddr,
    os::fd::AsFd as _,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
};

use anyhow::Context as _;
use aya::{Ebpf, maps::MapData};
use ck_common::SlotCgroup;

use super::cgroup_attach::{attach_sock_ops_for_life, take_storage, write_slot};
use super::conn_hook::{WORKERS_PIN, remove_pin, sock_ops_program};

/// One group's counter on its workers' cgroups.
pub struct WorkerCgroups {
    /// The `slot_cgroups` cgroup storage.
    storage: MapData,
    /// The group's port and family (0: either) in each worker cgroup's value, once known.
    port: Option<(u16, u16)>,
    /// The worker cgroups this image attached to: directory -> id.
    attached: BTreeMap<PathBuf, u64>,
}

impl WorkerCgroups {
    /// Loads `ck_conns_ops` from `ebpf` and pins it in `pin_dir`, replacing an earlier image's
    /// pin (attached later, one worker at a time: [`Self::count`]), and takes the storage map.
    pub fn start(ebpf: &mut Ebpf, pin_dir: &Path) -> anyhow::Result<WorkerCgroups> {
        let program = sock_ops_program(ebpf)?;
        program
            .load()
            .context("the kernel refused the sock_ops program")?;
        let pin = pin_dir.join(WORKERS_PIN);
        remove_pin(&pin)?;
        program
            .pin(&pin)
            .with_context(|| format!("pinning the program at {}", pin.display()))?;
        Ok(WorkerCgroups {
            storage: take_storage(ebpf)?,
            port: None,
            attached: BTreeMap::new(),
        })
    }

    /// The group listens on `addr`: connections to its port (of its family, unless
    /// `any_family`: no other group of the instance has the port) count.
    pub fn watch(&mut self, addr: SocketAddr, any_family: bool) {
        let family = match (any_family, addr) {
            (true, _) => 0,
            (false, SocketAddr::V4(_)) => libc::AF_INET,
            (false, SocketAddr::V6(_)) => libc::AF_INET6,
        };
        self.port = Some((addr.port(), family as u16));
    }

    /// Makes the kernel count, for `slot`, the connections of the sockets that the processes
    /// of the worker cgroup `dir` listen on the group's port with.
    pub fn count(&mut self, ebpf: &mut Ebpf, dir: &Path, slot: u32) -> anyhow::Result<()> {
        let (port, family) = self
            .port
            .context("the group's port is not known yet (a worker cgroup before the group)")?;
        let cgroup =
            std::fs::File::open(dir).with_context(|| format!("opening {}", dir.display()))?;
        let program = sock_ops_program(ebpf)?;
        let fd = program.fd().context("the sock_ops program is not loaded")?;
        match attach_sock_ops_for_life(fd.as_fd(), cgroup.as_fd()) {
            Err(e) if e.raw_os_error() != Some(libc::EEXIST) => {
                return Err(e).with_context(|| format!("attaching sock_ops to {}", dir.display()));
            }
            _ => {}
        }
        let id = cgroup
            .metadata()
            .with_context(|| format!("reading the id of {}", dir.display()))?
            .ino();
        let value = SlotCgroup {
            slot_plus_one: slot + 1,
            port,
            family,
        };
        write_slot(&self.storage, id, value)
            .with_context(|| format!("writing slot {slot} in the storage of {}", dir.display()))?;
        self.attached.insert(dir.to_path_buf(), id);
        Ok(())
    }

    /// The worker cgroup `dir` is going. Its attachment stays, for its open connections.
    pub fn forget(&mut self, dir: &Path) {
        self.attached.remove(dir);
    }

    /// Whether the cgroup of id `id` is a worker's this image counts in.
    pub fn counts_in(&self, id: u64) -> bool {
        self.attached.values().any(|attached| *attached == id)
    }
}
