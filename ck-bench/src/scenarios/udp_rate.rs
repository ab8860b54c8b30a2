//! The datagram rate through a UDP group: ck (`--udp-mode flow`, its program run for every
//! datagram, the flow table looked up and kept) beside plain `SO_REUSEPORT` (`--no-bpf`), both
//! with [`WORKERS`] demo workers that answer every datagram. [`FLOWS`] client flows, each a UDP
//! socket of its own (so many small flows), on [`THREADS`] threads; each thread sends one
//! datagram on each of its flows, then reads every answer, and again, for [`RUN`]. [`RUNS`]
//! runs per fleet, taking turns (ck first in odd runs, plain first in even ones); reported: the
//! median answered datagrams per second of each, and their ratio.

use std::{
    net::{SocketAddr, UdpSocket},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};

use crate::Bench;
use crate::instance::{Instance, Variant};
use crate::table::{Cell, Goal, Table, median};

/// Workers of each fleet.
const WORKERS: u32 = 4;
/// Client flows (sockets), all threads together.
const FLOWS: usize = 256;
/// Client threads.
const THREADS: usize = 2;
/// How long one run sends.
const RUN: Duration = Duration::from_secs(3);
/// Runs per fleet.
const RUNS: usize = 5;
/// How long a flow waits for its answer before it counts it lost.
const ANSWER_WAIT: Duration = Duration::from_millis(200);

/// Answered datagrams and lost ones in one run against `addr`.
pub(super) fn one_run(addr: SocketAddr) -> Result<(u64, u64)> {
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            std::thread::spawn(move || -> Result<(u64, u64)> {
                let sockets = (0..FLOWS / THREADS)
                    .map(|_| {
                        let socket = UdpSocket::bind("127.0.0.1:0")?;
                        socket.set_read_timeout(Some(ANSWER_WAIT))?;
                        Ok(socket)
                    })
                    .collect::<std::io::Result<Vec<_>>>()
                    .context("client sockets")?;
                let (mut answered, mut lost) = (0, 0);
                let mut buf = [0u8; 256];
                let until = Instant::now() + RUN;
                while Instant::now() < until {
                    for socket in &sockets {
                        socket.send_to(b"ping", addr).context("sending")?;
                    }
                    for socket in &sockets {
                        match socket.recv(&mut buf) {
                            Ok(_) => answered += 1,
                            Err(_) => lost += 1,
                        }
                    }
                }
                Ok((answered, lost))
            })
        })
        .collect();
    let mut total = (0, 0);
    for thread in threads {
        let (answered, lost) = thread
            .join()
            .map_err(|_| anyhow::anyhow!("a client thread panicked"))??;
        total.0 += answered;
        total.1 += lost;
    }
    Ok(total)
}

/// Runs the scenario and returns the table.
pub fn run(bench: &Bench) -> Result<Table> {
    let mut fleets = Vec::new();
    for (variant, extra) in [
        (Variant::Ck, ["--udp-mode", "flow"]),
        (Variant::Baseline, ["--udp-mode", "flow"]),
    ] {
        let mut inst = Instance::start_udp(
            &bench.bin,
            &bench.log_dir,
            "udp-rate",
            variant,
            WORKERS,
            &extra,
        )?;
        inst.wait_ready(WORKERS as usize)?;
        fleets.push(inst);
    }
    // rates[fleet]: answered datagrams per second of each run; lost[fleet]: summed.
    let mut rates = vec![Vec::new(), Vec::new()];
    let mut lost = [0u64; 2];
    for run in 0..RUNS {
        let order = if run % 2 == 0 { [0, 1] } else { [1, 0] };
        for fleet in order {
            bench.progress(format_args!(
                "udp-rate: run {} of {RUNS}, {}",
                run + 1,
                ["ck", "plain"][fleet]
            ));
            let (answered, missed) = one_run(fleets[fleet].addr())?;
            rates[fleet].push(answered as f64 / RUN.as_secs_f64());
            lost[fleet] += missed;
        }
    }
    for inst in fleets {
        bench.report_log(&inst);
        inst.stop()?;
    }
    let mut table = Table::with_columns(
        &format!(
            "UDP datagram rate, {FLOWS} client flows of one datagram in flight each, {WORKERS} \
             demo workers answering each ({RUNS} runs each, taking turns)"
        ),
        &["ck flow", "plain"],
    );
    table.row_of(
        "answered datagrams per second (median)",
        rates
            .iter()
            .map(|r| Cell::rate(median(r), "dgram/s"))
            .collect(),
        Goal::RatioAtLeast(0.95),
    );
    table.row_of(
        "datagrams lost (no answer within 200 ms), all runs",
        lost.iter().map(|n| Cell::count(*n)).collect(),
        Goal::None,
    );
    for (name, r) in ["ck flow", "plain"].iter().zip(&rates) {
        let runs: Vec<String> = r.iter().map(|v| format!("{v:.0}")).collect();
        table.note(format!("{name}, each run: {}", runs.join(", ")));
    }
    Ok(table)
}
