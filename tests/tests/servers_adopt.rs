//! Real servers that bind the port themselves, under `--adopt`, unmodified, each through the
//! one checklist of `ck_tests::server_checks`: a Go net/http server (`tests/servers/go-hello`,
//! graceful on SIGTERM with `http.Server.Shutdown`) and nginx (its own master and worker,
//! `--stop-signal QUIT`: nginx stops gracefully on SIGQUIT and fast on SIGTERM).
//!
//! And what `--stop-signal` is for: ck signals an old worker once its connections are done,
//! or once they stay as many for 100 ms (long requests, keep-alive connections); nginx rolled
//! while slow requests (a few seconds each, all started at once) are in flight then loses none with
//! QUIT, and loses those in flight on the old workers with TERM (both printed).

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ck_tests::promises::servers::KeepAliveStop;
use ck_tests::real_servers::{SLOW_BYTES, go_hello, nginx_app};
use ck_tests::server_checks::{self, Checks};
use ck_tests::sys::TempDir;
use ck_tests::{READY_TIMEOUT, local, start_ready};

#[test]
fn go_net_http_server_runs_under_adopt() {
    let server = go_hello();
    let (ck, port, _) = start_ready(
        "go",
        2,
        &[
            "--adopt",
            "--policy",
            "round-robin",
            "--",
            server.to_str().unwrap(),
        ],
    )
    .expect("start a ready ck");
    let checks = Checks {
        keep_alive_stop: KeepAliveStop::ClosesAtOnce,
        ..Checks::new("go", ck_tests::churn::RATE)
    };
    server_checks::run(ck, port, checks);
}

#[test]
fn nginx_with_its_own_master_runs_under_adopt() {
    let dir = TempDir::new("nginx");
    let app = nginx_app(&dir);
    let (ck, port, status) = start_ready(
        "nginx",
        2,
        &[
            "--adopt",
            "--policy",
            "round-robin",
            "--stop-signal",
            "QUIT",
            "--",
            app.to_str().unwrap(),
        ],
    )
    .expect("start a ready ck");
    assert_eq!(status.stop_signal, "SIGQUIT", "{status:#?}");
    let text = ck.ctl_ok(&["status"]).expect("ck status");
    assert!(text.contains("stop: SIGQUIT, SIGKILL after 10s"), "{text}");
    let checks = Checks {
        keep_alive_stop: KeepAliveStop::ClosesAtOnce,
        ..Checks::new("nginx", ck_tests::churn::RATE)
    };
    server_checks::run(ck, port, checks);
}

/// Slow requests, all started at once: all in flight, none ending, for most of a second after
/// the roll flips the old workers out (so ck's wait for their connections, which ends once they
/// stay as many for 100 ms, hands them to the stop signal).
const SLOW_REQUESTS: usize = 30;

/// `GET /slow.bin` on a new connection: its time, or what went wrong.
fn slow_get(port: u16) -> Result<Duration, String> {
    let started = Instant::now();
    let mut stream = TcpStream::connect(local(port)).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(b"GET /slow.bin HTTP/1.0\r\nHost: t\r\n\r\n")
        .map_err(|e| format!("send: {e}"))?;
    let mut answer = Vec::new();
    let read = stream.read_to_end(&mut answer);
    let head_end = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| p + 4);
    match (read, head_end) {
        (Ok(_), Some(end)) if answer.starts_with(b"HTTP/1.1 200") => {
            if answer.len() - end == SLOW_BYTES {
                Ok(started.elapsed())
            } else {
                Err(format!("{} of {SLOW_BYTES} bytes", answer.len() - end))
            }
        }
        (Err(e), _) => Err(format!("after {} bytes: {e}", answer.len())),
        (Ok(_), _) => Err(format!("cut short after {} bytes", answer.len())),
    }
}

/// What the slow requests across one roll of nginx with `--stop-signal stop` saw.
#[derive(Debug)]
struct SlowRun {
    ok: usize,
    failed: Vec<String>,
    longest: Duration,
}

/// nginx `-w 2 --adopt --stop-signal stop`; [`SLOW_REQUESTS`] slow requests at once, and a
/// `ck reload` once all are in flight.
fn roll_under_slow_requests(stop: &str) -> SlowRun {
    let dir = TempDir::new("nginx-stop");
    let app = nginx_app(&dir);
    let what = format!("ngx-{}", stop.to_lowercase());
    let (mut ck, port, _) = start_ready(
        &what,
        2,
        &[
            "--adopt",
            "--stop-signal",
            stop,
            "--",
            app.to_str().unwrap(),
        ],
    )
    .expect("start a ready ck");
    let requests: Vec<JoinHandle<Result<Duration, String>>> = (0..SLOW_REQUESTS)
        .map(|_| std::thread::spawn(move || slow_get(port)))
        .collect();
    std::thread::sleep(Duration::from_millis(400));
    let before = ck.status().expect("ck status").worker_pids();
    let reload = ck.ctl(&["reload"]).expect("ck reload");
    assert!(reload.status.success(), "reload failed: {}", ck.log());
    let outcomes: Vec<_> = requests.into_iter().map(|h| h.join().unwrap()).collect();
    ck.wait_status("the old workers gone", READY_TIMEOUT, |s| {
        s.worker_pids().is_disjoint(&before)
    })
    .expect("wait for the status");
    let signal = format!("SIG{}", stop.to_uppercase());
    // One line per old worker: stopping, with the signal ck sent.
    let log = ck.log();
    for pid in &before {
        let pid_field = format!("pid={pid} ");
        assert!(
            log.lines().any(|l| l.contains("worker stopping")
                && l.contains(&pid_field)
                && l.contains(&format!("signal=\"{signal}\""))),
            "no `worker stopping ... {pid_field}... signal=\"{signal}\"` in: {log}"
        );
    }
    let failed: Vec<String> = outcomes.iter().filter_map(|o| o.clone().err()).collect();
    let longest = outcomes
        .iter()
        .filter_map(|o| o.clone().ok())
        .max()
        .unwrap_or_default();
    ck.ctl_ok(&["stop"]).expect("ck stop");
    ck.wait_clean_exit().expect("ck exits cleanly");
    SlowRun {
        ok: outcomes.len() - failed.len(),
        failed,
        longest,
    }
}

#[test]
fn nginx_rolls_slow_requests_without_a_loss_with_quit_and_loses_them_with_term() {
    let quit = roll_under_slow_requests("QUIT");
    let term = roll_under_slow_requests("TERM");
    for (signal, run) in [("QUIT", &quit), ("TERM", &term)] {
        eprintln!(
            "nginx roll, --stop-signal {signal}: {} of {SLOW_REQUESTS} slow requests answered \
             (longest {:?}), {} failed {:?}",
            run.ok,
            run.longest,
            run.failed.len(),
            run.failed
        );
    }
    assert!(
        quit.longest >= Duration::from_millis(700),
        "the requests were not slow: {quit:?}"
    );
    assert_eq!(quit.failed, Vec::<String>::new(), "QUIT lost requests");
    assert!(
        !term.failed.is_empty(),
        "nginx's fast stop (SIGTERM) lost nothing in flight: {term:?}"
    );
}
