//! The `quic` scenario's table of unmodified QUIC servers: ngtcp2's example HTTP/3 server
//! (`ck_tests::quic_servers`), which binds the port itself, under `--adopt` and `--udp-mode
//! flow`, through the same changes and held connections as the example server (see
//! [`super::quic`]). Once stopped with a signal it ignores (its connections kept until ck's
//! `--udp-linger` finds its slot quiet), once with SIGTERM, on which it dies. Plain
//! `SO_REUSEPORT` has no column: without ck's bind hook a second one cannot bind the port.

use anyhow::Result;
use ck_tests::quic_servers::{Stop, ngtcp2};

use super::Bench;
use super::instance::Variant;
use super::quic::{CONNECTIONS, Clients, WORKERS, churn, example};
use super::table::{Cell, Goal, Table};

/// The columns: how ck stops the servers, and the column's name.
const STOPS: [(Stop, &str); 2] = [
    (Stop::IgnoredUntilQuiet, "ngtcp2, stop signal ignored"),
    (Stop::Term, "ngtcp2, SIGTERM"),
];

/// Runs the servers through the changes and returns the table.
pub fn run(bench: &Bench) -> Result<Table> {
    let bin = example()?;
    let mut seen = Vec::new();
    for (stop, name) in STOPS {
        bench.progress(format_args!("quic: {name}, held clients"));
        let htdocs = bench.log_dir.join("ngtcp2-htdocs");
        let args = ngtcp2(&htdocs, stop)?;
        seen.push(churn(bench, &bin, Variant::Ck, &args, Clients::Held)?);
    }
    let names: Vec<&str> = STOPS.iter().map(|(_, name)| *name).collect();
    let mut table = Table::with_columns(
        &format!(
            "An unmodified QUIC server (ngtcp2's gtlsserver, --adopt, flow mode) through 5 \
             rolls, a scale to 6 and back to 4 ({WORKERS} workers, {CONNECTIONS} connections, \
             a request every 100 ms each)"
        ),
        &names,
    );
    table.row_of(
        "broken connections",
        seen.iter().map(|s| Cell::count(s.broken)).collect(),
        Goal::AtMost(0.0, "0 (stop signal ignored)"),
    );
    table.row_of(
        "requests answered",
        seen.iter().map(|s| Cell::count(s.ok)).collect(),
        Goal::None,
    );
    table.note(
        "stop signal ignored: ck runs it with --stop-signal WINCH, so an old server keeps its \
         connections until its slot has had no datagram for --udp-linger (3 s), then ck kills \
         it; SIGTERM: it dies at once and its connections with it",
    );
    Ok(table)
}
