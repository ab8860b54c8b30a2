//! `--boot-boost`: while a replacement of a worker that died boots, the rest of the fleet steps
//! back that many nice levels ([`crate::os::priority`]), so the survivors serving the whole
//! load meanwhile do not take the CPU the boot needs; once no replacement boots (ready, dead or
//! stopped), every worker ck stepped back gets the fleet's priority again. Checked after every
//! batch of lifecycle inputs: the spawn of a replacement, its readiness and its exit all come
//! through one.
use super::{Supervisor, lifecycle::State};
use crate::os::priority;

impl Supervisor {
    /// Steps every other worker back while some replacement is starting, brings back the ones
    /// it stepped back once none is. One log line for each change, with the slot and pid. Reads
    /// nothing from the kernel unless some worker's priority is to change.
    pub(super) fn settle_boot_priority(&mut self) {
        let booting: Vec<u32> = self
            .slots
            .values()
            .filter(|s| matches!(s.life.state, State::Starting(_)))
            .filter(|s| s.worker.as_ref().is_some_and(|w| w.replacing))
            .map(|s| s.index)
            .collect();
        let back = !booting.is_empty() && self.cfg.boot_boost != 0;
        let changing: Vec<u32> = self
            .slots
            .values()
            .filter(|s| !booting.contains(&s.index))
            .filter(|s| s.worker.as_ref().is_some_and(|w| w.stepped_back != back))
            .map(|s| s.index)
            .collect();
        if changing.is_empty() {
            return;
        }
        let (nice, reason) = match back {
            true => match priority::step_back_nice(self.cfg.boot_boost) {
                Some(nice) => (nice, "a replacement boots"),
                None => return,
            },
            false => (priority::own_nice(), "no replacement boots"),
        };
        for index in changing {
            let Some(worker) = self.slots.get_mut(&index).and_then(|s| s.worker.as_mut()) else {
                continue;
            };
            let cgroup = worker.cgroup.as_ref().map(|c| c.dir());
            let threads = priority::set_worker_nice(worker.pid, cgroup, nice);
            worker.stepped_back = back;
            tracing::info!(
                slot = index,
                pid = worker.pid,
                nice,
                threads,
                reason,
                booting = ?booting,
                "worker priority"
            );
        }
    }
}
