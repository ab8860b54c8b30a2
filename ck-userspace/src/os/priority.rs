//! CPU priority (nice) of a fleet while a replacement boots. When workers die, the survivors
//! serve the whole load while the replacements boot on the same CPUs; on a small machine the
//! boot then takes as long as the survivors leave it. While a replacement of a worker that died
//! boots, the rest of the fleet steps back some nice levels (`--boot-boost`), every thread of
//! each worker's cgroup, and gets the fleet's priority back once no replacement boots. The
//! booting worker itself stays at ck's priority: above the rest of the fleet, never above ck,
//! the kernel's threads at nice 0 (`ksoftirqd`, which processes the host's packets when
//! softirqs back up) or the host's other processes, as raising the boot itself would put it.
//!
//! Stepping back is allowed for processes of ck's own user; coming back needs `CAP_SYS_NICE`
//! (or an `RLIMIT_NICE` that allows it), as does either for another user's (`--user`).
use std::{io, path::Path, sync::Once};

use super::capabilities::{self, Cap};

/// Lowering a nice value (the fleet's priority back), and any change to another user's.
pub const SYS_NICE: Cap = Cap {
    name: "CAP_SYS_NICE",
    bit: 23,
};

/// The nice value of the calling thread (ck's main thread: the fleet's priority).
pub fn own_nice() -> i32 {
    nice_of(0).unwrap_or(0)
}

/// The nice value of thread (or process) `tid`.
pub fn nice_of(tid: u32) -> io::Result<i32> {
    // getpriority returns -1 for nice -1 as for an error: errno tells them apart.
    // SAFETY: sets this thread's errno, then a getpriority with integer arguments.
    unsafe {
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, tid);
        match *libc::__errno_location() {
            0 => Ok(nice),
            errno => Err(io::Error::from_raw_os_error(errno)),
        }
    }
}

fn set_nice(tid: u32, nice: i32) -> io::Result<()> {
    // SAFETY: setpriority with integer arguments.
    match unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, nice) } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// The nice value the rest of the fleet steps back to, `boost` levels below ck's (at most 19),
/// if ck may bring it back (`CAP_SYS_NICE`, or `RLIMIT_NICE` high enough). Says once, in one
/// log line, when it may not.
pub fn step_back_nice(boost: u8) -> Option<i32> {
    if boost == 0 {
        return None;
    }
    let base = own_nice();
    let nice = (base + i32::from(boost)).min(19);
    if nice <= base {
        return None;
    }
    let capable = capabilities::effective().is_some_and(|set| set & (1 << SYS_NICE.bit) != 0);
    if capable || rlimit_allows(base) {
        return Some(nice);
    }
    static SAID: Once = Once::new();
    SAID.call_once(|| {
        tracing::info!(
            "the fleet does not step back while a replacement boots: bringing it back needs {} \
             (or an RLIMIT_NICE of {}); --boot-boost 0 says you do not want it",
            SYS_NICE.name,
            20 - base
        )
    });
    None
}

/// Whether `RLIMIT_NICE` lets this process take nice value `nice` (its limit is `20 - nice`).
fn rlimit_allows(nice: i32) -> bool {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NICE, &mut limit) } != 0 {
        return false;
    }
    limit.rlim_cur == libc::RLIM_INFINITY || limit.rlim_cur as i64 >= i64::from(20 - nice)
}

/// Gives every thread of worker `pid` nice value `nice`: the threads of its cgroup
/// (`cgroup.threads`: its whole tree), else of its process. Threads started meanwhile by a
/// thread not yet set inherit the old value, so it goes over them again until none is left (at
/// most 3 passes). Returns how many threads it set.
pub fn set_worker_nice(pid: u32, cgroup: Option<&Path>, nice: i32) -> usize {
    let mut set = 0;
    for _ in 0..3 {
        let threads = match cgroup {
            Some(dir) => threads_of_cgroup(dir),
            None => threads_of_process(pid),
        };
        let differing: Vec<u32> = threads
            .into_iter()
            .filter(|tid| nice_of(*tid).is_ok_and(|n| n != nice))
            .collect();
        if differing.is_empty() {
            break;
        }
        // A thread that exited meanwhile (ESRCH) needs nothing.
        set += differing
            .iter()
            .filter(|tid| set_nice(**tid, nice).is_ok())
            .count();
    }
    set
}

/// The thread ids in cgroup `dir` (`cgroup.threads` lists every thread of every process in it).
fn threads_of_cgroup(dir: &Path) -> Vec<u32> {
    std::fs::read_to_string(dir.join("cgroup.threads"))
        .map(|text| text.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// The thread ids of process `pid` (`/proc/PID/task`).
fn threads_of_process(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|dir| {
            dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process stepped back and brought back has the value on every thread, as the kernel
    /// reports it.
    #[test]
    fn a_worker_steps_back_and_comes_back_on_every_thread() {
        let base = own_nice();
        let Some(nice) = step_back_nice(5) else {
            // Without CAP_SYS_NICE nothing steps back.
            assert!(
                capabilities::effective().is_some_and(|s| s & (1 << SYS_NICE.bit) == 0),
                "step_back_nice refused though ck is capable"
            );
            return;
        };
        assert_eq!(nice, (base + 5).min(19));
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        assert_eq!(set_worker_nice(child.id(), None, nice), 1);
        assert_eq!(nice_of(child.id()).unwrap(), nice);
        assert_eq!(
            set_worker_nice(child.id(), None, nice),
            0,
            "nothing left to set"
        );
        assert_eq!(set_worker_nice(child.id(), None, base), 1);
        assert_eq!(nice_of(child.id()).unwrap(), base);
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn no_boost_asked_is_none() {
        assert_eq!(step_back_nice(0), None);
    }
}
