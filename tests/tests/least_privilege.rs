//! The capabilities ck needs, proven by running it as `nobody` (through `setpriv`) with only
//! `CAP_BPF` and `CAP_PERFMON` as its inheritable, ambient and bounding sets: the core scenario
//! works (steering on, counted connections, a drained slot gets none, a SIGKILLed worker is
//! restarted, `ck stop`), and without either capability ck refuses to start and says which one
//! it lacks and how to grant it; with `--user` of its own user, its workers hold none of its
//! capabilities. A non-root ck needs a run directory and a pin directory of its own
//! (`CK_RUN_DIR`, `CK_PIN_DIR`), lent to `nobody` by the test.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::time::Duration;

use ck_tests::ck::{Ck, said};
use ck_tests::privs::{LentDir, as_nobody, cap_bit, creds, nobody};
use ck_tests::sys::{TempDir, free_port, instance_processes, output_within, port_bindable};
use ck_tests::{READY_TIMEOUT, burst_pinned, ck_bin, instance_name, local, probe_base_for};

/// `CAP_PERFMON` and `CAP_BPF`.
const PERFMON: u32 = 38;
const BPF: u32 = 39;

/// What a non-root ck gets from the test: a run directory and a pin directory of its own.
struct Dirs {
    run: LentDir,
    pins: LentDir,
    /// Keeps the run directory's parent (a fresh temp dir) alive.
    _parent: TempDir,
}

impl Dirs {
    fn new(name: &str) -> Dirs {
        let parent = TempDir::new(name);
        Dirs {
            run: LentDir::new(parent.path().join("run")),
            pins: LentDir::new(format!("/sys/fs/bpf/{name}")),
            _parent: parent,
        }
    }

    fn env(&self) -> [(&str, &str); 2] {
        [
            ("CK_RUN_DIR", self.run.text()),
            ("CK_PIN_DIR", self.pins.text()),
        ]
    }
}

#[test]
fn core_scenario_as_nobody_with_only_cap_bpf_and_cap_perfmon() {
    let port = free_port();
    let name = instance_name("lp-core", port);
    // Declared first, dropped last: after `Ck` has killed everything.
    let dirs = Dirs::new(&name);
    let (port_text, base) = (port.to_string(), probe_base_for(port).to_string());
    let mut cmd = as_nobody(&["bpf", "perfmon"], &ck_bin());
    cmd.args(["run", "--name", &name, "--port", &port_text])
        .args([
            "--probe-port-base",
            &base,
            "-w",
            "2",
            "--policy",
            "round-robin",
        ])
        .envs(dirs.env());
    let mut ck = Ck::spawn(&name, cmd)
        .expect("start ck")
        .with_ctl_env(&dirs.env());
    let status = ck
        .wait_ready(2, READY_TIMEOUT)
        .expect("wait for ready slots");
    assert!(status.bpf, "steering on, as the canary shows: {status:#?}");

    // ck itself: nobody, with exactly the two capabilities.
    let me = creds(status.pid).expect("ck's /proc status");
    let who = nobody();
    assert!(me.uids.iter().all(|u| *u == who.uid), "{me:?}");
    assert_eq!(me.effective, cap_bit(BPF) | cap_bit(PERFMON), "{me:?}");
    assert_eq!(me.ambient, cap_bit(BPF) | cap_bit(PERFMON), "{me:?}");

    // Its control socket: 0600, nobody's (root may still use it: the test's `ck status`).
    let socket = dirs.run.path().join(format!("{name}.sock"));
    let meta = std::fs::metadata(&socket).expect("the control socket");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{socket:?}");
    assert_eq!(meta.uid(), who.uid, "{socket:?}");

    // Counted connections, spread exactly by round-robin.
    let addr = local(port);
    let spread = burst_pinned(addr, 20);
    assert_eq!(spread.ok, 20, "{spread:?}");
    assert_eq!((spread.slot(0), spread.slot(1)), (10, 10), "{spread:?}");

    // A drained slot gets none.
    ck.ctl_ok(&["drain", "1"]).expect("ck drain");
    let drained = burst_pinned(addr, 20);
    assert_eq!(drained.ok, 20, "{drained:?}");
    assert_eq!(
        drained.slot(1),
        0,
        "the drained slot got connections: {drained:?}"
    );
    ck.ctl_ok(&["undrain", "1"]).expect("ck undrain");

    // A SIGKILLed worker is restarted (as ck's user, like the first).
    let old = status.worker_pid(0);
    ck_tests::sys::kill_hard(old);
    let after = ck
        .wait_status("slot 0 restarted", READY_TIMEOUT, |s| {
            let slot = s.slot(0);
            slot.pid.is_some_and(|p| p != old) && slot.state == "ready" && slot.restarts == 1
        })
        .expect("wait for the status");
    let new = after.worker_pid(0);
    let worker = creds(new).expect("the new worker's /proc status");
    assert!(worker.uids.iter().all(|u| *u == who.uid), "{worker:?}");
    // Without --user, a worker inherits ck's ambient capabilities (see the next test).
    assert_eq!(worker.effective, me.effective, "{worker:?}");
    let again = burst_pinned(addr, 20);
    assert_eq!(again.pid(new), 10, "the new worker serves: {again:?}");

    // `ck stop`: clean exit, nothing left in the lent directories.
    ck.ctl_ok(&["stop"]).expect("ck stop");
    ck.wait_clean_exit().expect("ck exits cleanly");
    assert!(
        dirs.pins.entries().is_empty(),
        "pins left: {:?}",
        dirs.pins.entries()
    );
    assert!(
        dirs.run.entries().is_empty(),
        "run files left: {:?}",
        dirs.run.entries()
    );
    assert!(instance_processes(&name).is_empty(), "workers left");
}

#[test]
fn a_non_root_ck_runs_workers_without_its_capabilities_with_user_of_its_own() {
    let port = free_port();
    let name = instance_name("lp-user", port);
    let dirs = Dirs::new(&name);
    let (port_text, base) = (port.to_string(), probe_base_for(port).to_string());
    let mut cmd = as_nobody(&["bpf", "perfmon"], &ck_bin());
    cmd.args(["run", "--name", &name, "--port", &port_text])
        .args(["--probe-port-base", &base, "-w", "1", "--user", "nobody"])
        .envs(dirs.env());
    let mut ck = Ck::spawn(&name, cmd)
        .expect("start ck")
        .with_ctl_env(&dirs.env());
    let status = ck
        .wait_ready(1, READY_TIMEOUT)
        .expect("wait for ready slots");
    // No CAP_SETUID needed: the user is ck's own; only the capabilities are dropped.
    let worker = creds(status.worker_pid(0)).expect("the worker's /proc status");
    assert!(worker.uids.iter().all(|u| *u == nobody().uid), "{worker:?}");
    assert!(worker.no_capability(), "{worker:?}");
    let served = burst_pinned(local(port), 5);
    assert_eq!(served.ok, 5, "{served:?}");
    ck.ctl_ok(&["stop"]).expect("ck stop");
    ck.wait_clean_exit().expect("ck exits cleanly");
}

/// Runs ck as nobody with `caps` to completion and returns what it said (it must fail).
fn refused_with(caps: &[&str], what: &str) -> String {
    let port = free_port();
    let name = instance_name(what, port);
    let dirs = Dirs::new(&name);
    let port_text = port.to_string();
    let mut cmd = as_nobody(caps, &ck_bin());
    cmd.args(["run", "--name", &name, "--port", &port_text, "-w", "1"])
        .envs(dirs.env());
    let out = output_within(&mut cmd, Duration::from_secs(20)).expect("ck exits");
    let text = said(&out);
    assert!(!out.status.success(), "ck ran with only {caps:?}: {text}");
    assert!(text.contains("ck: error:"), "{text}");
    assert!(dirs.pins.entries().is_empty(), "pins left: {text}");
    assert!(dirs.run.entries().is_empty(), "run files left: {text}");
    assert!(instance_processes(&name).is_empty(), "workers left: {text}");
    assert!(port_bindable(port), "port {port} still bound: {text}");
    text
}

#[test]
fn without_cap_bpf_or_cap_perfmon_ck_says_which_it_lacks() {
    let no_bpf = refused_with(&["perfmon"], "lp-nobpf");
    assert!(no_bpf.contains("Operation not permitted"), "{no_bpf}");
    assert!(no_bpf.contains("ck lacks CAP_BPF ("), "{no_bpf}");
    assert!(no_bpf.contains("setcap cap_bpf+ep"), "{no_bpf}");

    let no_perfmon = refused_with(&["bpf"], "lp-noperfmon");
    assert!(
        no_perfmon.contains("pointer arithmetic with it prohibited for !root"),
        "the verifier's reason: {no_perfmon}"
    );
    assert!(
        no_perfmon.contains("ck lacks CAP_PERFMON ("),
        "{no_perfmon}"
    );
    assert!(
        no_perfmon.contains("AmbientCapabilities=CAP_PERFMON"),
        "{no_perfmon}"
    );
}

/// Starts a ck without ptrace access to its workers (`nobody`, workers as `daemon`, no
/// `CAP_SYS_PTRACE`) with `env`, and returns it, its directories (removed when dropped) and its
/// first worker's ready line.
fn without_ptrace(what: &str, env: &[(&str, &str)]) -> (Ck, Dirs, String) {
    let port = free_port();
    let name = instance_name(what, port);
    let dirs = Dirs::new(&name);
    let app_dir = TempDir::new(what);
    let server = ck_tests::slow_boot::poll_server(&app_dir);
    let (port_text, base) = (port.to_string(), probe_base_for(port).to_string());
    let caps = ["bpf", "perfmon", "setuid", "setgid", "kill"];
    let mut cmd = as_nobody(&caps, &ck_bin());
    cmd.args(["run", "--name", &name, "--port", &port_text])
        .args(["--probe-port-base", &base, "-w", "1", "--user", "daemon"])
        .args(["--", "python3", server.to_str().expect("UTF-8 path"), "1"])
        .envs(dirs.env())
        .envs(env.iter().copied());
    let mut ck = Ck::spawn(&name, cmd)
        .expect("start ck")
        .with_ctl_env(&dirs.env());
    ck.wait_ready(1, READY_TIMEOUT)
        .expect("wait for ready slots");
    let log = ck.log();
    let line = log
        .lines()
        .find(|l| l.contains("worker ready"))
        .unwrap_or_else(|| panic!("no ready line:\n{log}"))
        .to_string();
    eprintln!("{line}");
    let served = burst_pinned(local(port), 5);
    assert_eq!(served.ok, 5, "{served:?}");
    (ck, dirs, line)
}

/// Without ptrace access ck cannot read what a silent worker waits in, but its accept probe
/// needs no /proc: the worker is ready once it accepts, after its boot, not at the grace.
#[test]
fn without_ptrace_access_the_accept_probe_sees_a_silent_worker_accept() {
    let (mut ck, _dirs, line) = without_ptrace("lp-probe", &[]);
    assert!(line.contains("(accept probe)"), "{line}");
    ck.ctl_ok(&["stop"]).expect("ck stop");
    ck.wait_clean_exit().expect("ck exits cleanly");
}

/// Without ptrace access and without the accept probe (`CK_READY_DETECT=proc`), ck cannot see
/// what a silent worker waits in: only there is the grace the answer, and the ready line says
/// why.
#[test]
fn without_ptrace_access_the_grace_makes_a_silent_worker_ready_and_says_why() {
    let (mut ck, _dirs, line) =
        without_ptrace("lp-grace", &[(ck::supervisor::READY_DETECT_ENV, "proc")]);
    assert!(
        line.contains("within --ready-grace") && line.contains("ck may not read /proc/"),
        "{line}"
    );
    ck.ctl_ok(&["stop"]).expect("ck stop");
    ck.wait_clean_exit().expect("ck exits cleanly");
}
