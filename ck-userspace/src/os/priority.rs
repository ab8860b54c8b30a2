//! CPU priority (nice) of a booting replacement. When workers die, the survivors serve the whole
//! load while the replacements boot on the same CPUs; on a small machine the boot then takes
//! as long as the survivors leave it. A replacement boots some nice levels above the fleet
//! (`--boot-boost`), set in the child before it execs so that every thread and process it
//! starts inherits it, and gets the fleet's priority back, on every one of its threads, when it
//! becomes ready.
//!
//! Raising a priority needs `CAP_SYS_NICE` (or an `RLIMIT_NICE` that allows it); lowering it
//! back is always allowed to root and to ck for its own user's processes.
use std::{io, path::Path, sync::Once};

use super::capabilities::{self, Cap};

/// Raising a process's priority above its parent's.
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

/// The nice value a replacement boots at, `boost` levels above the fleet's, if ck may give it
/// that (`CAP_SYS_NICE`, or `RLIMIT_NICE` high enough). Says once, in one log line, when it
/// may not.
pub fn boot_nice(boost: u8) -> Option<i32> {
    if boost == 0 {
        return None;
    }
    let base = own_nice();
    let nice = (base - i32::from(boost)).max(-20);
    if nice >= base {
        return None;
    }
    let capable = capabilities::effective().is_some_and(|set| set & (1 << SYS_NICE.bit) != 0);
    if capable || rlimit_allows(nice) {
        return Some(nice);
    }
    static SAID: Once = Once::new();
    SAID.call_once(|| {
        tracing::info!(
            "replacements boot at the fleet's CPU priority: raising it needs {} (or an \
             RLIMIT_NICE of {}); --boot-boost 0 says you do not want it",
            SYS_NICE.name,
            20 - nice
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

/// In a child before it execs (a raw system call): takes nice value `nice`. A refusal leaves
/// it at the fleet's priority (the parent checked beforehand, and a boot must not fail for it).
pub fn boost_in_child(nice: i32) {
    let _ = set_nice(0, nice);
}

/// Gives every thread of a ready worker the fleet's nice value `base` back: the threads of its
/// cgroup (`cgroup.threads`: its whole tree), else of its process. Threads started meanwhile by
/// a thread not yet reset inherit the boost, so it goes over them again until none is left
/// (at most 3 passes). Returns how many threads it reset.
pub fn end_boost(pid: u32, cgroup: Option<&Path>, base: i32) -> usize {
    let mut reset = 0;
    for _ in 0..3 {
        let threads = match cgroup {
            Some(dir) => threads_of_cgroup(dir),
            None => threads_of_process(pid),
        };
        let boosted: Vec<u32> = threads
            .into_iter()
            .filter(|tid| nice_of(*tid).is_ok_and(|nice| nice != base))
            .collect();
        if boosted.is_empty() {
            break;
        }
        // A thread that exited meanwhile (ESRCH) needs nothing.
        reset += boosted
            .iter()
            .filter(|tid| set_nice(**tid, base).is_ok())
            .count();
    }
    reset
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

    /// A boosted child's threads (a shell's one) all get the base back, as `/proc` shows.
    #[test]
    fn a_boosted_process_gets_the_base_back_on_every_thread() {
        let base = own_nice();
        let Some(nice) = boot_nice(5) else {
            // Without CAP_SYS_NICE nothing is raised, and nothing is to reset.
            assert!(
                capabilities::effective().is_some_and(|s| s & (1 << SYS_NICE.bit) == 0),
                "boot_nice refused though ck is capable"
            );
            return;
        };
        assert_eq!(nice, (base - 5).max(-20));
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        set_nice(child.id(), nice).unwrap();
        assert_eq!(nice_of(child.id()).unwrap(), nice);
        assert_eq!(end_boost(child.id(), None, base), 1);
        assert_eq!(nice_of(child.id()).unwrap(), base);
        assert_eq!(
            end_boost(child.id(), None, base),
            0,
            "nothing left to reset"
        );
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn no_boost_asked_is_none() {
        assert_eq!(boot_nice(0), None);
    }
}
