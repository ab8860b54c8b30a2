//! `--boot-boost`: while a replacement of a worker that died boots, the rest of the fleet steps
//! back that many nice levels ([`crate::os::priority`]), so the survivors serving the whole
//! load meanwhile do not take the CPU the boot needs; once no replacement boots (ready, dead or
//! stopped), every worker ck stepped back gets the fleet's priority again. Checked after every
//! batch of lifecycle inputs: the spawn of a replacement, its readiness and its exit all come
//! through one.
use crate::os::priority;
use crate::supervisor::{
    fleet::boot::{Booting, Priority, decide},
    lifecycle::State,
    slots::SlotTable,
};

/// Steps every other worker back while some replacement is starting, brings back the ones
/// it stepped back once none is. One log line for each change, with the slot and pid. Reads
/// nothing from the kernel unless some worker's priority is to change.
pub(in crate::supervisor) fn apply(table: &mut SlotTable, boot_boost: u8) {
    let workers: Vec<Booting> = table
        .slots
        .values()
        .filter_map(|s| {
            let worker = s.worker.as_ref()?;
            Some(Booting {
                index: s.index,
                replacement_starting: worker.replacing
                    && matches!(s.life.state, State::Starting(_)),
                stepped_back: worker.stepped_back,
            })
        })
        .collect();
    let Some(Priority {
        back,
        booting,
        changing,
    }) = decide(&workers, boot_boost)
    else {
        return;
    };
    let (nice, reason) = match back {
        true => match priority::step_back_nice(boot_boost) {
            Some(nice) => (nice, "a replacement boots"),
            None => return,
        },
        false => (priority::own_nice(), "no replacement boots"),
    };
    for index in changing {
        let Some(worker) = table.worker_mut(index) else {
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
