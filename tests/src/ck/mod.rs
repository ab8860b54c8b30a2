//! Running `ck` under test: one handle on a `ck run` instance ([`Ck`]) for the integration
//! tests and the benchmarks alike. It starts from [`StartOptions`] (or a command line of the
//! caller's) with ck's stdout and stderr in a log file, temporary or kept in a directory of the
//! caller's; it reads `ck status --json` ([`Status`]), runs control commands within a time
//! limit, waits for a status, a readiness or an exit, signals the supervisor, stops it within a
//! bound, starts it again, and on drop kills everything of the instance and removes its
//! leftovers (no process, pin or run-time file stays, even when a test panicked).
//!
//! Every method that can fail returns an `anyhow::Result` whose error says what failed, the
//! last status where there was one, the command's output, and ck's log (quoted from a temporary
//! log, named when kept): a test `.expect`s it and prints the diagnosis, a benchmark passes it
//! on with `?`.

mod binary;
mod options;
mod status;

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fmt::Display;
use std::fs::{self, File};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use nix::sys::signal::Signal;
use nix::unistd::Pid;

pub use self::binary::{
    ck_bin, ck_command, ck_command_at, ck_output, control_socket, find_ck_bin, lock_file, pins_dir,
    remove_leftovers, said, state_file,
};
pub use self::options::StartOptions;
pub use self::status::Status;
/// A group's transport, for [`StartOptions::listen`]: ck's own type.
pub use ::ck::settings::run_config::Proto;

use crate::sys::{self, TempDir};

/// How long [`Ck::stop`] and [`Ck::wait_clean_exit`] wait for the supervisor to exit.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);
/// How often an exit is looked for: finely, since the benchmarks time shutdowns by it.
const EXIT_POLL: Duration = Duration::from_micros(200);

/// A running `ck run --name NAME ...`, killed with all its workers (and its leftovers removed)
/// on drop. When the thread is panicking, the drop prints ck's log.
#[derive(Debug)]
pub struct Ck {
    name: String,
    /// Started with `--no-bpf`.
    no_bpf: bool,
    /// Where its group is reached, when the options said ([`StartOptions::port`]).
    addr: Option<SocketAddr>,
    child: Child,
    exited: Option<ExitStatus>,
    /// When the current supervisor was spawned.
    spawned: Instant,
    /// What it was started with, for [`Ck::respawn`].
    command: CommandLine,
    log: LogFile,
    /// The binary of the control commands; `None`: [`ck_bin`].
    ctl_bin: Option<PathBuf>,
    /// Environment of the control commands (`CK_RUN_DIR`, `CK_PIN_DIR` of an instance started
    /// with its own).
    ctl_env: Vec<(String, String)>,
    /// The time limit of each control command.
    ctl_timeout: Duration,
    /// How often the waits ask for the status.
    poll: Duration,
    /// Dead, and its instance taken over by another `Ck`: dropping it kills nothing.
    abandoned: bool,
}

/// Where ck's stdout and stderr go.
#[derive(Debug)]
struct LogFile {
    path: PathBuf,
    /// The temporary directory that holds it (removed on drop); `None` for a kept log.
    temp: Option<TempDir>,
}

/// A command line as it was spawned, to spawn it again: program, arguments, environment
/// changes and working directory.
#[derive(Debug)]
struct CommandLine {
    program: OsString,
    args: Vec<OsString>,
    env: Vec<(OsString, Option<OsString>)>,
    dir: Option<PathBuf>,
}

impl CommandLine {
    fn of(cmd: &Command) -> CommandLine {
        CommandLine {
            program: cmd.get_program().to_owned(),
            args: cmd.get_args().map(ToOwned::to_owned).collect(),
            env: cmd
                .get_envs()
                .map(|(k, v)| (k.to_owned(), v.map(ToOwned::to_owned)))
                .collect(),
            dir: cmd.get_current_dir().map(Path::to_path_buf),
        }
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args);
        for (key, value) in &self.env {
            match value {
                Some(value) => cmd.env(key, value),
                None => cmd.env_remove(key),
            };
        }
        if let Some(dir) = &self.dir {
            cmd.current_dir(dir);
        }
        cmd
    }
}

impl Ck {
    /// Starts `ck run --name NAME ARGS...` with stdout and stderr going to a log file.
    pub fn start(name: &str, args: &[&str]) -> Result<Ck> {
        Ck::start_with_env(name, args, &[])
    }

    /// Like [`Ck::start`], with `env` (name, value) added to ck's environment.
    pub fn start_with_env(name: &str, args: &[&str], env: &[(&str, &str)]) -> Result<Ck> {
        StartOptions::new().args(args).env(env).start(name)
    }

    /// Like [`Ck::start_with_env`], with the `ck` command given (see [`ck_command_at`]).
    pub fn start_command(
        mut cmd: Command,
        name: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Ck> {
        cmd.arg("run")
            .args(["--name", name])
            .args(args)
            .envs(env.iter().copied());
        Ck::spawn(name, cmd)
    }

    /// Runs `cmd`, a command line that starts instance `name` (`ck run --name NAME ...`,
    /// possibly behind an init such as `tini --`), with stdout and stderr going to a log file.
    /// The instance is `--no-bpf` when `cmd` says so.
    pub fn spawn(name: &str, cmd: Command) -> Result<Ck> {
        Ck::spawn_with_stderr(name, cmd, None)
    }

    /// Like [`Ck::spawn`], with ck's stderr (where it logs) going to `stderr` when given: the
    /// log file then holds only its stdout.
    pub fn spawn_with_stderr(name: &str, cmd: Command, stderr: Option<Stdio>) -> Result<Ck> {
        Ck::launch(name, cmd, stderr, &StartOptions::new())
    }

    /// Spawns `cmd` as instance `name` with the log, address and time limits of `options` (its
    /// binary, if any, sends the control commands).
    fn launch(
        name: &str,
        mut cmd: Command,
        stderr: Option<Stdio>,
        options: &StartOptions,
    ) -> Result<Ck> {
        let log = match &options.log_dir {
            Some(dir) => LogFile {
                path: dir.join(format!("{name}.log")),
                temp: None,
            },
            None => {
                let dir = TempDir::try_new(name).context("creating a directory for ck's log")?;
                LogFile {
                    path: dir.path().join("ck.log"),
                    temp: Some(dir),
                }
            }
        };
        File::create(&log.path)
            .with_context(|| format!("creating ck's log file {}", log.path.display()))?;
        let command = CommandLine::of(&cmd);
        let spawned = Instant::now();
        let child = spawn_logged(&mut cmd, &log.path, stderr)?;
        Ok(Ck {
            name: name.to_string(),
            no_bpf: command.args.iter().any(|a| a == "--no-bpf"),
            addr: options.addr,
            child,
            exited: None,
            spawned,
            command,
            log,
            ctl_bin: options.bin.clone(),
            ctl_env: Vec::new(),
            ctl_timeout: options.ctl_timeout,
            poll: options.poll,
            abandoned: false,
        })
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

    /// Runs the same command line again once the supervisor has exited (same program,
    /// arguments, environment and directory; its stdout and stderr go on in the same log
    /// file): with `--survive-supervisor`, the new ck takes the fleet back.
    pub fn respawn(&mut self) -> Result<()> {
        if self.try_exit().is_none() {
            bail!(
                "ck {} is still running: it can be started again once it exited",
                self.name
            );
        }
        self.spawned = Instant::now();
        self.child = spawn_logged(&mut self.command.command(), &self.log.path, None)?;
        self.exited = None;
        Ok(())
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

    /// When the current supervisor was spawned (by the start or the last [`Ck::respawn`]).
    pub fn spawned(&self) -> Instant {
        self.spawned
    }

    /// Where its group is reached: `127.0.0.1:PORT` of [`StartOptions::port`] or
    /// [`StartOptions::listen`].
    ///
    /// # Panics
    /// When it was started without either (its address is in its arguments alone, which the
    /// harness does not read): a misuse of the harness, not a failure of ck.
    pub fn addr(&self) -> SocketAddr {
        self.addr.unwrap_or_else(|| {
            panic!(
                "ck {} was started without StartOptions::port or ::listen: its address is unknown",
                self.name
            )
        })
    }

    /// The log file.
    pub fn log_path(&self) -> &Path {
        &self.log.path
    }

    /// Everything ck (and its workers) wrote to stdout and stderr so far.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log.path).unwrap_or_default()
    }

    /// The lines of [`Ck::log`] that contain `needle`.
    pub fn log_lines(&self, needle: &str) -> Vec<String> {
        self.log()
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_string)
            .collect()
    }

    /// The lines of its log at level WARN or ERROR, but for the warning that `--no-bpf` is on:
    /// what went wrong during a run that did not fail.
    pub fn complaints(&self) -> Vec<String> {
        self.log()
            .lines()
            .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
            .filter(|l| !l.contains("BPF steering is off (--no-bpf)"))
            .map(str::to_string)
            .collect()
    }

    /// An error that says `problem`, with ck's log: quoted when the log is temporary (it goes
    /// with the handle), named when it is kept.
    fn failure(&self, problem: impl Display) -> anyhow::Error {
        match self.log.temp {
            Some(_) => anyhow!("{problem}\n--- ck log ---\n{}", self.log()),
            None => anyhow!("{problem}; ck's log: {}", self.log.path.display()),
        }
    }

    /// Whether the supervisor has exited (and its exit status, once known).
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().ok().flatten();
        }
        self.exited
    }
}

/// The control commands and status.
impl Ck {
    /// Runs `ck ARGS...` with the control environment of this instance, within its time limit.
    fn run_ctl(&self, args: &[&str]) -> Result<Output> {
        let bin = match &self.ctl_bin {
            Some(bin) => bin.clone(),
            None => binary::find_ck_bin()?,
        };
        let mut cmd = ck_command_at(&bin);
        cmd.envs(self.ctl_env.iter().map(|(k, v)| (k, v)))
            .args(args);
        sys::try_output_within(&mut cmd, self.ctl_timeout)
            .with_context(|| format!("starting {cmd:?}"))?
            .ok_or_else(|| anyhow!("`ck {}` timed out", args.join(" ")))
    }

    /// `ck status --name NAME --json`, or why it failed (without the log).
    fn query_status(&self) -> Result<Status> {
        let out = self.run_ctl(&["status", "--name", &self.name, "--json"])?;
        if !out.status.success() {
            bail!(
                "`ck status` failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        serde_json::from_slice(&out.stdout).map_err(|e| {
            anyhow!(
                "`ck status --json` printed something unexpected ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    /// `ck status --name NAME --json`.
    pub fn status(&self) -> Result<Status> {
        self.query_status()
            .map_err(|e| self.failure(format!("{e:#}")))
    }

    /// Polls the status until `done` holds for it and returns that status; fails after
    /// `timeout`, or when ck exits meanwhile, with the last status.
    pub fn wait_status(
        &mut self,
        what: &str,
        timeout: Duration,
        done: impl FnMut(&Status) -> bool,
    ) -> Result<Status> {
        self.wait_status_every(what, timeout, self.poll, done)
    }

    /// Waits up to `timeout` until every slot's open-connection count is 0 (closing crosses
    /// loopback: the counts fall once the workers see the clients' FIN).
    pub fn wait_connections_closed(&mut self, timeout: Duration) -> Result<Status> {
        self.wait_status("every connection counted closed", timeout, |s| {
            s.connections().values().all(|n| *n == 0)
        })
    }

    /// Like [`Ck::wait_status`], asking every `every` (a benchmark that times the change).
    pub fn wait_status_every(
        &mut self,
        what: &str,
        timeout: Duration,
        every: Duration,
        mut done: impl FnMut(&Status) -> bool,
    ) -> Result<Status> {
        let deadline = Instant::now() + timeout;
        let mut last = String::from("no status yet");
        loop {
            if let Some(code) = self.try_exit() {
                return Err(self.failure(format!(
                    "ck exited ({code}) while waiting for {what}; last status: {last}"
                )));
            }
            match self.query_status() {
                Ok(status) if done(&status) => return Ok(status),
                Ok(status) => last = format!("{status:#?}"),
                Err(e) => last = format!("{e:#}"),
            }
            if Instant::now() >= deadline {
                return Err(self.failure(format!(
                    "timed out after {timeout:?} waiting for {what}; last status: {last}"
                )));
            }
            std::thread::sleep(every);
        }
    }

    /// Waits until at least `n` slots are `ready` and, unless started with `--no-bpf`, BPF
    /// steering is on (ck attaches its program a few milliseconds after it starts the workers),
    /// and returns that status.
    pub fn wait_ready(&mut self, n: usize, timeout: Duration) -> Result<Status> {
        let want_bpf = !self.no_bpf;
        self.wait_status(&format!("{n} ready slot(s)"), timeout, |s| {
            s.ready_count() >= n && (s.bpf || !want_bpf)
        })
    }

    /// Runs `ck ARGS... --name NAME` (e.g. `&["drain", "1"]`) and returns its output, whatever
    /// its exit status; fails when it cannot start or does not exit in time.
    pub fn ctl(&self, args: &[&str]) -> Result<Output> {
        let all: Vec<&str> = args.iter().copied().chain(["--name", &self.name]).collect();
        self.run_ctl(&all)
            .map_err(|e| self.failure(format!("{e:#}")))
    }

    /// Like [`Ck::ctl`], and fails (with the output) unless it exits 0; returns its stdout.
    pub fn ctl_ok(&self, args: &[&str]) -> Result<String> {
        let out = self.ctl(args)?;
        if !out.status.success() {
            return Err(self.failure(format!(
                "`ck {}` failed ({}): {}",
                args.join(" "),
                out.status,
                said(&out)
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// Signals, exits and the clean-up.
impl Ck {
    /// Sends `signal` to the supervisor.
    pub fn signal(&self, signal: Signal) -> Result<()> {
        let pid = self.pid();
        let raw = i32::try_from(pid).with_context(|| format!("pid {pid} out of range"))?;
        nix::sys::signal::kill(Pid::from_raw(raw), signal)
            .with_context(|| format!("kill({pid}, {signal}) of ck {}", self.name))
    }

    /// Sends SIGTERM to the supervisor.
    pub fn sigterm(&self) -> Result<()> {
        self.signal(Signal::SIGTERM)
    }

    /// The supervisor's exit status, once it exits within `timeout`.
    fn exit_within(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let mut status = None;
        sys::poll_until(timeout, EXIT_POLL, || {
            status = self.try_exit();
            status.is_some()
        });
        status
    }

    /// Waits for the supervisor to exit and returns its status; fails after `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        self.exit_within(timeout)
            .ok_or_else(|| self.failure(format!("ck did not exit within {timeout:?}")))
    }

    /// Waits (at most 15 s) for the supervisor to exit, and fails unless it exited 0.
    pub fn wait_clean_exit(&mut self) -> Result<()> {
        let code = self.wait_exit(STOP_TIMEOUT)?;
        if code.code() != Some(0) {
            return Err(self.failure(format!("ck exited with {code}")));
        }
        Ok(())
    }

    /// Stops it gracefully, within a bound: SIGTERM, then waits (at most 15 s) for the
    /// supervisor to exit and returns its exit status. When it does not exit in time, it and
    /// every process of the instance are killed, and the stop fails. A supervisor that has
    /// exited already is not signalled.
    pub fn stop(&mut self) -> Result<ExitStatus> {
        if let Some(code) = self.try_exit() {
            return Ok(code);
        }
        self.sigterm()?;
        if let Some(code) = self.exit_within(STOP_TIMEOUT) {
            return Ok(code);
        }
        self.kill_everything();
        Err(self.failure(format!(
            "ck did not exit within {STOP_TIMEOUT:?} of SIGTERM: it and its workers were killed"
        )))
    }

    /// SIGKILLs the supervisor alone (a crash) and reaps it; its workers are left to their
    /// `PDEATHSIG`.
    pub fn kill_supervisor(&mut self) -> Result<ExitStatus> {
        self.signal(Signal::SIGKILL)?;
        self.wait_exit(Duration::from_secs(10))
    }

    /// Leaves the instance of this dead supervisor (killed by [`Ck::kill_supervisor`]) to
    /// whoever takes it over: dropping it then kills and removes nothing. Fails (and kills it)
    /// when the supervisor is still alive.
    pub fn abandon(mut self) -> Result<()> {
        if self.try_exit().is_none() {
            return Err(self.failure("abandoning a live ck"));
        }
        self.abandoned = true;
        Ok(())
    }

    /// Kills the supervisor and every process of the instance, and reaps the supervisor.
    fn kill_everything(&mut self) {
        let ck = self.pid();
        if self.try_exit().is_none() {
            // Freeze ck so that it restarts nothing while its workers are killed.
            let _ = nix::sys::signal::kill(Pid::from_raw(ck as i32), Signal::SIGSTOP);
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

/// Spawns `cmd` with stdin closed and stdout and stderr appended to the file `log` (stderr to
/// `stderr` instead, when given).
fn spawn_logged(cmd: &mut Command, log: &Path, stderr: Option<Stdio>) -> Result<Child> {
    let file = fs::OpenOptions::new()
        .append(true)
        .open(log)
        .with_context(|| format!("opening ck's log file {}", log.display()))?;
    let out = file.try_clone().context("cloning the log file handle")?;
    cmd.stdin(Stdio::null())
        .stdout(out)
        .stderr(stderr.unwrap_or_else(|| file.into()))
        .spawn()
        .with_context(|| format!("starting {cmd:?}"))
}
