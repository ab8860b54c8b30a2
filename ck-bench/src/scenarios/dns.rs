//! The `dns` scenario: plain UDP request and response through rolls. dnsperf sends queries at
//! a fixed rate well below capacity ([`RATE`] a second from [`CLIENTS`] sockets, `-Q`) to
//! [`WORKERS`] DNS servers while ck rolls them [`ROLLS`] times, one `ck reload` after the other;
//! counted: queries lost (no answer within dnsperf's 1 s timeout). The contenders, each on a
//! fresh fleet in every one of [`ROUNDS`] rounds (the order rotating):
//! - **ck stateless**: `examples/python/dns.py` under `--udp-mode stateless`, on ck's sockets;
//! - **ck --no-bpf**: the same server on plain `SO_REUSEPORT`;
//! - **ck, dnsmasq adopted**: an unmodified dnsmasq that binds the port itself (`--adopt`; ck's
//!   bind hook adds the `SO_REUSEPORT` it never sets). Plain `SO_REUSEPORT` cannot run two of
//!   it on one port, so it has no plain column.
//!
//! The servers exit at once on SIGTERM, as DNS servers do: what a roll loses is what was
//! queued on, or still sent to, a socket that closes. The goal, of both ck columns: no query
//! lost, in all the rounds together.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use crate::rounds::{App, Contender, Figures, Goal, Group, Layout, Measured, NO_BPF};
use crate::table::{Table, Unit};
use crate::{Bench, Outcome};

/// Workers of each fleet.
const WORKERS: u32 = 4;
/// Queries a second, all clients together (a Python worker answers well over 5,000).
const RATE: u32 = 2_000;
/// dnsperf's clients, each a socket of its own.
const CLIENTS: u32 = 32;
/// `ck reload`s per round and contender (fewer in a quick run's shorter window).
const ROLLS: usize = 10;
/// How long dnsperf sends; the rolls must end [`AFTER`] before.
const WINDOW: Duration = Duration::from_secs(25);
/// Load after the last roll, at least.
const AFTER: Duration = Duration::from_secs(3);
/// Rounds: a round (three fleets, each loaded for [`WINDOW`]) takes well over a minute, and
/// the goal bounds a count, not a ratio: the fewest allowed.
const ROUNDS: usize = 3;
/// The column of the example server under ck.
const CK: &str = "ck stateless";
/// The column of dnsmasq under ck.
const DNSMASQ_ADOPTED: &str = "ck, dnsmasq adopted";

/// The DNS server of a fleet (a contender's setup is its index).
#[derive(Debug, Clone, Copy)]
enum Server {
    /// `examples/python/dns.py` on the socket ck hands it.
    Example,
    /// dnsmasq binding `$PORT` itself, adopted.
    Dnsmasq,
}

/// The servers, by setup index.
const SERVERS: [Server; 2] = [Server::Example, Server::Dnsmasq];

impl Server {
    /// ck's options besides `--no-bpf`.
    fn flags(self) -> &'static [&'static str] {
        match self {
            Server::Example => &["--udp-mode", "stateless"],
            Server::Dnsmasq => &["--udp-mode", "stateless", "--adopt"],
        }
    }

    /// The workers.
    fn group(self, root: &Path) -> Group {
        let argv = match self {
            Server::Example => {
                let script = root.join("examples/python/dns.py");
                vec!["python3".to_string(), script.display().to_string()]
            }
            Server::Dnsmasq => ["sh", "-c", DNSMASQ].map(String::from).to_vec(),
        };
        Group {
            workers: WORKERS,
            udp: true,
            app: App::Program {
                argv,
                env: Vec::new(),
                bare_env: Vec::new(),
            },
        }
    }
}

/// dnsmasq answering `bench.test` from its own table: no upstream, no cache, no files, in the
/// foreground, as root, on 127.0.0.1:$PORT only.
const DNSMASQ: &str = "exec dnsmasq --keep-in-foreground --conf-file=/dev/null --no-resolv \
                       --no-hosts --cache-size=0 --pid-file= --user=root --bind-interfaces \
                       --listen-address=127.0.0.1 --port=\"$PORT\" \
                       --address=/bench.test/127.0.0.1";

/// The contenders, in column order.
fn contenders() -> Vec<Contender> {
    vec![
        Contender::ck(CK, Server::Example.flags()).with_setup(0),
        Contender::no_bpf(NO_BPF, Server::Example.flags()).with_setup(0),
        Contender::ck(DNSMASQ_ADOPTED, Server::Dnsmasq.flags()).with_setup(1),
    ]
}

/// Runs the scenario.
pub fn run(bench: &Bench) -> Result<Outcome> {
    let root = crate::paths::workspace_root()?;
    let queries = bench.log_dir.join("dns-queries.txt");
    std::fs::write(&queries, "bench.test A\n").context("writing dnsperf's query file")?;
    let plan = bench.plan("dns", ROUNDS, contenders());
    let measured = plan.run(bench, |i, c, _| {
        let group = SERVERS[c.setup].group(root);
        let mut fleet = c.start(bench, &format!("dns{i}"), &group)?;
        let counted = one_run(bench, &queries, &mut fleet);
        fleet.stop(bench)?;
        let (sent, lost, rolls) = counted?;
        bench.progress(format_args!(
            "dns: {}: {lost} of {sent} queries lost through {rolls} rolls",
            c.label
        ));
        let mut f = Figures::new();
        f.set("sent", sent as f64)
            .set("lost", lost as f64)
            .set("rolls", rolls as f64);
        Ok(f)
    })?;
    let table = table(&measured)?;
    Ok(measured.outcome(vec![table]))
}

/// The table.
fn table(m: &Measured) -> Result<Table> {
    let mut t = Layout::new(
        m,
        &format!(
            "dns: dnsperf at {RATE} queries/s from {CLIENTS} sockets through {ROLLS} rolls of \
             {WORKERS} DNS servers for {} s, --udp-mode stateless, a fresh fleet each round",
            WINDOW.as_secs()
        ),
    );
    t.total(
        "queries lost (no answer within 1 s), all rounds",
        "lost",
        Unit::Count,
    )
    .goal(Goal::at_most(0.0, Unit::Count).of(&[CK, DNSMASQ_ADOPTED]))
    .values("queries lost in a round", "lost", Unit::Count)
    .values("queries sent in a round", "sent", Unit::Count)
    .detail()
    .note(
        "the servers exit at once on SIGTERM; plain SO_REUSEPORT keeps hashing queries to a \
         worker's socket until it closes, ck sends new queries to the new workers before the \
         old ones are stopped",
    );
    t.finish()
}

/// One fleet through the rolls under dnsperf: queries sent, lost, and the rolls done.
fn one_run(
    bench: &Bench,
    queries: &Path,
    fleet: &mut crate::rounds::Fleet,
) -> Result<(u64, u64, usize)> {
    // dnsperf takes whole seconds.
    let window = Duration::from_secs(bench.span(WINDOW).as_secs().max(1));
    let after = bench.span(AFTER);
    // A quick run's shorter window holds as many fewer rolls.
    let rolls = ((ROLLS as f64 * window.as_secs_f64() / WINDOW.as_secs_f64()) as usize).max(1);
    let port = fleet.addr().port();
    let inst = fleet
        .instance_mut()
        .context("dns's contenders are ck instances")?;
    let started = Instant::now();
    let perf = dnsperf(port, queries, window)?;
    std::thread::sleep(Duration::from_secs(1));
    for _ in 0..rolls {
        inst.ctl_ok(&["reload"])?;
    }
    let rolled = started.elapsed();
    if rolled + after > window {
        bail!(
            "{rolls} rolls took {rolled:?}, too long for dnsperf's {window:?}: the machine is \
             too busy for this scenario"
        );
    }
    let (sent, lost) = finish(perf)?;
    Ok((sent, lost, rolls))
}

/// Starts dnsperf against 127.0.0.1:`port` for `window` (whole seconds).
fn dnsperf(port: u16, queries: &Path, window: Duration) -> Result<Child> {
    Command::new(dnsperf_bin()?)
        .args(["-s", "127.0.0.1", "-p", &port.to_string()])
        .arg("-d")
        .arg(queries)
        .args(["-Q", &RATE.to_string(), "-c", &CLIENTS.to_string()])
        .args(["-l", &window.as_secs().to_string(), "-t", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting dnsperf")
}

/// dnsperf (`cargo xtask bench` installs it with the tests' programs).
fn dnsperf_bin() -> Result<PathBuf> {
    which::which("dnsperf").context("dnsperf is missing: `apt-get install dnsperf`")
}

/// Waits for dnsperf and reads its counts: queries sent and lost.
fn finish(perf: Child) -> Result<(u64, u64)> {
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
    Ok((count("Queries sent:")?, count("Queries lost:")?))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::rounds::{Plan, RoundFigures};

    #[test]
    fn a_query_lost_by_either_ck_column_in_any_round_misses_the_goal() {
        let plan = Plan::new("dns", ROUNDS, contenders(), "/ck".as_ref(), None);
        let round = |r: usize| RoundFigures {
            order: vec![],
            figures: plan
                .contenders()
                .iter()
                .map(|c| {
                    let lost = match c.label.as_str() {
                        NO_BPF => 40.0,
                        DNSMASQ_ADOPTED if r == 1 => 2.0,
                        _ => 0.0,
                    };
                    let f = BTreeMap::from([
                        ("lost".to_string(), lost),
                        ("sent".to_string(), 50_000.0),
                    ]);
                    (c.label.clone(), f)
                })
                .collect(),
            seconds: 80.0,
        };
        let t = table(&Measured::new(
            plan.clone(),
            (0..ROUNDS).map(round).collect(),
        ))
        .unwrap();
        assert_eq!(t.rows[0].cells[1].text, "120");
        assert_eq!(t.rows[0].cells[2].text, "2");
        assert_eq!(
            t.rows[0].goal.as_ref().unwrap().text(),
            "<= 0 (ck stateless, ck, dnsmasq adopted): NOT met"
        );
        assert_eq!(t.rows[1].cells[2].text, "0 (0-2)");
    }
}
