//! Running `ck` under test: the binary's path, a supervised `ck run` instance ([`Ck`]) with its
//! log captured to a file, its `ck status --json` report, control commands, and a clean-up on
//! drop that leaves no process, pin or run-time file behind even when the test panicked.

mod binary;
mod status;

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

pub use self::binary::{
    ck_bin, ck_command, ck_command_at, ck_output, control_socket, lock_file, pins_dir,
    remove_leftovers, said, state_file,
};
pub use self::status::Status;

use crate::sys::{self, TempDir};

/// How long one `ck status`/`drain`/... call may take before the test gives up on it (a `ck
/// reload` waits for every replacement to boot: 10 s each for `ready_slow.rs`'s server).
const CTL_TIMEOUT: Duration = Duration::from_secs(60);

/// A running `ck run --name NAME ...`, killed with all its workers (and its leftovers removed)
/// on drop. When the test is panicking, the drop prints ck's log.
#[derive(Debug)]
pub struct Ck {
    name: String,
    /// Started with `--no-bpf`.
    no_bpf: bool,
    child: Child,
    exited: Option<ExitStatus>,
    log: PathBuf,
    /// Environment of the control commands (`CK_RUN_DIR`, `CK_PIN_DIR` of an instance started
    /// with its own).
    ctl_env: Vec<(String, String)>,
    /// Dead, and its instance taken over by another `Ck`: dropping it kills nothing.
    abandoned: bool,
    _dir: TempDir,
}

impl Ck {
    /// Starts `ck run --name NAME ARGS...` with stdout and stderr going to a log file.
    pub fn start(name: &str, args: &[&str]) -> Ck {
        Ck::start_with_env(name, args, &[])
    }

    /// Like [`Ck::start`], with `env` (name, value) added to ck's environment.
    pub fn start_with_env(name: &str, args: &[&str], env: &[(&str, &str)]) -> Ck {
        Ck::start_command(ck_command(), name, args, env)
    }

    /// Like [`Ck::start_with_env`], with the `ck` command given (see [`ck_command_at`]).
    pub fn start_command(mut cmd: Command, name: &str, args: &[&str], env: &[(&str, &str)]) -> Ck {
        cmd.arg("run")
            .args(["--name", name])
            .args(args)
            .envs(env.iter().copied());
        Ck::spawn(name, cmd)
    }

    /// Runs `cmd`, a command line that starts instance `name` (`ck run --name NAME ...`,
    /// possibly behind an init such as `tini --`), with stdout and stderr going to a log file.
    /// The instance is `--no-bpf` when `cmd` says so.
    pub fn spawn(name: &str, cmd: Command) -> Ck {
        Ck::spawn_with_stderr(name, cmd, None)
    }

    /// Like [`Ck::spawn`], with ck's stderr (where it logs) going to `stderr` when given: the
    /// log file then holds only its stdout.
    pub fn spawn_with_stderr(name: &str, mut cmd: Command, stderr: Option<Stdio>) -> Ck {
        let dir = TempDir::new(name);
        let log = dir.path().join("ck.log");
        let file = File::create(&log).expect("creating the ck log file");
        let file2 = file.try_clone().expect("cloning the log file handle");
        let no_bpf = cmd.get_args().any(|a| a == "--no-bpf");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(file2)
            .stderr(stderr.unwrap_or_else(|| file.into()))
            .spawn()
            .unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"));
        Ck {
            name: name.to_string(),
            no_bpf,
            child,
            exited: None,
            log,
            ctl_env: Vec::new(),
            abandoned: false,
            _dir: dir,
        }
    }

    /// Gives the control commands (`status`, `drain`, ...) `env` too: for an instance started
    /// with a `CK_RUN_DIR` or `CK_PIN_DIR` of its own.
    pub fn with_ctl_env(mut self, env: &[(&str, &str)]) -> Ck {
        self.ctl_env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self
    }

    /// A `ck` command with the control environment of this instance.
    fn ctl_command(&self) -> Command {
        let mut cmd = ck_command();
        cmd.envs(self.ctl_env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    /// Whether it was started with `--no-bpf`.
    pub fn no_bpf(&self) -> bool {
        self.no_bpf
    }

    /// The instance name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The supervisor's pid (or, started by [`Ck::spawn`] behind an init, the init's).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything ck (and its workers) wrote to stdout and stderr so far.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The lines of [`Ck::log`] that contain `needle`.
    pub fn log_lines(&self, needle: &str) -> Vec<String> {
        self.log()
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_string)
            .collect()
    }

    /// Whether the supervisor has exited (and its exit status, once known).
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().ok().flatten();
        }
        self.exited
    }

    /// `ck status --name NAME --json`, or the reason it failed.
    pub fn try_status(&self) -> Result<Status, String> {
        let out = sys::output_within(
            self.ctl_command()
                .args(["status", "--name", &self.name, "--json"]),
            CTL_TIMEOUT,
        )
        .ok_or_else(|| "`ck status` timed out".to_string())?;
        if !out.status.success() {
            return Err(format!(
                "`ck status` failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        serde_json::from_slice(&out.stdout).map_err(|e| {
            format!(
                "`ck status --json` printed something unexpected ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    /// `ck status --name NAME --json`.
    ///
    /// # Panics
    /// When it fails (the message includes ck's log).
    pub fn status(&self) -> Status {
        self.try_status()
            .unwrap_or_else(|e| panic!("{e}\n--- ck log ---\n{}", self.log()))
    }

    /// Polls the status until `done` holds for it and returns that status.
    ///
    /// # Panics
    /// After `timeout`, or when ck exits meanwhile, with the last status and ck's log.
    pub fn wait_status(
        &mut self,
        what: &str,
        timeout: Duration,
        mut done: impl FnMut(&Status) -> bool,
    ) -> Status {
        let deadline = Instant::now() + timeout;
        let mut last = String::from("no status yet");
        loop {
            if let Some(code) = self.try_exit() {
                panic!(
                    "ck exited ({code}) while waiting for {what}; last status: {last}\n\
                     --- ck log ---\n{}",
                    self.log()
                );
            }
            match self.try_status() {
                Ok(status) if done(&status) => return status,
                Ok(status) => last = format!("{status:#?}"),
                Err(e) => last = e,
            }
            if Instant::now() >= deadline {
                panic!(
                    "timed out after {timeout:?} waiting for {what}; last status: {last}\n\
                     --- ck log ---\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until at least `n` slots are `ready` and, unless started with `--no-bpf`, BPF
    /// steering is on (ck attaches its program a few milliseconds after it starts the workers),
    /// and returns that status.
    pub fn wait_ready(&mut self, n: usize, timeout: Duration) -> Status {
        let want_bpf = !self.no_bpf;
        self.wait_status(&format!("{n} ready slot(s)"), timeout, |s| {
            s.ready_count() >= n && (s.bpf || !want_bpf)
        })
    }

    /// Runs `ck ARGS... --name NAME` (e.g. `&["drain", "1"]`) and returns its output.
    pub fn ctl(&self, args: &[&str]) -> Output {
        sys::output_within(
            self.ctl_command().args(args).args(["--name", &self.name]),
            CTL_TIMEOUT,
        )
        .unwrap_or_else(|| panic!("`ck {}` timed out", args.join(" ")))
    }

    /// Like [`Ck::ctl`], panicking (with the output and ck's log) unless it exits 0.
    pub fn ctl_ok(&self, args: &[&str]) -> String {
        let out = self.ctl(args);
        assert!(
            out.status.success(),
            "`ck {}` failed ({}): {}{}\n--- ck log ---\n{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Sends SIGTERM to the supervisor.
    pub fn sigterm(&self) {
        sys::signal(self.pid(), Signal::SIGTERM);
    }

    /// Waits for the supervisor to exit and returns its status.
    ///
    /// # Panics
    /// After `timeout` (with ck's log).
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let mut status = None;
        sys::poll_until(timeout, Duration::from_millis(20), || {
            status = self.try_exit();
            status.is_some()
        });
        status.unwrap_or_else(|| {
            panic!(
                "ck did not exit within {timeout:?}\n--- ck log ---\n{}",
                self.log()
            )
        })
    }

    /// Waits (at most 15 s) for the supervisor to exit, and asserts that it exited 0.
    pub fn wait_clean_exit(&mut self) {
        let code = self.wait_exit(Duration::from_secs(15));
        assert_eq!(
            code.code(),
            Some(0),
            "ck exited with {code}\n--- ck log ---\n{}",
            self.log()
        );
    }

    /// SIGKILLs the supervisor alone (a crash) and reaps it; its workers are left to their
    /// `PDEATHSIG`.
    pub fn kill_supervisor(&mut self) -> ExitStatus {
        sys::signal(self.pid(), Signal::SIGKILL);
        self.wait_exit(Duration::from_secs(10))
    }

    /// Kills the supervisor and every process of the instance, and reaps the supervisor.
    fn kill_everything(&mut self) {
        let ck = self.pid();
        if self.try_exit().is_none() {
            // Freeze ck so that it restarts nothing while its workers are killed.
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(ck as i32), Signal::SIGSTOP);
            for pid in sys::children_of(ck) {
                sys::kill_hard(pid);
            }
        }
        for pid in sys::instance_processes(&self.name) {
            sys::kill_hard(pid);
        }
        if self.try_exit().is_none() {
            let _ = self.child.kill();
            self.exited = self.child.wait().ok();
        }
        // Workers killed above (or by PDEATHSIG) may take a moment to go.
        let rest: BTreeSet<u32> = sys::instance_processes(&self.name).into_iter().collect();
        for pid in &rest {
            sys::kill_hard(*pid);
        }
        sys::wait_all_dead(&rest, Duration::from_secs(5));
    }
}

impl Ck {
    /// Leaves the instance of this dead supervisor (killed by [`Ck::kill_supervisor`]) to
    /// whoever takes it over: dropping it then kills and removes nothing.
    pub fn abandon(mut self) {
        assert!(self.try_exit().is_some(), "abandoning a live ck");
        self.abandoned = true;
    }
}

impl Drop for Ck {
    fn drop(&mut self) {
        if self.abandoned {
            return;
        }
        self.kill_everything();
        remove_leftovers(&self.name);
        if std::thread::panicking() {
            eprintln!("--- ck log of {} ---\n{}", self.name, self.log());
        }
    }
}
