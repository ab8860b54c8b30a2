//! Servers that boot slowly and never say READY=1 (issue 14): a worker is ready when it accepts
//! on its socket, never because a fixed grace ran out. puma with a rack app that takes 4 s to
//! boot, seen by ck's accept probe, and a Python server that boots in 10 s and waits in `poll`,
//! seen by the `/proc` scan alone (`CK_READY_DETECT=proc`), each rolled by `ck reload` under
//! new-connection load: no request fails, every worker is ready only after its boot (the log's
//! `boot_ms`), from the detection (the log's reason), and the grace passed without making it
//! ready. `--ready probe`: a
//! worker that says READY=1 is ready only once its readiness probe passes.

use std::time::Duration;

use ck_tests::churn::{self, Background};
use ck_tests::load::Mode;
use ck_tests::slow_boot::poll_server;
use ck_tests::sys::{TempDir, free_port};
use ck_tests::{Ck, instance_name, probe_base_for, start};

/// How long a fleet of slow servers gets to become ready (their boot on a busy machine).
const SLOW_READY: Duration = Duration::from_secs(90);
/// Requests per second of the background load (Python and Ruby servers on two shared cores).
const RATE: f64 = 300.0;

/// A rack app that boots in 4 s (as a Rails app does) and answers `slot=S pid=P`.
const RACK_APP: &str = r#"sleep 4
run ->(env) { [200, {"content-type" => "text/plain"}, ["slot=#{ENV['CK_SLOT']} pid=#{Process.pid}\n"]] }
"#;

/// The `worker ready` lines of ck's log.
fn ready_lines(log: &str) -> Vec<&str> {
    log.lines().filter(|l| l.contains("worker ready")).collect()
}

/// The `boot_ms=` of a `worker ready` line.
fn boot_ms(line: &str) -> u64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("boot_ms=")?.parse().ok())
        .unwrap_or_else(|| panic!("no boot_ms in {line}"))
}

/// Starts 2 workers of `app`, waits until they are ready, rolls them once under load, and
/// checks: the reload succeeded, no request failed, the new workers answered, and each of the
/// four workers was ready after `boot` and for `reason` (never the grace, which passed).
fn rolls_without_a_failure(
    what: &str,
    app: impl FnOnce(u16) -> Vec<String>,
    boot: Duration,
    env: &[(&str, &str)],
    reason: &str,
) {
    let port = free_port();
    let (port_text, base) = (port.to_string(), probe_base_for(port).to_string());
    let app = app(port);
    let mut args = vec!["--port", &port_text, "--probe-port-base", &base];
    args.extend(["-w", "2", "--ready-timeout", "90s", "--"]);
    args.extend(app.iter().map(String::as_str));
    let mut ck = Ck::start_with_env(&instance_name(what, port), &args, env).expect("start ck");
    let first = ck.wait_ready(2, SLOW_READY).expect("wait for ready slots");
    let load = Background::start_with(port, Mode::NewConnection, true, RATE);
    let run = churn::reload_times_under(&mut ck, load, 1);
    churn::print_report(what, &run.report);
    // Latency is printed, not asserted: `cargo xtask bench ready-slow` measures it.
    eprintln!(
        "{what}: latency p99 {:?}, max {:?} over the run",
        run.report.p99(),
        run.report.quantile(1.0)
    );
    run.assert_all_succeeded(&ck);
    churn::assert_served(&run.report);
    let replaced = first.worker_pids();
    let new = run.after.worker_pids();
    assert!(new.is_disjoint(&replaced), "{:#?}", run.after);
    let answered = churn::answers_from_after(&run.report, run.reloads[0].asked, &new);
    assert!(!answered.is_empty(), "the new workers answered nothing");
    assert_ready_by_detection(&ck, 4, boot, reason);
}

/// Asserts that ck's log has `n` `worker ready` lines, each after `boot` and for `reason`, and
/// that the grace ran out on each worker without making it ready.
fn assert_ready_by_detection(ck: &Ck, n: usize, boot: Duration, reason: &str) {
    let log = ck.log();
    let ready = ready_lines(&log);
    assert_eq!(ready.len(), n, "{log}");
    for line in &ready {
        assert!(line.contains(reason), "ready for another reason: {line}");
        assert!(!line.contains("taken as ready"), "{line}");
        assert!(
            boot_ms(line) >= boot.as_millis() as u64,
            "ready before it booted ({boot:?}): {line}"
        );
    }
    let graces = log.matches("worker still starting").count();
    assert_eq!(graces, n, "the grace passed on every worker:\n{log}");
}

#[test]
fn puma_booting_in_4s_is_ready_when_it_accepts() {
    let dir = TempDir::new("ready-puma");
    let config = dir.write("config.ru", RACK_APP, false);
    let config = config.to_str().unwrap().to_string();
    // puma serves the socket ck hands it (LISTEN_FDS) for a bind of the same address.
    rolls_without_a_failure(
        "ready-puma",
        |port| {
            vec![
                "puma".into(),
                "-b".into(),
                format!("tcp://0.0.0.0:{port}"),
                config,
            ]
        },
        Duration::from_secs(4),
        &[],
        "(accept probe)",
    );
}

#[test]
fn a_server_booting_in_10s_is_ready_when_it_waits_in_poll() {
    let dir = TempDir::new("ready-poll");
    let server = poll_server(&dir);
    rolls_without_a_failure(
        "ready-poll",
        |_| {
            vec![
                "python3".into(),
                server.to_str().unwrap().into(),
                "10".into(),
            ]
        },
        Duration::from_secs(10),
        &[(ck::supervisor::READY_DETECT_ENV, "proc")],
        "poll()",
    );
}

#[test]
fn ready_probe_waits_for_the_probe_not_for_ready_1() {
    let dir = TempDir::new("ready-probe");
    let server = poll_server(&dir);
    let up = dir.path().join("up");
    let (server, up_path) = (server.to_str().unwrap(), up.to_str().unwrap());
    let args = [
        "-w",
        "2",
        "--ready",
        "probe",
        "--probe",
        "http:/healthz",
        "--probe-interval",
        "200ms",
        "--probe-timeout",
        "2s",
        "--",
        "python3",
        server,
        "0",
        up_path,
    ];
    let (mut ck, port) = start("ready-probe", &args).expect("start ck");
    // Both said READY=1 and accept; their probes reach them and fail (503): still starting.
    let probed = ck
        .wait_status("3 failed probes of each worker", SLOW_READY, |s| {
            s.slots.len() == 2 && s.slots.iter().all(|slot| slot.probe_hits >= 3)
        })
        .expect("wait for the status");
    assert!(
        probed.slots.iter().all(|s| s.state == "starting"),
        "{probed:#?}"
    );
    assert!(ready_lines(&ck.log()).is_empty(), "{}", ck.log());
    std::fs::write(&up, "").expect("creating the health marker");
    ck.wait_ready(2, SLOW_READY).expect("wait for ready slots");
    // A roll's replacements are probed while they start (as standbys) and flip in at a pass.
    let load = Background::start_with(port, Mode::NewConnection, true, RATE);
    let run = churn::reload_times_under(&mut ck, load, 1);
    churn::print_report("ready-probe", &run.report);
    run.assert_all_succeeded(&ck);
    churn::assert_served(&run.report);
    let log = ck.log();
    let ready = ready_lines(&log);
    assert_eq!(ready.len(), 4, "{log}");
    for line in ready {
        assert!(line.contains("the readiness probe passed"), "{line}");
    }
}
