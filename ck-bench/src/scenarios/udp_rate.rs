//! The `udp-rate` scenario: the datagram rate through a UDP group. ck (`--udp-mode flow`: its
//! program runs for every datagram, the flow table looked up and kept), `ck --no-bpf` (plain
//! `SO_REUSEPORT`) and the same demo workers with no supervisor, [`WORKERS`] each, answering
//! every datagram. [`FLOWS`] client flows, each a UDP socket of its own (so many small flows),
//! on [`THREADS`] threads; each thread sends one datagram on each of its flows, then reads every
//! answer, and again, for [`RUN`] per contender and round. Reported: answered datagrams per
//! second of each (median of the rounds, lowest-highest), the per-round ratios to `--no-bpf` and
//! to no supervisor, datagrams lost; the control pair voids a run on a noisy machine.

use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};

use crate::rounds::contender::{self, App};
use crate::rounds::{BARE, Contender, Control, Figures, Goal, Group, Layout, Measured, NO_BPF};
use crate::table::{Table, Unit};
use crate::{Bench, Outcome};

/// Workers of each contender.
const WORKERS: u32 = 4;
/// Client flows (sockets), all threads together.
const FLOWS: usize = 256;
/// Client threads.
const THREADS: usize = 2;
/// How long one contender sends in a round.
pub(super) const RUN: Duration = Duration::from_secs(3);
/// Rounds: the goal bounds a ratio within 5 % of 1 (ck / `--no-bpf` at least 0.95), which takes
/// at least 7; a round is about 10 s.
const ROUNDS: usize = 7;
/// How long a flow waits for its answer before it counts it lost.
const ANSWER_WAIT: Duration = Duration::from_millis(200);
/// The least ratio of ck to plain `SO_REUSEPORT`.
const LEAST_RATIO: f64 = 0.95;

/// Answered datagrams and lost ones in `run` against `addr`.
pub(super) fn one_run(addr: SocketAddr, run: Duration) -> Result<(u64, u64)> {
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
                let until = Instant::now() + run;
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

/// The contenders, in column order.
fn contenders() -> Vec<Contender> {
    vec![
        Contender::ck("ck flow", &["--udp-mode", "flow"]),
        Contender::no_bpf(NO_BPF, &["--udp-mode", "flow"]),
        Contender::bare(),
    ]
}

/// The control pair: `--no-bpf` / no supervisor on the rate.
fn control() -> Control {
    Control::pair(NO_BPF, BARE, &[("rate", "answered datagrams/s")])
}

/// Runs the scenario.
pub fn run(bench: &Bench) -> Result<Outcome> {
    let plan = bench
        .plan("udp-rate", ROUNDS, contenders())
        .control(control());
    let group = Group {
        workers: WORKERS,
        udp: true,
        app: App::Demo,
    };
    let fleets = contender::start_all(bench, plan.contenders(), "udp-rate", &group)?;
    let run = bench.span(RUN);
    let measured = plan.run(bench, |i, _, _| {
        let (answered, lost) = one_run(fleets[i].addr(), run)?;
        let mut f = Figures::new();
        f.set("rate", answered as f64 / run.as_secs_f64())
            .set("lost", lost as f64);
        Ok(f)
    })?;
    contender::stop_all(bench, fleets)?;
    let table = table(&measured)?;
    Ok(measured.outcome(vec![table]))
}

/// The table.
fn table(m: &Measured) -> Result<Table> {
    let mut t = Layout::new(
        m,
        &format!(
            "udp-rate: {FLOWS} client flows of one datagram in flight each, {WORKERS} demo \
             workers answering each, {} s per contender and round",
            RUN.as_secs()
        ),
    );
    t.values("answered datagrams/s", "rate", Unit::Rate("dgram/s"))
        .ratios("answered: / --no-bpf", "rate", NO_BPF)
        .goal(Goal::at_least(LEAST_RATIO, Unit::Ratio))
        .ratios("answered: / no supervisor", "rate", BARE)
        .total(
            &format!(
                "datagrams lost (no answer within {} ms), all rounds",
                ANSWER_WAIT.as_millis()
            ),
            "lost",
            Unit::Count,
        );
    t.finish()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::rounds::{Plan, RoundFigures};

    #[test]
    fn the_goal_is_ck_over_plain_so_reuseport_round_by_round() {
        let plan =
            Plan::new("udp-rate", ROUNDS, contenders(), "/ck".as_ref(), None).control(control());
        let rates = [190.0, 200.0, 202.0];
        let round = |_| RoundFigures {
            order: vec![],
            figures: plan
                .contenders()
                .iter()
                .zip(rates)
                .map(|(c, rate)| {
                    let f = BTreeMap::from([("rate".to_string(), rate), ("lost".into(), 1.0)]);
                    (c.label.clone(), f)
                })
                .collect(),
            seconds: 10.0,
        };
        let m = Measured::new(plan.clone(), (0..ROUNDS).map(round).collect());
        assert_eq!(m.void, None);
        let t = table(&m).unwrap();
        assert_eq!(t.rows[1].cells[0].text, "0.95");
        assert_eq!(
            t.rows[1].goal.as_ref().unwrap().text(),
            ">= 0.95 (ck flow): met"
        );
        assert_eq!(t.rows[3].cells[2].text, "7");
    }
}
