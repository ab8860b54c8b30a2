//! `ck run --user USER[:GROUP]`: ck (root) opens the sockets, so workers running as `nobody`
//! with no capability serve a port below 1024; a restarted worker is `nobody` too; `--adopt`
//! adopts the sockets of `nobody`'s workers; the option works from a `--config` file; a user or
//! group that does not exist, an app that user cannot reach, or a ck that cannot switch users is
//! refused at start with the fix, leaving nothing behind.

use std::process::Output;
use std::time::Duration;

use ck_tests::ck::{Ck, ck_command_at, ck_output, control_socket, lock_file, pins_dir, said};
use ck_tests::privs::{Creds, creds, free_low_port, nobody, reachable_copy};
use ck_tests::sys::{TempDir, free_port, instance_processes, output_within, port_bindable};
use ck_tests::{READY_TIMEOUT, Status, burst_pinned, ck_bin, instance_name, local, probe_base_for};

/// Asserts that worker `pid` runs as `nobody` (every uid and gid) with no capability at all.
fn assert_nobody_without_capabilities(pid: u32) -> Creds {
    let who = nobody();
    let c = creds(pid).unwrap_or_else(|| panic!("worker {pid} is gone"));
    assert!(c.uids.iter().all(|u| *u == who.uid), "uids of {pid}: {c:?}");
    assert!(c.gids.iter().all(|g| *g == who.gid), "gids of {pid}: {c:?}");
    assert!(!c.groups.contains(&0), "root's group kept: {c:?}");
    assert!(c.no_capability(), "capabilities left in {pid}: {c:?}");
    c
}

/// Starts `ck run --name NAME --port PORT --probe-port-base BASE ARGS...` and waits for
/// `workers` ready slots with steering on.
fn start_on(what: &str, port: u16, workers: usize, args: &[&str]) -> (Ck, Status) {
    let name = instance_name(what, port);
    let (port_text, base, w) = (
        port.to_string(),
        probe_base_for(port).to_string(),
        workers.to_string(),
    );
    let mut all = vec!["--port", &port_text, "--probe-port-base", &base, "-w", &w];
    all.extend_from_slice(args);
    // Root runs ck, but the workers run as `nobody`, which must reach the binary they start
    // (ck's own, for the demo worker), wherever the checkout is.
    let ck_copy = reachable_copy(&ck_bin());
    let mut ck = Ck::start_command(ck_command_at(&ck_copy), &name, &all, &[]).expect("start ck");
    let status = ck
        .wait_ready(workers, READY_TIMEOUT)
        .expect("wait for ready slots");
    (ck, status)
}

#[test]
fn workers_run_as_nobody_on_a_low_port_with_no_capability() {
    let port = free_low_port(731);
    let (mut ck, status) = start_on("user", port, 2, &["--user", "nobody"]);
    for pid in status.worker_pids() {
        assert_nobody_without_capabilities(pid);
    }
    // Their notify messages still count: the demo worker's STATUS= reaches ck, none refused.
    let status = ck
        .wait_status("STATUS=serving from both workers", READY_TIMEOUT, |s| {
            s.slots
                .iter()
                .all(|slot| slot.status.as_deref() == Some("serving"))
        })
        .expect("wait for the status");
    assert!(
        status.slots.iter().all(|s| s.notify_refused == 0),
        "{status:#?}"
    );
    // ck itself stays root.
    assert_eq!(creds(status.pid).expect("ck").uids[0], 0);

    let addr = local(port);
    let spread = burst_pinned(addr, 20);
    assert_eq!(spread.ok, 20, "{spread:?}");
    assert_eq!((spread.slot(0), spread.slot(1)), (10, 10), "{spread:?}");

    // A SIGKILLed worker is restarted as nobody, and serves.
    let old = status.worker_pid(1);
    ck_tests::sys::kill_hard(old);
    let after = ck
        .wait_status("slot 1 restarted", READY_TIMEOUT, |s| {
            let slot = s.slot(1);
            slot.pid.is_some_and(|p| p != old) && slot.state == "ready" && slot.restarts == 1
        })
        .expect("wait for the status");
    let new = after.worker_pid(1);
    assert_nobody_without_capabilities(new);
    let again = burst_pinned(addr, 20);
    assert_eq!(again.pid(new), 10, "the new worker serves: {again:?}");

    ck.ctl_ok(&["stop"]).expect("ck stop");
    ck.wait_clean_exit().expect("ck exits cleanly");
    assert!(port_bindable(port), "port {port} left bound");
}

#[test]
fn adopted_workers_run_as_nobody_and_are_adopted() {
    // With --adopt the app binds the port itself, so a high port: nobody has no capability.
    let port = free_port();
    let (mut ck, status) = start_on(
        "user-adopt",
        port,
        2,
        &[
            "--adopt",
            "--user",
            "nobody",
            "--",
            "sh",
            "-c",
            "exec python3 -m http.server $PORT",
        ],
    );
    for slot in &status.slots {
        assert!(slot.adopt_latency_us.is_some(), "not adopted: {status:#?}");
        assert_nobody_without_capabilities(slot.pid.expect("a worker"));
    }
    let old = status.worker_pid(0);
    ck_tests::sys::kill_hard(old);
    let after = ck
        .wait_status("slot 0 adopted again", READY_TIMEOUT, |s| {
            let slot = s.slot(0);
            slot.pid.is_some_and(|p| p != old) && slot.state == "ready" && slot.restarts == 1
        })
        .expect("wait for the status");
    assert_nobody_without_capabilities(after.worker_pid(0));
    ck.ctl_ok(&["stop"]).expect("ck stop");
    ck.wait_clean_exit().expect("ck exits cleanly");
}

#[test]
fn user_from_a_config_file() {
    let port = free_low_port(761);
    let dir = TempDir::new("user-config");
    let file = dir.write("ck.toml", "user = \"nobody\"\nworkers = 1\n", false);
    let file = file.to_str().expect("UTF-8 path");
    let (mut ck, status) = start_on("user-cfg", port, 1, &["--config", file]);
    assert_nobody_without_capabilities(status.worker_pid(0));
    let served = burst_pinned(local(port), 5);
    assert_eq!(served.ok, 5, "{served:?}");
    ck.ctl_ok(&["stop"]).expect("ck stop");
    ck.wait_clean_exit().expect("ck exits cleanly");
}

/// Asserts that `out` failed with an error (`error:` from the option's parser, `ck: error:`
/// from ck's checks) with every one of `phrases`, and that instance `name` on `port` left
/// nothing.
fn assert_refused(out: &Output, phrases: &[&str], name: &str, port: u16) {
    let text = said(out);
    assert!(!out.status.success(), "ck run succeeded: {text}");
    assert!(text.contains("error:"), "{text}");
    for phrase in phrases {
        assert!(text.contains(phrase), "no {phrase:?} in: {text}");
    }
    assert!(!pins_dir(name).exists(), "pins left: {text}");
    assert!(!control_socket(name).exists(), "control socket left");
    assert!(!lock_file(name).exists(), "lock file left");
    assert!(instance_processes(name).is_empty(), "workers left");
    assert!(port_bindable(port), "port {port} left bound");
}

#[test]
fn unknown_user_or_group_is_refused_with_the_fix() {
    let port = free_port();
    let name = instance_name("user-bad", port);
    let p = port.to_string();
    let run = |user: &str| ck_output(&["run", "--name", &name, "--port", &p, "--user", user]);
    assert_refused(
        &run("no-such-user-ck"),
        &["--user", "no user \"no-such-user-ck\"", "getent passwd"],
        &name,
        port,
    );
    assert_refused(
        &run("nobody:no-such-group-ck"),
        &["no group \"no-such-group-ck\"", "getent group"],
        &name,
        port,
    );
    assert_refused(&run("nobody:"), &["USER:GROUP"], &name, port);

    // An app the user cannot reach: named, with its directory, before anything starts.
    let dir = TempDir::new("user-private");
    let app = dir.write("app", "#!/bin/sh\nexec sleep 60\n", true);
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .expect("chmod 700");
    let app = app.to_str().expect("UTF-8 path");
    let out = ck_output(&[
        "run", "--name", &name, "--port", &p, "--user", "nobody", "--", app,
    ]);
    let private = format!("{} (mode 700", dir.path().display());
    assert_refused(&out, &[&private, "is not searchable by uid"], &name, port);
}

/// Runs `ck run --user nobody` as root with only `caps` in its bounding set, to completion.
fn run_root_with(caps: &str, name: &str, port: u16) -> Output {
    let p = port.to_string();
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args([
        "--inh-caps=-all",
        &format!("--bounding-set=-all,{caps}"),
        "--",
    ])
    .arg(ck_bin())
    .args(["run", "--name", name, "--port", &p, "--user", "nobody"])
    .env("NO_COLOR", "1");
    output_within(&mut cmd, Duration::from_secs(20)).expect("ck exits")
}

#[test]
fn a_ck_that_cannot_switch_users_refuses_user() {
    let port = free_port();
    let name = instance_name("user-nocap", port);
    // Root, but with only the capabilities BPF steering needs.
    assert_refused(
        &run_root_with("+bpf,+perfmon", &name, port),
        &[
            "--user nobody: ck runs as uid 0 without CAP_SETUID, CAP_SETGID and CAP_KILL",
            "setcap cap_setuid,cap_setgid,cap_kill+ep",
            "or drop --user",
        ],
        &name,
        port,
    );
    // Each of the three alone is named.
    let all = ["setuid", "setgid", "kill"];
    for missing in all {
        let caps: String = ["bpf", "perfmon"]
            .iter()
            .chain(all.iter().filter(|c| **c != missing))
            .map(|c| format!("+{c}"))
            .collect::<Vec<_>>()
            .join(",");
        let want = format!("without CAP_{}, so", missing.to_uppercase());
        assert_refused(&run_root_with(&caps, &name, port), &[&want], &name, port);
    }
}
