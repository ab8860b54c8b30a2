//! `--metrics ADDR`: `/metrics` parsed by a Prometheus text parser and checked against what the
//! tests count themselves (connections sent and answered per worker, keep-alive connections
//! held open, a SIGKILL, a reload, failed probes) and against `ck status`; `/readyz` turns 503
//! with its reason when no worker is in the active set and 200 again after; `/healthz` is 200.
//! (A taken `--metrics` address is refused in `bad_input.rs`.)

use std::io::{Read as _, Write as _};
use std::net::{Ipv6Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use ck_tests::http::{IO_TIMEOUT, KeepAlive};
use ck_tests::sys::free_port;
use ck_tests::{Ck, READY_TIMEOUT, Status, burst, ck_bin, local, start_ready};
use nix::sys::signal::Signal;
use prometheus_parse::{Sample, Value};

/// `--metrics` on any free loopback port (`ck status` says which).
const METRICS: [&str; 2] = ["--metrics", "127.0.0.1:0"];

/// Where the instance's metrics listener is, from `ck status`.
fn metrics_addr(status: &Status) -> SocketAddr {
    let addr = status
        .metrics
        .as_deref()
        .unwrap_or_else(|| panic!("`ck status` shows no metrics address: {status:#?}"));
    addr.parse()
        .unwrap_or_else(|e| panic!("metrics address {addr:?}: {e}"))
}

/// `GET path` on the metrics listener: the status code and the body.
fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)
        .unwrap_or_else(|e| panic!("connecting to the metrics listener {addr}: {e}"));
    stream.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: ck\r\nConnection: close\r\n\r\n"
    )
    .expect("sending the request");
    let mut text = String::new();
    stream
        .read_to_string(&mut text)
        .unwrap_or_else(|e| panic!("reading the answer to GET {path}: {e}"));
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP answer to GET {path}: {text:?}"));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status code in {head:?}"));
    (code, body.to_string())
}

/// One scrape of `/metrics`, parsed.
struct Metrics {
    samples: Vec<Sample>,
    text: String,
}

impl Metrics {
    fn fetch(addr: SocketAddr) -> Metrics {
        let (code, text) = get(addr, "/metrics");
        assert_eq!(code, 200, "GET /metrics: {text}");
        let lines = text.lines().map(|l| Ok(l.to_string()));
        let scrape = prometheus_parse::Scrape::parse(lines).expect("parsing /metrics");
        Metrics {
            samples: scrape.samples,
            text,
        }
    }

    /// The samples of `name` whose labels include all of `labels`.
    fn matching<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&str, &str)],
    ) -> impl Iterator<Item = f64> + 'a {
        self.samples
            .iter()
            .filter(move |s| s.metric == name)
            .filter(move |s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .map(move |s| match s.value {
                Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => v,
                ref other => panic!("{name}: unexpected value {other:?}"),
            })
    }

    /// The one sample of `name` with `labels`.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let found: Vec<f64> = self.matching(name, labels).collect();
        assert_eq!(
            found.len(),
            1,
            "{name}{labels:?}: want one sample, found {found:?} in\n{}",
            self.text
        );
        found[0]
    }

    /// The sum of `name` over the samples with `labels`.
    fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.matching(name, labels).sum()
    }
}

/// Polls `/metrics` until `done` holds and returns that scrape.
fn wait_metrics(ck: &Ck, addr: SocketAddr, what: &str, done: impl Fn(&Metrics) -> bool) -> Metrics {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let metrics = Metrics::fetch(addr);
        if done(&metrics) {
            return metrics;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; last /metrics:\n{}\n--- ck log ---\n{}",
            metrics.text,
            ck.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// N new connections over two groups (IPv4 `--port`, IPv6 `--listen`) make the selected
/// counters of each group grow by exactly the answers each worker gave; state, readiness and
/// queues agree with `ck status`; `/healthz` is 200.
#[test]
fn selected_counters_grow_by_the_connections_each_worker_answered() {
    let v6_port = free_port();
    let listen = format!("tcp://[::]:{v6_port}");
    let mut args = vec!["--listen", listen.as_str()];
    args.extend_from_slice(&METRICS);
    let (ck, port, status) = start_ready("metrics-sel", 3, &args).expect("start a ready ck");
    let addr = metrics_addr(&status);
    let (v4, v6) = (status.groups[0].clone(), status.groups[1].clone());
    let before = Metrics::fetch(addr);
    let sent = [
        (local(port), &v4, 60),
        (SocketAddr::from((Ipv6Addr::LOCALHOST, v6_port)), &v6, 45),
    ];
    let tallies: Vec<_> = sent.iter().map(|(to, _, n)| burst(*to, *n)).collect();
    let after = Metrics::fetch(addr);
    let status = ck.status().expect("ck status");
    for ((_, group, n), tally) in sent.iter().zip(&tallies) {
        assert_eq!(tally.ok, *n, "{group}: every request answered: {tally:?}");
        let grown = |slot: &str| {
            let labels = [("group", group.as_str()), ("slot", slot)];
            after.value("ck_connections_selected_total", &labels)
                - before.value("ck_connections_selected_total", &labels)
        };
        let total: f64 = status
            .slots
            .iter()
            .map(|s| grown(&s.slot.to_string()))
            .sum();
        assert_eq!(total, f64::from(*n), "{group}: {tally:?}\n{}", after.text);
        for slot in &status.slots {
            let pid = slot.pid.expect("a worker on every slot");
            assert_eq!(
                grown(&slot.slot.to_string()),
                f64::from(tally.pid(pid)),
                "{group} slot {} (pid {pid}): {tally:?}\n{}",
                slot.slot,
                after.text
            );
        }
        let labels = [("group", group.as_str())];
        assert_eq!(
            after.value("ck_connections_dropped_total", &labels),
            before.value("ck_connections_dropped_total", &labels)
        );
    }
    // Every slot's state and readiness as `ck status` shows them.
    for slot in &status.slots {
        let index = slot.slot.to_string();
        let labels = [("slot", index.as_str())];
        let on =
            |state: &str| after.value("ck_worker_state", &[("slot", &index), ("state", state)]);
        assert_eq!(
            on(&slot.state),
            1.0,
            "slot {index}: {status:#?}\n{}",
            after.text
        );
        assert_eq!(
            after.sum("ck_worker_state", &labels),
            1.0,
            "one state per slot"
        );
        let ready = f64::from(u8::from(status.active.contains(&slot.slot)));
        assert_eq!(
            after.value("ck_worker_ready", &labels),
            ready,
            "slot {index}"
        );
        assert_eq!(after.value("ck_breaker_open", &labels), 0.0);
        assert_eq!(after.value("ck_worker_restarts_total", &labels), 0.0);
        assert!(after.value("ck_worker_memory_bytes", &labels) > 0.0);
        for group in [&v4, &v6] {
            let labels = [("group", group.as_str()), ("slot", index.as_str())];
            assert_eq!(after.value("ck_accept_queue_depth", &labels), 0.0);
        }
    }
    assert_eq!(status.ready_count(), 3, "{status:#?}");
    assert!(after.value("process_resident_memory_bytes", &[]) > 0.0);
    assert!(after.value("process_open_fds", &[]) > 0.0);
    let (code, body) = get(addr, "/healthz");
    assert_eq!(code, 200, "{body}");
}

/// `ck_worker_connections` counts the keep-alive connections the test holds open to each
/// worker, and falls back to 0 when the test closes them.
fn worker_connections_count(what: &str, extra: &[&str]) {
    let mut args = METRICS.to_vec();
    args.extend_from_slice(extra);
    let (ck, port, status) = start_ready(what, 2, &args).expect("start a ready ck");
    let addr = metrics_addr(&status);
    let mut held = Vec::new();
    let mut per_slot = [0.0; 2];
    for _ in 0..7 {
        let mut conn = KeepAlive::connect(local(port)).expect("keep-alive connect");
        let answer = conn.get().expect("an answer on a keep-alive connection");
        per_slot[answer.slot as usize] += 1.0;
        held.push(conn);
    }
    let metrics = Metrics::fetch(addr);
    for (slot, count) in per_slot.iter().enumerate() {
        let labels = [("slot", &*slot.to_string())];
        assert_eq!(
            metrics.value("ck_worker_connections", &labels),
            *count,
            "slot {slot}: {per_slot:?}\n{}",
            metrics.text
        );
    }
    drop(held);
    wait_metrics(&ck, addr, "no open connection left", |m| {
        m.sum("ck_worker_connections", &[]) == 0.0
    });
}

#[test]
fn worker_connections_count_the_open_keep_alive_connections() {
    worker_connections_count("metrics-conns", &[]);
}

/// The same with workers that bind the port themselves (their own listeners, adopted).
#[test]
fn worker_connections_count_the_connections_of_adopted_workers() {
    worker_connections_count("metrics-conns-adopt", &["--adopt"]);
}

/// A SIGKILLed worker counts as a restart, `ck reload` as a successful reload, and failing
/// probes as probe failures; each matches `ck status`.
#[test]
fn restarts_reloads_and_probe_failures_are_counted() {
    let mut args = vec![
        "--probe",
        "http:/healthz",
        "--probe-interval",
        "100ms",
        "--probe-fails",
        "2",
    ];
    args.extend_from_slice(&METRICS);
    let (mut ck, _port, status) =
        start_ready("metrics-events", 2, &args).expect("start a ready ck");
    let addr = metrics_addr(&status);
    let killed = status.worker_pid(0);
    ck_tests::sys::signal(killed, Signal::SIGKILL);
    let status = ck
        .wait_status("slot 0 restarted and ready", READY_TIMEOUT, |s| {
            s.slot(0).restarts == 1 && s.slot(0).state == "ready" && s.slot(0).pid != Some(killed)
        })
        .expect("wait for the status");
    let metrics = Metrics::fetch(addr);
    assert_eq!(
        metrics.value("ck_worker_restarts_total", &[("slot", "0")]),
        1.0,
        "{status:#?}"
    );
    assert_eq!(
        metrics.value("ck_worker_restarts_total", &[("slot", "1")]),
        0.0
    );
    assert_eq!(metrics.value("ck_reloads_total", &[("result", "ok")]), 0.0);
    assert_eq!(
        metrics.sum("ck_probe_failures_total", &[]),
        0.0,
        "healthy workers"
    );

    ck.ctl_ok(&["reload"]).expect("ck reload");
    let metrics = Metrics::fetch(addr);
    assert_eq!(metrics.value("ck_reloads_total", &[("result", "ok")]), 1.0);
    assert_eq!(
        metrics.value("ck_reloads_total", &[("result", "aborted")]),
        0.0
    );
    drop(ck);

    // A worker whose /healthz fails from the start: its failed probes are counted, it is
    // unhealthy, and with no other worker /readyz says so.
    let bin = ck_bin();
    let mut args = vec![
        "-w",
        "1",
        "--probe",
        "http:/healthz",
        "--probe-interval",
        "100ms",
        "--probe-fails",
        "2",
    ];
    args.extend_from_slice(&METRICS);
    args.extend_from_slice(&[
        "--",
        bin.to_str().expect("UTF-8"),
        "demo-worker",
        "--fail-health-after",
        "0ms",
    ]);
    let (mut ck, _port) = ck_tests::start("metrics-probes", &args).expect("start ck");
    let status = ck
        .wait_status("steering on and the worker unhealthy", READY_TIMEOUT, |s| {
            s.bpf
                && s.slots
                    .first()
                    .is_some_and(|s| s.unhealthy.as_deref() == Some("probe"))
        })
        .expect("wait for the status");
    let addr = metrics_addr(&status);
    let metrics = Metrics::fetch(addr);
    assert!(
        metrics.value("ck_probe_failures_total", &[("slot", "0")]) >= 2.0,
        "{}",
        metrics.text
    );
    assert_eq!(
        metrics.value("ck_worker_state", &[("slot", "0"), ("state", "unhealthy")]),
        1.0
    );
    assert_eq!(metrics.value("ck_worker_ready", &[("slot", "0")]), 0.0);
    let (code, body) = get(addr, "/readyz");
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains("no worker in the active set") && body.contains("unhealthy"),
        "{body}"
    );
}

/// `/readyz` is 200 while a worker of every group is in the active set, 503 with the reason
/// once every slot is drained, and 200 again after an undrain; an unknown path is 404.
fn readyz_follows_the_active_set(what: &str, workers: usize) {
    let (ck, _port, status) = start_ready(what, workers, &METRICS).expect("start a ready ck");
    let addr = metrics_addr(&status);
    let (code, body) = get(addr, "/readyz");
    assert_eq!(code, 200, "{body}");
    for slot in 0..workers {
        let (code, body) = get(addr, "/readyz");
        assert_eq!(
            code, 200,
            "before draining slot {slot} of {workers}: {body}"
        );
        ck.ctl_ok(&["drain", &slot.to_string()]).expect("ck drain");
    }
    let (code, body) = get(addr, "/readyz");
    assert_eq!(code, 503, "every slot drained: {body}");
    assert!(body.contains("no worker in the active set"), "{body}");
    assert!(body.contains("slot 0 draining (drained)"), "{body}");
    let metrics = Metrics::fetch(addr);
    assert_eq!(metrics.sum("ck_worker_ready", &[]), 0.0, "{}", metrics.text);
    ck.ctl_ok(&["undrain", "0"]).expect("ck undrain");
    let (code, body) = get(addr, "/readyz");
    assert_eq!(code, 200, "slot 0 undrained: {body}");
    let (code, body) = get(addr, "/healthz");
    assert_eq!(code, 200, "{body}");
    let (code, body) = get(addr, "/nope");
    assert_eq!(code, 404, "{body}");
    assert!(
        body.contains("/metrics") && body.contains("/readyz"),
        "{body}"
    );
}

#[test]
fn readyz_turns_503_when_every_slot_is_drained_and_back() {
    readyz_follows_the_active_set("metrics-ready", 2);
}

#[test]
fn readyz_with_one_worker() {
    readyz_follows_the_active_set("metrics-ready1", 1);
}
