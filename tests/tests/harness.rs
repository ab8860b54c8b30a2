//! The harness's handle on a running ck ([`ck_tests::Ck`]) as the benchmarks use it: a UDP
//! `--no-bpf` baseline started from options, whose log is kept in a directory of the caller's
//! and whose only complaint is the baseline's own warning, answers and stops on SIGTERM; a
//! supervisor killed and started again by the same handle takes its fleet back; and a ck that
//! refuses its arguments is an error that carries its log, not a panic.

use std::time::Duration;

use ck_tests::ck::{Proto, StartOptions};
use ck_tests::sys::{TempDir, free_port};
use ck_tests::udp::Flows;
use ck_tests::{READY_TIMEOUT, get_new_conn, instance_name, local, probe_base_for, start};
use nix::sys::signal::Signal;

#[test]
fn a_udp_baseline_with_a_kept_log_answers_and_stops_cleanly() {
    let logs = TempDir::new("harness-logs");
    let port = free_port();
    let name = instance_name("harness-udp", port);
    let mut ck = StartOptions::new()
        .listen(Proto::Udp, port)
        .no_bpf(true)
        .args(&[
            "-w",
            "2",
            "--probe-port-base",
            &probe_base_for(port).to_string(),
        ])
        .log_dir(logs.path())
        .ctl_timeout(Duration::from_secs(20))
        .start(&name)
        .expect("start ck");
    assert!(ck.no_bpf());
    assert_eq!(ck.addr(), local(port));
    let status = ck
        .wait_ready(2, READY_TIMEOUT)
        .expect("wait for ready slots");
    assert!(!status.bpf, "{status:#?}");

    let answers = Flows::open(ck.addr(), 8).round();
    assert!(answers.iter().all(Option::is_some), "{answers:?}");

    let code = ck.stop().expect("stop ck");
    assert_eq!(code.code(), Some(0), "{}", ck.log());
    let kept = logs.path().join(format!("{name}.log"));
    assert_eq!(ck.log_path(), kept);
    assert!(ck.complaints().is_empty(), "{:?}", ck.complaints());
    drop(ck);
    let log = std::fs::read_to_string(&kept).expect("the log kept after the handle is gone");
    assert!(log.contains("BPF steering is off (--no-bpf)"), "{log}");
}

#[test]
fn a_supervisor_killed_and_started_again_takes_its_fleet_back() {
    let port = free_port();
    let mut ck = StartOptions::new()
        .port(port)
        .args(&[
            "-w",
            "2",
            "--probe-port-base",
            &probe_base_for(port).to_string(),
        ])
        .args(&["--survive-supervisor"])
        .start(&instance_name("harness-respawn", port))
        .expect("start ck");
    let before = ck
        .wait_ready(2, READY_TIMEOUT)
        .expect("wait for ready slots")
        .worker_pids();
    assert!(ck.respawn().is_err(), "a running ck was started again");

    let first = ck.spawned();
    ck.signal(Signal::SIGKILL).expect("SIGKILL to ck");
    ck.wait_exit(Duration::from_secs(10))
        .expect("wait for ck to exit");
    ck.respawn().expect("start ck again");
    assert!(ck.spawned() > first);
    let after = ck
        .wait_ready(2, READY_TIMEOUT)
        .expect("wait for ready slots");
    assert_eq!(after.worker_pids(), before, "{after:#?}");
    get_new_conn(ck.addr()).expect("an answer from the fleet taken back");

    let code = ck.stop().expect("stop ck");
    assert_eq!(code.code(), Some(0), "{}", ck.log());
}

#[test]
fn a_ck_that_refuses_its_arguments_is_an_error_with_its_log() {
    let (mut ck, _port) = start("harness-refused", &["--policy", "no-such-policy"])
        .expect("spawn ck (it exits at once)");
    let err = ck
        .wait_ready(1, READY_TIMEOUT)
        .expect_err("ck refused its arguments");
    let said = format!("{err:#}");
    assert!(said.contains("ck exited"), "{said}");
    assert!(said.contains("--- ck log ---"), "{said}");
    assert!(said.contains("no-such-policy"), "{said}");

    let err = ck.status().expect_err("no control socket");
    assert!(format!("{err:#}").contains("`ck status` failed"), "{err:#}");
}
