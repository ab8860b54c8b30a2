//! The `cork` scenario: the matrix of the SO_REUSEPORT + TCP_CORK article, reproduced with the
//! same kind of server (`examples/cork-server.c`: one connection at a time per process, four
//! small writes per response) under ck: 1 vs 4 workers, cork off vs on (and TCP_NODELAY for
//! comparison), a wrk-like keep-alive load of [`CONNECTIONS`] connections for [`DURATION`]
//! each, requests/s and mean latency, with the article's numbers beside ours.

use std::time::Duration;

use anyhow::Result;
use ck_tests::load::{self, LoadReport, LoadSpec, Mode};

use crate::Bench;
use crate::instance::{Instance, Variant};
use crate::table::{Cell, Goal, Table};

/// Keep-alive connections of the load (wrk -c100).
const CONNECTIONS: usize = 100;
/// Length of each run.
const DURATION: Duration = Duration::from_secs(8);
/// Limit of one request (wrk's default timeout is 2 s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// One cell of the matrix: workers, the server's socket option, the article's req/s.
struct Setup {
    workers: u32,
    option: &'static str,
    env: &'static str,
    article: Option<f64>,
}

const SETUPS: [Setup; 6] = [
    Setup {
        workers: 1,
        option: "no cork",
        env: "CORK=0",
        article: Some(22.46),
    },
    Setup {
        workers: 4,
        option: "no cork",
        env: "CORK=0",
        article: Some(88.77),
    },
    Setup {
        workers: 1,
        option: "TCP_CORK",
        env: "CORK=1",
        article: Some(44_645.9),
    },
    Setup {
        workers: 4,
        option: "TCP_CORK",
        env: "CORK=1",
        article: Some(143_654.0),
    },
    Setup {
        workers: 1,
        option: "TCP_NODELAY",
        env: "NODELAY=1",
        article: None,
    },
    Setup {
        workers: 4,
        option: "TCP_NODELAY",
        env: "NODELAY=1",
        article: None,
    },
];

/// Runs the matrix and returns the table.
pub fn run(bench: &Bench) -> Result<Table> {
    let server = ck_tests::cserver::cork_server();
    let server = server.to_string_lossy().to_string();
    let mut t = Table::with_columns(
        &format!(
            "cork: examples/cork-server.c under ck (one connection at a time per process, four \
             small writes per response), keep-alive load of {CONNECTIONS} connections for \
             {DURATION:?} each"
        ),
        &["ck, this machine", "the article"],
    );
    for (n, setup) in SETUPS.iter().enumerate() {
        bench.progress(format_args!(
            "cork: {} worker(s), {} ({}/{})",
            setup.workers,
            setup.option,
            n + 1,
            SETUPS.len()
        ));
        let args = ["--", "env", setup.env, server.as_str()];
        let mut inst = Instance::start(
            &bench.bin,
            &bench.log_dir,
            "cork",
            Variant::Ck,
            setup.workers,
            &args,
        )?;
        inst.wait_ready(setup.workers as usize)?;
        let report = measure(&inst);
        bench.report_log(&inst);
        inst.stop()?;
        let name = format!("{} worker(s), {}", setup.workers, setup.option);
        t.row_of(
            &format!("{name}: req/s"),
            vec![
                Cell::rate(report.rps(), "req/s"),
                setup
                    .article
                    .map_or_else(|| Cell::text("-"), |r| Cell::rate(r, "req/s")),
            ],
            Goal::None,
        );
        t.row_of(
            &format!("{name}: mean latency of answered requests"),
            vec![
                Cell::ms(Duration::from_micros(report.latency.mean() as u64)),
                Cell::text("-"),
            ],
            Goal::None,
        );
        t.detail();
        t.row_of(
            &format!("{name}: requests timed out (> {REQUEST_TIMEOUT:?})"),
            vec![Cell::count(report.timeout), Cell::text("-")],
            Goal::None,
        );
    }
    t.note(
        "why: each response is four small write()s. Nagle's algorithm sends the first at once \
         and holds the rest until that segment is acknowledged; the client delays its ACK \
         (up to ~40 ms on Linux) because it has nothing to send back until the response is \
         whole. So every response waits ~40 ms, and a process that serves one connection at a \
         time answers ~25 requests/s, whatever the machine: 1 worker ~22 req/s, 4 workers ~4x. \
         TCP_CORK holds the four pieces and sends them as one segment when the cork is pulled: \
         no wait, and the rate becomes CPU-bound. TCP_NODELAY also removes the wait, but sends \
         four segments per response (more packets and syscalls' worth of work per request).",
    );
    t.note(
        "with one connection at a time per process, the other connections of the load wait in \
         the accept queue; their requests time out (counted above) as with wrk",
    );
    Ok(t)
}

/// A keep-alive load on `inst`, like wrk -c100 (no retries).
fn measure(inst: &Instance) -> LoadReport {
    let mut spec = LoadSpec::for_duration(inst.addr(), Mode::KeepAlive, CONNECTIONS, DURATION);
    spec.timeout = REQUEST_TIMEOUT;
    spec.retry = false;
    load::run(spec)
}
