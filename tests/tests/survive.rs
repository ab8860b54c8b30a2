//! `--survive-supervisor`: when ck is killed (SIGKILL, no chance to clean up) its workers keep
//! serving, and the next `ck run` of the same name takes the running fleet back (same worker
//! pids, counters going on) with no failed request; if no ck comes back within
//! `--orphan-timeout`, the orphan guard stops the workers and nothing is left. With `--adopt`
//! (servers that bind the port themselves, a forking one's member slots included) the program
//! keeps steering to every adopted socket while ck is away and the next ck takes them back.

use std::time::Duration;

use ck_tests::adopted::{self, Server};
use ck_tests::churn::{self, Background, SETTLE};
use ck_tests::ck::{control_socket, lock_file, pins_dir, state_file};
use ck_tests::http::hold;
use ck_tests::load::Mode;
use ck_tests::sys::{self, pid_alive, wait_all_dead};
use ck_tests::{Ck, READY_TIMEOUT, Status, burst, local, probe_base_for, start_ready};

/// The same `ck run` as the first instance's (`start_ready`'s port and probe ports, `workers`,
/// `flags`), started again to take its fleet back.
fn run_again(name: &str, port: u16, workers: u32, flags: &[&str]) -> Ck {
    let (workers, port_text, base_text) = (
        workers.to_string(),
        port.to_string(),
        probe_base_for(port).to_string(),
    );
    let mut args = vec![
        "-w",
        workers.as_str(),
        "--port",
        port_text.as_str(),
        "--probe-port-base",
        base_text.as_str(),
    ];
    args.extend_from_slice(flags);
    Ck::start(name, &args).expect("start ck")
}

/// Pids of the orphan guards of instance `name`.
fn guards(name: &str) -> Vec<u32> {
    let needle = format!("orphan-guard\0--name\0{name}\0");
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&needle))
        })
        .filter(|pid| pid_alive(*pid))
        .collect()
}

/// Waits until instance `name` has no orphan guard left.
fn assert_guards_gone(name: &str) {
    let mut left = Vec::new();
    sys::poll_until(Duration::from_secs(10), Duration::from_millis(20), || {
        left = guards(name);
        left.is_empty()
    });
    assert!(left.is_empty(), "orphan guard(s) {left:?} of {name} left");
}

fn take_back_under_load(what: &str, mode: Mode) {
    let flags = ["--survive-supervisor", "--policy", "round-robin"];
    let (mut first, port, _) = start_ready(what, 4, &flags).expect("start a ready ck");
    let name = first.name().to_string();
    assert_eq!(guards(&name).len(), 1, "one orphan guard per instance");
    let load = Background::start_without_retry(port, mode);
    std::thread::sleep(SETTLE);
    let was = first.status().expect("ck status");
    first.kill_supervisor().expect("kill the supervisor");
    first.abandon().expect("abandon the dead ck");
    // The workers serve on without a supervisor (the program keeps steering).
    std::thread::sleep(SETTLE / 2);
    let mut second = run_again(&name, port, 4, &flags);
    let now = second
        .wait_ready(4, READY_TIMEOUT)
        .expect("wait for ready slots");
    assert_ne!(now.pid, was.pid, "a new ck: {now:#?}");
    assert_eq!(
        now.worker_pids(),
        was.worker_pids(),
        "the same workers: {was:#?}\n{now:#?}"
    );
    assert_continuous(&was, &now);
    assert!(
        second
            .log()
            .contains("took back the fleet of a ck that died"),
        "{}",
        second.log()
    );
    std::thread::sleep(SETTLE);
    let report = load.finish_and_print(what);
    churn::assert_served(&report);
    let after = second.status().expect("ck status");
    assert_eq!(after.worker_pids(), was.worker_pids(), "{after:#?}");
    // Every worker answered, and only they.
    for pid in &after.worker_pids() {
        assert!(
            report.by_pid.get(pid).is_some_and(|n| *n > 0),
            "{pid}: {:?}",
            report.by_pid
        );
    }
    assert!(
        report
            .by_pid
            .keys()
            .all(|p| after.worker_pids().contains(p))
    );
    // The first guard left once the new ck answered; the new ck has its own.
    sys::poll_until(Duration::from_secs(5), Duration::from_millis(20), || {
        guards(&name).len() == 1
    });
    assert_eq!(guards(&name).len(), 1, "{:?}", guards(&name));
    // Counters went on: selections only grew, no restart was counted.
    second.ctl_ok(&["stop"]).expect("ck stop");
    second.wait_clean_exit().expect("ck exits cleanly");
    assert!(!state_file(&name).exists(), "state file left");
    assert!(!pins_dir(&name).exists(), "pins left");
    assert_guards_gone(&name);
}

/// Restarts and generations unchanged, selections only grew.
fn assert_continuous(was: &Status, now: &Status) {
    for slot in &now.slots {
        let before = was.slot(slot.slot);
        assert_eq!(slot.state, "ready", "{now:#?}");
        assert_eq!(slot.restarts, before.restarts, "{now:#?}");
        assert_eq!(slot.generation, before.generation, "{now:#?}");
        assert!(slot.selected >= before.selected, "{was:#?}\n{now:#?}");
    }
}

#[test]
fn kill_9_then_run_again_takes_the_fleet_back_new_connections() {
    take_back_under_load("sv-nc", Mode::NewConnection);
}

#[test]
fn kill_9_then_run_again_takes_the_fleet_back_keep_alive() {
    take_back_under_load("sv-ka", Mode::KeepAlive);
}

/// Open-connection counts go on while ck is dead (the pinned program counts) and after the
/// take-back: connections closed and opened meanwhile are counted exactly.
#[test]
fn open_connection_counts_go_on_across_a_take_back() {
    let flags = ["--survive-supervisor", "--policy", "round-robin"];
    let (mut first, port, _) = start_ready("sv-conns", 2, &flags).expect("start a ready ck");
    let name = first.name().to_string();
    let (conns, answered) = hold(local(port), 8);
    assert_eq!(first.status().expect("ck status").connections(), answered);
    first.kill_supervisor().expect("kill the supervisor");
    first.abandon().expect("abandon the dead ck");
    drop(conns);
    let (more, now_open) = hold(local(port), 4);
    let mut second = run_again(&name, port, 2, &flags);
    let now = second
        .wait_status("taken back, counting what is open", READY_TIMEOUT, |s| {
            s.ready_count() == 2 && s.bpf && s.connection_count == "kernel"
        })
        .expect("wait for the status");
    assert_eq!(now.worker_pids().len(), 2, "the same two workers: {now:#?}");
    second
        .wait_status("the 4 opened while ck was down", SETTLE * 2, |s| {
            s.connections() == now_open
        })
        .expect("wait for the status");
    drop(more);
    second
        .wait_connections_closed(SETTLE * 2)
        .expect("wait for the status");
    second.ctl_ok(&["stop"]).expect("ck stop");
    second.wait_clean_exit().expect("ck exits cleanly");
}

#[test]
fn orphans_stop_when_no_ck_comes_back() {
    let (mut ck, port, before) = start_ready(
        "sv-orphan",
        2,
        &[
            "--survive-supervisor",
            "--orphan-timeout",
            "2s",
            "--drain-timeout",
            "2s",
        ],
    )
    .expect("start a ready ck");
    let name = ck.name().to_string();
    let pids = before.worker_pids();
    ck.kill_supervisor().expect("kill the supervisor");
    // Right after ck died, its workers still serve.
    let tally = burst(local(port), 10);
    assert_eq!(tally.failed(), 0, "{tally:?}");
    assert!(tally.only_from(&pids), "{tally:?}");
    // Then the guard stops them and removes everything.
    let left = wait_all_dead(&pids, Duration::from_secs(20));
    assert!(
        left.is_empty(),
        "workers {left:?} still alive\n{}",
        ck.log()
    );
    let gone = sys::poll_until(Duration::from_secs(10), Duration::from_millis(20), || {
        !pins_dir(&name).exists()
            && !state_file(&name).exists()
            && !control_socket(&name).exists()
            && !lock_file(&name).exists()
    });
    assert!(
        gone,
        "left behind: pins {}, state {}, socket {}, lock {}\n{}",
        pins_dir(&name).exists(),
        state_file(&name).exists(),
        control_socket(&name).exists(),
        lock_file(&name).exists(),
        ck.log()
    );
    assert_guards_gone(&name);
    assert!(
        ck.log().contains("no ck took instance"),
        "the guard says what it did: {}",
        ck.log()
    );
    for pid in &pids {
        assert!(!pid_alive(*pid));
    }
    ck.abandon().expect("abandon the dead ck");
}

#[test]
fn a_worker_that_died_while_ck_was_down_is_replaced_on_take_back() {
    let flags = ["--survive-supervisor"];
    let (mut first, port, before) = start_ready("sv-gone", 2, &flags).expect("start a ready ck");
    let name = first.name().to_string();
    first.kill_supervisor().expect("kill the supervisor");
    first.abandon().expect("abandon the dead ck");
    let (kept, gone) = (before.worker_pid(0), before.worker_pid(1));
    sys::kill_hard(gone);
    assert!(wait_all_dead(&[gone].into(), Duration::from_secs(10)).is_empty());
    let mut second = run_again(&name, port, 2, &flags);
    let now = second
        .wait_ready(2, READY_TIMEOUT)
        .expect("wait for ready slots");
    assert_eq!(now.worker_pid(0), kept, "slot 0 taken back: {now:#?}");
    assert_ne!(now.worker_pid(1), gone, "slot 1 has a new worker: {now:#?}");
    assert_eq!(
        now.slot(1).generation,
        before.slot(1).generation + 1,
        "{now:#?}"
    );
    let tally = burst(local(port), 40);
    assert_eq!(tally.failed(), 0, "{tally:?}");
    assert!(tally.only_from(&now.worker_pids()), "{tally:?}");
    second.ctl_ok(&["stop"]).expect("ck stop");
    second.wait_clean_exit().expect("ck exits cleanly");
    assert_guards_gone(&name);
}

#[test]
fn a_kept_release_is_taken_back_after_a_kill_and_rolls_back() {
    let flags = ["--survive-supervisor", "--keep-previous", "10m"];
    let (mut first, port, before) = start_ready("sv-kept", 2, &flags).expect("start a ready ck");
    let name = first.name().to_string();
    let old = before.worker_pids();
    first.ctl_ok(&["reload"]).expect("ck reload");
    let kept = |s: &Status| -> std::collections::BTreeSet<u32> {
        let kept = s.slots.iter().filter(|slot| slot.state == "kept");
        kept.filter_map(|slot| slot.pid).collect()
    };
    let reloaded = first
        .wait_status("the old release kept", READY_TIMEOUT, |s| {
            kept(s) == old && s.ready_count() == 2
        })
        .expect("wait for the status");
    let new: std::collections::BTreeSet<u32> = reloaded.ready().filter_map(|s| s.pid).collect();
    first.kill_supervisor().expect("kill the supervisor");
    first.abandon().expect("abandon the dead ck");
    let mut second = run_again(&name, port, 2, &flags);
    let now = second
        .wait_status("taken back, the release still kept", READY_TIMEOUT, |s| {
            s.ready_count() == 2 && kept(s) == old
        })
        .expect("the kept release taken back");
    assert_eq!(now.worker_pids().len(), 4, "{now:#?}");
    // Asked while the new ck may still load its program (a take-back steers by the dead ck's
    // maps until then): answered once it steers and the flip took effect, so from the answer
    // on only the kept release answers.
    second
        .ctl_ok(&["rollback"])
        .expect("ck rollback after the take-back");
    let tally = burst(local(port), 40);
    assert_eq!(tally.failed(), 0, "{tally:?}");
    assert!(tally.only_from(&old), "{tally:?}");
    assert!(
        wait_all_dead(&new, Duration::from_secs(15)).is_empty(),
        "the new release leaves"
    );
    second.ctl_ok(&["stop"]).expect("ck stop");
    second.wait_clean_exit().expect("ck exits cleanly");
    assert_guards_gone(&name);
}

#[test]
fn a_fleet_upgraded_in_place_is_taken_back_after_a_kill() {
    let flags = ["--survive-supervisor"];
    let (mut first, port, before) =
        start_ready("sv-upgraded", 2, &flags).expect("start a ready ck");
    let name = first.name().to_string();
    first.ctl_ok(&["upgrade"]).expect("ck upgrade");
    first
        .wait_status("the upgrade done", READY_TIMEOUT, |s| {
            s.upgrades == 1 && s.bpf
        })
        .expect("wait for the status");
    // The guard watches the same pid across the upgrade: still one.
    assert_eq!(guards(&name).len(), 1, "{:?}", guards(&name));
    first.kill_supervisor().expect("kill the supervisor");
    first.abandon().expect("abandon the dead ck");
    let mut second = run_again(&name, port, 2, &flags);
    let now = second
        .wait_ready(2, READY_TIMEOUT)
        .expect("wait for ready slots");
    assert_eq!(now.worker_pids(), before.worker_pids(), "{now:#?}");
    assert_eq!(now.upgrades, 1, "the count goes on: {now:#?}");
    let tally = burst(local(port), 20);
    assert_eq!(tally.failed(), 0, "{tally:?}");
    second.ctl_ok(&["stop"]).expect("ck stop");
    second.wait_clean_exit().expect("ck exits cleanly");
    assert_guards_gone(&name);
}

#[test]
fn a_pid_that_names_another_process_now_is_neither_taken_back_nor_signalled() {
    // What pid reuse looks like to the next ck: the state names pid P started at tick T, and
    // the process with pid P now started at another tick. Here the state file is edited so
    // that slot 1's record has another start time than its (live) worker.
    let flags = ["--survive-supervisor"];
    let (mut first, port, before) = start_ready("sv-reuse", 2, &flags).expect("start a ready ck");
    let name = first.name().to_string();
    first.kill_supervisor().expect("kill the supervisor");
    first.abandon().expect("abandon the dead ck");
    let path = state_file(&name);
    let mut state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("the state file")).expect("JSON");
    let other = before.worker_pid(1);
    for slot in state["slots"].as_array_mut().expect("slots") {
        if slot["worker"]["pid"].as_u64() == Some(u64::from(other)) {
            let ticks = slot["worker"]["start_ticks"].as_u64().expect("start ticks");
            slot["worker"]["start_ticks"] = (ticks + 1).into();
        }
    }
    std::fs::write(&path, serde_json::to_vec(&state).unwrap()).expect("writing the state");
    let mut second = run_again(&name, port, 2, &flags);
    let now = second
        .wait_ready(2, READY_TIMEOUT)
        .expect("wait for ready slots");
    assert_eq!(now.worker_pid(0), before.worker_pid(0), "{now:#?}");
    assert_ne!(now.worker_pid(1), other, "{now:#?}");
    assert!(
        second.log().contains("is another process now"),
        "{}",
        second.log()
    );
    // ck left that process alone: it is not its worker.
    assert!(pid_alive(other), "pid {other} was signalled");
    // New connections go to ck's workers only.
    let tally = burst(local(port), 40);
    assert_eq!(tally.failed(), 0, "{tally:?}");
    assert!(tally.only_from(&now.worker_pids()), "{tally:?}");
    sys::kill_hard(other);
    second.ctl_ok(&["stop"]).expect("ck stop");
    second.wait_clean_exit().expect("ck exits cleanly");
    assert_guards_gone(&name);
}

/// The orphan guard stops orphans with `--stop-signal`: demo workers that ignore SIGTERM
/// (SIGINT stops them) stop on the guard's SIGINT, long before the 60 s drain timeout after
/// which SIGTERM would have left them to SIGKILL.
#[test]
fn the_orphan_guard_sends_the_stop_signal() {
    let ck_path = ck_tests::ck_bin();
    let (mut ck, _port, before) = start_ready(
        "sv-orphan-sig",
        2,
        &[
            "--survive-supervisor",
            "--orphan-timeout",
            "1s",
            "--drain-timeout",
            "60s",
            "--stop-signal",
            "INT",
            "--",
            ck_path.to_str().expect("UTF-8 path"),
            "demo-worker",
            "--ignore-sigterm",
        ],
    )
    .expect("start a ready ck");
    let name = ck.name().to_string();
    let pids = before.worker_pids();
    ck.kill_supervisor().expect("kill the supervisor");
    let left = wait_all_dead(&pids, Duration::from_secs(20));
    assert!(
        left.is_empty(),
        "workers {left:?} still alive\n{}",
        ck.log()
    );
    for pid in &pids {
        let line =
            format!("ck orphan-guard: stopping worker pid={pid} (SIGINT, SIGKILL after 60s)");
        assert!(ck.log().contains(&line), "no {line:?} in:\n{}", ck.log());
    }
    assert_guards_gone(&name);
}

/// An adopted fleet under `mode`: SIGKILL ck, traffic flows on to every slot, the same `ck run`
/// takes the fleet back (same slots, pids and members), no request failed, the exits of its
/// processes are seen; a roll afterwards replaces it, and a stop leaves nothing.
fn adopted_take_back_under_load(what: &str, server: Server, mode: Mode) {
    let args = server.args(&["--survive-supervisor"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (mut first, port) = ck_tests::start(what, &args).expect("start ck");
    let name = first.name().to_string();
    let started = adopted::wait_fleet(&mut first, server, |_| true);
    let load = Background::start_without_retry(port, mode);
    std::thread::sleep(SETTLE);
    let was = first.status().expect("ck status");
    let root = was.worker_pid(0);
    assert!(adopted::binds_beside(root, port), "the bind hook is off");
    first.kill_supervisor().expect("kill the supervisor");
    first.abandon().expect("abandon the dead ck");
    // No ck: the pinned bind hook still lets the fleet's processes bind the port.
    assert!(
        adopted::binds_beside(root, port),
        "no bind hook while ck was away"
    );
    // And the pinned maps keep steering to every adopted socket (counted there too).
    std::thread::sleep(SETTLE / 2);
    let away = 10 * server.listeners() as u32;
    let tally = burst(local(port), away);
    assert_eq!(tally.ok, away, "while ck was away: {tally:?}");
    let (port_text, base_text) = (port.to_string(), probe_base_for(port).to_string());
    let mut again = vec!["--port", &port_text, "--probe-port-base", &base_text];
    again.extend_from_slice(&args);
    let mut second = Ck::start(&name, &again).expect("start ck");
    let now = adopted::wait_fleet(&mut second, server, |_| true);
    assert_ne!(now.pid, was.pid, "a new ck: {now:#?}");
    adopted::assert_same_fleet(&was, &now);
    adopted::assert_every_slot_selected(&was, &now);
    assert!(
        second
            .log()
            .contains("took back the fleet of a ck that died"),
        "{}",
        second.log()
    );
    std::thread::sleep(SETTLE);
    let report = load.finish_and_print(what);
    churn::assert_served(&report);
    let after = second.status().expect("ck status");
    adopted::assert_same_fleet(&was, &after);
    adopted::assert_every_slot_gets_connections(&second, port);
    adopted::assert_exits_seen(&mut second, port, server);
    // A roll after the take-back: a new fleet of the same shape, then 0 failed.
    let old = started.worker_pids();
    second.ctl_ok(&["reload"]).expect("ck reload");
    let rolled = adopted::wait_fleet(&mut second, server, |s| s.worker_pids().is_disjoint(&old));
    let tally = burst(local(port), 40);
    assert_eq!(tally.failed(), 0, "{tally:?}");
    let mut pids = old;
    pids.extend(rolled.worker_pids());
    adopted::stop_and_assert_clean(second, port, pids);
    assert!(!state_file(&name).exists(), "state file left");
    assert_guards_gone(&name);
}

#[test]
fn adopted_servers_are_taken_back_under_load_new_connections() {
    adopted_take_back_under_load("sv-adopt-nc", Server::Demo, Mode::NewConnection);
}

#[test]
fn adopted_servers_are_taken_back_under_load_keep_alive() {
    adopted_take_back_under_load("sv-adopt-ka", Server::Demo, Mode::KeepAlive);
}

#[test]
fn a_forking_servers_members_are_taken_back_under_load_new_connections() {
    adopted_take_back_under_load("sv-fork-nc", Server::Forking, Mode::NewConnection);
}

#[test]
fn a_forking_servers_members_are_taken_back_under_load_keep_alive() {
    adopted_take_back_under_load("sv-fork-ka", Server::Forking, Mode::KeepAlive);
}

/// With `--adopt`, the orphan guard stops a forking server's whole tree when no ck comes back:
/// the root worker, the child holding its socket and every member (recorded with their start
/// times), then the pins and files.
#[test]
fn a_forking_servers_orphans_stop_when_no_ck_comes_back() {
    let server = Server::Forking;
    let flags = [
        "--survive-supervisor",
        "--orphan-timeout",
        "2s",
        "--drain-timeout",
        "2s",
    ];
    let args = server.args(&flags);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (mut ck, port) = ck_tests::start("sv-fork-orphan", &args).expect("start ck");
    let name = ck.name().to_string();
    adopted::wait_fleet(&mut ck, server, |_| true);
    let pids: std::collections::BTreeSet<u32> =
        sys::instance_processes(&name).into_iter().collect();
    assert_eq!(pids.len(), 5, "the root and its four children: {pids:?}");
    ck.kill_supervisor().expect("kill the supervisor");
    let tally = burst(local(port), 20);
    assert_eq!(tally.ok, 20, "{tally:?}");
    let left = wait_all_dead(&pids, Duration::from_secs(20));
    assert!(left.is_empty(), "{left:?} still alive\n{}", ck.log());
    let gone = sys::poll_until(Duration::from_secs(10), Duration::from_millis(20), || {
        !pins_dir(&name).exists() && !state_file(&name).exists() && !lock_file(&name).exists()
    });
    assert!(gone, "pins, state or lock left\n{}", ck.log());
    assert!(std::net::TcpStream::connect(local(port)).is_err());
    let cgroup = ck_tests::sys::cgroup_dir(&name);
    assert!(
        cgroup.is_none_or(|d| !d.exists()),
        "the instance's cgroup left"
    );
    assert_guards_gone(&name);
    ck.abandon().expect("abandon the dead ck");
}
