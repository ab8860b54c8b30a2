//! The `canary` scenario: `ck reload --canary 25` on [`WORKERS`] demo workers, once per round,
//! by client and by connection side by side. While the canary is judged, [`CLIENTS`] clients
//! (each its own source address, 127.x.y.7) connect once and then once more: by client, the
//! share of clients the canary got and how many changed side between their two connections;
//! by connection, the share of [`CLIENTS`] connections from one address. Reported with the
//! goals 25 +- 5 % and no client changing side.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use ck_tests::http::get_new_conn_from;

use crate::rounds::contender::{self, Fleet};
use crate::rounds::{Contender, FailureNotes, Figures, Goal, Group, Layout, Measured};
use crate::table::{Table, Unit};
use crate::{Bench, Outcome};

/// Workers of each contender.
const WORKERS: u32 = 4;
/// The canary's share, in percent.
const PERCENT: u32 = 25;
/// Clients (by client) or connections (by connection) per round.
const CLIENTS: u32 = 1000;
/// How long the canary is judged: long enough for both passes of the clients (a second or
/// two), and short enough for `ck reload` to answer within the harness's 20 s.
const WINDOW: &str = "8s";
/// Rounds: the goals are a band and a count, not a ratio near 1.
const ROUNDS: usize = 5;
/// How far from [`PERCENT`] the share may be, in points.
const BAND: f64 = 5.0;
/// The contender by client.
const BY_CLIENT: &str = "by client";
/// The contender by connection.
const BY_CONNECTION: &str = "by connection";

/// The contenders, in column order.
fn contenders() -> Vec<Contender> {
    vec![
        Contender::ck(BY_CLIENT, &[]),
        Contender::ck(BY_CONNECTION, &[]),
    ]
}

/// Runs the scenario.
pub fn run(bench: &Bench) -> Result<Outcome> {
    let plan = bench.plan("canary", ROUNDS, contenders());
    let mut fleets =
        contender::start_all(bench, plan.contenders(), "canary", &Group::demo(WORKERS))?;
    let measured = plan.run(bench, |i, c, _| round(&mut fleets[i], &c.label))?;
    contender::stop_all(bench, fleets)?;
    let table = table(&measured, &FailureNotes::new(0))?;
    Ok(measured.outcome(vec![table]))
}

/// Client `i`'s source address.
fn client(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 1 + (i / 250) as u8, (i % 250) as u8, 7))
}

/// One contender's round: a canary reload, the clients while it is judged, the roll's end.
fn round(fleet: &mut Fleet, label: &str) -> Result<Figures> {
    let addr = fleet.addr();
    let ck = fleet
        .instance_mut()
        .context("canary's contenders are ck instances")?;
    ck.wait_ready(WORKERS as usize, Duration::from_secs(30))?;
    let by = match label {
        BY_CLIENT => "client",
        _ => "connection",
    };
    let name = ck.name().to_string();
    let percent = PERCENT.to_string();
    let reload = std::thread::spawn(move || {
        ck_tests::ck::ck_output(&[
            "reload",
            "--name",
            &name,
            "--canary",
            &percent,
            "--canary-for",
            WINDOW,
            "--canary-by",
            by,
        ])
    });
    let judged = ck.wait_status("the canary judged", Duration::from_secs(30), |s| {
        s.canary.as_deref().is_some_and(|c| c.starts_with("judged"))
    })?;
    let canary: BTreeSet<u32> = judged
        .slots
        .iter()
        .filter(|s| s.canary)
        .filter_map(|s| s.pid)
        .collect();
    let source = |i: u32| match label {
        BY_CLIENT => client(i),
        _ => client(0),
    };
    let mut first = Vec::with_capacity(CLIENTS as usize);
    let mut failed = 0;
    for i in 0..CLIENTS {
        match get_new_conn_from(source(i), addr) {
            Ok(answer) => first.push(Some(canary.contains(&answer.pid))),
            Err(_) => {
                failed += 1;
                first.push(None);
            }
        }
    }
    let mut moved = 0;
    if label == BY_CLIENT {
        for (i, side) in first.iter().enumerate() {
            let again = get_new_conn_from(source(i as u32), addr).ok();
            let side_now = again.map(|a| canary.contains(&a.pid));
            if side_now.is_none() || side_now != *side {
                moved += 1;
            }
        }
    }
    let out = reload
        .join()
        .map_err(|_| anyhow::anyhow!("the reload thread"))?;
    if !out.status.success() {
        bail!("{label}: the canary reload failed: {out:?}");
    }
    let on_canary = first.iter().filter(|s| **s == Some(true)).count();
    let mut f = Figures::new();
    let share = on_canary as f64 * 100.0 / f64::from(CLIENTS);
    f.set("share_pct", share)
        .set("share_off", (share - f64::from(PERCENT)).abs())
        .set("failed", f64::from(failed));
    if label == BY_CLIENT {
        f.set("moved", f64::from(moved));
    }
    Ok(f)
}

/// The table.
fn table(m: &Measured, notes: &FailureNotes) -> Result<Table> {
    let mut t = Layout::with_columns(
        m,
        &format!(
            "canary: {WORKERS} workers, `ck reload --canary {PERCENT}` per round; {CLIENTS} \
             clients or connections"
        ),
        &[BY_CLIENT, BY_CONNECTION],
    );
    t.values(
        &format!("canary's share, points from {PERCENT} %"),
        "share_off",
        Unit::Ratio,
    )
    .goal(Goal::at_most(BAND, Unit::Ratio).of(&[BY_CLIENT, BY_CONNECTION]))
    .values("canary's share, %", "share_pct", Unit::Ratio)
    .detail()
    .total(
        "clients that changed side, all rounds",
        "moved",
        Unit::Count,
    )
    .goal(Goal::at_most(0.0, Unit::Count).of(&[BY_CLIENT]))
    .total("failed connections, all rounds", "failed", Unit::Count)
    .detail();
    notes.note(&mut t);
    t.finish()
}
