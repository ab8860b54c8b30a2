//! The kernel's own accounting of a BPF program's runs: how many times it ran (`run_cnt`) and
//! for how long in total (`run_time_ns`), as `bpftool prog show` prints them.
//!
//! The kernel counts only while run-time statistics are on. [`StatsOn`] turns them on with
//! `BPF_ENABLE_STATS` rather than the `kernel.bpf_stats_enabled` sysctl: the kernel keeps them
//! on while the returned file descriptor is open and turns them off when it closes, however
//! this process ends (error, Ctrl-C, SIGKILL), so there is no sysctl to restore and nothing to
//! leave behind. The sysctl and other holders of such a descriptor are counted apart, so this
//! never turns statistics off under someone else.

use std::fs;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, anyhow, bail};
use aya::maps::MapInfo;
use aya::programs::loaded_programs;
use aya::sys::{Stats, enable_stats};

/// The name ck's `SK_REUSEPORT` program is loaded under.
pub const PROGRAM: &str = "ck_select";

/// BPF run-time statistics on, while this lives.
#[derive(Debug)]
pub struct StatsOn(#[allow(dead_code, reason = "held only to keep the statistics on")] OwnedFd);

impl StatsOn {
    /// Turns the kernel's run-time statistics on (`BPF_ENABLE_STATS`, kernel >= 5.8, root).
    pub fn enable() -> Result<StatsOn> {
        enable_stats(Stats::RunTime)
            .map(StatsOn)
            .context("turning BPF run-time statistics on (BPF_ENABLE_STATS; needs root)")
    }
}

/// A program's counters at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RunStats {
    /// Runs counted so far.
    pub runs: u64,
    /// Time spent in them so far, in ns.
    pub time_ns: u64,
}

impl RunStats {
    /// The runs between `self` (earlier) and `later`, and their mean cost in ns (`None`
    /// without a run).
    pub fn until(self, later: RunStats) -> (u64, Option<f64>) {
        let runs = later.runs.saturating_sub(self.runs);
        let time = later.time_ns.saturating_sub(self.time_ns);
        (runs, (runs > 0).then(|| time as f64 / runs as f64))
    }
}

/// The names ck's open-connection counting program is loaded under: on the instance's cgroup
/// (`sock_ops`), and host-wide (`tp_btf/inet_sock_set_state`).
pub const CONNS_PROGRAMS: [&str; 2] = ["ck_conns_ops", "ck_conns"];

/// The id of the open-connection counter of instance `name`'s first group, on whichever hook it
/// runs.
pub fn conns_program_of(name: &str) -> Result<u32> {
    let mut why = Vec::new();
    for program in CONNS_PROGRAMS {
        match program_using(name, program, "conns") {
            Ok(id) => return Ok(id),
            Err(e) => why.push(format!("{e:#}")),
        }
    }
    bail!("{}", why.join("; "))
}

/// The id of the `ck_select` program of instance `name`'s first group: the loaded program of
/// that name that uses the instance's pinned `config` map (other instances have their own).
pub fn program_of(name: &str) -> Result<u32> {
    program_using(name, PROGRAM, "config")
}

/// The id of the loaded program `program` of instance `name`'s first group: the one that uses
/// the instance's pinned map `map`.
pub fn program_using(name: &str, program_name: &str, map: &str) -> Result<u32> {
    let config = first_group(&crate::ck::pins_dir(name))?.join(map);
    let map = MapInfo::from_pin(&config)
        .with_context(|| format!("reading the pinned map {}", config.display()))?
        .id();
    for program in loaded_programs() {
        let program = program.context("listing the loaded BPF programs")?;
        if program.name_as_str() != Some(program_name) {
            continue;
        }
        // A program unloaded since it was listed has no map ids to read: not ours.
        if let Ok(Some(ids)) = program.map_ids()
            && ids.contains(&map)
        {
            return Ok(program.id());
        }
    }
    bail!(
        "no loaded {program_name} program uses map {map} ({})",
        config.display()
    )
}

/// The counters of program `id` now.
pub fn read(id: u32) -> Result<RunStats> {
    for program in loaded_programs() {
        let program = program.context("listing the loaded BPF programs")?;
        if program.id() == id {
            return Ok(RunStats {
                runs: program.run_count(),
                time_ns: u64::try_from(program.run_time().as_nanos()).unwrap_or(u64::MAX),
            });
        }
    }
    Err(anyhow!("BPF program {id} is not loaded any more"))
}

/// The counters of programs `ids` now, summed (one program's work spread over several, or
/// several instances' copies of one).
pub fn read_sum(ids: &[u32]) -> Result<RunStats> {
    let mut sum = RunStats::default();
    for id in ids {
        let stats = read(*id)?;
        sum.runs += stats.runs;
        sum.time_ns += stats.time_ns;
    }
    Ok(sum)
}

/// The first (by name) group directory of an instance's pins.
fn first_group(instance: &Path) -> Result<PathBuf> {
    let mut groups: Vec<PathBuf> = fs::read_dir(instance)
        .with_context(|| format!("listing {}", instance.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    groups.sort();
    groups
        .into_iter()
        .next()
        .ok_or_else(|| anyhow!("{} has no group directory", instance.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_between_two_readings() {
        let before = RunStats {
            runs: 100,
            time_ns: 30_000,
        };
        let after = RunStats {
            runs: 1100,
            time_ns: 280_000,
        };
        assert_eq!(before.until(after), (1000, Some(250.0)));
        assert_eq!(before.until(before), (0, None));
    }

    /// `BPF_ENABLE_STATS` leaves the sysctl alone: nothing to restore (needs root, like the
    /// benches; that the kernel counts meanwhile is checked by `bench bpf-cost`, which fails
    /// when the program ran without being counted).
    #[test]
    fn stats_leave_the_sysctl_as_it_was() {
        let sysctl = "/proc/sys/kernel/bpf_stats_enabled";
        let before = fs::read_to_string(sysctl).unwrap();
        let on = StatsOn::enable().unwrap();
        assert_eq!(fs::read_to_string(sysctl).unwrap(), before);
        drop(on);
        assert_eq!(fs::read_to_string(sysctl).unwrap(), before);
    }
}
