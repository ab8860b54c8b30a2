//! The `quic` scenario's table of other QUIC stacks (`ck_tests::quic_servers`), in `--udp-mode
//! flow` (they choose random connection IDs), through the same changes and held connections as
//! the example server (see [`super::quic`]):
//! - ngtcp2's example HTTP/3 server, unmodified under `--adopt` (it binds the port itself):
//!   once stopped with a signal it ignores (its connections kept until ck's `--udp-linger`
//!   finds its slot quiet), once with SIGTERM, on which it dies. Plain `SO_REUSEPORT` has no
//!   column for it: without ck's bind hook a second one cannot bind the port.
//! - aioquic (`examples/python/h3_server.py`, on ck's socket; it finishes its connections on
//!   SIGTERM), beside the same server on plain `SO_REUSEPORT` (`--no-bpf`).

use anyhow::Result;
use ck_tests::quic_servers::{Stop, aioquic, ngtcp2};

use super::quic::{CONNECTIONS, Clients, WORKERS, churn, example};
use crate::Bench;
use crate::instance::Variant;
use crate::table::{Cell, Goal, Table};

/// The servers, in column order.
#[derive(Debug, Clone, Copy)]
enum Server {
    /// ngtcp2 stopped as said.
    Ngtcp2(Stop),
    /// The aioquic example.
    Aioquic,
}

/// The columns: the server, which ck, and the column's name.
const COLUMNS: [(Server, Variant, &str); 4] = [
    (
        Server::Ngtcp2(Stop::IgnoredUntilQuiet),
        Variant::Ck,
        "ngtcp2, stop signal ignored",
    ),
    (Server::Ngtcp2(Stop::Term), Variant::Ck, "ngtcp2, SIGTERM"),
    (Server::Aioquic, Variant::Ck, "aioquic"),
    (Server::Aioquic, Variant::Baseline, "aioquic, plain"),
];

/// Runs the servers through the changes and returns the table.
pub fn run(bench: &Bench) -> Result<Table> {
    let bin = example()?;
    let mut seen = Vec::new();
    for (server, variant, name) in COLUMNS {
        bench.progress(format_args!("quic: {name}, held clients"));
        let args = match server {
            Server::Ngtcp2(stop) => ngtcp2(&bench.log_dir.join("ngtcp2-htdocs"), stop)?,
            Server::Aioquic => aioquic(),
        };
        seen.push(churn(bench, &bin, variant, &args, Clients::Held)?);
    }
    let names: Vec<&str> = COLUMNS.iter().map(|(_, _, name)| *name).collect();
    let mut table = Table::with_columns(
        &format!(
            "Other QUIC stacks in flow mode through 5 rolls, a scale to 6 and back to 4 \
             ({WORKERS} workers, {CONNECTIONS} connections, a request every 100 ms each)"
        ),
        &names,
    );
    table.ratio_between(2, 3);
    table.row_of(
        "broken connections",
        seen.iter().map(|s| Cell::count(s.broken)).collect(),
        Goal::AtMost(0.0, "0 (ngtcp2 with its stop signal ignored)"),
    );
    table.row_of(
        "requests answered",
        seen.iter().map(|s| Cell::count(s.ok)).collect(),
        Goal::None,
    );
    table.note(
        "ngtcp2: Debian's gtlsserver, adopted (--adopt). Stop signal ignored: ck runs it with \
         --stop-signal WINCH, so an old server keeps its connections until its slot has had no \
         datagram for --udp-linger (3 s), then ck kills it; SIGTERM: it dies at once and its \
         connections with it. aioquic: examples/python/h3_server.py on ck's socket, which exits \
         on SIGTERM once its connections are closed.",
    );
    Ok(table)
}
