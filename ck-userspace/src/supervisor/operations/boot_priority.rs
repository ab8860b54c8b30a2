//! `--boot-boost`: while a replacement of a worker that died boots, the rest of the fleet steps
//! back that many nice levels ([`crate::os::priority`]), so the survivors serving the whole
//! load meanwhile do not take the CPU the boot needs; once no replacement boots (ready, dead or
//! stopped), every worker ck stepped back gets the fleet's priority again. Checked after every
//! batch of lifecycle inputs: the spawn of a replacement, its readiness and its exit all come
//! through one. The rule ([`decide`]) is pure; [`apply`] reads the slots and acts on it.
use crate::os::priority;
use crate::supervisor::{lifecycle::State, slots::SlotTable};

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

/// A worker as boot priority sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Booting {
    /// Its slot.
    pub index: u32,
    /// A replacement of a worker that died, still starting.
    pub replacement_starting: bool,
    /// ck stepped it back.
    pub stepped_back: bool,
}

/// What boot priority changes now.
#[derive(Debug, PartialEq, Eq)]
pub struct Priority {
    /// Whether the workers that change step back (else they come back).
    pub back: bool,
    /// The replacements booting.
    pub booting: Vec<u32>,
    /// The workers whose priority changes.
    pub changing: Vec<u32>,
}

/// The change boot priority makes for `workers` (`boost`: `--boot-boost`, 0 when off); None
/// when nothing changes.
pub fn decide(workers: &[Booting], boost: u8) -> Option<Priority> {
    let booting: Vec<u32> = workers
        .iter()
        .filter(|w| w.replacement_starting)
        .map(|w| w.index)
        .collect();
    let back = !booting.is_empty() && boost != 0;
    let changing: Vec<u32> = workers
        .iter()
        .filter(|w| !w.replacement_starting && w.stepped_back != back)
        .map(|w| w.index)
        .collect();
    (!changing.is_empty()).then_some(Priority {
        back,
        booting,
        changing,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_priority_steps_the_others_back_while_a_replacement_boots() {
        let w = |index, replacement_starting, stepped_back| Booting {
            index,
            replacement_starting,
            stepped_back,
        };
        let booting = [w(0, false, false), w(1, true, false), w(2, false, true)];
        let p = decide(&booting, 5).expect("slot 0 steps back");
        assert_eq!((p.back, p.booting, p.changing), (true, vec![1], vec![0]));
        // Off (--boot-boost 0): nothing steps back, and what was back comes back.
        let p = decide(&booting, 0).expect("slot 2 comes back");
        assert_eq!((p.back, p.changing), (false, vec![2]));
        let done = [w(0, false, true), w(1, false, false)];
        assert_eq!(decide(&done, 5).expect("slot 0 back").changing, vec![0]);
        assert_eq!(decide(&[w(0, false, false)], 5), None);
    }
}
