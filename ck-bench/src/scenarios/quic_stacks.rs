//! The `quic` scenario's contenders and table of other QUIC stacks (`ck_tests::quic_servers`),
//! in `--udp-mode flow` (they choose random connection IDs), through the same changes and held
//! connections as the example server (see [`super::quic`]), in the same rounds:
//! - ngtcp2's example HTTP/3 server, unmodified under `--adopt` (it binds the port itself):
//!   once stopped with a signal it ignores (its connections kept until ck's `--udp-linger`
//!   finds its slot quiet), once with SIGTERM, on which it dies. Plain `SO_REUSEPORT` has no
//!   column for it: without ck's bind hook a second one cannot bind the port.
//! - aioquic (`examples/python/h3_server.py`, on ck's socket; it finishes its connections on
//!   SIGTERM), beside the same server on plain `SO_REUSEPORT` (`--no-bpf`).

use std::path::Path;

use anyhow::{Context as _, Result};
use ck_tests::quic_servers::{Stop, aioquic, ngtcp2};

use super::quic::{CONNECTIONS, Clients, WORKERS, churn};
use crate::Bench;
use crate::rounds::{App, Contender, Figures, Goal, Group, Layout, Measured, Role};
use crate::table::{Table, Unit};

/// The servers.
#[derive(Debug, Clone, Copy)]
enum Server {
    /// ngtcp2 stopped as said.
    Ngtcp2(Stop),
    /// The aioquic example.
    Aioquic,
}

/// The columns: the server, which ck, and the column's name (the contender's label).
const STACKS: [(Server, Role, &str); 4] = [
    (
        Server::Ngtcp2(Stop::IgnoredUntilQuiet),
        Role::Ck,
        "ngtcp2, stop signal ignored",
    ),
    (Server::Ngtcp2(Stop::Term), Role::Ck, "ngtcp2, SIGTERM"),
    (Server::Aioquic, Role::Ck, "aioquic"),
    (Server::Aioquic, Role::NoBpf, "aioquic, plain"),
];
/// The stacks held to no broken connection: those that finish their connections before they
/// exit.
const KEEP_THEIR_CONNECTIONS: [&str; 2] = ["ngtcp2, stop signal ignored", "aioquic"];

/// The contenders, one per stack; their setups are `offset`, `offset + 1`, ... Their `ck run`
/// options come with the server's command line ([`Stacks::one`]).
pub(super) fn contenders(offset: usize) -> Vec<Contender> {
    STACKS
        .iter()
        .enumerate()
        .map(|(k, (_, role, name))| {
            let c = match role {
                Role::Ck => Contender::ck(name, &[]),
                _ => Contender::no_bpf(name, &[]),
            };
            c.with_setup(offset + k)
        })
        .collect()
}

/// Each stack's ck options and command line (`OPTIONS... -- COMMAND...`).
pub(super) struct Stacks {
    args: Vec<Vec<String>>,
}

impl Stacks {
    /// The stacks' command lines, ngtcp2's with the page it serves written under the bench's
    /// log directory.
    pub(super) fn prepare(bench: &Bench) -> Result<Stacks> {
        let htdocs = bench.log_dir.join("ngtcp2-htdocs");
        let args = STACKS
            .iter()
            .map(|(server, _, _)| match server {
                Server::Ngtcp2(stop) => ngtcp2(&htdocs, *stop).context("ngtcp2's page"),
                Server::Aioquic => Ok(aioquic()),
            })
            .collect::<Result<_>>()?;
        Ok(Stacks { args })
    }

    /// One round of stack `stack` (contender `c`): a fresh fleet through the changes under the
    /// example client (`bin`) holding its connections.
    pub(super) fn one(
        &self,
        bench: &Bench,
        bin: &Path,
        c: &Contender,
        index: usize,
        stack: usize,
    ) -> Result<Figures> {
        let args = &self.args[stack];
        let split = args
            .iter()
            .position(|a| a == "--")
            .context("a stack's command line has its `--`")?;
        let mut c = c.clone();
        c.flags = args[..split].to_vec();
        let group = Group {
            workers: WORKERS,
            udp: true,
            app: App::Program {
                argv: args[split + 1..].to_vec(),
                env: Vec::new(),
                bare_env: Vec::new(),
            },
        };
        let mut fleet = c.start(bench, &format!("quic{index}"), &group)?;
        let seen = churn(bench, bin, &mut fleet, Clients::Held);
        fleet.stop(bench)?;
        let seen = seen?;
        let mut f = Figures::new();
        f.set("broken", seen.broken as f64)
            .set("ok", seen.ok as f64);
        Ok(f)
    }
}

/// The table: a column per stack (and `--against` copy).
pub(super) fn table(m: &Measured) -> Result<Table> {
    let names: Vec<&str> = STACKS.iter().map(|(_, _, name)| *name).collect();
    let mut t = Layout::with_columns(
        m,
        &format!(
            "quic, other stacks: flow mode through 5 rolls, a scale to 6 and back to 4 \
             ({WORKERS} workers, {CONNECTIONS} connections, a request every 100 ms each)"
        ),
        &names,
    );
    t.total("broken connections, all rounds", "broken", Unit::Count)
        .goal(Goal::at_most(0.0, Unit::Count).of(&KEEP_THEIR_CONNECTIONS))
        .values("requests answered", "ok", Unit::Count)
        .ratios(
            "requests answered: / aioquic, plain",
            "ok",
            "aioquic, plain",
        )
        .detail()
        .note(
            "ngtcp2: Debian's gtlsserver, adopted (--adopt). Stop signal ignored: ck runs it \
             with --stop-signal WINCH, so an old server keeps its connections until its slot \
             has had no datagram for --udp-linger (3 s), then ck kills it; SIGTERM: it dies at \
             once and its connections with it. aioquic: examples/python/h3_server.py on ck's \
             socket, which exits on SIGTERM once its connections are closed.",
        );
    t.finish()
}
