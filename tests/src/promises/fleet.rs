//! What every real server under ck is promised ([`server_keeps_its_promises`]): [`ROLLS`]
//! rolls, a scale-up and a scale-down under a new-connection load and under a keep-alive load,
//! both from a client that never retries, fail no request, except, with a server that closes
//! its idle keep-alive connections at its stop signal, no more than the connections its old
//! workers held when signalled (ck logs each count, read from the kernel as it sends the
//! signal); a SIGKILLed worker fails only requests on connections it had accepted
//! (`super::kill`); and a stop leaves nothing.
use super::figures::ROLLS;
use super::kill::{assert_only_accepted_failed, freeze_and_kill};
use super::servers::{KeepAliveStop, Server};
use crate::READY_TIMEOUT;
use crate::churn::{Background, SETTLE, print_report};
use crate::ck::Ck;
use crate::load::{LoadReport, Mode};
use crate::server_checks::stops_clean;
use crate::sys::TempDir;

/// Starts `server` under ck, then checks under a new-connection load and under a keep-alive
/// load (neither retries a request) that [`ROLLS`] rolls, a scale-up and a scale-down fail no
/// more than [`allowed_failures`], that a SIGKILLed worker fails only requests on connections
/// it had accepted, and that `ck stop` leaves nothing.
pub fn server_keeps_its_promises(server: Server) {
    let dir = TempDir::new(server.label());
    let (mut ck, port) = server.start(&dir);
    for mode in [Mode::NewConnection, Mode::KeepAlive] {
        changes_fail_nothing(&mut ck, port, server, mode);
    }
    a_kill_fails_only_what_it_accepted(&mut ck, port, server);
    stops_clean(ck, port, server.label());
}

/// The connections each worker held as ck sent it its stop signal, from ck's log lines
/// `stop signal sent ... open_connections=N` in `log` (in order).
pub fn held_at_stop_signals(log: &str) -> Vec<u64> {
    log.lines()
        .filter(|l| l.contains("stop signal sent"))
        .map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("open_connections="))
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("a stop signal without its count: {l}"))
        })
        .collect()
}

/// The failures a load in `mode` that never retries may have at the rolls and scale changes of
/// a server that does `stop` with idle keep-alive connections, given what the old workers
/// held at their stop signals (`held`): none, except with a keep-alive load on a server that
/// closes them at once, one request per connection held.
pub fn allowed_failures(stop: KeepAliveStop, mode: Mode, held: &[u64]) -> u64 {
    match (mode, stop) {
        (Mode::KeepAlive, KeepAliveStop::ClosesAtOnce) => held.iter().sum(),
        _ => 0,
    }
}

/// Under a load in `mode` that never retries: [`ROLLS`] rolls, then `ck scale 3` and
/// `ck scale 2`, fail no more than [`allowed_failures`].
fn changes_fail_nothing(ck: &mut Ck, port: u16, server: Server, mode: Mode) {
    let label = format!("{} {mode:?}", server.label());
    let log_before = ck.log().len();
    let load = Background::start_with(port, mode, false, server.rate());
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
    let held = held_at_stop_signals(&ck.log()[log_before..]);
    let allowed = allowed_failures(server.keep_alive_stop(), mode, &held);
    assert_within_allowed(&label, &report, allowed, &held);
}

/// Asserts that `report` answered and failed no more than `allowed` requests (what the old
/// workers `held` at their stop signals).
pub fn assert_within_allowed(label: &str, report: &LoadReport, allowed: u64, held: &[u64]) {
    assert!(
        report.ok > 0,
        "{label}: nothing answered: {}",
        report.summary()
    );
    assert!(
        report.failed() <= allowed,
        "{label}: {} request(s) failed, {allowed} allowed (the old workers held {held:?} \
         connection(s) at their stop signals): {}\n{:?}",
        report.failed(),
        report.summary(),
        report.errors
    );
    eprintln!(
        "{label}: {} request(s) failed of {allowed} allowed; the old workers held {held:?} \
         connection(s) at their stop signals",
        report.failed()
    );
}

/// Under a new-connection load that never retries, freezes one ready worker, reads what it
/// holds and SIGKILLs its cgroup: only requests on connections it had accepted fail; the slot
/// gets a ready replacement.
fn a_kill_fails_only_what_it_accepted(ck: &mut Ck, port: u16, server: Server) {
    let label = format!("{} kill", server.label());
    let load = Background::start_with(port, Mode::NewConnection, false, server.rate());
    std::thread::sleep(SETTLE);
    let victim = ck
        .status()
        .expect("ck status")
        .ready()
        .next()
        .expect("a ready worker")
        .slot;
    let frozen = freeze_and_kill(ck, port, victim, &load);
    ck.wait_status("the killed worker replaced", READY_TIMEOUT, |s| {
        s.ready_count() == 2 && s.slot(victim).pid.is_some_and(|p| p != frozen.pid)
    })
    .expect("wait for the status");
    std::thread::sleep(SETTLE);
    let report = load.finish();
    print_report(&label, &report);
    assert_only_accepted_failed(&label, &report, &frozen);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_signals_are_read_with_their_counts() {
        let log = "2026-01-01T00:00:00Z  INFO ck: worker stopping slot=0 pid=5\n\
                   2026-01-01T00:00:00Z  INFO ck: stop signal sent slot=0 pid=5 \
                   signal=\"SIGTERM\" open_connections=4\n\
                   2026-01-01T00:00:01Z  INFO ck: stop signal sent slot=1 pid=6 \
                   signal=\"SIGTERM\" open_connections=0\n";
        assert_eq!(held_at_stop_signals(log), [4, 0]);
        let at_once = Server::Uvicorn.keep_alive_stop();
        assert_eq!(allowed_failures(at_once, Mode::KeepAlive, &[4, 0]), 4);
        assert_eq!(allowed_failures(at_once, Mode::NewConnection, &[4]), 0);
        let graceful = Server::Hyper.keep_alive_stop();
        assert_eq!(allowed_failures(graceful, Mode::KeepAlive, &[4]), 0);
    }
}
