//! Which instance a command answers for, while another one runs: `ck status --wait --pid PID`
//! right after `ck run` was started waits for that ck (it has no control socket yet) and
//! answers for it; without `--name` or `--pid` the command refuses and lists both (the new one
//! possibly as starting), never answering for the one that was already running; `ck stop
//! --wait --pid PID` stops that one alone; and a `--pid` whose ck exits before it made its
//! control socket fails at once, saying so.

use std::net::TcpListener;
use std::process::{Output, Stdio};
use std::time::Duration;

use ck_tests::ck::{ck_command, said};
use ck_tests::sys::{self, TempDir};
use ck_tests::{Ck, READY_TIMEOUT, Status, instance_name, probe_base_for};

/// The environment of a run directory of the test's own.
fn env_of(dir: &TempDir) -> Vec<(String, String)> {
    vec![(
        "CK_RUN_DIR".to_string(),
        dir.path().join("run").display().to_string(),
    )]
}

/// Runs `ck ARGS` with `env` (at most 60 s).
fn ck_with(env: &[(String, String)], args: &[&str]) -> Output {
    sys::output_within(
        ck_command()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .args(args),
        Duration::from_secs(60),
    )
    .unwrap_or_else(|| panic!("`ck {}` did not exit within 60 s", args.join(" ")))
}

/// Starts `ck run --name t-WHAT-PORT --port PORT -w 1` with `env`, not waiting for it.
fn start(what: &str, env: &[(String, String)]) -> Ck {
    let port = sys::free_port();
    let (port_text, base) = (port.to_string(), probe_base_for(port).to_string());
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let args = ["--port", &port_text, "--probe-port-base", &base, "-w", "1"];
    Ck::start_with_env(&instance_name(what, port), &args, &env)
        .expect("start ck")
        .with_ctl_env(&env)
}

#[test]
fn status_wait_pid_answers_for_the_ck_just_started_and_nothing_answers_for_the_other() {
    let dir = TempDir::new("choice");
    let env = env_of(&dir);
    let mut first = start("choice-a", &env);
    let first_pid = first.wait_ready(1, READY_TIMEOUT).expect("ready").pid;
    // Started, and asked about at once: its control socket may not exist yet.
    let second = start("choice-b", &env);
    let second_pid = second.pid().to_string();
    let out = ck_with(&env, &["status", "--wait"]);
    let text = said(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains(&format!(
            "several ck instances: {} (pid {first_pid})",
            first.name()
        )) && text.contains(&format!("pid {second_pid}"))
            && text.contains("choose one with --name NAME, or --pid PID"),
        "{text}"
    );
    let out = ck_with(&env, &["status", "--wait", "--json", "--pid", &second_pid]);
    assert!(out.status.success(), "{}", said(&out));
    let status: Status = serde_json::from_slice(&out.stdout).expect("status JSON");
    assert_eq!(status.name, second.name());
    assert_eq!(status.pid, second.pid());
    assert_eq!(status.ready_count(), 1, "{status:#?}");
    // `ck stop --wait --pid` stops that one alone.
    let out = ck_with(&env, &["stop", "--wait", "--pid", &second_pid]);
    assert!(
        out.status.success() && said(&out).contains("is down"),
        "{}",
        said(&out)
    );
    assert!(!sys::pid_alive(second.pid()), "the second ck is gone");
    assert_eq!(
        first.status().expect("ck status").pid,
        first_pid,
        "the first runs on"
    );
    // Alone now, the first is the only instance.
    let out = ck_with(&env, &["status", "--wait", "--json"]);
    assert!(out.status.success(), "{}", said(&out));
    let status: Status = serde_json::from_slice(&out.stdout).expect("status JSON");
    assert_eq!(status.pid, first_pid);
    let out = first.ctl(&["stop", "--wait"]).expect("ck control command");
    assert!(out.status.success(), "{}", said(&out));
    first.wait_exit(Duration::from_secs(15)).expect("ck exits");
}

#[test]
fn status_wait_pid_fails_at_once_when_that_ck_exits_before_its_control_socket() {
    let dir = TempDir::new("choice-exit");
    let env = env_of(&dir);
    // Its port is taken: ck checks its options, then fails to bind and exits 1.
    let holder = TcpListener::bind("0.0.0.0:0").expect("binding a listener");
    let port = holder.local_addr().expect("its address").port().to_string();
    let mut doomed = ck_command()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .args([
            "run",
            "--name",
            &format!("t-doomed-{port}"),
            "--port",
            &port,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting ck run");
    // Not reaped until the end: its pid stays its own.
    let pid = doomed.id().to_string();
    let out = ck_with(
        &env,
        &["status", "--wait", "--pid", &pid, "--timeout", "50s"],
    );
    let text = said(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!(
            "ck (pid {pid}) exited before its control socket appeared: its output (stderr) says \
             why"
        )),
        "{text}"
    );
    let status = doomed.wait().expect("reaping ck");
    assert_eq!(status.code(), Some(1));
    drop(holder);
}
