//! Default worker count: `WEB_CONCURRENCY`, else the CPUs this process may actually use
//! (cgroup v2 `cpu.max`, cgroup v1 CFS quota, CPU affinity), at least 1.
use std::{fs, path::PathBuf};

/// The worker count to use when `--workers` is not given.
pub fn default_workers() -> u32 {
    if let Some(n) = std::env::var("WEB_CONCURRENCY")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .filter(|n| *n > 0)
    {
        return n;
    }
    usable_cpus()
}

/// CPUs this process may use: the smallest of its affinity mask and its cgroup CPU quota.
pub fn usable_cpus() -> u32 {
    let affinity = affinity_cpus().unwrap_or(1);
    let quota = cgroup_quota_cpus();
    let n = match quota {
        Some(q) => affinity.min(q),
        None => affinity,
    };
    n.max(1)
}

fn affinity_cpus() -> Option<u32> {
    let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).ok()?;
    let n = (0..nix::sched::CpuSet::count())
        .filter(|cpu| set.is_set(*cpu).unwrap_or(false))
        .count();
    Some(n as u32)
}

fn cgroup_quota_cpus() -> Option<u32> {
    let cgroups = fs::read_to_string("/proc/self/cgroup").ok()?;
    let mounts = fs::read_to_string("/proc/self/mounts").ok()?;
    if let Some(dir) = cgroup_dir(&cgroups, &mounts, CgroupVersion::V2)
        && let Ok(text) = fs::read_to_string(dir.join("cpu.max"))
        && let Some(n) = parse_cpu_max(&text)
    {
        return Some(n);
    }
    let dir = cgroup_dir(&cgroups, &mounts, CgroupVersion::V1Cpu)?;
    let quota = fs::read_to_string(dir.join("cpu.cfs_quota_us")).ok()?;
    let period = fs::read_to_string(dir.join("cpu.cfs_period_us")).ok()?;
    cpus_from_quota(quota.trim().parse().ok()?, period.trim().parse().ok()?)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum CgroupVersion {
    V2,
    V1Cpu,
}

/// Finds this process's cgroup directory from `/proc/self/cgroup` and `/proc/self/mounts`.
fn cgroup_dir(cgroups: &str, mounts: &str, version: CgroupVersion) -> Option<PathBuf> {
    let rel = cgroups.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let wanted = match version {
            CgroupVersion::V2 => id == "0" && controllers.is_empty(),
            CgroupVersion::V1Cpu => controllers.split(',').any(|c| c == "cpu"),
        };
        wanted.then(|| path.to_string())
    })?;
    let mount = mounts.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (point, fstype, opts) = (fields.get(1)?, fields.get(2)?, fields.get(3)?);
        let wanted = match version {
            CgroupVersion::V2 => *fstype == "cgroup2",
            CgroupVersion::V1Cpu => *fstype == "cgroup" && opts.split(',').any(|o| o == "cpu"),
        };
        wanted.then(|| point.to_string())
    })?;
    Some(PathBuf::from(mount).join(rel.trim_start_matches('/')))
}

/// `cpu.max` is `max PERIOD` or `QUOTA PERIOD` (microseconds).
fn parse_cpu_max(text: &str) -> Option<u32> {
    let mut parts = text.split_whitespace();
    let quota = parts.next()?;
    let period: i64 = parts.next()?.parse().ok()?;
    if quota == "max" {
        return None;
    }
    cpus_from_quota(quota.parse().ok()?, period)
}

/// CPUs a quota allows, rounded up (1.5 CPUs of quota can keep 2 workers busy part-time).
fn cpus_from_quota(quota: i64, period: i64) -> Option<u32> {
    if quota <= 0 || period <= 0 {
        return None;
    }
    Some(((quota + period - 1) / period) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_max_parses() {
        assert_eq!(parse_cpu_max("max 100000\n"), None);
        assert_eq!(parse_cpu_max("200000 100000\n"), Some(2));
        assert_eq!(parse_cpu_max("150000 100000"), Some(2));
        assert_eq!(parse_cpu_max("50000 100000"), Some(1));
        assert_eq!(cpus_from_quota(-1, 100000), None);
    }

    #[test]
    fn cgroup_dirs_are_found() {
        let cgroups = "12:cpu,cpuacct:/kube/pod1\n0::/system.slice/x.service\n";
        let mounts = "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n\
                      cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,cpu,cpuacct 0 0\n";
        assert_eq!(
            cgroup_dir(cgroups, mounts, CgroupVersion::V2).unwrap(),
            PathBuf::from("/sys/fs/cgroup/unified/system.slice/x.service")
        );
        assert_eq!(
            cgroup_dir(cgroups, mounts, CgroupVersion::V1Cpu).unwrap(),
            PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/kube/pod1")
        );
    }

    #[test]
    fn usable_cpus_is_at_least_one() {
        assert!(usable_cpus() >= 1);
    }
}
