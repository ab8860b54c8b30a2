//! The `udp-cost` table: what ck's UDP program (`ck_select_udp`) costs per datagram in each
//! `--udp-mode`, from the kernel's own accounting (`run_time_ns / run_cnt`, see
//! [`ck_tests::bpf_stats`]), beside `ck_udp_minimal`: a program that only picks
//! `hash % n` from the same socket array (see [`super::minimal_program`]), attached to a plain
//! `--no-bpf` fleet and measured the same way.
//!
//! Two loads, each on fleets of [`WORKERS`] workers started side by side: real QUIC (the
//! quinn and h3 example server, its client holding 64 connections that each send a request every
//! 100 ms: Initials, handshakes and short-header packets) under `quic`, `flow` and
//! `stateless` mode; and many small flows (the demo worker answering 256 client sockets, one
//! datagram in flight each) under `flow` and `stateless` mode. [`ROUNDS`] rounds, taking turns
//! (each round starts with the next fleet); reported: the median of the rounds' ns per
//! datagram, and each mode over the minimal program.

use std::path::Path;

use anyhow::{Context as _, Result, bail};
use ck_tests::bpf_stats::{self, RunStats, StatsOn};

use super::bpf_cost::ns_cell;
use super::minimal_program::Minimal;
use crate::Bench;
use crate::instance::{Instance, Variant};
use crate::table::{Goal, Table, median};

/// Workers of each fleet.
const WORKERS: u32 = 4;
/// Rounds per fleet.
const ROUNDS: usize = 5;
/// How long the QUIC client runs in a round (the small flows run `udp_rate`'s 3 s).
const QUIC_MS: u128 = 3_000;

/// The two loads.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Load {
    /// HTTP/3 connections through the quinn + h3 example.
    Quic,
    /// Small flows answered by the demo worker.
    SmallFlows,
}

impl Load {
    /// The modes measured under this load (`quic` mode needs QUIC datagrams).
    fn modes(self) -> &'static [&'static str] {
        match self {
            Load::Quic => &["quic", "flow", "stateless"],
            Load::SmallFlows => &["flow", "stateless"],
        }
    }

    /// The row names' description of the load.
    fn text(self) -> &'static str {
        match self {
            Load::Quic => "HTTP/3 connections",
            Load::SmallFlows => "small flows",
        }
    }
}

/// One fleet and the program measured on it.
struct Fleet {
    /// `quic`, `flow`, `stateless`, or `minimal`.
    mode: &'static str,
    /// The fleet's ck.
    inst: Instance,
    /// The id of the program measured.
    program: u32,
    /// The minimal program, held while its fleet runs.
    _minimal: Option<Minimal>,
    /// ns per datagram, per round.
    ns: Vec<f64>,
    /// Datagrams counted, per round.
    runs: Vec<u64>,
}

/// Measures both loads and returns the table.
pub fn run(bench: &Bench) -> Result<Table> {
    let _stats = StatsOn::enable()?;
    let mut table = Table::with_columns(
        &format!(
            "udp-cost: ns per datagram of ck's UDP program (kernel run_time_ns / run_cnt) beside \
             a minimal hash % n program, {WORKERS} workers, {ROUNDS} rounds, median shown"
        ),
        &["ck", "minimal"],
    );
    for load in [Load::Quic, Load::SmallFlows] {
        let fleets = measure(bench, load)?;
        let minimal = fleets.last().context("no minimal fleet")?;
        let minimal_ns = median(&minimal.ns);
        for fleet in &fleets[..fleets.len() - 1] {
            let goal = match fleet.mode {
                "stateless" => Goal::None,
                _ => Goal::RatioAtMost(2.0),
            };
            table.row(
                &format!("{} mode, {}: ns per datagram", fleet.mode, load.text()),
                ns_cell(median(&fleet.ns)),
                ns_cell(minimal_ns),
                goal,
            );
        }
        for fleet in &fleets {
            let rounds: Vec<String> = fleet
                .ns
                .iter()
                .zip(&fleet.runs)
                .map(|(ns, runs)| format!("{ns:.1} ns ({runs} datagrams)"))
                .collect();
            table.note(format!(
                "{}, {}: {}",
                fleet.mode,
                load.text(),
                rounds.join(", ")
            ));
        }
    }
    table.note(
        "datagrams = runs the kernel counted in the round; ck's also include its steering \
         canary (one a second). The time includes the kernel's own timing of each run.",
    );
    Ok(table)
}

/// One fleet's rounds.
struct Rounds {
    /// `quic`, `flow`, `stateless`, or `minimal`.
    mode: &'static str,
    /// ns per datagram, per round.
    ns: Vec<f64>,
    /// Datagrams counted, per round.
    runs: Vec<u64>,
}

/// Starts the fleets of `load` (ck's modes, then the minimal program on a plain fleet) and
/// measures them in turns; returns their rounds, the minimal program's last.
fn measure(bench: &Bench, load: Load) -> Result<Vec<Rounds>> {
    let quic_bin = super::quic::example()?;
    let quic_text = quic_bin.to_str().context("a UTF-8 path")?.to_string();
    let app: Vec<&str> = match load {
        Load::Quic => vec!["--", &quic_text, "serve"],
        Load::SmallFlows => Vec::new(),
    };
    let mut fleets = Vec::new();
    for mode in load.modes().iter().copied().chain(["minimal"]) {
        let (variant, udp_mode) = match mode {
            "minimal" => (Variant::Baseline, "flow"),
            _ => (Variant::Ck, mode),
        };
        let mut args = vec!["--udp-mode", udp_mode];
        args.extend(&app);
        let inst = Instance::start_udp(
            &bench.bin,
            &bench.log_dir,
            &format!("udp-cost-{mode}"),
            variant,
            WORKERS,
            &args,
        )?;
        fleets.push((mode, inst));
    }
    let mut measured = Vec::new();
    for (mode, mut inst) in fleets {
        inst.wait_ready(WORKERS as usize)?;
        let (program, minimal) = match mode {
            "minimal" => {
                let minimal = Minimal::attach(&bench.bin, &inst)?;
                (minimal.id, Some(minimal))
            }
            _ => (
                bpf_stats::program_using(inst.name(), "ck_select_udp", "config")?,
                None,
            ),
        };
        measured.push(Fleet {
            mode,
            inst,
            program,
            _minimal: minimal,
            ns: Vec::new(),
            runs: Vec::new(),
        });
    }
    let n = measured.len();
    for round in 0..ROUNDS {
        for k in 0..n {
            let fleet = &mut measured[(round + k) % n];
            bench.progress(format_args!(
                "udp-cost: {}, {}, round {}/{ROUNDS}",
                load.text(),
                fleet.mode,
                round + 1
            ));
            let before = bpf_stats::read(fleet.program)?;
            drive(&quic_bin, load, &fleet.inst)?;
            let after = bpf_stats::read(fleet.program)?;
            let (runs, ns) = RunStats::until(before, after);
            let Some(ns) = ns else {
                bail!(
                    "{} mode: the program ran {runs} times in a round of load; are BPF \
                     run-time statistics on?",
                    fleet.mode
                );
            };
            fleet.ns.push(ns);
            fleet.runs.push(runs);
        }
    }
    let mut done = Vec::new();
    for fleet in measured {
        bench.report_log(&fleet.inst);
        done.push(Rounds {
            mode: fleet.mode,
            ns: fleet.ns,
            runs: fleet.runs,
        });
        fleet.inst.stop()?;
    }
    Ok(done)
}

/// One round of `load` against `inst`.
fn drive(quic_bin: &Path, load: Load, inst: &Instance) -> Result<()> {
    match load {
        Load::Quic => {
            let client = super::quic::client(quic_bin, inst.addr(), QUIC_MS, &[])?;
            let seen = super::quic::finish(client)?;
            if seen.ok == 0 {
                bail!("no request answered by the fleet at {}", inst.addr());
            }
        }
        Load::SmallFlows => {
            let (answered, _) = super::udp_rate::one_run(inst.addr(), super::udp_rate::RUN)?;
            if answered == 0 {
                bail!("no datagram answered by the fleet at {}", inst.addr());
            }
        }
    }
    Ok(())
}
