//! Bad input: `ck run` refuses it with `ck: error:` and a message that says what is wrong, exits
//! non-zero, and leaves nothing behind (no pins, no control socket or lock, no bound port, no
//! worker process).

use std::io::Read as _;
use std::net::{TcpListener, TcpStream};
use std::process::Output;
use std::time::Duration;

use ck_tests::ck::{ck_output, control_socket, lock_file, pins_dir, said};
use ck_tests::sys::{TempDir, free_port, instance_processes, poll_until, port_bindable};
use ck_tests::{burst, instance_name, local, start_ready};

/// The lines of `ss -tanpe` that mention `port`, for failure messages.
fn sockets_on(port: u16) -> String {
    let out = std::process::Command::new("ss").arg("-tanpe").output();
    let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    let needle = format!(":{port} ");
    text.unwrap_or_default()
        .lines()
        .filter(|l| l.contains(&needle))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs `ck run --name NAME --port PORT ARGS...` to completion.
fn run(name: &str, port: u16, args: &[&str]) -> Output {
    let port = port.to_string();
    let mut all = vec!["run", "--name", name, "--port", &port];
    all.extend_from_slice(args);
    ck_output(&all)
}

/// Asserts that `out` is a failure whose stderr has `ck: error:` and `phrase` (any case), and
/// that instance `name` left nothing.
fn assert_refused(out: &Output, phrase: &str, name: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "ck run succeeded ({}): {err}",
        out.status
    );
    assert!(err.contains("ck: error:"), "no `ck: error:` in: {err}");
    assert!(
        err.to_lowercase().contains(&phrase.to_lowercase()),
        "no {phrase:?} in: {err}"
    );
    assert!(
        !pins_dir(name).exists(),
        "pins left: {}",
        pins_dir(name).display()
    );
    assert!(!control_socket(name).exists(), "control socket left");
    let cgroup = ck_tests::sys::cgroup_dir(name);
    assert!(
        cgroup.as_ref().is_none_or(|d| !d.exists()),
        "cgroup left: {cgroup:?}"
    );
    assert!(!lock_file(name).exists(), "lock file left");
    assert_eq!(
        instance_processes(name),
        Vec::<u32>::new(),
        "worker processes left"
    );
}

/// Runs a bad `ck run` on a free port and checks the refusal and that the port is free.
fn refused(what: &str, args: &[&str], phrase: &str) {
    let port = free_port();
    let name = instance_name(what, port);
    let out = run(&name, port, args);
    assert_refused(&out, phrase, &name);
    assert!(port_bindable(port), "port {port} left bound");
}

#[test]
fn missing_app() {
    refused("bad-missing", &["--", "/nonexistent/app"], "no such file");
}

#[test]
fn app_not_executable() {
    let dir = TempDir::new("not-exec");
    let app = dir.write("app.sh", "#!/bin/sh\nexit 0\n", false);
    refused(
        "bad-noexec",
        &["--", app.to_str().expect("utf-8")],
        "not executable",
    );
}

#[test]
fn keep_previous_without_room_for_two_releases() {
    refused(
        "bad-keep",
        &["--workers", "64", "--keep-previous", "10m"],
        "run at most 63 workers with --keep-previous",
    );
}

#[test]
fn zero_workers() {
    refused("bad-workers", &["--workers", "0"], "out of range");
}

#[test]
fn invalid_name() {
    let port = free_port();
    let name = format!("bad.name-{port}");
    let out = run(&name, port, &[]);
    assert_refused(&out, "invalid --name", &name);
    assert!(port_bindable(port));
}

#[test]
fn port_already_in_use() {
    let port = free_port();
    let holder = TcpListener::bind(("0.0.0.0", port)).unwrap_or_else(|e| {
        panic!(
            "binding a plain listener on {port}: {e}\n{}",
            sockets_on(port)
        )
    });
    let name = instance_name("bad-inuse", port);
    let out = run(&name, port, &["-w", "2"]);
    assert_refused(&out, "already in use", &name);
    // The holder is named: this test process.
    let me = format!("pid {}", std::process::id());
    assert!(said(&out).contains(&me), "{}", said(&out));
    // The same with --adopt (ck checks the port before any worker binds it).
    let out = run(&name, port, &["-w", "2", "--adopt"]);
    assert_refused(&out, "already in use", &name);
    // The holder's socket is untouched: it still accepts.
    let client = TcpStream::connect(local(port)).expect("connect to the holder");
    let (mut accepted, peer) = holder.accept().expect("the holder still accepts");
    assert!(peer.ip().is_loopback());
    // The client closes first, so that no half-closed socket keeps our port.
    drop(client);
    let mut rest = Vec::new();
    accepted
        .read_to_end(&mut rest)
        .expect("reading the client's close");
    drop(accepted);
    drop(holder);
    let free = poll_until(Duration::from_secs(2), Duration::from_millis(20), || {
        port_bindable(port)
    });
    assert!(free, "port {port} still bound:\n{}", sockets_on(port));
}

/// `--metrics` on an address something already listens on: refused before any worker starts,
/// naming the flag, the address and its holder; on the listen port itself: refused too.
#[test]
fn metrics_address_in_use() {
    let holder = TcpListener::bind("127.0.0.1:0").expect("binding a listener");
    let taken = holder.local_addr().expect("its address").to_string();
    let port = free_port();
    let name = instance_name("bad-metrics", port);
    let out = run(&name, port, &["-w", "2", "--metrics", &taken]);
    assert_refused(
        &out,
        &format!("--metrics {taken}: the address is already in use"),
        &name,
    );
    let me = format!("pid {}", std::process::id());
    assert!(said(&out).contains(&me), "{}", said(&out));
    assert!(port_bindable(port), "port {port} left bound");
    // The listen port itself.
    let out = run(&name, port, &["--metrics", &port.to_string()]);
    assert_refused(&out, "overlaps the listen address", &name);
    assert!(port_bindable(port), "port {port} left bound");
}

#[test]
fn second_instance_with_the_same_name() {
    let (first, first_port, status) = start_ready("bad-twice", 2, &[]).expect("start a ready ck");
    let name = first.name().to_string();
    let second_port = free_port();
    let out = run(&name, second_port, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "second instance started: {err}");
    assert!(
        err.contains("ck: error:") && err.contains("already running"),
        "{err}"
    );
    assert!(
        port_bindable(second_port),
        "the second instance left its port bound"
    );

    // The first instance is untouched and still serves.
    assert!(control_socket(&name).exists() && lock_file(&name).exists());
    let now = first.status().expect("ck status");
    assert_eq!(now.pid, status.pid);
    assert_eq!(now.worker_pids(), status.worker_pids());
    assert_eq!(now.ready_count(), 2, "{now:#?}");
    let tally = burst(local(first_port), 20);
    assert_eq!(tally.ok, 20, "{tally:?}");
}

#[test]
fn quiet_period_longer_than_quiet_max() {
    let port = free_port();
    let name = instance_name("bad-quiet", port);
    let out = run(
        &name,
        port,
        &[
            "--metrics",
            "127.0.0.1:0",
            "--quiet-period",
            "20s",
            "--quiet-max",
            "5s",
        ],
    );
    // Both flags named, and the fix.
    assert_refused(
        &out,
        "--quiet-period 20s is longer than --quiet-max 5s",
        &name,
    );
    assert_refused(
        &out,
        "give a --quiet-period shorter than --quiet-max",
        &name,
    );
    assert!(port_bindable(port), "port {port} left bound");
}

/// An unknown `--stop-signal` is refused with the signals ck takes, from the command line and
/// from the config file.
#[test]
fn unknown_stop_signal() {
    let list = "give one of TERM, QUIT, INT, HUP, USR1, USR2, WINCH, KILL";
    let port = free_port();
    let name = instance_name("bad-stopsig", port);
    let out = run(&name, port, &["--stop-signal", "STOP"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "ck run took --stop-signal STOP: {err}"
    );
    assert!(err.contains("\"STOP\" is not a stop signal"), "{err}");
    assert!(err.contains(list), "{err}");
    assert!(!pins_dir(&name).exists() && !control_socket(&name).exists());
    assert!(port_bindable(port), "port {port} left bound");

    let dir = TempDir::new("bad-stopsig");
    let file = dir.write("ck.toml", "stop-signal = \"SIGCHLD\"\n", false);
    refused(
        "bad-stopsig-file",
        &["--config", file.to_str().expect("utf-8")],
        &format!(
            "line 1: `stop-signal = \"SIGCHLD\"`: \"SIGCHLD\" is not a stop signal ck sends: {list}"
        ),
    );
}

#[test]
fn queue_patience_too_long() {
    refused(
        "bad-patience",
        &["--policy", "least-queue", "--queue-patience", "2h"],
        "--queue-patience 7200s is longer than the program can hold: give at most 3600s",
    );
}

#[test]
fn queue_patience_without_least_queue() {
    refused(
        "bad-patience-policy",
        &["--queue-patience", "10ms"],
        "--queue-patience is least-queue's (how long a queue may wait before its depth is \
         compared), and --policy is round-robin: add --policy least-queue or drop --queue-patience",
    );
}

#[test]
fn ready_probe_without_a_probe() {
    refused(
        "bad-readyprobe",
        &["--ready", "probe"],
        "add --probe http:/PATH",
    );
}

#[test]
fn ready_probe_with_a_tcp_probe() {
    refused(
        "bad-readytcp",
        &["--ready", "probe", "--probe", "tcp"],
        "use --probe http:/PATH",
    );
}

#[test]
fn unknown_worker_output_mode() {
    let port = free_port();
    let name = instance_name("bad-output", port);
    let out = run(&name, port, &["--worker-output", "file"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    // The option, the value and the choices.
    assert!(
        err.contains("ck: error: --worker-output \"file\": expected one of: capture, inherit"),
        "{err}"
    );
    assert_eq!(out.status.code(), Some(2), "a refused command line exits 2");
    assert!(!pins_dir(&name).exists() && !control_socket(&name).exists());
    assert!(!lock_file(&name).exists(), "lock file left");
    assert!(port_bindable(port), "port {port} left bound");
}

#[test]
fn probes_on_a_fleet_of_udp_groups_only() {
    let port = free_port();
    let name = instance_name("bad-udpprobe", port);
    let udp = format!("udp://127.0.0.1:{port}");
    let both = ["--ready", "probe", "--probe", "http:/healthz"];
    for probe in [&["--probe", "http:/healthz"][..], &both] {
        let mut args = vec!["run", "--name", &name, "--listen", &udp];
        args.extend_from_slice(probe);
        let out = ck_output(&args);
        assert_refused(
            &out,
            "this fleet has only UDP groups: add a TCP group",
            &name,
        );
    }
}

#[test]
fn a_udp_address_without_a_port() {
    let port = free_port();
    let name = instance_name("bad-udpport", port);
    let out = run(&name, port, &["--listen", "udp://127.0.0.1:0"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("has port 0: port 0 asks the kernel for any free port")
            && err.ends_with("give a port from 1 to 65535, e.g. 8080\n"),
        "{err}"
    );
    assert!(!pins_dir(&name).exists() && !control_socket(&name).exists());
    assert!(port_bindable(port), "port {port} left bound");
}

#[test]
fn unknown_udp_mode() {
    let port = free_port();
    let name = instance_name("bad-udpmode", port);
    let out = run(&name, port, &["--udp-mode", "tcp"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("ck: error: --udp-mode \"tcp\": expected one of: flow, stateless, quic"),
        "{err}"
    );
    assert!(!pins_dir(&name).exists() && !control_socket(&name).exists());
    assert!(port_bindable(port), "port {port} left bound");
}
