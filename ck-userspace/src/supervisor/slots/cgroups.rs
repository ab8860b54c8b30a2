//! Worker cgroups at run time: the instance's cgroup at start (required by `--adopt`, else
//! best effort), a cgroup per worker at spawn, the tree of an exited worker killed and its
//! cgroup removed once empty, and each worker's CPU time and memory for `ck status`.
use crate::supervisor::slots::SlotTable;
use crate::{
    os::cgroup::{InstanceCgroup, Usage, WorkerCgroup},
    settings::run_config::RunConfig,
};

/// Creates the instance's cgroup. Without `--adopt` a host without usable cgroup2 only costs
/// the per-worker extras, so it is a warning; with it, an error.
pub(in crate::supervisor) fn create(cfg: &RunConfig) -> anyhow::Result<Option<InstanceCgroup>> {
    let cgroup = match InstanceCgroup::create(&cfg.name, cfg.worker_memory_max.is_some()) {
        Ok(cgroup) => cgroup,
        Err(e) if cfg.adopt => return Err(e.into()),
        Err(e) => {
            tracing::warn!(
                "{e}; workers run without a cgroup of their own (no whole-tree kill, no \
                 per-worker CPU and memory)"
            );
            return Ok(None);
        }
    };
    if let Some(max) = cfg.worker_memory_max
        && !cgroup.memory_controller()
    {
        tracing::warn!(
            memory_max = max,
            "--worker-memory-max is not applied: this host's cgroup2 has no memory controller \
             (it is held by cgroup v1, or ck's cgroup cannot delegate it); workers run without \
             a memory limit"
        );
    }
    Ok(Some(cgroup))
}

impl SlotTable {
    /// A cgroup for worker `id`, if the instance has cgroups.
    /// (`memory_max`: `--worker-memory-max`).
    pub(in crate::supervisor) fn worker_cgroup(
        &self,
        id: u64,
        memory_max: Option<u64>,
    ) -> anyhow::Result<Option<WorkerCgroup>> {
        let Some(cgroups) = &self.cgroups else {
            return Ok(None);
        };
        Ok(Some(cgroups.worker(id, memory_max)?))
    }

    /// The root of a worker's tree exited: kill what it left (so no grandchild holds its
    /// sockets or outlives it) and remove the cgroup once it is empty (the caller has the
    /// groups forget it first: `Groups::unbind_cgroup`).
    pub(in crate::supervisor) fn bury_cgroup(&mut self, cgroup: WorkerCgroup) {
        if let Err(e) = cgroup.kill() {
            tracing::debug!(cgroup = %cgroup.dir().display(), "cgroup.kill: {e}");
        }
        if !cgroup.try_remove() {
            self.dead_cgroups.push(cgroup);
        }
    }

    /// Removes the cgroups of exited workers that are empty by now.
    pub(in crate::supervisor) fn reap_cgroups(&mut self) {
        self.dead_cgroups.retain(|cgroup| !cgroup.try_remove());
    }

    /// A slot's worker's CPU time and memory, if it has a cgroup.
    pub(in crate::supervisor) fn usage(&self, index: u32) -> Option<Usage> {
        let worker = self.slots.get(&index)?.worker.as_ref()?;
        worker.cgroup.as_ref().map(WorkerCgroup::usage)
    }

    /// What `ck status` says of the memory limit (`--worker-memory-max`).
    pub(in crate::supervisor) fn memory_limit(&self, memory_max: Option<u64>) -> Option<String> {
        let max = memory_max?;
        Some(match &self.cgroups {
            Some(c) if c.memory_controller() => format!("{max} bytes (memory.max)"),
            _ => format!("{max} bytes NOT applied: no cgroup2 memory controller on this host"),
        })
    }
}
