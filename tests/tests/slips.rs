//! Slips at the terminal: ck's command line misused in many ways (every command; every kind of
//! value: counts, durations, sizes, ports, addresses, signals, policies, paths; missing and extra
//! arguments; unknown commands; options in the wrong place; several instances and no `--name`),
//! one row of [`SLIPS`] or [`WITH_TWO_RUNNING`] each, run against the real `ck` binary. Each
//! row checks the exit status (2: ck refused the command line and did nothing; 1: the command
//! failed), that the message names what was typed and then the fix, and that nothing was left
//! behind: no process, control socket, lock, pin or cgroup.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use ck_tests::ck::ck_command;
use ck_tests::sys::{self, TempDir};
use ck_tests::{Ck, READY_TIMEOUT};

/// One slip: what is typed after `ck`, how ck exits, and what its message says.
struct Slip {
    /// The arguments, split at blanks. `{port}` is a free port, `{dir}` a scratch directory
    /// (with `typo.toml` and a subdirectory `app.d` in it), `{pid}` a live process that is no
    /// ck, `{one}` and `{two}` the names of the instances of [`WITH_TWO_RUNNING`] (also in
    /// [`Slip::says`]).
    typed: &'static str,
    /// 2: a command line ck refuses; 1: a command that failed.
    code: i32,
    /// Phrases of the message, in this order: what was typed wrong, then the fix.
    says: &'static [&'static str],
}

/// Shorthand for a row.
const fn slip(typed: &'static str, code: i32, says: &'static [&'static str]) -> Slip {
    Slip { typed, code, says }
}

/// Slips made while no instance runs.
#[rustfmt::skip]
const SLIPS: &[Slip] = &[
    // Options ck does not have, and options in the wrong place.
    slip("run --wrokers 4 -- node server.js", 2, &["unknown option --wrokers for `ck run`", "did you mean --workers?", "an app's own options go after `--`"]),
    slip("run -W 4 -- node server.js", 2, &["unknown option -W", "did you mean -w (--workers)?"]),
    slip("run --port {port} -w 2 --polcy hash -- node server.js", 2, &["unknown option --polcy", "did you mean --policy?"]),
    slip("run --port {port} --inspect server.js", 2, &["unknown option --inspect", "an app's own options go after `--` or after the app's path"]),
    slip("--workers 4 run", 2, &["unknown option --workers for `ck`", "it is an option of `ck run`", "ck run --workers"]),
    slip("--name web status", 2, &["unknown option --name for `ck`", "given after it: ck status --name"]),
    slip("status --workers 4", 2, &["unknown option --workers for `ck status`", "it is an option of `ck run`", "see `ck status --help`"]),
    slip("status --wiat", 2, &["unknown option --wiat", "did you mean --wait?"]),
    slip("stop --wiat", 2, &["unknown option --wiat for `ck stop`", "did you mean --wait?"]),
    slip("drain --al", 2, &["unknown option --al", "did you mean --all?"]),
    slip("top --once --json", 2, &["unknown option --json for `ck top`", "it is an option of `ck status` and `ck maps`"]),
    // Commands ck does not have.
    slip("statsu", 2, &["unknown command \"statsu\"", "did you mean status?"]),
    slip("relaod", 2, &["unknown command \"relaod\"", "did you mean reload?"]),
    slip("node server.js", 2, &["unknown command \"node\"", "to run a program under ck: ck run -- node"]),
    // Missing and extra arguments.
    slip("scale", 2, &["`ck scale` needs <WORKERS>", "usage: ck scale"]),
    slip("probe", 2, &["`ck probe` needs <SLOT>", "usage: ck probe"]),
    slip("drain", 2, &["`ck drain` needs <SLOT>", "usage: ck drain"]),
    slip("man", 2, &["`ck man` needs <DIR>", "usage: ck man"]),
    slip("status web", 2, &["unexpected argument \"web\" for `ck status`", "did you mean --name web?"]),
    slip("scale 4 5", 2, &["unexpected argument \"5\" for `ck scale`", "usage: ck scale"]),
    slip("run --workers", 2, &["--workers needs a value", "--workers N"]),
    slip("status --timeout 1s", 2, &["`ck status` needs --wait", "usage: ck status --wait --timeout"]),
    slip("drain 1 --all", 2, &["cannot be given with --all", "give one of them"]),
    slip("stop --name web --pid 1", 2, &["--name cannot be given with --pid", "give one of them"]),
    slip("run --port {port} --name a --name b", 2, &["--name is given twice", "give it once"]),
    // Counts.
    slip("run --port {port} --workers four", 2, &["--workers \"four\"", "expected a whole number"]),
    slip("run --port {port} --workers 0", 2, &["--workers 0 is out of range", "give a number from 1 to"]),
    slip("run --port {port} --workers 99999", 2, &["--workers 99999 is out of range", "give a number from 1 to"]),
    slip("run --port {port} --boot-boost 40", 2, &["--boot-boost \"40\"", "expected a whole number from 0 to 39"]),
    slip("run --port {port} --reload-batch 0", 2, &["--reload-batch 0", "give at least 1"]),
    slip("run --port {port} --max-requests 0", 2, &["--max-requests \"0\"", "expected a whole number from 1 to"]),
    slip("scale many", 2, &["<WORKERS> \"many\"", "expected a whole number"]),
    // Durations.
    slip("run --port {port} --drain-timeout 5x", 2, &["--drain-timeout \"5x\"", "a bare number is seconds"]),
    slip("status --wait --timeout soon", 2, &["--timeout \"soon\"", "give a number with a unit", "a bare number is seconds"]),
    slip("run --port {port} --restart-backoff 10s,1s", 2, &["--restart-backoff \"10s,1s\"", "give a MAX of at least INITIAL"]),
    slip("run --port {port} --policy least-queue --queue-patience 2h", 2, &["--queue-patience 7200s is longer than the program can hold", "give at most 3600s"]),
    slip("run --port {port} --quiet-period 20s --quiet-max 5s", 2, &["--quiet-period 20s is longer than --quiet-max 5s", "give a --quiet-period shorter than --quiet-max"]),
    // Sizes.
    slip("run --port {port} --max-memory lots", 2, &["--max-memory \"lots\"", "e.g. 512M"]),
    slip("run --port {port} --worker-memory-max 0", 2, &["--worker-memory-max \"0\"", "give more than 0"]),
    // Ports.
    slip("run --port 0", 2, &["--port \"0\"", "port 0 asks the kernel for any free port", "give a port from 1 to 65535"]),
    slip("run --port 99999", 2, &["--port \"99999\"", "ports go from 1 to 65535"]),
    slip("run -p http", 2, &["--port \"http\"", "give a number from 1 to 65535", "--listen tcp://HOST:PORT"]),
    slip("run --port {port} --port {port}", 2, &["is given twice", "list each address once"]),
    // Addresses.
    slip("run --listen 127.0.0.1:{port}", 2, &["--listen \"127.0.0.1:", "expected tcp://HOST:PORT or udp://HOST:PORT"]),
    slip("run --listen tcp://0.0.0.0:0", 2, &["has port 0", "give a port from 1 to 65535"]),
    slip("run --port {port} --metrics localhost:9100", 2, &["--metrics \"localhost:9100\"", "e.g. 127.0.0.1:9100"]),
    slip("run --port {port} --metrics {port}", 2, &["overlaps the listen address", "give --metrics another port"]),
    // Signals, policies, modes, probes.
    slip("run --port {port} --stop-signal STOP", 2, &["--stop-signal \"STOP\"", "give one of TERM, QUIT"]),
    slip("run --port {port} --policy fastest", 2, &["--policy \"fastest\"", "expected one of: hash, round-robin, least-queue, sticky, least-conn"]),
    slip("run --port {port} --policy round-robbin", 2, &["--policy \"round-robbin\"", "did you mean round-robin?"]),
    slip("run --port {port} --udp-mode tcp", 2, &["--udp-mode \"tcp\"", "expected one of: flow"]),
    slip("run --port {port} --probe htp", 2, &["--probe \"htp\"", "give `tcp`, `http` or `http:/PATH`"]),
    slip("run --port {port} --ready probe", 2, &["--ready probe", "add --probe http:/PATH"]),
    slip("run --port {port} --adopt --no-bpf", 2, &["--adopt needs BPF", "drop --no-bpf"]),
    slip("completions fish2", 2, &["<SHELL> \"fish2\"", "expected one of: bash", "did you mean fish?"]),
    // Names, users and paths.
    slip("run --port {port} --name bad.name", 2, &["invalid --name \"bad.name\"", "use 1 to 48 characters"]),
    slip("run --port {port} --user nosuchuser", 2, &["--user \"nosuchuser\"", "give an existing user name or uid"]),
    slip("run --port {port} -- ./no-such-app", 2, &["cannot run \"./no-such-app\"", "check the path"]),
    slip("run --port {port} -- {dir}/app.d", 2, &["is a directory, not a program"]),
    slip("run --port {port} --config {dir}/missing.toml", 2, &["cannot read the config file", "check the path given to --config"]),
    slip("run --port {port} --config {dir}/typo.toml", 2, &["unknown key `wokers`", "did you mean `workers`?"]),
    slip("man /proc/ck-man", 1, &["cannot write the man pages into /proc/ck-man", "give a directory you may write to"]),
    // Instances that do not run.
    slip("status", 1, &["no ck instance is running", "start one with `ck run`"]),
    slip("status --wait --timeout 300ms", 1, &["no ck instance started within 300ms", "wait longer with --timeout"]),
    slip("stop --wait", 1, &["no ck instance is running", "start one with `ck run`"]),
    slip("reload --name web", 1, &["no ck instance named \"web\" is running", "ck instances here: none", "start it with `ck run`"]),
    slip("status --pid {pid}", 1, &["is \"sleep\", not the ck of an instance", "give the pid of ck itself", "or --name NAME"]),
    slip("status --wait --pid {pid} --timeout 300ms", 1, &["no ck instance with pid", "within 300ms", "--name NAME"]),
];

/// Slips made while two instances run (`{one}` and `{two}`, one worker each).
#[rustfmt::skip]
const WITH_TWO_RUNNING: &[Slip] = &[
    slip("status", 2, &["several ck instances: {one} (pid", "{two} (pid", "choose one with --name NAME, or --pid PID"]),
    slip("status --wait", 2, &["several ck instances", "choose one with --name NAME, or --pid PID"]),
    slip("stop --wait", 2, &["several ck instances", "choose one with --name NAME"]),
    slip("reload", 2, &["several ck instances", "choose one with --name NAME"]),
    slip("status --name {one}x", 1, &["no ck instance named \"{one}x\" is running", "ck instances here: {one} (pid", "give one of them with --name"]),
    slip("scale 0 --name {one}", 1, &["0 workers is out of range", "give a number from 1 to"]),
    slip("probe 9 --name {one}", 1, &["no slot 9", "see `ck status`"]),
    slip("drain 9 --name {two}", 1, &["no slot 9", "see `ck status`"]),
];

/// The run and pin directories a test's commands get, and the scratch files the slips name.
struct Scene {
    dir: TempDir,
    run: PathBuf,
    pins: PathBuf,
    port: u16,
    /// A live process that is no ck (`{pid}`).
    stranger: std::process::Child,
}

impl Scene {
    fn new(what: &str) -> Scene {
        let dir = TempDir::new(what);
        dir.write("typo.toml", "wokers = 2\n", false);
        fs::create_dir(dir.path().join("app.d")).expect("creating app.d");
        let run = dir.path().join("run");
        let pins = PathBuf::from(format!("/sys/fs/bpf/ck-{what}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&pins);
        fs::create_dir_all(&pins).expect("creating the pin directory (is bpffs mounted?)");
        let stranger = std::process::Command::new("sleep")
            .arg("600")
            .spawn()
            .expect("starting sleep");
        Scene {
            dir,
            run,
            pins,
            port: sys::free_port(),
            stranger,
        }
    }

    fn env(&self) -> [(&'static str, String); 2] {
        [
            ("CK_RUN_DIR", self.run.display().to_string()),
            ("CK_PIN_DIR", self.pins.display().to_string()),
        ]
    }

    /// `text` with its placeholders filled in (`names`: `{one}` and `{two}`).
    fn fill(&self, text: &str, names: &[String; 2]) -> String {
        text.replace("{port}", &self.port.to_string())
            .replace("{dir}", &self.dir.path().display().to_string())
            .replace("{pid}", &self.stranger.id().to_string())
            .replace("{one}", &names[0])
            .replace("{two}", &names[1])
    }

    /// Runs `ck ARGS` in this scene (at most 20 s).
    fn ck(&self, args: &[String]) -> Output {
        sys::output_within(
            ck_command()
                .envs(self.env())
                .current_dir(self.dir.path())
                .args(args),
            Duration::from_secs(20),
        )
        .unwrap_or_else(|| panic!("`ck {}` did not exit within 20 s", args.join(" ")))
    }

    /// Why `slip` went wrong, if it did.
    fn check(&self, slip: &Slip, names: &[String; 2]) -> Option<String> {
        let typed = self.fill(slip.typed, names);
        let args: Vec<String> = typed.split_whitespace().map(str::to_string).collect();
        let out = self.ck(&args);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        let mut problems = Vec::new();
        if out.status.code() != Some(slip.code) {
            problems.push(format!("exit {:?}, not {}", out.status.code(), slip.code));
        }
        if !err.starts_with("ck: error: ") {
            problems.push("no `ck: error: ` first".to_string());
        }
        let mut rest = err.as_str();
        for phrase in slip.says {
            let phrase = self.fill(phrase, names);
            let phrase = phrase.as_str();
            match rest.find(phrase) {
                Some(at) => rest = &rest[at + phrase.len()..],
                None => problems.push(format!("no {phrase:?} (in this order)")),
            }
        }
        (!problems.is_empty()).then(|| {
            format!(
                "`ck {}`: {}\n    stderr: {err}",
                args.join(" "),
                problems.join("; ")
            )
        })
    }

    /// What is left of ck in this scene beyond `expected` (the instances running on purpose):
    /// run-time files, pins, processes with this run directory, the cgroup of the default
    /// instance name.
    fn leftovers(&self, expected: &BTreeSet<String>) -> Vec<String> {
        let mut left: Vec<String> = Vec::new();
        let files = |dir: &Path| -> Vec<String> {
            fs::read_dir(dir)
                .map(|entries| {
                    entries
                        .flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default()
        };
        let of_expected = |file: &str| {
            expected
                .iter()
                .any(|name| file.split('.').next() == Some(name))
        };
        left.extend(
            files(&self.run)
                .into_iter()
                .filter(|f| !of_expected(f))
                .map(|f| format!("run-time file {f}")),
        );
        left.extend(
            files(&self.pins)
                .into_iter()
                .filter(|f| !of_expected(f))
                .map(|f| format!("pin {f}")),
        );
        if expected.is_empty() {
            let marker = format!("CK_RUN_DIR={}", self.run.display());
            left.extend(
                processes_with(&marker)
                    .into_iter()
                    .map(|pid| format!("process {pid}")),
            );
        }
        if let Some(cgroup) = sys::cgroup_dir(&format!("ck-{}", self.port))
            && cgroup.exists()
        {
            left.push(format!("cgroup {}", cgroup.display()));
        }
        left
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        let _ = self.stranger.kill();
        let _ = self.stranger.wait();
        let _ = fs::remove_dir_all(&self.pins);
    }
}

/// The live processes whose environment holds `var` (`NAME=value`).
fn processes_with(var: &str) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == var.as_bytes()))
        })
        .filter(|pid| sys::pid_alive(*pid))
        .collect()
}

#[test]
fn every_slip_is_refused_with_its_exit_status_a_message_naming_it_and_the_fix_leaving_nothing() {
    assert!(
        SLIPS.len() + WITH_TWO_RUNNING.len() >= 40,
        "the table holds {} slips",
        SLIPS.len() + WITH_TWO_RUNNING.len()
    );
    let scene = Scene::new("slips");
    let none = [String::new(), String::new()];
    let mut failures = Vec::new();
    for slip in SLIPS {
        if let Some(why) = scene.check(slip, &none) {
            failures.push(why);
        }
        let left = scene.leftovers(&BTreeSet::new());
        if !left.is_empty() {
            failures.push(format!("`ck {}` left {}", slip.typed, left.join(", ")));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} slips went wrong:\n  {}",
        failures.len(),
        SLIPS.len(),
        failures.join("\n  ")
    );
}

#[test]
fn with_two_instances_running_no_command_answers_for_one_it_was_not_asked_about() {
    let scene = Scene::new("slips-two");
    let env = scene.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let start = |what: &str| {
        let port = sys::free_port();
        let name = format!("slip-{what}-{port}");
        let port = port.to_string();
        let base = ck_tests::probe_base_for(port.parse().expect("a port")).to_string();
        let args = ["--port", &port, "--probe-port-base", &base, "-w", "1"];
        let mut ck = Ck::start_with_env(&name, &args, &env)
            .expect("start ck")
            .with_ctl_env(&env);
        ck.wait_ready(1, READY_TIMEOUT).expect("ready");
        ck
    };
    let (one, two) = (start("one"), start("two"));
    let names = [one.name().to_string(), two.name().to_string()];
    let pids = (
        one.status().expect("ck status").pid,
        two.status().expect("ck status").pid,
    );
    let expected: BTreeSet<String> = names.iter().cloned().collect();
    let mut failures = Vec::new();
    for slip in WITH_TWO_RUNNING {
        if let Some(why) = scene.check(slip, &names) {
            failures.push(why);
        }
        let left = scene.leftovers(&expected);
        if !left.is_empty() {
            failures.push(format!("`ck {}` left {}", slip.typed, left.join(", ")));
        }
    }
    // Nothing was stopped, reloaded or scaled: both run as they were.
    let (now_one, now_two) = (
        one.status().expect("ck status"),
        two.status().expect("ck status"),
    );
    assert_eq!((now_one.pid, now_two.pid), pids);
    assert_eq!((now_one.workers, now_two.workers), (1, 1));
    assert!(!now_one.stopping && !now_two.stopping);
    assert!(
        failures.is_empty(),
        "{} of {} slips went wrong:\n  {}",
        failures.len(),
        WITH_TWO_RUNNING.len(),
        failures.join("\n  ")
    );
    for ck in [one, two] {
        let out = ck.ctl(&["stop", "--wait"]).expect("ck control command");
        assert!(out.status.success(), "{}", ck_tests::ck::said(&out));
    }
    assert!(scene.leftovers(&BTreeSet::new()).is_empty());
}

/// A release that cannot start: `ck reload` is refused, quoting the last error line the
/// replacement wrote on stderr, and the old workers keep serving.
#[test]
fn an_aborted_roll_quotes_the_replacement_s_last_error_line() {
    let scene = Scene::new("slips-roll");
    let broken = scene.dir.path().join("broken");
    let app = scene.dir.write(
        "app.sh",
        &format!(
            "#!/bin/sh\nif [ -e {} ]; then\n  echo 'loading v3' >&2\n  echo 'fatal: cannot read \
             config /etc/app.conf' >&2\n  echo 'bye' >&2\n  exit 1\nfi\nexec {} demo-worker\n",
            broken.display(),
            ck_tests::ck_bin().display()
        ),
        true,
    );
    let env = scene.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let port = scene.port.to_string();
    let base = ck_tests::probe_base_for(scene.port).to_string();
    let app = app.display().to_string();
    let args = [
        "--port",
        &port,
        "--probe-port-base",
        &base,
        "-w",
        "2",
        "--",
        &app,
    ];
    let mut ck = Ck::start_with_env(&format!("ck-{port}"), &args, &env)
        .expect("start ck")
        .with_ctl_env(&env);
    let before = ck
        .wait_ready(2, READY_TIMEOUT)
        .expect("ready")
        .worker_pids();
    fs::write(&broken, "").expect("breaking the release");
    let out = ck.ctl(&["reload"]).expect("ck control command");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "exited before it was flipped in (exit 1); its last error on stderr: \"fatal: cannot \
             read config /etc/app.conf\"; the old workers keep serving"
        ),
        "{err}\n--- ck log ---\n{}",
        ck.log()
    );
    assert_eq!(
        ck.status().expect("ck status").worker_pids(),
        before,
        "the old workers serve on"
    );
    let out = ck.ctl(&["stop", "--wait"]).expect("ck control command");
    assert!(out.status.success(), "{}", ck_tests::ck::said(&out));
    ck.wait_exit(Duration::from_secs(15)).expect("ck exits");
}
