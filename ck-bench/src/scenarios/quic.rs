//! The `quic` scenario: HTTP/3 connections held open through a fleet's changes. 4 workers of the
//! quinn + h3 example server (`examples/quic`) in a UDP group, under `--udp-mode quic`, `flow`
//! and plain `SO_REUSEPORT` (`--no-bpf`), side by side in one run. The example client holds
//! [`CONNECTIONS`] connections, each on a UDP socket of its own, each sending a request every
//! 100 ms and replaced after [`LIFETIME_MS`]; meanwhile 5 `ck reload`s, then `ck scale 6`, then
//! `ck scale 4`, one after the other; the load runs until 5 s after the last. Counted: broken
//! connections (a request that failed, a handshake that failed, a connection that ended with an
//! error the client did not ask for). Then the same with every client moving to a new local
//! port every [`REBIND_MS`] (client migration), and with every ClientHello padded to span
//! three Initial datagrams ([`HELLO_BYTES`]). Then ngtcp2's client (`gtlsclient`) moving to a
//! new port before its request while the fleet grows (NAT rebinding, another QUIC stack's
//! migration). Then a `kill -9` of one worker under the held connections: what breaks should be
//! that worker's own connections at most.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, Result, bail};
use ck_tests::quic_client::{Seen, sum_lines};

use crate::Bench;
use crate::instance::{Instance, Variant};
use crate::table::{Cell, Goal, Table};

/// Workers of each fleet.
pub(super) const WORKERS: u32 = 4;
/// Connections the client holds open.
pub(super) const CONNECTIONS: u32 = 64;
/// How long each connection lives before the client replaces it.
const LIFETIME_MS: u32 = 3_000;
/// Client migration: every client moves to a new local port this often.
const REBIND_MS: u32 = 500;
/// The padded ClientHello's ALPN bytes: the ClientHello spans three Initial datagrams.
const HELLO_BYTES: u32 = 3_000;
/// How long the load runs after the last change.
const AFTER: Duration = Duration::from_secs(5);
/// The fleets, in column order: which ck, its `--udp-mode` and the column's name.
const FLEETS: [(Variant, &str, &str); 3] = [
    (Variant::Ck, "quic", "ck quic"),
    (Variant::Ck, "flow", "ck flow"),
    (Variant::Baseline, "flow", "plain"),
];

/// The example's release binary (built by `cargo xtask build --release`, as ck is).
pub(super) fn example() -> Result<PathBuf> {
    let bin = crate::paths::target_dir()?.join("release/ck-example-quic");
    if !bin.exists() {
        bail!(
            "{} is missing: `cargo xtask bench` builds it (`cargo build --release -p \
             ck-example-quic`)",
            bin.display()
        );
    }
    Ok(bin)
}

/// Starts the client against `addr` for `ms`, with `extra` options.
pub(super) fn client(bin: &Path, addr: SocketAddr, ms: u128, extra: &[String]) -> Result<Child> {
    Command::new(bin)
        .arg("client")
        .arg(addr.to_string())
        .args(["--connections", &CONNECTIONS.to_string()])
        .args(["--interval-ms", "100"])
        .args(["--lifetime-ms", &LIFETIME_MS.to_string()])
        .args(["--duration-ms", &ms.to_string()])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("starting ck-example-quic client")
}

/// Waits for the client and sums its lines.
pub(super) fn finish(child: Child) -> Result<Seen> {
    let out = child.wait_with_output().context("the client")?;
    if !out.status.success() {
        bail!(
            "the client failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    sum_lines(&String::from_utf8_lossy(&out.stdout)).context("the client's JSON lines")
}

/// How the clients behave in a run under the changes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Clients {
    /// Each on its own address and port.
    Held,
    /// Each moving to a new local port every [`REBIND_MS`].
    Migrating,
    /// Each with a ClientHello of [`HELLO_BYTES`] of ALPN (three Initial datagrams).
    BigHello,
}

impl Clients {
    /// The client's extra options.
    fn args(self) -> Vec<String> {
        match self {
            Clients::Held => Vec::new(),
            Clients::Migrating => vec!["--rebind-ms".into(), REBIND_MS.to_string()],
            Clients::BigHello => vec!["--hello-bytes".into(), HELLO_BYTES.to_string()],
        }
    }

    /// The rows' words for these clients.
    fn label(self) -> &'static str {
        match self {
            Clients::Held => "held",
            Clients::Migrating => "migrating",
            Clients::BigHello => "3-datagram ClientHello",
        }
    }
}

/// One fleet of the example server in `mode` under the changes, with `clients`.
fn one_run(
    bench: &Bench,
    bin: &Path,
    variant: Variant,
    mode: &str,
    clients: Clients,
) -> Result<Seen> {
    churn(bench, bin, variant, &example_args(bin, mode)?, clients)
}

/// ck's options and command for [`WORKERS`] of the example server (`bin`) in `mode`.
fn example_args(bin: &Path, mode: &str) -> Result<Vec<String>> {
    let bin = bin.to_str().context("a UTF-8 path")?;
    Ok(["--udp-mode", mode, "--", bin, "serve"]
        .map(String::from)
        .to_vec())
}

/// [`WORKERS`] of the example server (`bin`) in `mode`, started as `what` and ready.
fn example_fleet(
    bench: &Bench,
    what: &str,
    bin: &Path,
    variant: Variant,
    mode: &str,
) -> Result<Instance> {
    let args = example_args(bin, mode)?;
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut inst = Instance::start_udp(&bench.bin, &bench.log_dir, what, variant, WORKERS, &args)?;
    inst.wait_ready(WORKERS as usize)?;
    Ok(inst)
}

/// A fleet of [`WORKERS`] started with ck options and command `args`, under the changes: 5
/// `ck reload`s, `ck scale 6`, `ck scale 4`, with `clients` of the example client (`bin`)
/// until [`AFTER`] after the last.
pub(super) fn churn(
    bench: &Bench,
    bin: &Path,
    variant: Variant,
    args: &[String],
    clients: Clients,
) -> Result<Seen> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut inst =
        Instance::start_udp(&bench.bin, &bench.log_dir, "quic", variant, WORKERS, &args)?;
    inst.wait_ready(WORKERS as usize)?;
    let addr: SocketAddr = inst.addr();
    // At most a minute; SIGTERM ends it AFTER the last change.
    let load = client(bin, addr, 60_000, &clients.args())?;
    std::thread::sleep(Duration::from_secs(1));
    for _ in 0..5 {
        inst.ctl(&["reload"])?;
    }
    inst.ctl(&["scale", "6"])?;
    inst.wait_ready(6)?;
    inst.ctl(&["scale", "4"])?;
    std::thread::sleep(AFTER);
    ck_tests::sys::signal(load.id(), nix::sys::signal::Signal::SIGTERM);
    let seen = finish(load)?;
    bench.report_log(&inst);
    inst.stop()?;
    Ok(seen)
}

/// What a `kill -9` of one worker broke: in all, and of the clients the killed worker never
/// answered.
#[derive(Debug, Clone, Copy)]
struct Killed {
    broken: u64,
    elsewhere: u64,
    ok: u64,
}

/// One fleet under the held connections while one worker is killed with SIGKILL; the fleet
/// is whole again (the replacement ready) before the load ends.
fn one_kill(bench: &Bench, bin: &Path, variant: Variant, mode: &str) -> Result<Killed> {
    let mut inst = example_fleet(bench, "quic-kill", bin, variant, mode)?;
    let load = client(bin, inst.addr(), 60_000, &[])?;
    std::thread::sleep(Duration::from_secs(1));
    let victim = *inst
        .serving_pids()?
        .first()
        .context("no serving worker to kill")?;
    crate::instance::kill(victim, nix::sys::signal::Signal::SIGKILL)?;
    std::thread::sleep(AFTER);
    inst.wait_ready(WORKERS as usize)?;
    ck_tests::sys::signal(load.id(), nix::sys::signal::Signal::SIGTERM);
    let seen = finish(load)?;
    bench.report_log(&inst);
    inst.stop()?;
    let elsewhere = seen
        .broken_pids
        .iter()
        .filter(|pids| !pids.contains(&victim))
        .count() as u64;
    Ok(Killed {
        broken: seen.broken,
        elsewhere,
        ok: seen.ok,
    })
}

/// Clients of ngtcp2 (`gtlsclient`) that move to a new port mid-connection.
const REBINDING: usize = 32;

/// One fleet against [`REBINDING`] of ngtcp2's clients that each move to a new local port
/// (NAT rebinding) before their one request, while the fleet grows to 6: the clients left
/// unanswered.
fn one_rebinding(bench: &Bench, bin: &Path, variant: Variant, mode: &str) -> Result<u64> {
    let mut inst = example_fleet(bench, "quic-rebind", bin, variant, mode)?;
    let mut grown = Ok(());
    let answers = ck_tests::quic_client::ngtcp2_rebinding(inst.addr(), REBINDING, || {
        grown = inst.ctl(&["scale", "6"]).map(drop);
    });
    grown?;
    inst.wait_ready(6)?;
    bench.report_log(&inst);
    inst.stop()?;
    Ok(answers.iter().filter(|a| a.is_none()).count() as u64)
}

/// Runs the scenario and returns the table.
pub fn run(bench: &Bench) -> Result<Table> {
    let bin = example()?;
    let kinds = [Clients::Held, Clients::Migrating, Clients::BigHello];
    let mut columns = Vec::new();
    for clients in kinds {
        let mut row = Vec::new();
        for (variant, mode, name) in FLEETS {
            bench.progress(format_args!("quic: {name}, {} clients", clients.label()));
            row.push(one_run(bench, &bin, variant, mode, clients)?);
        }
        columns.push(row);
    }
    let mut killed = Vec::new();
    for (variant, mode, name) in FLEETS {
        bench.progress(format_args!("quic: {name}, kill -9 of one worker"));
        killed.push(one_kill(bench, &bin, variant, mode)?);
    }
    let mut unanswered = Vec::new();
    for (variant, mode, name) in FLEETS {
        bench.progress(format_args!(
            "quic: {name}, ngtcp2's clients moving to a new port"
        ));
        unanswered.push(one_rebinding(bench, &bin, variant, mode)?);
    }
    let names: Vec<&str> = FLEETS.iter().map(|(_, _, name)| *name).collect();
    let mut table = Table::with_columns(
        &format!(
            "HTTP/3 through 5 rolls, a scale to 6 and back to 4 ({WORKERS} quinn + h3 workers, \
             {CONNECTIONS} connections, a request every 100 ms each)"
        ),
        &names,
    );
    let count = |v: u64| Cell::count(v);
    for (clients, seen) in kinds.iter().zip(&columns) {
        let (what, goal) = match clients {
            Clients::Held => ("broken connections".to_string(), Goal::AtMost(0.0, "0")),
            Clients::Migrating => (
                format!("broken connections, clients migrating every {REBIND_MS} ms"),
                Goal::AtMost(0.0, "0 (quic mode)"),
            ),
            Clients::BigHello => (
                "broken connections, each ClientHello in 3 datagrams".to_string(),
                Goal::AtMost(0.0, "0"),
            ),
        };
        table.row_of(&what, seen.iter().map(|s| count(s.broken)).collect(), goal);
        let label = clients.label();
        table.row_of(
            &format!("{label}: requests answered"),
            seen.iter().map(|s| count(s.ok)).collect(),
            Goal::None,
        );
        table.row_of(
            &format!("{label}: connections moved on by GOAWAY"),
            seen.iter().map(|s| count(s.moved)).collect(),
            Goal::None,
        );
    }
    table.row_of(
        &format!(
            "ngtcp2's clients moving to a new port (NAT rebinding) while the fleet grows: \
             unanswered, of {REBINDING}"
        ),
        unanswered.iter().map(|n| count(*n)).collect(),
        Goal::AtMost(0.0, "0 (quic mode)"),
    );
    table.row_of(
        &format!("kill -9 of one worker of {WORKERS}: clients broken that it never answered"),
        killed.iter().map(|s| count(s.elsewhere)).collect(),
        Goal::AtMost(0.0, "0 (only its own break)"),
    );
    table.row_of(
        &format!(
            "kill -9: broken connections, all (its share is about {})",
            CONNECTIONS / WORKERS
        ),
        killed.iter().map(|s| count(s.broken)).collect(),
        Goal::None,
    );
    table.row_of(
        "kill -9: requests answered",
        killed.iter().map(|s| count(s.ok)).collect(),
        Goal::None,
    );
    table.note(
        "broken: a request that failed, a handshake that failed, or a connection that ended \
         with an error the client did not ask for; GOAWAY moves are not broken (the client \
         opens a new connection, as HTTP/3 clients do). flow mode keeps a connection on its \
         worker while its address and port stay; quic mode by the worker's cookie in the \
         connection ID, whatever the address.",
    );
    Ok(table)
}
