//! `ck upgrade` and SIGUSR2: ck re-executes itself in place (same pid) and carries on with the
//! same workers, sockets, counters and steering. Ten upgrades of a 4-worker fleet under load
//! (new connections, keep-alive connections) fail no request; a binary that cannot take over
//! is refused with the reason and the old ck carries on; SIGUSR2 upgrades too; `-w 1`, a
//! worker still starting, and an upgrade asked in ck's first milliseconds work or are refused
//! clearly. With `--adopt` (servers that bind the port themselves, a forking one's member slots
//! included) upgrades under load keep every listener steered.

use std::time::Duration;

use ck_tests::adopted::{self, Server};
use ck_tests::churn::{self, Background, SETTLE};
use ck_tests::ck::{control_socket, pins_dir};
use ck_tests::load::Mode;
use ck_tests::sys::{self, TempDir};
use ck_tests::{Ck, READY_TIMEOUT, Status, burst, local, start, start_one_starting, start_ready};
use nix::sys::signal::Signal;

/// Upgrades in a row under load.
const UPGRADES: u32 = 10;

/// Waits until the new image has reported upgrade number `n` and its steering is checked.
fn wait_upgraded(ck: &mut Ck, n: u32) -> Status {
    ck.wait_status(&format!("upgrade {n} done"), READY_TIMEOUT, |s| {
        s.upgrades == n && s.bpf
    })
    .expect("wait for the status")
}

/// The same supervisor and the same workers, with counters that went on from `was`: no
/// restart, no new generation, selections only grew.
fn assert_continuous(ck: &Ck, was: &Status, now: &Status) {
    assert_eq!(now.pid, ck.pid(), "ck's pid changed: {now:#?}");
    assert_eq!(
        now.worker_pids(),
        was.worker_pids(),
        "the workers changed: {was:#?}\n{now:#?}"
    );
    assert_eq!(now.slots.len(), was.slots.len(), "{now:#?}");
    for slot in &now.slots {
        let before = was.slot(slot.slot);
        assert_eq!(slot.state, "ready", "{now:#?}");
        assert_eq!(
            slot.restarts, before.restarts,
            "slot {}: {now:#?}",
            slot.slot
        );
        assert_eq!(
            slot.generation, before.generation,
            "slot {}: {now:#?}",
            slot.slot
        );
        assert!(
            slot.selected >= before.selected,
            "slot {}: selected went back from {} to {}",
            slot.slot,
            before.selected,
            slot.selected
        );
    }
}

/// Stops ck and checks that nothing is left: no control socket, no pins.
fn stop_clean(mut ck: Ck) {
    ck.ctl_ok(&["stop"]).expect("ck stop");
    ck.wait_clean_exit().expect("ck exits cleanly");
    assert!(!control_socket(ck.name()).exists(), "control socket left");
    assert!(!pins_dir(ck.name()).exists(), "pins left");
}

fn upgrades_under_load(what: &str, mode: Mode) {
    let (mut ck, port, first) = start_ready(what, 4, &[]).expect("start a ready ck");
    let load = Background::start_without_retry(port, mode);
    std::thread::sleep(SETTLE);
    let mut was = ck.status().expect("ck status");
    for n in 1..=UPGRADES {
        let said = ck.ctl_ok(&["upgrade"]).expect("ck upgrade");
        assert!(said.contains("upgraded:"), "upgrade {n}: {said}");
        let now = wait_upgraded(&mut ck, n);
        assert_continuous(&ck, &was, &now);
        assert!(
            now.last_upgrade
                .as_deref()
                .is_some_and(|u| u.starts_with("ok")),
            "{now:#?}"
        );
        was = now;
        std::thread::sleep(SETTLE / 4);
    }
    std::thread::sleep(SETTLE);
    let report = load.finish_and_print(what);
    churn::assert_served(&report);
    let after = ck.status().expect("ck status");
    assert_continuous(&ck, &first, &after);
    assert_eq!(after.upgrades, UPGRADES);
    let selected = |s: &Status| s.slots.iter().map(|s| s.selected).sum::<u64>();
    assert!(
        selected(&after) > selected(&first),
        "the kernel's counters did not go on: {first:#?}\n{after:#?}"
    );
    // Only the first workers answered, and each of them did (round-robin steering went on).
    let pids = after.worker_pids();
    assert!(
        report.by_pid.keys().all(|pid| pids.contains(pid)),
        "answers from other pids than {pids:?}: {:?}",
        report.by_pid
    );
    for pid in &pids {
        assert!(
            report.by_pid.get(pid).is_some_and(|n| *n > 0),
            "worker {pid} answered nothing: {:?}",
            report.by_pid
        );
    }
    assert_eq!(
        ck.log().matches("ck upgraded in place").count(),
        UPGRADES as usize,
        "{}",
        ck.log()
    );
    stop_clean(ck);
}

#[test]
fn ten_upgrades_under_load_new_connections() {
    upgrades_under_load("up-nc", Mode::NewConnection);
}

#[test]
fn ten_upgrades_under_load_keep_alive() {
    upgrades_under_load("up-ka", Mode::KeepAlive);
}

#[test]
fn a_binary_that_cannot_take_over_is_refused_and_ck_carries_on() {
    let (mut ck, port, before) = start_ready("up-bad", 2, &[]).expect("start a ready ck");
    let dir = TempDir::new("up-bad");
    let not_executable = dir.write("ck-not-executable", "#!/bin/sh\nexit 0\n", false);
    let not_ck = dir.write("not-ck", "#!/bin/sh\necho hello\n", true);
    let other_format = dir.write(
        "ck-other-format",
        "#!/bin/sh\necho '{\"ck\":\"9.0.0\",\"format\":999,\"maps\":\"x\"}'\n",
        true,
    );
    let other_maps = dir.write(
        "ck-other-maps",
        &format!(
            "#!/bin/sh\necho '{{\"ck\":\"9.0.0\",\"format\":{},\"maps\":\"slots=64\"}}'\n",
            ::ck::supervisor::Compat::this().format
        ),
        true,
    );
    // A ck that does not accept the instance's command line (here: one more argument).
    let other_args = dir.write(
        "ck-other-args",
        &format!(
            "#!/bin/sh\nexec '{}' \"$@\" --no-such-option\n",
            ck_tests::ck_bin().display()
        ),
        true,
    );
    let missing = dir.path().join("no-such-ck");
    let cases = [
        ("/bin/false".into(), "upgrade-check failed (exit 1)"),
        (missing, "does not exist"),
        (not_executable, "cannot be executed (permission denied)"),
        (not_ck, "did not answer `upgrade-check`"),
        (other_format, "handover format 999"),
        (other_maps, "map layout"),
        (other_args, "the instance's command line"),
    ];
    for (binary, problem) in cases {
        let binary = binary.to_str().expect("UTF-8 path").to_string();
        let out = ck
            .ctl(&["upgrade", "--binary", &binary])
            .expect("ck upgrade");
        let said = sys_said(&out);
        assert!(!out.status.success(), "{binary}: {said}");
        assert!(said.contains(problem), "{binary}: {said}");
        assert!(
            said.contains("--binary") || said.contains("ck stop"),
            "{binary}: no fix named: {said}"
        );
        // The old ck carries on: same pid, same workers, still serving, no upgrade counted.
        let now = ck.status().expect("ck status");
        assert_eq!(now.pid, ck.pid());
        assert_eq!(now.worker_pids(), before.worker_pids(), "{now:#?}");
        assert_eq!(now.upgrades, 0, "{now:#?}");
        assert!(
            now.last_upgrade
                .as_deref()
                .is_some_and(|u| u.contains(problem)),
            "{now:#?}"
        );
        let tally = burst(local(port), 20);
        assert_eq!(tally.failed(), 0, "{binary}: {tally:?}");
    }
    // And a good one still works afterwards.
    let bin = ck_tests::ck_bin();
    ck.ctl_ok(&["upgrade", "--binary", bin.to_str().expect("UTF-8 path")])
        .expect("ck upgrade");
    let now = wait_upgraded(&mut ck, 1);
    assert_eq!(now.worker_pids(), before.worker_pids());
    stop_clean(ck);
}

fn sys_said(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn sigusr2_upgrades_in_place() {
    let (mut ck, port, _) = start_ready("up-usr2", 2, &[]).expect("start a ready ck");
    // A worker count changed at run time is kept (not the command line's).
    ck.ctl_ok(&["scale", "3"]).expect("ck scale");
    let before = ck
        .wait_ready(3, READY_TIMEOUT)
        .expect("wait for ready slots");
    sys::signal(ck.pid(), Signal::SIGUSR2);
    let now = wait_upgraded(&mut ck, 1);
    assert_continuous(&ck, &before, &now);
    assert_eq!(now.workers, 3, "{now:#?}");
    let tally = burst(local(port), 40);
    assert_eq!(tally.failed(), 0, "{tally:?}");
    assert!(tally.only_from(&before.worker_pids()), "{tally:?}");
    stop_clean(ck);
}

#[test]
fn one_worker_still_starting_becomes_ready_after_an_upgrade() {
    // The worker says READY=1 1.5 s after it starts: on the notify socket the new image took
    // over, with the ready timeout armed again from the handed-over timers.
    let (mut ck, port, starting) =
        start_one_starting("up-start", &[]).expect("start ck with a starting worker");
    let pid = starting.worker_pid(0);
    let out = ck.ctl_ok(&["upgrade"]).expect("ck upgrade");
    assert!(out.contains("upgraded:"), "{out}");
    let ready = ck
        .wait_ready(1, READY_TIMEOUT)
        .expect("wait for ready slots");
    assert_eq!(ready.worker_pid(0), pid, "{ready:#?}");
    assert_eq!(ready.slot(0).restarts, 0, "{ready:#?}");
    assert_eq!(ready.slot(0).generation, starting.slot(0).generation);
    let tally = burst(local(port), 20);
    assert_eq!(tally.failed(), 0, "{tally:?}");
    stop_clean(ck);
}

#[test]
fn an_upgrade_in_the_first_milliseconds_works_or_is_refused_clearly() {
    let (mut ck, port) = start("up-early", &["-w", "1"]).expect("start ck");
    // As soon as the control socket answers.
    assert!(sys::poll_until(
        READY_TIMEOUT,
        Duration::from_millis(1),
        || { control_socket(ck.name()).exists() }
    ));
    let out = ck.ctl(&["upgrade"]).expect("ck upgrade");
    let said = sys_said(&out);
    eprintln!("upgrade asked as soon as the control socket existed: {said}");
    if out.status.success() {
        assert!(said.contains("upgraded:"), "{said}");
    } else {
        assert!(said.contains("upgrade refused:"), "{said}");
        assert!(said.contains("try again"), "{said}");
    }
    let ready = ck
        .wait_ready(1, READY_TIMEOUT)
        .expect("wait for ready slots");
    let again = ck.status().expect("ck status").upgrades + 1;
    ck.ctl_ok(&["upgrade"]).expect("ck upgrade");
    let now = wait_upgraded(&mut ck, again);
    assert_eq!(now.worker_pids(), ready.worker_pids(), "{now:#?}");
    let tally = burst(local(port), 20);
    assert_eq!(tally.failed(), 0, "{tally:?}");
    stop_clean(ck);
}

/// `GET path` on `addr`: the status code, or None when the connection gave no answer.
fn http_code(addr: &str, path: &str) -> Option<u16> {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: ck\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    text.split_whitespace().nth(1)?.parse().ok()
}

/// `GET /metrics` on `addr`: the body of a 200 answer.
fn metrics(addr: &str) -> String {
    ck_tests::http::metrics_text(addr)
}

#[test]
fn the_metrics_listener_and_its_counters_go_on_after_an_upgrade() {
    let (mut ck, port, before) =
        start_ready("up-metrics", 2, &["--metrics", "127.0.0.1:0"]).expect("start a ready ck");
    let addr = before.metrics.clone().expect("a metrics address");
    burst(local(port), 20);
    assert!(metrics(&addr).contains("ck_upgrades_total 0"));
    // /readyz asked in a loop across the upgrade never says "not ready": the old program
    // steers with the pinned maps while the new image loads it again.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let poller = {
        let (stop, addr) = (stop.clone(), addr.clone());
        std::thread::spawn(move || {
            let (mut codes, mut unanswered) = (std::collections::BTreeMap::new(), 0);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match http_code(&addr, "/readyz") {
                    Some(code) => *codes.entry(code).or_insert(0u32) += 1,
                    None => unanswered += 1,
                }
            }
            (codes, unanswered)
        })
    };
    ck.ctl_ok(&["upgrade"]).expect("ck upgrade");
    let now = wait_upgraded(&mut ck, 1);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (codes, unanswered) = poller.join().expect("the /readyz poller");
    eprintln!("/readyz across the upgrade: {codes:?}, {unanswered} unanswered");
    assert!(codes.get(&200).is_some_and(|n| *n > 0), "{codes:?}");
    assert_eq!(
        codes.len(),
        1,
        "/readyz said something else than 200: {codes:?}"
    );
    assert_eq!(now.metrics.as_deref(), Some(addr.as_str()), "same listener");
    let text = metrics(&addr);
    assert!(text.contains("ck_upgrades_total 1"), "{text}");
    // The selections counted before the upgrade are still there.
    let selected: f64 = text
        .lines()
        .filter(|l| l.starts_with("ck_connections_selected_total{"))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum();
    assert!(selected >= 20.0, "{text}");
    stop_clean(ck);
}

#[test]
fn a_broken_slots_cool_down_goes_on_across_an_upgrade() {
    // Slot 1's worker exits at once: two boot crashes open its breaker for 2 s. The cool-down
    // timer is handed over: after the upgrade, the slot is tried again (without it, the slot
    // would stay broken for good).
    let dir = TempDir::new("up-broken");
    let body = format!(
        "if [ \"$CK_SLOT\" = 1 ]; then exit 3; fi\nexec '{}' demo-worker",
        ck_tests::ck_bin().display()
    );
    let app = ck_tests::app::script(&dir, "app.sh", &body);
    let app = app.to_str().expect("UTF-8 path");
    let (mut ck, _port) = start(
        "up-broken",
        &[
            "-w",
            "2",
            "--crash-limit",
            "2",
            "--crash-cooldown",
            "2s",
            "--",
            app,
        ],
    )
    .expect("start ck");
    let broken = ck
        .wait_status("slot 1 broken", READY_TIMEOUT, |s| {
            s.bpf && s.slots.len() == 2 && s.slot(0).state == "ready" && s.slot(1).state == "broken"
        })
        .expect("wait for the status");
    let out = ck.ctl_ok(&["upgrade"]).expect("ck upgrade");
    assert!(out.contains("upgraded:"), "{out}");
    let was = broken.slot(1).restarts;
    let after = ck
        .wait_status(
            "slot 1 tried again after its cool-down",
            READY_TIMEOUT,
            |s| s.slot(1).restarts > was,
        )
        .expect("wait for the status");
    assert_eq!(after.upgrades, 1, "{after:#?}");
    assert_eq!(after.worker_pid(0), broken.worker_pid(0), "{after:#?}");
    stop_clean(ck);
}

#[test]
fn an_upgrade_during_a_rolling_restart_is_refused_and_the_roll_goes_on() {
    // Workers that take 1 s to be ready: the roll of 2 lasts a few seconds.
    let bin = ck_tests::ck_bin();
    let bin = bin.to_str().expect("UTF-8 path");
    let (mut ck, port, _) = start_ready(
        "up-roll",
        2,
        &["--", bin, "demo-worker", "--ready-after", "1s"],
    )
    .expect("start a ready ck");
    let reload = ck_tests::ck::ck_command()
        .args(["reload", "--name", ck.name()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting ck reload");
    ck.wait_status("the roll under way", READY_TIMEOUT, |s| s.reloading)
        .expect("wait for the status");
    let out = ck.ctl(&["upgrade"]).expect("ck upgrade");
    let said = sys_said(&out);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("rolling restart is in progress"), "{said}");
    let reload = reload.wait_with_output().expect("ck reload");
    assert!(reload.status.success(), "{}", sys_said(&reload));
    let now = ck
        .wait_ready(2, READY_TIMEOUT)
        .expect("wait for ready slots");
    assert_eq!(now.upgrades, 0, "{now:#?}");
    // Once the roll is done, the upgrade goes through.
    ck.ctl_ok(&["upgrade"]).expect("ck upgrade");
    wait_upgraded(&mut ck, 1);
    let tally = burst(local(port), 20);
    assert_eq!(tally.failed(), 0, "{tally:?}");
    stop_clean(ck);
}

/// Three upgrades of an adopted fleet under `mode`: the same pids, slots and members, no failed
/// request, every slot selected after them; then a drain drains, the new image sees a member's
/// or worker's exit, and a stop leaves nothing.
fn adopted_upgrades_under_load(what: &str, server: Server, mode: Mode) {
    let args = server.args(&[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (mut ck, port) = start(what, &args).expect("start ck");
    let first = adopted::wait_fleet(&mut ck, server, |_| true);
    let load = Background::start_without_retry(port, mode);
    std::thread::sleep(SETTLE);
    let mut was = ck.status().expect("ck status");
    for n in 1..=3 {
        let said = ck.ctl_ok(&["upgrade"]).expect("ck upgrade");
        assert!(said.contains("upgraded:"), "upgrade {n}: {said}");
        let now = adopted::wait_fleet(&mut ck, server, |s| s.upgrades == n);
        assert_eq!(now.pid, ck.pid(), "ck's pid changed: {now:#?}");
        adopted::assert_same_fleet(&was, &now);
        was = now;
        std::thread::sleep(SETTLE / 4);
    }
    std::thread::sleep(SETTLE);
    let report = load.finish_and_print(what);
    churn::assert_served(&report);
    let after = ck.status().expect("ck status");
    adopted::assert_same_fleet(&first, &after);
    adopted::assert_every_slot_gets_connections(&ck, port);
    assert_eq!(ck.log().matches("ck upgraded in place").count(), 3);
    // The bind hook is the new image's (pinned in place of the old one's) and works.
    assert!(adopted::binds_beside(after.worker_pid(0), port));
    adopted::assert_drain_works(&mut ck, port);
    adopted::assert_exits_seen(&mut ck, port, server);
    adopted::stop_and_assert_clean(ck, port, first.worker_pids());
}

#[test]
fn adopted_servers_upgrade_under_load_new_connections() {
    adopted_upgrades_under_load("up-adopt-nc", Server::Demo, Mode::NewConnection);
}

#[test]
fn adopted_servers_upgrade_under_load_keep_alive() {
    adopted_upgrades_under_load("up-adopt-ka", Server::Demo, Mode::KeepAlive);
}

#[test]
fn a_forking_servers_members_upgrade_under_load_new_connections() {
    adopted_upgrades_under_load("up-fork-nc", Server::Forking, Mode::NewConnection);
}

#[test]
fn a_forking_servers_members_upgrade_under_load_keep_alive() {
    adopted_upgrades_under_load("up-fork-ka", Server::Forking, Mode::KeepAlive);
}
