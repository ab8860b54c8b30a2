//! ck's own process metrics (`process_*`, named as Prometheus client libraries name them), read
//! from `/proc/self`: resident and virtual memory, CPU time, open and maximum file
//! descriptors, threads and start time.
use std::fs;

use nix::unistd::{SysconfVar, sysconf};

/// ck's process as `/proc/self` shows it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcessStats {
    /// Resident memory.
    pub resident_bytes: u64,
    /// Virtual memory.
    pub virtual_bytes: u64,
    /// User and system CPU time.
    pub cpu_seconds: f64,
    /// Open file descriptors.
    pub open_fds: u64,
    /// The soft limit on open file descriptors, if any.
    pub max_fds: Option<u64>,
    /// Threads.
    pub threads: u64,
    /// Start time, in seconds since the Unix epoch.
    pub start_time_seconds: f64,
}

/// Reads ck's own process; None if `/proc/self/stat` cannot be read or parsed.
pub fn read() -> Option<ProcessStats> {
    let stat = fs::read_to_string("/proc/self/stat").ok()?;
    let ticks = sysconf(SysconfVar::CLK_TCK).ok().flatten()? as f64;
    let page = sysconf(SysconfVar::PAGE_SIZE).ok().flatten()? as u64;
    let boot = boot_time(&fs::read_to_string("/proc/stat").ok()?)?;
    let fields = StatFields::parse(&stat)?;
    Some(ProcessStats {
        resident_bytes: fields.rss_pages * page,
        virtual_bytes: fields.vsize,
        cpu_seconds: (fields.utime + fields.stime) as f64 / ticks,
        open_fds: fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64),
        max_fds: fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|l| max_open_files(&l)),
        threads: fields.threads,
        start_time_seconds: boot as f64 + fields.start_ticks as f64 / ticks,
    })
}

/// The fields of `/proc/PID/stat` used here.
#[derive(Debug, PartialEq, Eq)]
struct StatFields {
    utime: u64,
    stime: u64,
    threads: u64,
    start_ticks: u64,
    vsize: u64,
    rss_pages: u64,
}

impl StatFields {
    /// Parses `/proc/PID/stat` (see proc(5)); the command name may hold spaces and
    /// parentheses, so fields are counted from the last `)`.
    fn parse(stat: &str) -> Option<StatFields> {
        let after = &stat[stat.rfind(')')? + 1..];
        let fields: Vec<&str> = after.split_whitespace().collect();
        // `after` starts at field 3 (state): field N is at index N - 3.
        let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
        Some(StatFields {
            utime: field(14)?,
            stime: field(15)?,
            threads: field(20)?,
            start_ticks: field(22)?,
            vsize: field(23)?,
            rss_pages: field(24)?,
        })
    }
}

/// `btime` of `/proc/stat`: boot time in seconds since the epoch.
fn boot_time(proc_stat: &str) -> Option<u64> {
    proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime ")?.trim().parse().ok())
}

/// The soft limit of `Max open files` in `/proc/PID/limits` (None when unlimited).
fn max_open_files(limits: &str) -> Option<u64> {
    limits.lines().find_map(|l| {
        l.strip_prefix("Max open files")?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_files() {
        let stat = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 500 0 0 0 250 50 0 0 20 0 3 0 \
                    123456 10485760 640 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0";
        assert_eq!(
            StatFields::parse(stat),
            Some(StatFields {
                utime: 250,
                stime: 50,
                threads: 3,
                start_ticks: 123456,
                vsize: 10485760,
                rss_pages: 640,
            })
        );
        assert_eq!(
            boot_time("cpu 1 2 3\nbtime 1700000000\nprocesses 9\n"),
            Some(1700000000)
        );
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n";
        assert_eq!(max_open_files(limits), Some(1024));
    }

    #[test]
    fn reads_this_process() {
        let me = read().expect("/proc/self");
        assert!(me.resident_bytes > 0 && me.virtual_bytes >= me.resident_bytes);
        assert!(me.open_fds >= 3 && me.threads >= 1);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            me.start_time_seconds <= now + 1.0 && me.start_time_seconds > now - 86400.0 * 365.0
        );
    }
}
