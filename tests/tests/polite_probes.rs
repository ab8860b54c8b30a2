//! ck's own connections to its workers never harm them and never pass for clients. A server
//! written in a hurry (no READY=1, no error handling: `accept`, `recv`, answer, close) is made
//! ready by ck's accept probe and lives through starts, rolls, scales and the stop with no
//! restart and no failed request under a load that never retries; a server that records how
//! each connection ended sees every one of ck's (accept probes, HTTP and TCP health probes, `ck
//! probe`) end with a FIN after it has answered, never a reset; and a fleet with no client,
//! serving or crash-looping, shows 0 selected and 0 open connections in `ck status` and
//! `/metrics` while the probe counter counts the probes.

use std::path::PathBuf;
use std::time::Duration;

use ck_tests::app::script;
use ck_tests::churn::{self, Background, SETTLE};
use ck_tests::http::metrics_text;
use ck_tests::load::Mode;
use ck_tests::sys::TempDir;
use ck_tests::{Ck, READY_TIMEOUT, Status, burst, local, start, start_with_env};

/// The server a hurried person writes on ck's socket: no READY=1, no error handling, one
/// `recv` and an answer per connection. A reset under its `recv` (ck's probes used to close
/// with one) raises `ConnectionResetError` and kills it.
const NAIVE: &str = r#"
import os, socket
srv = socket.socket(fileno=3)
body = ("slot=%s pid=%d\n" % (os.environ["CK_SLOT"], os.getpid())).encode()
while True:
    c, _ = srv.accept()
    c.recv(4096)
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
    c.close()
"#;

/// A server that reads each connection to its end, answers a request, writes once more after
/// the end (a polite client still reads), and writes how the connection ended (`end`, or the
/// error it raised) to `$ENDS_LOG`, one line per connection.
const RECORDER: &str = r#"
import os, socket
srv = socket.socket(fileno=3)
log = open(os.environ["ENDS_LOG"], "a", buffering=1)
body = ("slot=%s pid=%d\n" % (os.environ["CK_SLOT"], os.getpid())).encode()
answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body
while True:
    c, peer = srv.accept()
    got = b""
    try:
        while True:
            data = c.recv(4096)
            if not data:
                break
            got += data
            if got.endswith(b"\r\n\r\n"):
                c.sendall(answer)
        c.sendall(b"bye\n")
        end = "end"
    except OSError as e:
        end = "error " + type(e).__name__
    log.write("%d %s\n" % (peer[1], end))
    c.close()
"#;

/// Writes `body` as `server.py` in `dir` and returns the path.
fn python(dir: &TempDir, body: &str) -> String {
    let path = script(dir, "server.py", body);
    path.to_str().expect("UTF-8 path").to_string()
}

/// Waits until the fleet has `n` slots, each with a ready worker.
fn wait_fleet(ck: &mut Ck, n: usize) -> Status {
    ck.wait_status(
        &format!("{n} ready slot(s) and no other"),
        READY_TIMEOUT,
        |s| s.slots.len() == n && s.ready_count() == n && s.bpf,
    )
    .expect("wait for a status")
}

/// The naive server under `-w workers`: ready without a word, then three rolls, a scale up and
/// down and the stop, all under a load that never retries: nothing fails, nothing restarts.
fn a_naive_server_lives_through_everything(workers: usize) {
    let dir = TempDir::new("naive");
    let server = python(&dir, NAIVE);
    let w = workers.to_string();
    let what = format!("naive-w{workers}");
    let (mut ck, port) = start(&what, &["-w", &w, "--", "python3", &server]).expect("start ck");
    wait_fleet(&mut ck, workers);
    let load = Background::start_without_retry(port, Mode::NewConnection);
    std::thread::sleep(SETTLE);
    for round in 1..=3 {
        let said = ck.ctl_ok(&["reload"]).expect("ck control command");
        assert!(
            said.contains(&format!("reloaded {workers} worker(s)")),
            "reload {round}: {said}"
        );
        std::thread::sleep(SETTLE);
    }
    let more = (workers + 1).to_string();
    ck.ctl_ok(&["scale", &more]).expect("ck control command");
    wait_fleet(&mut ck, workers + 1);
    std::thread::sleep(SETTLE);
    ck.ctl_ok(&["scale", &w]).expect("ck control command");
    wait_fleet(&mut ck, workers);
    std::thread::sleep(SETTLE);
    let report = load.finish_and_print(&what);
    churn::assert_served(&report);
    let status = ck.status().expect("ck status");
    for slot in &status.slots {
        assert_eq!(
            slot.restarts, 0,
            "slot {} restarted: {status:#?}",
            slot.slot
        );
    }
    ck.ctl_ok(&["stop"]).expect("ck control command");
    ck.wait_clean_exit().expect("ck exits cleanly");
    let log = ck.log();
    for sign in [
        "Traceback",
        "ConnectionResetError",
        "restart scheduled",
        "worker restarting",
    ] {
        assert!(!log.contains(sign), "{sign:?} in ck's log:\n{log}");
    }
    let ready: Vec<String> = ck.log_lines("worker ready");
    // 1 start, 3 rolls, 1 scale-up: every worker ck started was ready by its accept probe.
    assert_eq!(ready.len(), 4 * workers + 1, "{ready:#?}");
    for line in &ready {
        assert!(line.contains("(accept probe)"), "{line}");
    }
}

#[test]
fn a_naive_server_alone_lives_through_rolls_scales_and_the_stop() {
    a_naive_server_lives_through_everything(1);
}

#[test]
fn two_naive_servers_live_through_rolls_scales_and_the_stop() {
    a_naive_server_lives_through_everything(2);
}

/// The sum of every sample of `family` in the `/metrics` text.
fn metric_sum(text: &str, family: &str) -> f64 {
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("parsing /metrics");
    let samples: Vec<f64> = scrape
        .samples
        .iter()
        .filter(|s| s.metric == family)
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => panic!("{family} is not a number: {s:?}"),
        })
        .collect();
    assert!(!samples.is_empty(), "no {family} in /metrics:\n{text}");
    samples.iter().sum()
}

#[test]
fn probes_count_apart_from_clients() {
    let dir = TempDir::new("probe-counts");
    let server = python(&dir, NAIVE);
    let probe = ["--probe", "http:/healthz", "--probe-interval", "100ms"];
    let mut args = vec!["-w", "2", "--metrics", "127.0.0.1:0"];
    args.extend(probe);
    args.extend(["--", "python3", &server]);
    let (mut ck, port) = start("probe-counts", &args).expect("start ck");
    wait_fleet(&mut ck, 2);
    // No client yet: every connection so far is ck's (the accept probes, then the health
    // probes, each from the slot's one probe port, one after the other).
    let status = ck
        .wait_status("five probes of each worker", READY_TIMEOUT, |s| {
            s.slots.iter().all(|slot| slot.probe_hits >= 5)
        })
        .expect("wait for a status");
    for slot in &status.slots {
        assert_eq!(slot.selected, 0, "probes counted as clients: {status:#?}");
        assert_eq!(
            slot.connections,
            Some(0),
            "probes counted as open: {status:#?}"
        );
    }
    let metrics = metric_text_of(&status);
    assert_eq!(metric_sum(&metrics, "ck_connections_selected_total"), 0.0);
    assert_eq!(metric_sum(&metrics, "ck_worker_connections"), 0.0);
    assert!(
        metric_sum(&metrics, "ck_connections_probe_total") >= 10.0,
        "{metrics}"
    );
    assert_eq!(
        metric_sum(&metrics, "ck_probe_failures_total"),
        0.0,
        "{metrics}"
    );
    let text = ck.ctl_ok(&["status"]).expect("ck control command");
    assert!(text.contains(" probes "), "no probes column: {text}");
    // Clients count, and only they do.
    let tally = burst(local(port), 10);
    assert_eq!(tally.ok, 10, "{tally:?}");
    let status = ck
        .wait_status("the clients' connections closed", READY_TIMEOUT, |s| {
            s.slots.iter().all(|slot| slot.connections == Some(0))
        })
        .expect("wait for a status");
    let selected: u64 = status.slots.iter().map(|s| s.selected).sum();
    assert_eq!(selected, 10, "{status:#?}");
    let metrics = metric_text_of(&status);
    assert_eq!(metric_sum(&metrics, "ck_connections_selected_total"), 10.0);
    assert_eq!(
        metric_sum(&metrics, "ck_probe_failures_total"),
        0.0,
        "{metrics}"
    );
}

/// A worker that never starts: it boots for a moment (ck's accept probe waits in its queue
/// meanwhile) and exits before it accepts anything.
const NEVER_STARTS: &str = r#"
import sys, time
time.sleep(0.3)
sys.exit(1)
"#;

/// A crash loop with no client: every connection the slots saw is ck's (accept probes queued
/// on sockets that closed under them, or were held for the next worker). None counts as a
/// client's: nothing selected, migrated or open, while the probe counter counts them.
#[test]
fn a_crash_loop_with_no_client_shows_no_client() {
    let dir = TempDir::new("probe-crash-loop");
    let server = python(&dir, NEVER_STARTS);
    let args = [
        "-w",
        "2",
        "--metrics",
        "127.0.0.1:0",
        "--",
        "python3",
        &server,
    ];
    let (mut ck, _) = start("probe-crash-loop", &args).expect("start ck");
    let status = ck
        .wait_status("both breakers tripped", Duration::from_secs(60), |s| {
            s.slots.len() == 2 && s.slots.iter().all(|slot| slot.breaker != "closed")
        })
        .expect("wait for a status");
    let probes: u64 = status.slots.iter().map(|s| s.probe_hits).sum();
    assert!(probes >= 2, "no accept probe was sent: {status:#?}");
    for slot in &status.slots {
        assert_eq!(
            (
                slot.selected,
                slot.migrated,
                slot.fallbacks,
                slot.connections
            ),
            (0, 0, 0, Some(0)),
            "ck's probes counted as clients: {status:#?}"
        );
    }
    let metrics = metric_text_of(&status);
    assert_eq!(metric_sum(&metrics, "ck_connections_selected_total"), 0.0);
    assert_eq!(metric_sum(&metrics, "ck_worker_connections"), 0.0);
}

/// `/metrics` of the instance whose status is `status`.
fn metric_text_of(status: &Status) -> String {
    metrics_text(status.metrics.as_deref().expect("--metrics"))
}

/// A slot alone (`-w 1`) whose workers die before they accept: ck's accept probe waits in the
/// queue of the held socket, longer than ck reads a connection the worker does not close. The
/// worker that finally takes it (the app fixed, `ck reload`) finds a live client: it reads the
/// end, answers, and sees no reset.
#[test]
fn a_probe_left_in_a_held_queue_is_a_live_client_for_the_next_worker() {
    let dir = TempDir::new("probe-held");
    let server = python(&dir, RECORDER);
    let broken = dir.path().join("broken");
    std::fs::write(&broken, "").expect("writing the marker");
    let app = script(
        &dir,
        "app.sh",
        &format!(
            "if [ -e '{}' ]; then sleep 0.3; exit 1; fi\nexec python3 '{server}'",
            broken.display()
        ),
    );
    let log = dir.path().join("ends.log");
    let env = [("ENDS_LOG", log.to_str().expect("UTF-8 path"))];
    let app = app.to_str().expect("UTF-8 path");
    let (mut ck, _) =
        start_with_env("probe-held", &["-w", "1", "--", app], &env).expect("start ck");
    ck.wait_status("the breaker held half-open", Duration::from_secs(60), |s| {
        s.slots.len() == 1 && s.slots[0].breaker == "half-open" && s.slots[0].probe_hits >= 1
    })
    .expect("wait for a status");
    // Longer than ck reads a connection before it closes it (os::probe::conn::CLOSE_LIMIT).
    std::thread::sleep(Duration::from_secs(11));
    std::fs::remove_file(&broken).expect("removing the marker");
    let said = ck.ctl_ok(&["reload"]).expect("ck control command");
    assert!(said.contains("all ready"), "{said}");
    ck.ctl_ok(&["stop"]).expect("ck control command");
    ck.wait_clean_exit().expect("ck exits cleanly");
    let ends = ends(&log);
    assert!(
        !ends.is_empty(),
        "the worker took no connection: {}",
        ck.log()
    );
    let bad: Vec<&String> = ends.iter().filter(|l| !l.ends_with(" end")).collect();
    assert!(
        bad.is_empty(),
        "a worker saw an error: {bad:#?}\n{}",
        ck.log()
    );
}

/// How each connection of a [`RECORDER`] server ended, from its log (`port end` lines).
fn ends(log: &PathBuf) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Every connection ck makes to a worker with `probe` (accept probes at start and after a
/// roll, the periodic probes, `ck probe`) ends with the worker reading its end and ck reading
/// what the worker wrote after it: the worker sees no reset.
fn no_worker_sees_a_reset(what: &str, probe: &str) {
    let dir = TempDir::new(what);
    let server = python(&dir, RECORDER);
    let log = dir.path().join("ends.log");
    let env = [("ENDS_LOG", log.to_str().expect("UTF-8 path"))];
    let args = [
        "-w",
        "2",
        "--probe",
        probe,
        "--probe-interval",
        "100ms",
        "--",
        "python3",
        &server,
    ];
    let (mut ck, _) = start_with_env(what, &args, &env).expect("start ck");
    wait_fleet(&mut ck, 2);
    ck.wait_status("five probes of each worker", READY_TIMEOUT, |s| {
        s.slots.iter().all(|slot| slot.probe_hits >= 5)
    })
    .expect("wait for a status");
    ck.ctl_ok(&["reload"]).expect("ck control command");
    let status = wait_fleet(&mut ck, 2);
    let slot = status.slots[0].slot.to_string();
    let said = ck.ctl_ok(&["probe", &slot]).expect("ck control command");
    assert!(
        said.contains("HTTP 200") || said.contains("connected"),
        "{said}"
    );
    ck.wait_status("five probes of each new worker", READY_TIMEOUT, |s| {
        s.slots.iter().all(|slot| slot.probe_hits >= 5)
    })
    .expect("wait for a status");
    ck.ctl_ok(&["stop"]).expect("ck control command");
    ck.wait_clean_exit().expect("ck exits cleanly");
    let ends = ends(&log);
    assert!(ends.len() >= 20, "too few connections recorded: {ends:#?}");
    let bad: Vec<&String> = ends.iter().filter(|l| !l.ends_with(" end")).collect();
    assert!(
        bad.is_empty(),
        "a worker saw an error: {bad:#?}\n{}",
        ck.log()
    );
}

#[test]
fn http_probes_never_reset_a_worker() {
    no_worker_sees_a_reset("polite-http", "http:/healthz");
}

#[test]
fn tcp_probes_never_reset_a_worker() {
    no_worker_sees_a_reset("polite-tcp", "tcp");
}
