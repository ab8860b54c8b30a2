//! `--adopt`: servers that bind the port themselves run unmodified. ck's bind hook lets every
//! worker bind the port, ck adopts each listening socket, and from then on the slot is steered,
//! drained, restarted (the last socket held for the replacement) and rolled like one whose
//! socket ck made.

use std::collections::BTreeSet;
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::Duration;

use ck_tests::churn::{self, Background, SETTLE, failures_by_kind};
use ck_tests::ck::{ck_output, said};
use ck_tests::http::hold;
use ck_tests::load::Mode;
use ck_tests::sys::{cgroup_dir, kill_hard, poll_until};
use ck_tests::{READY_TIMEOUT, burst_pinned, ck_bin, local, start, start_ready};

fn example(file: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(file);
    path.to_str().expect("UTF-8 path").to_string()
}

/// One plain `GET /` on a new connection; the status code.
fn get_status(port: u16) -> u16 {
    let mut stream = TcpStream::connect(local(port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream
        .write_all(b"GET / HTTP/1.0\r\nHost: t\r\n\r\n")
        .expect("send");
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}

#[test]
fn an_unmodified_python_http_server_is_adopted_steered_and_drained() {
    let (mut ck, port, status) = start_ready(
        "adopt-py",
        2,
        &[
            "--adopt",
            "--",
            "sh",
            "-c",
            "exec python3 -m http.server $PORT",
        ],
    )
    .expect("start a ready ck");
    for slot in &status.slots {
        assert!(slot.adopt_latency_us.is_some(), "{status:#?}");
    }
    let before = ck.status().expect("ck status");
    for _ in 0..20 {
        assert_eq!(get_status(port), 200);
    }
    let after = ck.status().expect("ck status");
    for s in [0, 1] {
        assert!(
            after.slot(s).selected > before.slot(s).selected,
            "slot {s} got nothing: {after:#?}"
        );
    }
    ck.ctl_ok(&["drain", "1"]).expect("ck drain");
    let drained = ck.status().expect("ck status");
    for _ in 0..20 {
        assert_eq!(get_status(port), 200);
    }
    let later = ck
        .wait_status("counters", READY_TIMEOUT, |_| true)
        .expect("wait for the status");
    assert_eq!(
        later.slot(1).selected,
        drained.slot(1).selected,
        "the drained slot got connections: {later:#?}"
    );
    assert_eq!(later.slot(0).selected, drained.slot(0).selected + 20);
    ck.ctl_ok(&["stop"]).expect("ck stop");
    ck.wait_clean_exit().expect("ck exits cleanly");
    assert!(!cgroup_dir(ck.name()).expect("cgroup2").exists());
}

#[test]
fn an_unmodified_node_server_spreads_evenly_and_survives_a_kill_under_load() {
    let app = example("listen.js");
    let (mut ck, port, status) = start_ready(
        "adopt-node",
        2,
        &["--adopt", "--policy", "round-robin", "--", "node", &app],
    )
    .expect("start a ready ck");
    let tally = burst_pinned(local(port), 40);
    assert_eq!(tally.ok, 40, "{tally:?}");
    assert_eq!((tally.slot(0), tally.slot(1)), (20, 20), "{tally:?}");

    let load = Background::start(port, Mode::NewConnection);
    std::thread::sleep(SETTLE);
    let victim = status.worker_pid(1);
    kill_hard(victim);
    ck.wait_status("slot 1 replaced, adopted, ready", READY_TIMEOUT, |s| {
        s.ready_count() == 2 && s.slot(1).pid.is_some_and(|p| p != victim) && s.bpf
    })
    .expect("wait for the status");
    std::thread::sleep(SETTLE);
    let report = load.finish_and_print("adopt-node kill");
    let kinds = failures_by_kind(&report);
    assert_eq!(report.refused, 0, "{kinds:?}");
    assert_eq!(report.timeout, 0, "{kinds:?}");
    assert!(report.reset <= churn::CONNECTIONS as u64, "{kinds:?}");
}

/// Adopted sockets are tagged like ck's own: the kernel counts each slot's open connections
/// exactly, and none once they close.
#[test]
fn adopted_sockets_connections_are_counted() {
    let (mut ck, port, _) = start_ready("adopt-conns", 2, &["--adopt", "--policy", "round-robin"])
        .expect("start a ready ck");
    let (conns, answered) = hold(local(port), 10);
    let status = ck.status().expect("ck status");
    assert_eq!(status.connection_count, "kernel", "{status:#?}");
    assert_eq!(status.connections(), answered, "{status:#?}");
    drop(conns);
    ck.wait_connections_closed(READY_TIMEOUT)
        .expect("wait for the status");
}

/// `-w 1` adopted demo worker (it binds $PORT itself): five kills refuse nothing; each time the
/// dead worker's socket is held until the replacement's is adopted, then closed, and what was
/// queued on it migrates.
#[test]
fn a_single_adopted_worker_restarts_without_refusing_a_connection() {
    let (mut ck, port, _) = start_ready("adopt-one", 1, &["--adopt"]).expect("start a ready ck");
    let load = Background::start(port, Mode::NewConnection);
    std::thread::sleep(SETTLE);
    let mut dead = BTreeSet::new();
    for _ in 0..5 {
        let pid = ck.status().expect("ck status").worker_pid(0);
        kill_hard(pid);
        dead.insert(pid);
        ck.wait_status("replaced and adopted", READY_TIMEOUT, |s| {
            s.ready_count() == 1 && s.slot(0).pid.is_some_and(|p| !dead.contains(&p)) && s.bpf
        })
        .expect("wait for the status");
        std::thread::sleep(Duration::from_millis(500));
    }
    let report = load.finish_and_print("adopt-one");
    let kinds = failures_by_kind(&report);
    assert_eq!(report.refused, 0, "refused: {kinds:?}");
    assert_eq!(report.timeout, 0, "{kinds:?}");
    assert!(report.reset <= 5 * churn::CONNECTIONS as u64, "{kinds:?}");
    let log = ck.log();
    assert_eq!(
        log.matches("last socket of its group kept open").count(),
        5,
        "{log}"
    );
    assert!(
        log.matches("listening socket adopted").count() >= 6,
        "{log}"
    );
}

#[test]
fn adopted_workers_roll_under_a_keep_alive_client_that_never_retries() {
    let (mut ck, port, _) = start_ready("adopt-roll", 2, &["--adopt"]).expect("start a ready ck");
    let load = Background::start_without_retry(port, Mode::KeepAlive);
    let run = churn::reload_times_under(&mut ck, load, 3);
    run.assert_all_succeeded(&ck);
    churn::print_report("adopt-roll", &run.report);
    churn::assert_served(&run.report);
    assert!(run.after.worker_pids().is_disjoint(&run.reloads[0].before));
}

#[test]
fn a_worker_that_listens_elsewhere_is_named_and_replaced() {
    let body = format!(
        "PORT=$(( PORT + 1 )) exec env -u CK_LISTEN '{}' demo-worker",
        ck_bin().display()
    );
    let dir = ck_tests::sys::TempDir::new("adopt-elsewhere");
    let app = ck_tests::app::script(&dir, "app.sh", &body);
    let (mut ck, _port) = start(
        "adopt-elsewhere",
        &[
            "-w",
            "1",
            "--adopt",
            "--ready-timeout",
            "1s",
            "--",
            app.to_str().unwrap(),
        ],
    )
    .expect("start ck");
    let named = poll_until(Duration::from_secs(10), Duration::from_millis(50), || {
        ck.log()
            .contains("a worker listens on a port that is not one of the instance's")
    });
    assert!(named, "{}", ck.log());
    ck.wait_status(
        "the worker replaced after --ready-timeout",
        READY_TIMEOUT,
        |s| s.slot(0).restarts >= 1,
    )
    .expect("wait for the status");
    assert!(
        ck.log().contains("not ready within --ready-timeout"),
        "{}",
        ck.log()
    );
}

#[test]
fn adopt_without_bpf_is_refused() {
    let out = ck_output(&[
        "run",
        "--adopt",
        "--no-bpf",
        "--name",
        "t-adopt-nobpf",
        "-p",
        "1",
    ]);
    assert!(!out.status.success());
    assert!(said(&out).contains("--adopt needs BPF"), "{}", said(&out));
}
