//! What every real server under ck is promised ([`server_keeps_its_promises`]): rolls and
//! scale changes under load fail no request, a SIGKILL fails no more than the worker held, and
//! a stop leaves nothing. Failures are counted by the load client (`crate::load`); what a
//! killed worker held is counted by the kernel (`ck status`: its open connections, and the
//! connections the program sent it until it died).
use std::time::Duration;

use super::servers::{KeepAliveStop, Server};
use crate::READY_TIMEOUT;
use crate::churn::{Background, SETTLE, print_report};
use crate::ck::Ck;
use crate::load::Mode;
use crate::server_checks::stops_clean;
use crate::sys::{TempDir, kill_hard, pid_alive, poll_until};

/// Rolls under each load.
const ROLLS: usize = 5;

/// Starts `server` under ck, then checks under a new-connection load and under a keep-alive
/// load that [`ROLLS`] rolls, a scale-up and a scale-down fail no request, that a SIGKILLed
/// worker fails no more than it held, and that `ck stop` leaves nothing.
///
/// The keep-alive client never retries, except for servers that close idle keep-alive
/// connections at once when told to stop ([`KeepAliveStop::ClosesAtOnce`]): a request sent on
/// one as it closes fails without a retry, as it would without ck. Those requests are printed
/// (`retried`): what a client that never retries loses with that server.
pub fn server_keeps_its_promises(server: Server) {
    let dir = TempDir::new(server.label());
    let (mut ck, port) = server.start(&dir);
    for mode in [Mode::NewConnection, Mode::KeepAlive] {
        changes_fail_nothing(&mut ck, port, server, mode);
    }
    a_kill_fails_no_more_than_it_held(&mut ck, port, server);
    stops_clean(ck, port, server.label());
}

/// Under a load in `mode`: [`ROLLS`] rolls, then `ck scale 3` and `ck scale 2`, fail nothing.
fn changes_fail_nothing(ck: &mut Ck, port: u16, server: Server, mode: Mode) {
    let label = format!("{} {mode:?}", server.label());
    let retry = mode == Mode::KeepAlive && server.keep_alive_stop() == KeepAliveStop::ClosesAtOnce;
    let load = Background::start_with(port, mode, retry, server.rate());
    std::thread::sleep(SETTLE);
    for roll in 1..=ROLLS {
        let out = ck.ctl(&["reload"]).expect("ck reload");
        assert!(
            out.status.success(),
            "{label}: roll {roll} failed: {}\n--- ck log ---\n{}",
            crate::ck::said(&out),
            ck.log()
        );
        std::thread::sleep(SETTLE / 2);
    }
    ck.ctl_ok(&["scale", "3"]).expect("ck scale");
    ck.wait_ready(3, READY_TIMEOUT)
        .expect("wait for ready slots");
    std::thread::sleep(SETTLE / 2);
    ck.ctl_ok(&["scale", "2"]).expect("ck scale");
    ck.wait_status("scaled down to 2", READY_TIMEOUT, |s| {
        s.slots.len() == 2 && s.ready_count() == 2
    })
    .expect("wait for the status");
    std::thread::sleep(SETTLE);
    let report = load.finish();
    print_report(&label, &report);
    assert!(
        report.ok > 0,
        "{label}: nothing answered: {}",
        report.summary()
    );
    assert_eq!(
        report.failed(),
        0,
        "{label}: {ROLLS} rolls and a scale up and down failed requests: {}\n{:?}",
        report.summary(),
        report.errors
    );
    if retry {
        eprintln!(
            "{label}: {} request(s) sent again on a new connection (their idle keep-alive \
             connection closed at the stop signal): a client that never retries loses these",
            report.retried
        );
    }
}

/// Under a new-connection load that never retries, SIGKILLs one worker's whole process group:
/// the load loses no more requests than the worker held (its open connections when the kill
/// was decided, and those the program sent it until it died), and none is refused or times
/// out; the slot gets a ready replacement.
fn a_kill_fails_no_more_than_it_held(ck: &mut Ck, port: u16, server: Server) {
    let label = server.label();
    let load = Background::start_with(port, Mode::NewConnection, false, server.rate());
    std::thread::sleep(SETTLE);
    let before = ck.status().expect("ck status");
    let victim = before.ready().next().expect("a ready worker").slot;
    let pid = before.worker_pid(victim);
    let held = ck.status().expect("ck status").connections()[&victim];
    kill_hard(pid);
    assert!(
        poll_until(Duration::from_secs(5), Duration::from_millis(5), || {
            !pid_alive(pid)
        }),
        "{label}: worker {pid} survived SIGKILL"
    );
    let seen = ck
        .wait_status("the kill seen", READY_TIMEOUT, |s| {
            s.slot(victim).pid != Some(pid) || s.slot(victim).state != "ready"
        })
        .expect("wait for the status");
    let sent = seen.slot(victim).selected - before.slot(victim).selected;
    ck.wait_status("the killed worker replaced", READY_TIMEOUT, |s| {
        s.ready_count() == 2 && s.slot(victim).pid.is_some_and(|p| p != pid)
    })
    .expect("wait for the status");
    std::thread::sleep(SETTLE);
    let report = load.finish();
    print_report(&format!("{label} kill"), &report);
    assert_eq!(report.refused, 0, "{label}: {}", report.summary());
    assert_eq!(report.timeout, 0, "{label}: {}", report.summary());
    assert!(
        report.failed() <= held + sent,
        "{label}: {} failed, more than the killed worker held ({held} open, {sent} sent to it \
         after): {}",
        report.failed(),
        report.summary()
    );
}
