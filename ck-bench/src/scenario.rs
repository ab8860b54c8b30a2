//! The scenarios `ck-bench` knows ([`Scenario`]): their names on the command line and in the
//! records, which ones `all` runs, the source files a record of each is a run of (for "K/N runs
//! met": a record counts while they are unchanged), and which module runs each.

use anyhow::{Result, bail};

use crate::scenarios::{
    bpf_cost, canary, canary_withdraw, chaos, conn_count, cork, dns, first_moment, footprint,
    latency, long_lived, overhead, peer_loads, quic, ready_slow, recovery, reload, rollback,
    slow_start, spread, stall, sticky, supervisor_cpu, udp_cost, udp_rate, upgrade,
};
use crate::{Bench, Outcome};

/// What to measure.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// SIGKILL 2 of 3 workers under load, once per round: failed requests, time until every
    /// slot serves again; with the demo worker (ck, --no-bpf) and with the Node hello app (ck's
    /// settings, --no-bpf, node:cluster, pm2), in the same rounds.
    Recovery,
    /// `ck reload`s under load, in rounds: p99 latency and failed requests, steady vs during
    /// the reloads; ck and --no-bpf.
    Reload,
    /// `ck upgrade`s under load, in rounds: failed requests, p99 steady vs during upgrades, how
    /// long the control socket is unavailable per upgrade; beside it `--survive-supervisor`:
    /// kill -9 and take-back under load.
    Upgrade,
    /// Keep-alive requests/s and new connections/s of ck, --no-bpf, --adopt and the same
    /// workers with no supervisor, in rounds; --adopt's time from listen() to adoption.
    Overhead,
    /// The BPF program's cost per selection, from the kernel's own accounting, per policy and
    /// worker count.
    BpfCost,
    /// Latency at a fixed rate (half and four fifths of the plain fleet's capacity), new
    /// connection per request and keep-alive: ck, --no-bpf and no supervisor.
    Latency,
    /// Supervisor RSS, start to first answer, idle shutdown time.
    Footprint,
    /// Open connections counted in the kernel: the counting program's cost per state change
    /// beside the selection program's, and the counts' exactness (held, closed, drift).
    ConnCount,
    /// Share of new connections per worker (3 workers), per policy.
    Spread,
    /// Keep-alive clients that connect as the fleet boots (Node hello app, 2 workers, 50
    /// connections from the port's first answer): connections per worker and requests/s; ck
    /// and --no-bpf.
    FirstMoment,
    /// ck beside node:cluster and pm2 (Node hello app, 2 workers, a fresh fleet per round):
    /// keep-alive requests/s from the port's first answer, new connections/s, ck's programs'
    /// run time per connection, and an idle ck's per connection of each fleet.
    Peers,
    /// Latency with one of 4 workers stalling every second, per policy, beside --no-bpf.
    Stall,
    /// Session affinity: clients (source addresses) that change worker when one of 4 leaves,
    /// and that keep it over 1,000 connections; sticky beside hash and round-robin.
    Sticky,
    /// Long-lived connections over a fleet that grows (2 workers, scale to 4) and churns:
    /// max/mean open connections per worker, least-conn beside round-robin, hash and plain.
    LongLived,
    /// The supervisor's own CPU, idle and under new connections (2 demo workers):
    /// round-robin, least-queue and --no-bpf, in rounds.
    SupervisorCpu,
    /// A random worker of 4 SIGKILLed every 0.5 s, 8 s per round on a fresh fleet: ck,
    /// --no-bpf, node:cluster, pm2.
    Chaos,
    /// The SO_REUSEPORT + TCP_CORK article's matrix with its kind of C server under ck, beside
    /// the article's figures.
    Cork,
    /// `ck reload` of a server that boots in 10 s and says nothing (waits in poll), once per
    /// round: p99 during the roll vs steady, failed requests, how each worker was taken as
    /// ready; ck and --no-bpf.
    ReadySlow,
    /// A bad release taken back under new connections that never retry, once per round, 2
    /// workers of a server that boots in 4 s: `ck rollback` (with --keep-previous) beside
    /// `ck reload` of the old code: time to the bad release's last answer, failed requests.
    Rollback,
    /// A roll of 4 demo workers that start at a tenth of their capacity and warm up over 10 s,
    /// under new connections at 60 % of the warm fleet's capacity, once per round: p99 during
    /// the roll vs steady, failed requests; --slow-start 10s beside without.
    SlowStart,
    /// `ck reload --canary 25` on 4 demo workers, once per round: the share 1,000 clients (each
    /// its own address) and 1,000 connections give the canary, and the clients that changed
    /// side; by client beside by connection.
    Canary,
    /// A bad release as `ck reload --canary 50` of 2 demo workers, once per round, under new
    /// connections that never retry: its worker exits, it resets every request
    /// (--canary-max-resets), it stops accepting (--canary-max-queue-age): rounds withdrawn,
    /// failed requests beside the connections the canary was sent.
    CanaryWithdraw,
    /// HTTP/3 connections (quinn + h3) held open through 5 rolls and a scale up and down, with
    /// and without client migration, and a worker's kill -9: broken connections under
    /// --udp-mode quic, flow and plain SO_REUSEPORT; ngtcp2's client moving to a new port; an
    /// unmodified ngtcp2 server adopted.
    Quic,
    /// The datagram rate of many small UDP flows: ck (flow mode), --no-bpf and no supervisor.
    UdpRate,
    /// dnsperf at a fixed rate through 10 rolls of 4 DNS servers: queries lost under
    /// --udp-mode stateless, plain SO_REUSEPORT, and an adopted dnsmasq.
    Dns,
    /// ns per datagram of ck's UDP program in each --udp-mode (kernel accounting) beside a
    /// minimal hash % n program on a plain group, under HTTP/3 connections and small flows.
    UdpCost,
    /// Every scenario, in the order above.
    All,
    /// Measures nothing: draws BENCHMARKS.md's tables again from the records in
    /// docs/bench/runs (`--check`: fails if the file differs instead).
    Summary,
}

/// The scenarios `all` runs, in order.
pub const ALL: [Scenario; 26] = [
    Scenario::Recovery,
    Scenario::Reload,
    Scenario::Upgrade,
    Scenario::Overhead,
    Scenario::BpfCost,
    Scenario::Latency,
    Scenario::Footprint,
    Scenario::ConnCount,
    Scenario::Spread,
    Scenario::FirstMoment,
    Scenario::Peers,
    Scenario::Stall,
    Scenario::Sticky,
    Scenario::LongLived,
    Scenario::SupervisorCpu,
    Scenario::Chaos,
    Scenario::Cork,
    Scenario::ReadySlow,
    Scenario::Rollback,
    Scenario::SlowStart,
    Scenario::Canary,
    Scenario::CanaryWithdraw,
    Scenario::Quic,
    Scenario::UdpRate,
    Scenario::UdpCost,
    Scenario::Dns,
];

impl Scenario {
    /// The scenarios `self` stands for.
    pub fn expand(self) -> Vec<Scenario> {
        match self {
            Scenario::All => ALL.to_vec(),
            Scenario::Summary => vec![],
            one => vec![one],
        }
    }

    /// The scenario's name on the command line (`supervisor-cpu`), as records and
    /// BENCHMARKS.md's markers name it.
    pub fn name(self) -> String {
        use clap::ValueEnum as _;
        self.to_possible_value()
            .map_or_else(|| format!("{self:?}"), |v| v.get_name().to_string())
    }

    /// The scenario named `name`, if there is one.
    pub fn named(name: &str) -> Option<Scenario> {
        ALL.into_iter().find(|s| s.name() == name)
    }

    /// The source files (from the workspace root) that make the scenario what it is: a record
    /// of it counts as a run of the current program only while they are unchanged.
    pub fn sources(self) -> &'static [&'static str] {
        macro_rules! files {
            ($($f:literal),+) => { &[$(concat!("ck-bench/src/scenarios/", $f)),+] };
        }
        match self {
            Scenario::Recovery => files!("recovery.rs", "recovery_node.rs"),
            Scenario::Reload => files!("reload.rs"),
            Scenario::Upgrade => files!("upgrade.rs", "survive.rs"),
            Scenario::Overhead => files!("overhead.rs"),
            Scenario::BpfCost => files!("bpf_cost.rs", "grid.rs"),
            Scenario::Latency => files!("latency.rs"),
            Scenario::Footprint => files!("footprint.rs"),
            Scenario::ConnCount => files!("conn_count.rs"),
            Scenario::Spread => files!("spread.rs"),
            Scenario::Stall => files!("stall.rs"),
            Scenario::Sticky => files!("sticky.rs"),
            Scenario::LongLived => files!("long_lived.rs"),
            Scenario::FirstMoment => files!("first_moment.rs"),
            Scenario::Peers => files!("peer_loads.rs"),
            Scenario::SupervisorCpu => files!("supervisor_cpu.rs"),
            Scenario::Chaos => files!("chaos.rs"),
            Scenario::Cork => files!("cork.rs"),
            Scenario::ReadySlow => files!("ready_slow.rs"),
            Scenario::Rollback => files!("rollback.rs"),
            Scenario::SlowStart => files!("slow_start.rs"),
            Scenario::Canary => files!("canary.rs"),
            Scenario::CanaryWithdraw => files!("canary_withdraw.rs"),
            Scenario::Quic => files!("quic.rs", "quic_stacks.rs", "grid.rs"),
            Scenario::UdpRate => files!("udp_rate.rs"),
            Scenario::UdpCost => files!("udp_cost.rs", "minimal_program.rs", "grid.rs"),
            Scenario::Dns => files!("dns.rs"),
            Scenario::All | Scenario::Summary => &[],
        }
    }

    /// Runs it.
    pub fn run(self, bench: &Bench) -> Result<Outcome> {
        match self {
            Scenario::Recovery => recovery::run(bench),
            Scenario::Reload => reload::run(bench),
            Scenario::Upgrade => upgrade::run(bench),
            Scenario::Overhead => overhead::run(bench),
            Scenario::BpfCost => bpf_cost::run(bench),
            Scenario::Latency => latency::run(bench),
            Scenario::Footprint => footprint::run(bench),
            Scenario::ConnCount => conn_count::run(bench),
            Scenario::Spread => spread::run(bench),
            Scenario::Stall => stall::run(bench),
            Scenario::Sticky => sticky::run(bench),
            Scenario::LongLived => long_lived::run(bench),
            Scenario::FirstMoment => first_moment::run(bench),
            Scenario::Peers => peer_loads::run(bench),
            Scenario::SupervisorCpu => supervisor_cpu::run(bench),
            Scenario::Chaos => chaos::run(bench),
            Scenario::Cork => cork::run(bench),
            Scenario::ReadySlow => ready_slow::run(bench),
            Scenario::Rollback => rollback::run(bench),
            Scenario::SlowStart => slow_start::run(bench),
            Scenario::Canary => canary::run(bench),
            Scenario::CanaryWithdraw => canary_withdraw::run(bench),
            Scenario::Quic => quic::run(bench),
            Scenario::UdpRate => udp_rate::run(bench),
            Scenario::UdpCost => udp_cost::run(bench),
            Scenario::Dns => dns::run(bench),
            Scenario::All | Scenario::Summary => {
                bail!("{} is not one scenario: expand it first", self.name())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_expands_to_every_scenario() {
        assert_eq!(Scenario::All.expand().len(), 26);
        assert_eq!(Scenario::Reload.expand(), [Scenario::Reload]);
        assert!(Scenario::Summary.expand().is_empty());
        assert_eq!(Scenario::SupervisorCpu.name(), "supervisor-cpu");
        assert_eq!(Scenario::named("udp-rate"), Some(Scenario::UdpRate));
        assert_eq!(Scenario::named("all"), None);
    }

    #[test]
    fn every_scenario_names_source_files_that_exist() {
        let root = crate::paths::workspace_root().unwrap();
        for s in ALL {
            assert!(!s.sources().is_empty(), "{s:?}");
            for file in s.sources() {
                assert!(root.join(file).is_file(), "{s:?}: no {file}");
            }
        }
    }
}
