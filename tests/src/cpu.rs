//! A process's own CPU time, read from the kernel: per thread from
//! `/proc/PID/task/TID/schedstat` (nanoseconds on a CPU, and how many times it was put on
//! one: its wake-ups), and for the whole process from
//! `/proc/PID/stat` (`utime` + `stime`, dead threads included, in clock ticks of 10 ms). The
//! idle check, the promise suite and `bench supervisor-cpu` read ck's cost with these.
use std::collections::BTreeMap;
use std::fs;
use std::time::Duration;

/// The run time of every thread of a process at one moment.
#[derive(Clone, Debug, Default)]
pub struct CpuSnapshot {
    /// Thread id -> (nanoseconds on a CPU, times put on a CPU) so far.
    threads: BTreeMap<u32, (u64, u64)>,
}

impl CpuSnapshot {
    /// Reads every thread of `pid` (None: the process is gone).
    pub fn take(pid: u32) -> Option<CpuSnapshot> {
        let dir = format!("/proc/{pid}/task");
        let mut threads = BTreeMap::new();
        for entry in fs::read_dir(&dir).ok()? {
            let Ok(entry) = entry else { continue };
            let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse().ok()) else {
                continue;
            };
            // A thread that exited in between has no file any more.
            let Ok(text) = fs::read_to_string(entry.path().join("schedstat")) else {
                continue;
            };
            let mut fields = text.split_whitespace().map(|f| f.parse().ok());
            if let (Some(Some(ns)), Some(_), Some(Some(runs))) =
                (fields.next(), fields.next(), fields.next())
            {
                threads.insert(tid, (ns, runs));
            }
        }
        Some(CpuSnapshot { threads })
    }

    /// CPU time spent since `earlier`: each thread's growth, a thread started since counted
    /// whole. (A thread that ran and exited in between is missed: `ticks_cpu` counts it, in
    /// 10 ms steps.)
    pub fn since(&self, earlier: &CpuSnapshot) -> Duration {
        Duration::from_nanos(self.growth(earlier, |(ns, _)| ns))
    }

    /// Times the threads were put on a CPU since `earlier` (their wake-ups), counted as
    /// [`CpuSnapshot::since`] counts time.
    pub fn wakeups_since(&self, earlier: &CpuSnapshot) -> u64 {
        self.growth(earlier, |(_, runs)| runs)
    }

    fn growth(&self, earlier: &CpuSnapshot, field: fn((u64, u64)) -> u64) -> u64 {
        self.threads
            .iter()
            .map(|(tid, now)| {
                let then = earlier.threads.get(tid).map_or(0, |t| field(*t));
                field(*now).saturating_sub(then)
            })
            .sum()
    }
}

/// What a process spent over a window.
#[derive(Clone, Copy, Debug)]
pub struct Spent {
    /// CPU time (per-thread schedstat).
    pub cpu: Duration,
    /// Times its threads were put on a CPU.
    pub wakeups: u64,
}

/// What `pid` spends over `window`, or None if it exited.
pub fn spent_over(pid: u32, window: Duration) -> Option<Spent> {
    let before = CpuSnapshot::take(pid)?;
    std::thread::sleep(window);
    let after = CpuSnapshot::take(pid)?;
    Some(Spent {
        cpu: after.since(&before),
        wakeups: after.wakeups_since(&before),
    })
}

/// Clock ticks per second (`utime`'s unit).
pub fn clock_ticks() -> u64 {
    // SAFETY: sysconf reads a constant of the system; no memory is involved.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as u64 } else { 100 }
}

/// `utime` + `stime` of `pid` (all its threads, dead ones included; not its children), or None
/// if it is gone.
pub fn ticks_cpu(pid: u32) -> Option<Duration> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ticks = utime_stime(&stat)?;
    Some(Duration::from_secs_f64(ticks as f64 / clock_ticks() as f64))
}

/// `utime` + `stime` (fields 14 and 15) of a `/proc/PID/stat` line; the command name (field 2)
/// may hold spaces and parentheses, so fields are counted after its last `)`.
fn utime_stime(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state).
    let utime: u64 = fields.get(14 - 3)?.parse().ok()?;
    let stime: u64 = fields.get(15 - 3)?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utime_and_stime_are_read_after_the_command_name() {
        let stat = "42 (ck (x) y) S 1 42 42 0 -1 4194560 100 0 0 0 7 5 0 0 20 0 3 0";
        assert_eq!(utime_stime(stat), Some(12));
    }

    #[test]
    fn a_busy_thread_is_counted() {
        let pid = std::process::id();
        assert!(ticks_cpu(pid).is_some());
        let before = CpuSnapshot::take(pid).unwrap();
        // Spin until this thread has had 50 ms of CPU (not of wall time: on a loaded machine
        // the thread may wait for a CPU most of that time).
        let cpu = || {
            nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
                .map(Duration::from)
                .unwrap()
        };
        let start = cpu();
        while cpu() - start < Duration::from_millis(50) {
            std::hint::black_box(0u64);
        }
        // A spinning thread on a quiet machine may keep its CPU throughout (no wake-up to
        // count): sleeping once takes it off and puts it back on, one wake-up at least.
        std::thread::sleep(Duration::from_millis(2));
        let after = CpuSnapshot::take(pid).unwrap();
        let busy = after.since(&before);
        assert!(busy >= Duration::from_millis(20), "{busy:?}");
        assert!(after.wakeups_since(&before) >= 1);
    }
}
