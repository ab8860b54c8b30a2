//! The `dns` scenario: plain UDP request and response through rolls. dnsperf sends queries at
//! a fixed rate well below capacity ([`RATE`] a second from [`CLIENTS`] sockets, `-Q`) to
//! [`WORKERS`] DNS servers while ck rolls them [`ROLLS`] times, one `ck reload` after the other;
//! counted: queries lost (no answer within dnsperf's 1 s timeout). Side by side, [`RUNS`] runs
//! each, taking turns:
//! - **ck stateless**: `examples/python/dns.py` under `--udp-mode stateless`, on ck's sockets;
//! - **plain**: the same server on plain `SO_REUSEPORT` (`--no-bpf`);
//! - **ck, dnsmasq adopted**: an unmodified dnsmasq that binds the port itself (`--adopt`; ck's
//!   bind hook adds the `SO_REUSEPORT` it never sets). Plain `SO_REUSEPORT` cannot run two of
//!   it on one port, so it has no plain column.
//!
//! The servers exit at once on SIGTERM, as DNS servers do: what a roll loses is what was
//! queued on, or still sent to, a socket that closes.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use crate::Bench;
use crate::instance::{Instance, Variant};
use crate::table::{Cell, Goal, Table};

/// Workers of each fleet.
const WORKERS: u32 = 4;
/// Queries a second, all clients together (a Python worker answers well over 5,000).
const RATE: u32 = 2_000;
/// dnsperf's clients, each a socket of its own.
const CLIENTS: u32 = 32;
/// `ck reload`s per run.
const ROLLS: usize = 10;
/// How long dnsperf sends; the rolls must end [`AFTER`] before.
const WINDOW: Duration = Duration::from_secs(25);
/// Load after the last roll, at least.
const AFTER: Duration = Duration::from_secs(3);
/// Runs per fleet.
const RUNS: usize = 3;
/// The fleets, in column order.
const FLEETS: [(&str, Server, Variant); 3] = [
    ("ck stateless", Server::Example, Variant::Ck),
    ("plain", Server::Example, Variant::Baseline),
    ("ck, dnsmasq adopted", Server::Dnsmasq, Variant::Ck),
];

/// The DNS server of a fleet.
#[derive(Debug, Clone, Copy)]
enum Server {
    /// `examples/python/dns.py` on the socket ck hands it.
    Example,
    /// dnsmasq binding `$PORT` itself, adopted.
    Dnsmasq,
}

impl Server {
    /// ck's options and the worker command.
    fn args(self, root: &Path) -> Vec<String> {
        let mut args: Vec<String> = vec!["--udp-mode".into(), "stateless".into()];
        match self {
            Server::Example => {
                let script = root.join("examples/python/dns.py");
                args.extend(["--".into(), "python3".into(), script.display().to_string()]);
            }
            Server::Dnsmasq => {
                args.push("--adopt".into());
                args.extend(["--", "sh", "-c", DNSMASQ].map(String::from));
            }
        }
        args
    }
}

/// dnsmasq answering `bench.test` from its own table: no upstream, no cache, no files, in the
/// foreground, as root, on 127.0.0.1:$PORT only.
const DNSMASQ: &str = "exec dnsmasq --keep-in-foreground --conf-file=/dev/null --no-resolv \
                       --no-hosts --cache-size=0 --pid-file= --user=root --bind-interfaces \
                       --listen-address=127.0.0.1 --port=\"$PORT\" \
                       --address=/bench.test/127.0.0.1";

/// What dnsperf counted in one run.
#[derive(Debug, Default, Clone, Copy)]
struct Counted {
    sent: u64,
    lost: u64,
}

/// Runs the scenario and returns the table.
pub fn run(bench: &Bench) -> Result<Table> {
    let root = crate::paths::workspace_root()?;
    let queries = bench.log_dir.join("dns-queries.txt");
    std::fs::write(&queries, "bench.test A\n").context("writing dnsperf's query file")?;
    let mut counted = vec![Vec::new(); FLEETS.len()];
    for run in 0..RUNS {
        for k in 0..FLEETS.len() {
            let f = (run + k) % FLEETS.len();
            let (name, server, variant) = FLEETS[f];
            bench.progress(format_args!("dns: {name}, run {} of {RUNS}", run + 1));
            counted[f].push(one_run(bench, root, &queries, server, variant)?);
        }
    }
    let names: Vec<&str> = FLEETS.iter().map(|(name, _, _)| *name).collect();
    let mut table = Table::with_columns(
        &format!(
            "dns: dnsperf at {RATE} queries/s from {CLIENTS} sockets through {ROLLS} rolls of \
             {WORKERS} DNS servers, --udp-mode stateless ({RUNS} runs each, taking turns)"
        ),
        &names,
    );
    let sum = |c: &[Counted], pick: fn(&Counted) -> u64| c.iter().map(pick).sum::<u64>();
    table.row_of(
        "queries lost (no answer within 1 s), all runs",
        counted
            .iter()
            .map(|c| Cell::count(sum(c, |c| c.lost)))
            .collect(),
        Goal::AtMost(0.0, "0"),
    );
    table.row_of(
        "queries sent, all runs",
        counted
            .iter()
            .map(|c| Cell::count(sum(c, |c| c.sent)))
            .collect(),
        Goal::None,
    );
    for (name, runs) in names.iter().zip(&counted) {
        let each: Vec<String> = runs.iter().map(|c| c.lost.to_string()).collect();
        table.note(format!("{name}, lost in each run: {}", each.join(", ")));
    }
    table.note(
        "the servers exit at once on SIGTERM; plain SO_REUSEPORT keeps hashing queries to a \
         worker's socket until it closes, ck sends new queries to the new workers before the \
         old ones are stopped",
    );
    Ok(table)
}

/// One fleet through the rolls under dnsperf.
fn one_run(
    bench: &Bench,
    root: &Path,
    queries: &Path,
    server: Server,
    variant: Variant,
) -> Result<Counted> {
    let args = server.args(root);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut inst = Instance::start_udp(&bench.bin, &bench.log_dir, "dns", variant, WORKERS, &args)?;
    inst.wait_ready(WORKERS as usize)?;
    let started = Instant::now();
    let perf = dnsperf(inst.addr().port(), queries)?;
    std::thread::sleep(Duration::from_secs(1));
    for _ in 0..ROLLS {
        inst.ctl(&["reload"])?;
    }
    let rolled = started.elapsed();
    if rolled + AFTER > WINDOW {
        bail!(
            "{ROLLS} rolls took {rolled:?}, too long for dnsperf's {WINDOW:?}: the machine is \
             too busy for this scenario"
        );
    }
    let counted = finish(perf)?;
    bench.report_log(&inst);
    inst.stop()?;
    Ok(counted)
}

/// Starts dnsperf against 127.0.0.1:`port` for [`WINDOW`].
fn dnsperf(port: u16, queries: &Path) -> Result<Child> {
    Command::new(dnsperf_bin()?)
        .args(["-s", "127.0.0.1", "-p", &port.to_string()])
        .arg("-d")
        .arg(queries)
        .args(["-Q", &RATE.to_string(), "-c", &CLIENTS.to_string()])
        .args(["-l", &WINDOW.as_secs().to_string(), "-t", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting dnsperf")
}

/// dnsperf (`cargo xtask bench` installs it with the tests' programs).
fn dnsperf_bin() -> Result<PathBuf> {
    which::which("dnsperf").context("dnsperf is missing: `apt-get install dnsperf`")
}

/// Waits for dnsperf and reads its counts.
fn finish(perf: Child) -> Result<Counted> {
    let out = perf.wait_with_output().context("dnsperf")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "dnsperf failed ({}): {}{}",
            out.status,
            text,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let count = |label: &str| -> Result<u64> {
        text.lines()
            .find_map(|line| line.trim().strip_prefix(label))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .with_context(|| format!("no `{label}` in dnsperf's output: {text}"))
    };
    Ok(Counted {
        sent: count("Queries sent:")?,
        lost: count("Queries lost:")?,
    })
}
