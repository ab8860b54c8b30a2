//! Drain by observed traffic (`--quiet-period`, `--quiet-max`): on SIGTERM or `ck stop` with
//! `--metrics`, `/readyz` turns 503 (stopping) at once while every worker keeps serving, and ck
//! drains only once no new connection came for the quiet period: a client that keeps opening
//! connections is served (0 failed) and keeps ck from exiting; once it stops, ck drains and
//! exits, and says the wait ended because it was quiet. A client that never stops is cut off at
//! `--quiet-max` with a warning; a second SIGTERM or SIGINT, or `ck stop --now`, skips the wait;
//! a worker that dies during it is replaced and serves; `ck upgrade` is refused; without
//! `--metrics` (or with `--quiet-period 0`) there is no wait. `/metrics` shows the time since
//! each group's last new connection. (The refusal of a period longer than the maximum is in
//! `bad_input.rs`.)

use std::time::Duration;

use ck_tests::http::get_path;
use ck_tests::load::{self, LoadSpec, Mode};
use ck_tests::{Ck, Status, get_new_conn, local, start_ready};

/// Long enough that a wait that is not skipped outlasts every timeout below.
const LONG: [&str; 4] = ["--quiet-period", "60s", "--quiet-max", "120s"];

/// The stop's quiet wait, while it lasts.
fn waiting(status: &Status) -> bool {
    status.quiet_wait.as_ref().is_some_and(|w| w.waiting)
}

/// New connections the program selected, over every slot.
fn selected(status: &Status) -> u64 {
    status.slots.iter().map(|s| s.selected).sum()
}

/// A client that keeps opening new connections (40 a second) until stopped.
fn steady_client(port: u16) -> load::LoadHandle {
    let mut spec = LoadSpec::for_duration(
        local(port),
        Mode::NewConnection,
        2,
        Duration::from_secs(120),
    );
    spec.rate = Some(40.0);
    load::start(spec)
}

/// Starts the client and waits until the program has sent it to a worker.
fn traffic_flowing(ck: &mut Ck, port: u16) -> load::LoadHandle {
    let client = steady_client(port);
    let before = selected(&ck.status().expect("ck status"));
    ck.wait_status("the client's connections", Duration::from_secs(10), |s| {
        selected(s) > before + 20
    })
    .expect("wait for the status");
    client
}

#[test]
fn ck_waits_while_connections_keep_coming_and_drains_once_they_stop() {
    let (mut ck, port, status) = start_ready(
        "quiet-wait",
        2,
        &[
            "--metrics",
            "127.0.0.1:0",
            "--quiet-period",
            "2s",
            "--quiet-max",
            "120s",
        ],
    )
    .expect("start a ready ck");
    let metrics = status.metrics_addr();
    let client = traffic_flowing(&mut ck, port);
    ck.sigterm().expect("SIGTERM to ck");
    let first = ck
        .wait_status("the quiet wait", Duration::from_secs(10), waiting)
        .expect("wait for the status");
    let (code, body) = get_path(metrics, "/readyz").expect("/readyz");
    assert_eq!(code, 503, "/readyz during the wait: {body}");
    assert!(body.contains("stopping"), "/readyz during the wait: {body}");
    // While the client keeps coming, ck keeps waiting (well past the quiet period), every
    // worker stays selected, and the count of new connections during the wait grows.
    let counted = first.quiet_wait.as_ref().expect("wait").new_connections;
    let later = ck
        .wait_status(
            "5 s of waiting with the client still sending",
            Duration::from_secs(30),
            |s| s.quiet_wait.as_ref().is_some_and(|w| w.waited_ms >= 5000),
        )
        .expect("wait for the status");
    assert!(ck.try_exit().is_none(), "ck exited while connections came");
    let wait = later.quiet_wait.as_ref().expect("wait");
    assert!(wait.waiting, "{wait:?}");
    assert!(
        wait.new_connections > counted + 20,
        "the client's connections during the wait: {wait:?}"
    );
    assert_eq!(
        later.active.len(),
        2,
        "both workers stay selected: {later:#?}"
    );
    let text = ck.ctl_ok(&["status"]).expect("ck status");
    assert!(
        text.contains("stopping: waiting for traffic to stop"),
        "`ck status` during the wait:\n{text}"
    );
    // The client stops: ck is quiet for the period, drains and exits.
    client.stop();
    let report = client.join();
    assert!(report.ok > 100, "{}", report.summary());
    assert_eq!(report.failed(), 0, "{}", report.summary());
    ck.wait_clean_exit().expect("ck exits cleanly");
    let log = ck.log();
    assert!(
        log.contains("quiet wait ended") && log.contains("quiet for"),
        "the log says why the wait ended:\n{log}"
    );
    assert!(!log.contains("--quiet-max"), "{log}");
}

#[test]
fn a_balancer_that_never_stops_sending_is_cut_off_at_quiet_max_with_a_warning() {
    let (mut ck, port, _) = start_ready(
        "quiet-max",
        1,
        &[
            "--metrics",
            "127.0.0.1:0",
            "--quiet-period",
            "2s",
            "--quiet-max",
            "4s",
        ],
    )
    .expect("start a ready ck");
    let client = traffic_flowing(&mut ck, port);
    ck.sigterm().expect("SIGTERM to ck");
    ck.wait_status("the quiet wait", Duration::from_secs(10), waiting)
        .expect("wait for the status");
    ck.wait_clean_exit().expect("ck exits cleanly");
    drop(client);
    let log = ck.log();
    let line = log
        .lines()
        .find(|l| l.contains("quiet wait ended"))
        .unwrap_or_else(|| panic!("no end of the wait in the log:\n{log}"));
    assert!(line.contains("WARN"), "{line}");
    assert!(
        line.contains("reached --quiet-max 4s") && line.contains("never stopped sending"),
        "{line}"
    );
}

#[test]
fn a_second_sigterm_skips_the_rest_of_the_wait() {
    let mut args = vec!["--metrics", "127.0.0.1:0"];
    args.extend(LONG);
    let (mut ck, port, _) = start_ready("quiet-twice", 2, &args).expect("start a ready ck");
    ck.sigterm().expect("SIGTERM to ck");
    ck.wait_status("the quiet wait", Duration::from_secs(10), waiting)
        .expect("wait for the status");
    // Still serving while it waits.
    get_new_conn(local(port)).expect("a connection during the wait");
    ck.sigterm().expect("SIGTERM to ck");
    ck.wait_clean_exit().expect("ck exits cleanly");
    let log = ck.log();
    assert!(
        log.contains("second stop signal") && log.contains("SIGTERM again during the wait"),
        "{log}"
    );
}

#[test]
fn a_second_sigint_skips_the_rest_of_the_wait_too() {
    let mut args = vec!["--metrics", "127.0.0.1:0"];
    args.extend(LONG);
    let (mut ck, _, _) = start_ready("quiet-int", 1, &args).expect("start a ready ck");
    ck_tests::sys::signal(ck.pid(), nix::sys::signal::Signal::SIGINT);
    ck.wait_status("the quiet wait", Duration::from_secs(10), waiting)
        .expect("wait for the status");
    ck_tests::sys::signal(ck.pid(), nix::sys::signal::Signal::SIGINT);
    ck.wait_clean_exit().expect("ck exits cleanly");
    assert!(
        ck.log().contains("SIGINT again during the wait"),
        "{}",
        ck.log()
    );
}

#[test]
fn ck_stop_waits_and_ck_stop_now_skips_the_wait() {
    let mut args = vec!["--metrics", "127.0.0.1:0"];
    args.extend(LONG);
    let (mut ck, _, _) = start_ready("quiet-stop-now", 1, &args).expect("start a ready ck");
    let answer = ck.ctl_ok(&["stop"]).expect("ck stop");
    assert!(answer.contains("waiting for traffic to stop"), "{answer}");
    ck.wait_status("the quiet wait", Duration::from_secs(10), waiting)
        .expect("wait for the status");
    // The control socket keeps answering during the wait; an upgrade (whose new image would
    // not know of the wait) is refused.
    let again = ck.ctl_ok(&["stop"]).expect("ck stop");
    assert!(again.contains("ck stop --now"), "{again}");
    let upgrade = ck.ctl(&["upgrade"]).expect("ck upgrade");
    assert!(!upgrade.status.success(), "an upgrade during the wait");
    assert!(
        ck_tests::ck::said(&upgrade).contains("ck is stopping"),
        "{}",
        ck_tests::ck::said(&upgrade)
    );
    ck.ctl_ok(&["stop", "--now"]).expect("ck stop");
    ck.wait_clean_exit().expect("ck exits cleanly");
    assert!(ck.log().contains("quiet wait ended"), "{}", ck.log());
}

#[test]
fn a_worker_that_dies_during_the_wait_is_replaced_and_serves() {
    let mut args = vec!["--metrics", "127.0.0.1:0"];
    args.extend(LONG);
    let (mut ck, port, status) = start_ready("quiet-crash", 2, &args).expect("start a ready ck");
    let old = status.worker_pid(0);
    ck.sigterm().expect("SIGTERM to ck");
    ck.wait_status("the quiet wait", Duration::from_secs(10), waiting)
        .expect("wait for the status");
    ck_tests::sys::signal(old, nix::sys::signal::Signal::SIGKILL);
    let replaced = ck
        .wait_status("slot 0 ready again", Duration::from_secs(15), |s| {
            s.slot(0).pid.is_some_and(|p| p != old) && s.active.len() == 2
        })
        .expect("wait for the status");
    assert!(waiting(&replaced), "{replaced:#?}");
    let tally = ck_tests::burst(local(port), 20);
    assert_eq!(tally.ok, 20, "{tally:?}");
    ck.ctl_ok(&["stop", "--now"]).expect("ck stop");
    ck.wait_clean_exit().expect("ck exits cleanly");
}

#[test]
fn ck_stop_now_drains_at_once() {
    let mut args = vec!["--metrics", "127.0.0.1:0"];
    args.extend(LONG);
    let (mut ck, _, _) = start_ready("quiet-now", 1, &args).expect("start a ready ck");
    ck.ctl_ok(&["stop", "--now"]).expect("ck stop");
    ck.wait_clean_exit().expect("ck exits cleanly");
    let log = ck.log();
    assert!(!log.contains("quiet wait ended"), "{log}");
    assert!(log.contains("no quiet wait"), "{log}");
}

#[test]
fn without_metrics_or_with_quiet_period_0_there_is_no_wait() {
    for (what, args) in [
        (
            "quiet-nometrics",
            vec!["--quiet-period", "60s", "--quiet-max", "120s"],
        ),
        (
            "quiet-zero",
            vec!["--metrics", "127.0.0.1:0", "--quiet-period", "0"],
        ),
    ] {
        let (mut ck, _, _) = start_ready(what, 1, &args).expect("start a ready ck");
        ck.sigterm().expect("SIGTERM to ck");
        ck.wait_clean_exit().expect("ck exits cleanly");
        let log = ck.log();
        let why = match what {
            "quiet-zero" => "--quiet-period 0",
            _ => "no --metrics",
        };
        assert!(
            log.contains("no quiet wait") && log.contains(why),
            "{what}: {log}"
        );
    }
}

/// `ck_group_seconds_since_last_connection` of the instance's one group, scraped.
fn since_last(metrics: std::net::SocketAddr) -> f64 {
    let (code, text) = get_path(metrics, "/metrics").expect("/metrics");
    assert_eq!(code, 200, "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("ck_group_seconds_since_last_connection{"))
        .unwrap_or_else(|| panic!("no ck_group_seconds_since_last_connection in\n{text}"));
    assert!(line.contains("listen=\"0.0.0.0:"), "{line}");
    line.rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no value in {line:?}"))
}

#[test]
fn metrics_show_the_time_since_the_last_new_connection() {
    let (mut ck, port, status) =
        start_ready("quiet-gauge", 1, &["--metrics", "127.0.0.1:0"]).expect("start a ready ck");
    let metrics = status.metrics_addr();
    get_new_conn(local(port)).expect("a connection");
    let first = since_last(metrics);
    // It grows while no connection comes ...
    let mut grown = first;
    ck_tests::sys::poll_until(Duration::from_secs(10), Duration::from_millis(100), || {
        grown = since_last(metrics);
        grown >= first + 1.0
    });
    assert!(grown >= first + 1.0, "{first} -> {grown}");
    // ... and a new connection sets it back.
    get_new_conn(local(port)).expect("a connection");
    let after = since_last(metrics);
    assert!(after < grown, "after a new connection: {grown} -> {after}");
    assert!(ck.try_exit().is_none());
}

/// systemd's SIGKILL after `TimeoutStopSec` (or kubelet's after the grace period) lands during
/// the wait: the workers stop with ck (`PR_SET_PDEATHSIG`), nothing of theirs is left, and the
/// same `ck run` starts again on the same name and port (the stale pins removed) and serves.
#[test]
fn a_sigkill_during_the_wait_leaves_nothing_that_blocks_the_next_run() {
    let mut args = vec!["--metrics", "127.0.0.1:0"];
    args.extend(LONG);
    let (mut ck, port, status) = start_ready("quiet-kill", 2, &args).expect("start a ready ck");
    let name = ck.name().to_string();
    let workers = status.worker_pids();
    ck.sigterm().expect("SIGTERM to ck");
    ck.wait_status("the quiet wait", Duration::from_secs(10), waiting)
        .expect("wait for the status");
    ck.kill_supervisor().expect("kill the supervisor");
    let left = ck_tests::sys::wait_all_dead(&workers, Duration::from_secs(10));
    assert!(left.is_empty(), "workers {left:?} outlived a SIGKILLed ck");
    assert!(
        ck_tests::sys::instance_processes(&name).is_empty(),
        "processes of {name} left"
    );
    ck.abandon().expect("abandon the dead ck");
    let (port_text, base_text) = (port.to_string(), ck_tests::probe_base_for(port).to_string());
    let mut again = vec![
        "-w",
        "2",
        "--port",
        &port_text,
        "--probe-port-base",
        &base_text,
    ];
    again.extend_from_slice(&args);
    let mut second = Ck::start(&name, &again).expect("start ck");
    second
        .wait_ready(2, Duration::from_secs(20))
        .expect("wait for ready slots");
    get_new_conn(local(port)).expect("the next run serves");
    second.ctl_ok(&["stop", "--now"]).expect("ck stop");
    second.wait_clean_exit().expect("ck exits cleanly");
}
