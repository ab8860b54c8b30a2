//! The `quic` scenario: HTTP/3 connections held open through a fleet's changes. [`WORKERS`]
//! workers of the quinn + h3 example server (`examples/quic`) in a UDP group, under
//! `--udp-mode quic`, `flow` and plain `SO_REUSEPORT` (`--no-bpf`). The example client holds
//! [`CONNECTIONS`] connections, each on a UDP socket of its own, each sending a request every
//! 100 ms and replaced after [`LIFETIME_MS`]; meanwhile 5 `ck reload`s, then `ck scale 6`, then
//! `ck scale 4`, one after the other; the load runs until [`AFTER`] after the last. Counted:
//! broken connections (a request that failed, a handshake that failed, a connection that ended
//! with an error the client did not ask for). The same with every client moving to a new local
//! port every [`REBIND_MS`] (client migration), and with every ClientHello padded to span
//! three Initial datagrams ([`HELLO_BYTES`]). Then ngtcp2's client (`gtlsclient`) moving to a
//! new port before its request while the fleet grows (NAT rebinding, another QUIC stack's
//! migration). Then a `kill -9` of one worker under the held connections: what breaks should be
//! that worker's own connections at most. Beside them, other QUIC stacks through the same
//! changes ([`super::quic_stacks`]).
//!
//! Every one of these (fleet and test) is a contender, on a fresh fleet in each of [`ROUNDS`]
//! rounds, the order rotating. Reported: the broken connections of all the rounds (one in any
//! round misses a goal of none), the other counts' medians with the lowest and highest round.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, Result, bail};
use ck_tests::quic_client::{Seen, sum_lines};
use nix::sys::signal::Signal;

use super::{grid, quic_stacks};
use crate::rounds::contender::READY_TIMEOUT;
use crate::rounds::{App, Contender, Figures, Fleet, Goal, Group, Layout, Measured, Role};
use crate::table::{Table, Unit};
use crate::{Bench, Outcome};
use ck_tests::ck::Ck;

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
/// Clients of ngtcp2 (`gtlsclient`) that move to a new port mid-connection.
const REBINDING: usize = 32;
/// Rounds: a round (19 fleets, each through the changes) takes minutes, and the goals bound
/// counts, not ratios: the fewest allowed.
const ROUNDS: usize = 3;
/// The fleets of the example server, in column order: the column's name, which ck, its
/// `--udp-mode`.
const FLEETS: [(&str, Role, &str); 3] = [
    ("ck quic", Role::Ck, "quic"),
    ("ck flow", Role::Ck, "flow"),
    ("plain", Role::NoBpf, "flow"),
];
/// Both ck modes, the columns of the goals every mode should meet.
const CK_MODES: [&str; 2] = ["ck quic", "ck flow"];
/// The column of the goals only quic mode can meet (a client that changes its address).
const QUIC_MODE: [&str; 1] = ["ck quic"];

/// What a contender does with its fleet in a round.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Test {
    /// The changes under the example client.
    Churn(Clients),
    /// A worker killed under the example client.
    Kill,
    /// ngtcp2's clients moving to a new port while the fleet grows.
    Rebinding,
}

/// The tests, in row order.
const TESTS: [Test; 5] = [
    Test::Churn(Clients::Held),
    Test::Churn(Clients::Migrating),
    Test::Churn(Clients::BigHello),
    Test::Kill,
    Test::Rebinding,
];
/// The setups of the example server: a contender's setup below this is `fleet * 5 + test`,
/// from it on one of [`quic_stacks`]'s.
const EXAMPLE_SETUPS: usize = FLEETS.len() * TESTS.len();

impl Test {
    /// The grid's row (the second half of the contender's label).
    fn row(self) -> &'static str {
        match self {
            Test::Churn(clients) => clients.label(),
            Test::Kill => "kill -9",
            Test::Rebinding => "ngtcp2 rebinding",
        }
    }
}

/// The contenders: each fleet in each test, then the other stacks.
fn contenders() -> Vec<Contender> {
    let mut all = Vec::new();
    for (f, (fleet, role, mode)) in FLEETS.iter().enumerate() {
        for (t, test) in TESTS.iter().enumerate() {
            let label = grid::label(fleet, test.row());
            let flags = ["--udp-mode", *mode];
            let c = match role {
                Role::Ck => Contender::ck(&label, &flags),
                _ => Contender::no_bpf(&label, &flags),
            };
            all.push(c.with_setup(f * TESTS.len() + t));
        }
    }
    all.extend(quic_stacks::contenders(EXAMPLE_SETUPS));
    all
}

/// Runs the scenario: both tables from the same rounds.
pub fn run(bench: &Bench) -> Result<Outcome> {
    let bin = example()?;
    let stacks = quic_stacks::Stacks::prepare(bench)?;
    let plan = bench.plan("quic", ROUNDS, contenders());
    let measured = plan.run(bench, |i, c, _| {
        let figures = match c.setup.checked_sub(EXAMPLE_SETUPS) {
            None => one_example(bench, &bin, c, i),
            Some(stack) => stacks.one(bench, &bin, c, i, stack),
        };
        figures.with_context(|| c.label.clone())
    })?;
    let tables = vec![table(&measured)?, quic_stacks::table(&measured)?];
    Ok(measured.outcome(tables))
}

/// The workers of a fleet of the example server (`bin`).
fn example_group(bin: &Path) -> Group {
    Group {
        workers: WORKERS,
        udp: true,
        app: App::Program {
            argv: vec![bin.display().to_string(), "serve".into()],
            env: Vec::new(),
            bare_env: Vec::new(),
        },
    }
}

/// One round of an example server's contender: a fresh fleet through its test.
fn one_example(bench: &Bench, bin: &Path, c: &Contender, index: usize) -> Result<Figures> {
    let test = TESTS[c.setup % TESTS.len()];
    let mut fleet = c.start(bench, &format!("quic{index}"), &example_group(bin))?;
    let figures = match test {
        Test::Churn(clients) => churn(bench, bin, &mut fleet, clients).map(|seen| {
            let mut f = Figures::new();
            f.set("broken", seen.broken as f64)
                .set("ok", seen.ok as f64)
                .set("moved", seen.moved as f64);
            f
        }),
        Test::Kill => one_kill(bench, bin, &mut fleet),
        Test::Rebinding => one_rebinding(&mut fleet),
    };
    fleet.stop(bench)?;
    figures
}

/// The `ck run` of a fleet.
fn ck_of(fleet: &mut Fleet) -> Result<&mut Ck> {
    fleet
        .instance_mut()
        .context("quic's contenders are ck instances")
}

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

/// A fleet through the changes: 5 `ck reload`s, `ck scale 6`, `ck scale 4`, with `clients` of
/// the example client (`bin`) until [`AFTER`] after the last.
pub(super) fn churn(
    bench: &Bench,
    bin: &Path,
    fleet: &mut Fleet,
    clients: Clients,
) -> Result<Seen> {
    let addr = fleet.addr();
    let inst = ck_of(fleet)?;
    // At most a minute; SIGTERM ends it AFTER the last change.
    let load = client(bin, addr, 60_000, &clients.args())?;
    let changes = (|| -> Result<()> {
        std::thread::sleep(Duration::from_secs(1));
        for _ in 0..5 {
            inst.ctl_ok(&["reload"])?;
        }
        inst.ctl_ok(&["scale", "6"])?;
        inst.wait_ready(6, READY_TIMEOUT)?;
        inst.ctl_ok(&["scale", "4"])?;
        std::thread::sleep(bench.span(AFTER));
        Ok(())
    })();
    ck_tests::sys::signal(load.id(), Signal::SIGTERM);
    let seen = finish(load);
    changes?;
    seen
}

/// A fleet under the held connections while one worker is killed with SIGKILL; the fleet is
/// whole again (the replacement ready) before the load ends. Counted: the broken connections in
/// all, and those of clients the killed worker never answered.
fn one_kill(bench: &Bench, bin: &Path, fleet: &mut Fleet) -> Result<Figures> {
    let addr = fleet.addr();
    let inst = ck_of(fleet)?;
    let load = client(bin, addr, 60_000, &[])?;
    let killed = (|| -> Result<u32> {
        std::thread::sleep(Duration::from_secs(1));
        let victim = *inst
            .status()?
            .serving_pids()
            .first()
            .context("no serving worker to kill")?;
        crate::process::kill(victim, Signal::SIGKILL)?;
        std::thread::sleep(bench.span(AFTER));
        inst.wait_ready(WORKERS as usize, READY_TIMEOUT)?;
        Ok(victim)
    })();
    ck_tests::sys::signal(load.id(), Signal::SIGTERM);
    let seen = finish(load)?;
    let victim = killed?;
    let elsewhere = seen
        .broken_pids
        .iter()
        .filter(|pids| !pids.contains(&victim))
        .count();
    let mut f = Figures::new();
    f.set("broken", seen.broken as f64)
        .set("elsewhere", elsewhere as f64)
        .set("ok", seen.ok as f64);
    Ok(f)
}

/// A fleet against [`REBINDING`] of ngtcp2's clients that each move to a new local port (NAT
/// rebinding) before their one request, while the fleet grows to 6: the clients left
/// unanswered.
fn one_rebinding(fleet: &mut Fleet) -> Result<Figures> {
    let addr = fleet.addr();
    let inst = ck_of(fleet)?;
    let mut grown = Ok(());
    let answers = ck_tests::quic_client::ngtcp2_rebinding(addr, REBINDING, || {
        grown = inst.ctl_ok(&["scale", "6"]).map(drop);
    });
    grown?;
    inst.wait_ready(6, READY_TIMEOUT)?;
    let unanswered = answers.iter().filter(|a| a.is_none()).count();
    let mut f = Figures::new();
    f.set("unanswered", unanswered as f64);
    Ok(f)
}

/// The example server's table: a column per fleet (and `--against` copy), rows per test.
fn table(m: &Measured) -> Result<Table> {
    let fleets: Vec<&str> = FLEETS.iter().map(|(name, _, _)| *name).collect();
    let columns = grid::columns(m, &fleets);
    let names: Vec<&str> = columns.iter().map(String::as_str).collect();
    let mut t = Layout::with_columns(
        m,
        &format!(
            "quic: HTTP/3 through 5 rolls, a scale to 6 and back to 4 ({WORKERS} quinn + h3 \
             workers, {CONNECTIONS} connections, a request every 100 ms each), a fresh fleet \
             per test and round"
        ),
        &names,
    );
    let none = |of: &[&str]| Goal::at_most(0.0, Unit::Count).of(of);
    for clients in [Clients::Held, Clients::Migrating, Clients::BigHello] {
        let row = clients.label();
        let (what, of): (String, &[&str]) = match clients {
            Clients::Held => ("broken connections".into(), &CK_MODES),
            Clients::Migrating => (
                format!("broken connections, clients migrating every {REBIND_MS} ms"),
                &QUIC_MODE,
            ),
            Clients::BigHello => (
                "broken connections, each ClientHello in 3 datagrams".into(),
                &CK_MODES,
            ),
        };
        t.row(
            &format!("{what}, all rounds"),
            grid::totals(m, &columns, row, "broken", Unit::Count),
        )
        .goal(none(of));
        t.row(
            &format!("{row}: requests answered"),
            grid::medians(m, &columns, row, "ok", Unit::Count),
        )
        .row(
            &format!("{row}: connections moved on by GOAWAY"),
            grid::medians(m, &columns, row, "moved", Unit::Count),
        );
    }
    let rebinding = Test::Rebinding.row();
    t.row(
        &format!(
            "ngtcp2's clients moving to a new port (NAT rebinding) while the fleet grows: \
             unanswered, of {REBINDING} a round, all rounds"
        ),
        grid::totals(m, &columns, rebinding, "unanswered", Unit::Count),
    )
    .goal(none(&QUIC_MODE));
    let kill = Test::Kill.row();
    t.row(
        &format!(
            "kill -9 of one worker of {WORKERS}: clients broken that it never answered, all \
             rounds"
        ),
        grid::totals(m, &columns, kill, "elsewhere", Unit::Count),
    )
    .goal(none(&CK_MODES))
    .row(
        &format!(
            "kill -9: broken connections, all (its share is about {})",
            CONNECTIONS / WORKERS
        ),
        grid::medians(m, &columns, kill, "broken", Unit::Count),
    )
    .row(
        "kill -9: requests answered",
        grid::medians(m, &columns, kill, "ok", Unit::Count),
    )
    .note(
        "broken: a request that failed, a handshake that failed, or a connection that ended \
         with an error the client did not ask for; GOAWAY moves are not broken (the client \
         opens a new connection, as HTTP/3 clients do). flow mode keeps a connection on its \
         worker while its address and port stay; quic mode by the worker's cookie in the \
         connection ID, whatever the address.",
    );
    t.finish()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::rounds::{Plan, RoundFigures};

    #[test]
    fn a_break_in_any_round_of_a_ck_mode_misses_its_goal() {
        let plan = Plan::new("quic", ROUNDS, contenders(), "/ck".as_ref(), None);
        assert_eq!(plan.contenders().len(), EXAMPLE_SETUPS + 4);
        // flow mode breaks one held connection in the last round; plain breaks them all.
        let figures = |label: &str, r: usize| -> BTreeMap<String, f64> {
            let broken = match label {
                "ck flow, held" if r == ROUNDS - 1 => 1.0,
                l if l.starts_with("plain") => 60.0,
                _ => 0.0,
            };
            ["broken", "ok", "moved", "elsewhere", "unanswered"]
                .iter()
                .map(|k| (k.to_string(), if *k == "ok" { 3700.0 } else { broken }))
                .collect()
        };
        let round = |r: usize| RoundFigures {
            order: vec![],
            figures: plan
                .contenders()
                .iter()
                .map(|c| (c.label.clone(), figures(&c.label, r)))
                .collect(),
            seconds: 240.0,
        };
        let m = Measured::new(plan.clone(), (0..ROUNDS).map(round).collect());
        let t = table(&m).unwrap();
        assert_eq!(t.columns, ["ck quic", "ck flow", "plain"]);
        let verdicts: Vec<String> = t
            .rows
            .iter()
            .filter_map(|r| r.goal.as_ref().map(|v| v.text()))
            .collect();
        assert_eq!(
            verdicts,
            [
                "<= 0 (ck quic, ck flow): NOT met",
                "<= 0 (ck quic): met",
                "<= 0 (ck quic, ck flow): met",
                "<= 0 (ck quic): met",
                "<= 0 (ck quic, ck flow): met",
            ]
        );
        assert_eq!(t.rows[0].cells[2].text, "180");
        assert_eq!(t.rows[1].cells[0].text, "3700");
        let stacks = quic_stacks::table(&m).unwrap();
        assert_eq!(stacks.rows[0].goal.as_ref().unwrap().met, Some(true));
    }
}
