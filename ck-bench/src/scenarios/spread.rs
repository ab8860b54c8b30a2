//! The `spread` scenario: how evenly new connections land on 3 workers, per policy. One
//! instance per policy (hash, round-robin, least-queue, least-conn), least-queue with a
//! `--queue-patience`, and a baseline, side by side; in each of [`ROUNDS`] rounds (alternating over the instances), [`OPENERS`] threads
//! together open [`CONNECTIONS`] connections at once (source ports and CPUs as the OS picks),
//! then send one keep-alive `GET /` on each and read which slot answered. Reports each slot's
//! share of the connections and the largest share, worst of the rounds, and checks the answers
//! against the BPF program's own `selected` counters.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, bail};
use serde_json::Value;

use crate::Bench;
use crate::instance::{Instance, Variant};
use crate::plot::bars::{self, Bars, Group};
use crate::table::{Cell, Goal, Table};

/// Workers of each instance.
const WORKERS: u32 = 3;
/// Connections per round.
const CONNECTIONS: usize = 150;
/// Threads opening them (each a share, all at once).
const OPENERS: usize = 3;
/// Rounds per instance.
const ROUNDS: usize = 3;
/// Limit of one connect, and of one answer.
const TIMEOUT: Duration = Duration::from_secs(2);
/// Pause between rounds.
const PAUSE: Duration = Duration::from_millis(200);
/// The largest share of the connections one worker may get, in %.
const GOAL_SHARE: f64 = 36.0;
/// The request sent on every connection (keep-alive: the worker does not close it).
const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: b\r\n\r\n";

/// The ck variants measured, in table order: label, instance name suffix, `ck run` options.
/// The last is least-queue with a patience (a queue whose oldest connection has waited less
/// than 10 ms keeps its round-robin turn), beside its default (every non-empty queue compared).
const VARIANTS: [(&str, &str, &[&str]); 5] = [
    ("hash", "hash", &["--policy", "hash"]),
    ("round-robin", "round-robin", &["--policy", "round-robin"]),
    ("least-queue", "least-queue", &["--policy", "least-queue"]),
    ("least-conn", "least-conn", &["--policy", "least-conn"]),
    (
        "least-queue --queue-patience 10ms",
        "lq-patient",
        &["--policy", "least-queue", "--queue-patience", "10ms"],
    ),
];

/// One measured instance: a ck policy or the baseline.
struct Measured {
    /// `hash`, ..., or `baseline`.
    label: &'static str,
    inst: Instance,
    /// Connections per slot, one map per round.
    rounds: Vec<BTreeMap<String, u64>>,
    /// Rounds whose answers differ from the BPF `selected` counters, described.
    mismatches: Vec<String>,
}

/// Runs the scenario and returns the table.
pub fn run(bench: &Bench) -> Result<Table> {
    let mut all = Vec::new();
    for (label, suffix, args) in VARIANTS {
        let inst = Instance::start(
            &bench.bin,
            &bench.log_dir,
            &format!("spread-{suffix}"),
            Variant::Ck,
            WORKERS,
            args,
        )?;
        all.push(Measured::new(label, inst));
    }
    let base = Instance::start(
        &bench.bin,
        &bench.log_dir,
        "spread",
        Variant::Baseline,
        WORKERS,
        &[],
    )?;
    all.push(Measured::new("baseline", base));
    for m in &mut all {
        m.inst.wait_ready(WORKERS as usize)?;
    }

    for round in 0..ROUNDS {
        for m in &mut all {
            let before = selected(&m.inst, m.label)?;
            let slots = open_and_ask(m.inst.addr())?;
            let after = selected(&m.inst, m.label)?;
            if let (Some(before), Some(after)) = (before, after) {
                let bpf: BTreeMap<String, u64> = after
                    .iter()
                    .map(|(slot, n)| {
                        let was = before.get(slot).copied().unwrap_or(0);
                        (slot.clone(), n.saturating_sub(was))
                    })
                    .filter(|(_, n)| *n > 0)
                    .collect();
                if bpf != slots {
                    m.mismatches.push(format!(
                        "round {}: answers {} vs BPF selected {}",
                        round + 1,
                        counts(&slots),
                        counts(&bpf)
                    ));
                }
            }
            bench.progress(format_args!(
                "spread: {} round {}/{ROUNDS}: {}",
                m.label,
                round + 1,
                counts(&slots)
            ));
            m.rounds.push(slots);
            thread::sleep(PAUSE);
        }
    }

    let mut t = Table::new(&format!(
        "spread: {WORKERS} workers, {CONNECTIONS} connections opened at once from {OPENERS} \
         threads, one GET / on each; {ROUNDS} rounds per variant (alternating); share of the \
         connections per slot"
    ));
    let base = all.pop().ok_or_else(|| anyhow!("no baseline measured"))?;
    for m in &all {
        t.row(
            &format!("largest share, worst of {ROUNDS}, {}", m.label),
            percent(m.worst()),
            percent(base.worst()),
            Goal::AtMost(GOAL_SHARE, "<= 36 %"),
        );
    }
    for m in all.iter().chain([&base]) {
        let rounds: Vec<String> = m.rounds.iter().map(shares).collect();
        t.note(format!(
            "{} shares (slot 0/1/2, %), per round: {}",
            m.label,
            rounds.join("; ")
        ));
    }
    for m in &all {
        if m.mismatches.is_empty() {
            t.note(format!(
                "{}: the answers match the BPF `selected` counters in every round",
                m.label
            ));
        }
        for mismatch in &m.mismatches {
            t.note(format!("{} MISMATCH {mismatch}", m.label));
        }
    }
    t.note(
        "round-robin, least-queue and least-conn use a per-CPU cursor: connections opened \
         from different CPUs each advance their own CPU's cursor",
    );
    let plot = share_plot(all.iter().chain([&base]));
    t.plot_with(bench.plot_path("spread-shares"), |path| {
        bars::draw(path, &plot)
    });
    for m in all.into_iter().chain([base]) {
        bench.report_log(&m.inst);
        m.inst.stop()?;
    }
    Ok(t)
}

/// Each slot's share of the connections, one group of bars per instance and round.
fn share_plot<'a>(measured: impl Iterator<Item = &'a Measured>) -> Bars {
    let groups = measured
        .flat_map(|m| {
            m.rounds.iter().enumerate().map(|(r, slots)| {
                let total: u64 = slots.values().sum();
                Group {
                    label: format!("{} {}", m.label, r + 1),
                    values: (0..WORKERS)
                        .map(|s| {
                            let n = slots.get(&s.to_string()).copied().unwrap_or(0);
                            100.0 * n as f64 / total.max(1) as f64
                        })
                        .collect(),
                    runs: Vec::new(),
                }
            })
        })
        .collect();
    Bars {
        title: format!(
            "spread: share of {CONNECTIONS} connections opened at once per worker, each policy \
             and round"
        ),
        y_desc: "% of the connections".into(),
        keys: (0..WORKERS).map(|s| format!("slot {s}")).collect(),
        groups,
        lines: vec![
            (100.0 / f64::from(WORKERS), "even share".into()),
            (GOAL_SHARE, format!("goal: largest <= {GOAL_SHARE} %")),
        ],
        decimals: 0,
    }
}

impl Measured {
    /// `inst`, not measured yet.
    fn new(label: &'static str, inst: Instance) -> Measured {
        Measured {
            label,
            inst,
            rounds: Vec::new(),
            mismatches: Vec::new(),
        }
    }

    /// The largest share of any slot in any round, in %.
    fn worst(&self) -> f64 {
        self.rounds.iter().map(largest).fold(0.0, f64::max)
    }
}

/// A share in %.
fn percent(p: f64) -> Cell {
    Cell {
        text: format!("{p:.1} %"),
        num: Some(p),
    }
}

/// The largest share of one round, in %.
fn largest(slots: &BTreeMap<String, u64>) -> f64 {
    let total: u64 = slots.values().sum();
    let max = slots.values().copied().max().unwrap_or(0);
    100.0 * max as f64 / total.max(1) as f64
}

/// The shares of one round, `33.3/34.0/32.7` (slots 0..WORKERS).
fn shares(slots: &BTreeMap<String, u64>) -> String {
    let total: u64 = slots.values().sum();
    (0..WORKERS)
        .map(|s| {
            let n = slots.get(&s.to_string()).copied().unwrap_or(0);
            format!("{:.1}", 100.0 * n as f64 / total.max(1) as f64)
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// `0=50 1=49 2=51`.
fn counts(slots: &BTreeMap<String, u64>) -> String {
    slots
        .iter()
        .map(|(slot, n)| format!("{slot}={n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Opens [`CONNECTIONS`] connections to `addr` from [`OPENERS`] threads at once, holds them
/// all open, sends [`REQUEST`] on each and returns how many each slot answered.
fn open_and_ask(addr: SocketAddr) -> Result<BTreeMap<String, u64>> {
    let opened = Barrier::new(OPENERS);
    let go = Barrier::new(OPENERS);
    let per_thread = CONNECTIONS / OPENERS;
    let answers: Vec<Result<Vec<String>>> = thread::scope(|s| {
        let threads: Vec<_> = (0..OPENERS)
            .map(|_| {
                s.spawn(|| {
                    go.wait();
                    let streams: Result<Vec<TcpStream>> = (0..per_thread)
                        .map(|_| {
                            TcpStream::connect_timeout(&addr, TIMEOUT)
                                .with_context(|| format!("connecting to {addr}"))
                        })
                        .collect();
                    // Every thread passes the barrier, even after a failed connect.
                    opened.wait();
                    streams?.iter_mut().map(ask).collect()
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| {
                t.join()
                    .unwrap_or_else(|_| Err(anyhow!("a spread thread panicked")))
            })
            .collect()
    });
    let mut slots = BTreeMap::new();
    for slot in answers.into_iter().collect::<Result<Vec<_>>>()?.concat() {
        *slots.entry(slot).or_insert(0) += 1;
    }
    Ok(slots)
}

/// Sends [`REQUEST`] on `stream` and returns the `slot=` of the answer's body.
fn ask(stream: &mut TcpStream) -> Result<String> {
    stream.set_read_timeout(Some(TIMEOUT))?;
    stream.write_all(REQUEST).context("sending GET /")?;
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 512];
    loop {
        if let Some(body) = complete_body(&buf) {
            let text = String::from_utf8_lossy(body);
            return text
                .split_ascii_whitespace()
                .find_map(|w| w.strip_prefix("slot="))
                .map(str::to_string)
                .ok_or_else(|| anyhow!("answer without slot=: {text:?}"));
        }
        let n = stream.read(&mut chunk).context("reading the answer")?;
        if n == 0 {
            bail!(
                "connection closed before the whole answer: {:?}",
                String::from_utf8_lossy(&buf)
            );
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The body of the HTTP response in `buf`, once head and `Content-Length` bytes are there.
fn complete_body(buf: &[u8]) -> Option<&[u8]> {
    let head_end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&buf[..head_end]);
    let length: usize = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.trim().parse().ok())
        .unwrap_or(0);
    buf.get(head_end..head_end + length)
}

/// The BPF program's `selected` counter per slot (`None` for the baseline, which has none).
fn selected(inst: &Instance, label: &str) -> Result<Option<BTreeMap<String, u64>>> {
    if label == "baseline" {
        return Ok(None);
    }
    let json: Value = serde_json::from_str(&inst.ctl(&["status", "--json"])?)
        .context("parsing `ck status --json`")?;
    let slots = json["slots"]
        .as_array()
        .ok_or_else(|| anyhow!("`ck status --json` has no slots array"))?;
    Ok(Some(
        slots
            .iter()
            .map(|s| (s["slot"].to_string(), s["selected"].as_u64().unwrap_or(0)))
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_once_complete() {
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\n";
        let mut buf = head.to_vec();
        buf.extend_from_slice(b"slot=2 pid=");
        assert_eq!(complete_body(&buf), None);
        buf.extend_from_slice(b"9\n");
        assert_eq!(complete_body(&buf), Some(&b"slot=2 pid=9\n"[..]));
    }

    #[test]
    fn shares_and_largest() {
        let slots: BTreeMap<String, u64> =
            [("0".into(), 45), ("1".into(), 60), ("2".into(), 45)].into();
        assert_eq!(shares(&slots), "30.0/40.0/30.0");
        assert_eq!(largest(&slots), 40.0);
    }
}
