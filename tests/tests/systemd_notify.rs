//! ck under a service manager (`Type=notify`, as `deploy/ck.service` runs it): the test plays
//! systemd, binding the datagram socket that ck's `NOTIFY_SOCKET` names, and checks what ck tells
//! it, in order: nothing is `READY=1` while the workers boot (they say `READY=1` only after
//! 1.5 s), `READY=1` (with `MAINPID=` ck) once one is ready, `STATUS=` with the worker count,
//! `RELOADING=1` with `MONOTONIC_USEC=` during `ck reload` and `READY=1` after it, a `DEGRADED`
//! status when a slot's circuit breaker opens, `WATCHDOG=1` about every half
//! `WATCHDOG_USEC` throughout, and `STOPPING=1` on `ck stop`. Workers never see ck's
//! `NOTIFY_SOCKET` or watchdog variables.

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::time::{Duration, Instant};

use ck_tests::app::script;
use ck_tests::ck::Ck;
use ck_tests::sys::{TempDir, free_port, kill_hard};
use ck_tests::{READY_TIMEOUT, ck_bin, instance_name, probe_base_for};

/// `WATCHDOG_USEC` given to ck: it should send `WATCHDOG=1` every 200 ms.
const WATCHDOG_USEC: u64 = 400_000;

/// The service manager's end: the socket ck notifies, and every datagram received so far.
struct ServiceManager {
    socket: UnixDatagram,
    received: Vec<String>,
}

impl ServiceManager {
    fn bind(path: &Path) -> ServiceManager {
        let socket =
            UnixDatagram::bind(path).unwrap_or_else(|e| panic!("binding {}: {e}", path.display()));
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .expect("setting a read timeout");
        ServiceManager {
            socket,
            received: Vec::new(),
        }
    }

    /// Receives datagrams until one satisfies `done` and returns it; panics after `timeout`
    /// (or if ck exits meanwhile) with everything received and ck's log.
    fn wait_for(
        &mut self,
        ck: &mut Ck,
        what: &str,
        timeout: Duration,
        done: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + timeout;
        let mut buf = [0u8; 4096];
        loop {
            match self.socket.recv(&mut buf) {
                Ok(len) => {
                    let datagram = String::from_utf8_lossy(&buf[..len]).into_owned();
                    self.received.push(datagram.clone());
                    if done(&datagram) {
                        return datagram;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("receiving on the notify socket: {e}"),
            }
            let exited = ck.try_exit();
            assert!(
                Instant::now() < deadline && exited.is_none(),
                "no {what} (ck exit: {exited:?}); received: {:#?}\n--- ck log ---\n{}",
                self.received,
                ck.log()
            );
        }
    }

    /// How many `WATCHDOG=1` were received so far.
    fn watchdogs(&self) -> usize {
        self.received
            .iter()
            .filter(|d| has_line(d, "WATCHDOG=1"))
            .count()
    }
}

/// Whether `datagram` carries the line `line`.
fn has_line(datagram: &str, line: &str) -> bool {
    datagram.lines().any(|l| l == line)
}

/// The `STATUS=` text of `datagram`, if it has one.
fn status_of(datagram: &str) -> Option<&str> {
    datagram.lines().find_map(|l| l.strip_prefix("STATUS="))
}

#[test]
fn ck_tells_the_service_manager_ready_status_degraded_watchdog_and_stopping() {
    let dir = TempDir::new("sdnotify");
    let notify_path = dir.path().join("notify.sock");
    let mut manager = ServiceManager::bind(&notify_path);
    let marker = dir.path().join("crash");
    // Every worker writes its environment to env.<worker id>; the worker of the slot named in
    // `marker` exits at once (a boot crash); the others say READY=1 after 1.5 s.
    let app = script(
        &dir,
        "app.sh",
        &format!(
            "env > '{dir}/env.'\"$CK_WORKER_ID\"\n\
             [ -e '{marker}' ] && [ \"$CK_SLOT\" = \"$(cat '{marker}')\" ] && exit 1\n\
             exec '{ck}' demo-worker --ready-after 1500ms",
            dir = dir.path().display(),
            marker = marker.display(),
            ck = ck_bin().display()
        ),
    );
    let port = free_port();
    let (port_text, base_text) = (port.to_string(), probe_base_for(port).to_string());
    let notify_text = notify_path.to_str().expect("UTF-8 temp path");
    let watchdog_text = WATCHDOG_USEC.to_string();
    let started = Instant::now();
    let mut ck = Ck::start_with_env(
        &instance_name("sdnotify", port),
        &[
            "--port",
            &port_text,
            "--probe-port-base",
            &base_text,
            "-w",
            "2",
            "--ready",
            "notify",
            "--crash-limit",
            "2",
            "--crash-window",
            "30s",
            "--crash-cooldown",
            "60s",
            "--restart-backoff",
            "50ms,200ms",
            "--reload-batch",
            "2",
            "--",
            app.to_str().expect("UTF-8 temp path"),
        ],
        &[
            ("NOTIFY_SOCKET", notify_text),
            ("WATCHDOG_USEC", &watchdog_text),
        ],
    )
    .expect("start ck");

    // READY=1 only once a worker is ready: ck was alive and beating before it (several
    // WATCHDOG=1 and a STATUS with no worker ready), and the kernel's active set has a
    // worker as soon as READY=1 arrives (readiness does not go back here).
    let ready = manager.wait_for(&mut ck, "READY=1", READY_TIMEOUT, |d| {
        has_line(d, "READY=1")
    });
    let status = ck.status().expect("ck status");
    assert!(
        !status.active.is_empty(),
        "READY=1 while no worker is in the active set: {status:#?}"
    );
    assert!(
        has_line(&ready, &format!("MAINPID={}", ck.pid())),
        "READY=1 without MAINPID={}: {ready:?}",
        ck.pid()
    );
    let before_ready = &manager.received[..manager.received.len() - 1];
    let beats_before = before_ready
        .iter()
        .filter(|d| has_line(d, "WATCHDOG=1"))
        .count();
    assert!(
        beats_before >= 3,
        "READY=1 came after only {beats_before} WATCHDOG=1 (workers wait 1.5 s): {:#?}",
        manager.received
    );
    assert!(
        before_ready
            .iter()
            .filter_map(|d| status_of(d))
            .any(|s| s.starts_with("0/2 workers ready")),
        "no STATUS with 0/2 workers ready before READY=1: {:#?}",
        manager.received
    );
    manager.wait_for(&mut ck, "STATUS=2/2 workers ready", READY_TIMEOUT, |d| {
        status_of(d) == Some("2/2 workers ready, steering on")
    });

    // `ck reload`: RELOADING=1 with the time, the progress, then READY=1 when it is done.
    ck.ctl_ok(&["reload"]).expect("ck reload");
    let reloading = manager.wait_for(&mut ck, "RELOADING=1", READY_TIMEOUT, |d| {
        has_line(d, "RELOADING=1")
    });
    assert!(
        reloading.lines().any(|l| l.starts_with("MONOTONIC_USEC="))
            && status_of(&reloading).is_some_and(|s| s.starts_with("reloading 0/2;")),
        "{reloading:?}"
    );
    let reloaded = manager.wait_for(&mut ck, "READY=1 after the reload", READY_TIMEOUT, |d| {
        has_line(d, "READY=1")
    });
    assert_eq!(
        status_of(&reloaded),
        Some("2/2 workers ready, steering on"),
        "{reloaded:?}"
    );

    // A worker is killed and its replacements crash at start: its slot's breaker opens, and
    // ck says the fleet is degraded.
    let status = ck.status().expect("ck status");
    let victim = status
        .slots
        .iter()
        .rfind(|s| s.state == "ready")
        .unwrap_or_else(|| panic!("no ready worker after the reload: {status:#?}"))
        .slot;
    std::fs::write(&marker, victim.to_string()).expect("writing the crash marker");
    kill_hard(status.worker_pid(victim));
    let degraded = manager.wait_for(&mut ck, "a DEGRADED status", READY_TIMEOUT, |d| {
        status_of(d)
            .is_some_and(|s| s.starts_with(&format!("DEGRADED: slot {victim} breaker open;")))
    });
    assert!(
        status_of(&degraded).is_some_and(|s| s.ends_with("1/2 workers ready, steering on")),
        "{degraded:?}"
    );
    let status = ck.status().expect("ck status");
    assert_eq!(status.slot(victim).breaker, "open", "{status:#?}");

    // `ck stop`: STOPPING=1, then a clean exit.
    ck.ctl_ok(&["stop"]).expect("ck stop");
    manager.wait_for(&mut ck, "STOPPING=1", READY_TIMEOUT, |d| {
        has_line(d, "STOPPING=1")
    });
    let elapsed = started.elapsed();
    ck.wait_clean_exit().expect("ck exits cleanly");

    // WATCHDOG=1 about every 200 ms the whole time (loose bounds: a busy machine delays ticks).
    let beats = manager.watchdogs();
    let nominal = elapsed.as_micros() as f64 / (WATCHDOG_USEC as f64 / 2.0);
    eprintln!(
        "{beats} WATCHDOG=1 in {elapsed:?} (nominal {nominal:.1}); {} datagrams",
        manager.received.len()
    );
    assert!(
        beats as f64 >= nominal / 4.0 && beats as f64 <= nominal * 2.0 + 2.0,
        "{beats} WATCHDOG=1 in {elapsed:?}, expected about {nominal:.0}"
    );

    // No worker saw ck's NOTIFY_SOCKET or its watchdog: each had its own notify socket.
    let envs: Vec<_> = std::fs::read_dir(dir.path())
        .expect("reading the temp dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("env."))
        .map(|e| std::fs::read_to_string(e.path()).expect("reading a worker's env"))
        .collect();
    assert!(
        envs.len() >= 6,
        "expected the envs of 2 workers, 2 replacements and a crashing one's, found {}",
        envs.len()
    );
    let own_socket = format!("NOTIFY_SOCKET=@ck/{}/", ck.name());
    for env in &envs {
        assert!(
            env.lines().any(|l| l.starts_with(&own_socket)),
            "a worker without its own NOTIFY_SOCKET: {env}"
        );
        assert!(
            !env.contains(notify_text),
            "a worker saw ck's NOTIFY_SOCKET: {env}"
        );
        assert!(
            !env.lines()
                .any(|l| l.starts_with("WATCHDOG_USEC=") || l.starts_with("WATCHDOG_PID=")),
            "a worker saw ck's watchdog: {env}"
        );
    }
}
