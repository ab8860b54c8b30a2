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
    /// it stepped back once none is. One log line for each change, with the slot and pid.
    pub(super) fn settle_boot_priority(&mut self) {
        let booting: Vec<u32> = self
            .slots
            .values()
            .filter(|s| matches!(s.life.state, State::Starting(_)))
            .filter(|s| s.worker.as_ref().is_some_and(|w| w.replacing))
            .map(|s| s.index)
            .collect();
        let any_stepped_back = self
            .slots
            .values()
            .any(|s| s.worker.as_ref().is_some_and(|w| w.stepped_back.is_some()));
        if booting.is_empty() && !any_stepped_back {
            return;
        }
        let step_back = match booting.is_empty() {
            true => None,
            false => priority::step_back_nice(self.cfg.boot_boost),
        };
        let base = priority::own_nice();
        for slot in self.slots.values_mut() {
            if booting.contains(&slot.index) {
                continue;
            }
            let Some(worker) = slot.worker.as_mut() else {
                continue;
            };
            let (nice, reason) = match (step_back, worker.stepped_back) {
                (Some(nice), None) => (nice, "a replacement boots"),
                (None, Some(_)) => (base, "no replacement boots"),
                _ => continue,
            };
            let cgroup = worker.cgroup.as_ref().map(|c| c.dir());
            let threads = priority::set_worker_nice(worker.pid, cgroup, nice);
            worker.stepped_back = step_back;
            tracing::info!(
                slot = slot.index,
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
