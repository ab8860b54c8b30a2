//! One `ck run` under benchmark: started on a free loopback port under a name of its own, with
//! its stdout and stderr captured to a log file; its `ck status --json`, control commands with
//! time limits, and a bounded stop. Dropping an instance that is still running stops it, and
//! kills it and its workers when it does not exit in time.

use std::fs::{self, File};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow, bail};
use ck_tests::Status;
use ck_tests::ck::{ck_command_at, remove_leftovers};
use ck_tests::sys::{children_of, free_port, try_output_within};
use nix::sys::signal::Signal;

pub use crate::process::kill;

/// How long one control command (`ck status`, `ck reload`, ...) may take.
pub const CTL_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a stopping instance may take to exit before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// Which ck is measured: with its BPF program, or the plain `SO_REUSEPORT` baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// `ck run` with BPF steering.
    Ck,
    /// `ck run --no-bpf`.
    Baseline,
}

impl Variant {
    /// `ck` or `baseline`.
    pub fn label(self) -> &'static str {
        match self {
            Variant::Ck => "ck",
            Variant::Baseline => "baseline",
        }
    }

    /// The `ck run` flags that select it.
    fn flags(self) -> &'static [&'static str] {
        match self {
            Variant::Ck => &[],
            Variant::Baseline => &["--no-bpf"],
        }
    }
}

/// A running `ck run --name NAME --listen tcp://127.0.0.1:PORT ...`.
#[derive(Debug)]
pub struct Instance {
    bin: PathBuf,
    name: String,
    variant: Variant,
    port: u16,
    child: Child,
    exited: Option<ExitStatus>,
    log: PathBuf,
    /// The arguments of its `ck run`.
    args: Vec<String>,
    /// Environment variables set for it.
    env: Vec<(String, String)>,
    /// When `ck run` was spawned.
    pub spawned: Instant,
}

impl Instance {
    /// Starts `ck run` of `variant` with `workers` demo workers and `extra` flags on a free
    /// port, as `bench-<what>-<variant>-<port>`, logging to `<log_dir>/<name>.log`.
    pub fn start(
        bin: &Path,
        log_dir: &Path,
        what: &str,
        variant: Variant,
        workers: u32,
        extra: &[&str],
    ) -> Result<Instance> {
        Self::start_with_env(bin, log_dir, what, variant, workers, extra, &[])
    }

    /// Like [`Instance::start`], with the environment variables `env` set for `ck run` (e.g.
    /// `CK_LOG`).
    pub fn start_with_env(
        bin: &Path,
        log_dir: &Path,
        what: &str,
        variant: Variant,
        workers: u32,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Instance> {
        Self::start_group(bin, log_dir, what, variant, workers, extra, env, "tcp")
    }

    /// Starts `ck run` with one group of `scheme` (`tcp` or `udp`) on a free port, with the
    /// environment variables `env` set for it.
    #[allow(clippy::too_many_arguments)]
    pub fn start_group(
        bin: &Path,
        log_dir: &Path,
        what: &str,
        variant: Variant,
        workers: u32,
        extra: &[&str],
        env: &[(&str, &str)],
        scheme: &str,
    ) -> Result<Instance> {
        let port = free_port();
        let name = format!("bench-{what}-{}-{port}", variant.label());
        let log = log_dir.join(format!("{name}.log"));
        File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut args: Vec<String> = vec![
            "run".into(),
            "--name".into(),
            name.clone(),
            "--listen".into(),
            format!("{scheme}://127.0.0.1:{port}"),
            "-w".into(),
            workers.to_string(),
        ];
        args.extend(variant.flags().iter().map(|s| s.to_string()));
        args.extend(extra.iter().map(|s| s.to_string()));
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let spawned = Instant::now();
        let child = spawn_run(bin, &args, &env, &log)?;
        Ok(Instance {
            bin: bin.to_path_buf(),
            name,
            variant,
            port,
            child,
            exited: None,
            log,
            args,
            env,
            spawned,
        })
    }

    /// Runs the same `ck run` again (same name, port and flags; the log goes on) once the
    /// supervisor has exited: with `--survive-supervisor`, the new one takes the fleet back.
    pub fn respawn(&mut self) -> Result<()> {
        if self.try_exit()?.is_none() {
            bail!("{} is still running", self.name);
        }
        self.spawned = Instant::now();
        self.child = spawn_run(&self.bin, &self.args, &self.env, &self.log)?;
        self.exited = None;
        Ok(())
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// Its `--name` (its pins are under `ck_tests::ck::pins_dir(name)`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The supervisor's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The log file.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Whether the supervisor has exited.
    pub fn try_exit(&mut self) -> Result<Option<ExitStatus>> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait()?;
        }
        Ok(self.exited)
    }

    /// Runs `ck ARGS... --name NAME` within [`CTL_TIMEOUT`], failing unless it exits 0.
    pub fn ctl(&self, args: &[&str]) -> Result<String> {
        let mut cmd = ck_command_at(&self.bin);
        cmd.args(args).args(["--name", &self.name]);
        let out = output_within(&mut cmd, CTL_TIMEOUT)?;
        if !out.status.success() {
            bail!(
                "`ck {} --name {}` failed ({}): {}; see {}",
                args.join(" "),
                self.name,
                out.status,
                String::from_utf8_lossy(&out.stderr).trim(),
                self.log.display()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `ck status --json`.
    pub fn status(&self) -> Result<Status> {
        let json = self.ctl(&["status", "--json"])?;
        serde_json::from_str(&json)
            .with_context(|| format!("parsing `ck status --json` of {}: {json}", self.name))
    }

    /// Polls the status every `every` until `done` holds (returning that status), failing
    /// after `timeout` or when ck exits.
    pub fn wait_status(
        &mut self,
        timeout: Duration,
        every: Duration,
        mut done: impl FnMut(&Status) -> bool,
    ) -> Result<Status> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(code) = self.try_exit()? {
                bail!("ck exited ({code}); see {}", self.log.display());
            }
            // Errors are expected while ck is starting (no control socket yet); the last one is
            // told if the wait fails (e.g. a status this schema does not read, from another ck).
            let last_error = match self.status() {
                Ok(status) if done(&status) => return Ok(status),
                Ok(_) => None,
                Err(e) => Some(e),
            };
            if Instant::now() >= deadline {
                let last = last_error.map_or(String::new(), |e| format!(" (last try: {e:#})"));
                bail!(
                    "{} did not reach the wanted state within {timeout:?}{last}; see {}",
                    self.name,
                    self.log.display()
                );
            }
            thread::sleep(every);
        }
    }

    /// The pids of the workers that serve (not hot spares), from `ck status --json`.
    pub fn serving_pids(&self) -> Result<Vec<u32>> {
        Ok(self.status()?.serving_pids())
    }

    /// Waits until `n` slots are ready and, with BPF, the program steers (at most 15 s).
    pub fn wait_ready(&mut self, n: usize) -> Result<Status> {
        let want_bpf = self.variant == Variant::Ck;
        self.wait_status(Duration::from_secs(15), Duration::from_millis(10), |s| {
            s.ready().count() >= n && (s.bpf || !want_bpf)
        })
    }

    /// Sends `signal` to the supervisor.
    pub fn signal(&self, signal: Signal) -> Result<()> {
        kill(self.pid(), signal).with_context(|| format!("sending {signal} to ck"))
    }

    /// Polls (every 200 µs) until the supervisor exits; returns how long that took from now.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<Duration> {
        let start = Instant::now();
        while self.try_exit()?.is_none() {
            if start.elapsed() >= timeout {
                bail!(
                    "{} did not exit within {timeout:?}; see {}",
                    self.name,
                    self.log.display()
                );
            }
            thread::sleep(Duration::from_micros(200));
        }
        Ok(start.elapsed())
    }

    /// `ck stop`, then waits for the supervisor to exit.
    pub fn stop(mut self) -> Result<()> {
        self.ctl(&["stop"])?;
        self.wait_exit(STOP_TIMEOUT)?;
        Ok(())
    }

    /// The log lines at level WARN or ERROR, but for the warning that `--no-bpf` is on.
    pub fn complaints(&self) -> Vec<String> {
        fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
            .filter(|l| !l.contains("BPF steering is off (--no-bpf)"))
            .map(str::to_string)
            .collect()
    }

    /// Stops a supervisor that is still running: SIGTERM, then SIGKILL to it and its children
    /// when it does not exit in time; removes what a killed ck leaves behind.
    fn shut_down(&mut self) {
        if matches!(self.try_exit(), Ok(Some(_))) {
            return;
        }
        let _ = self.signal(Signal::SIGTERM);
        if self.wait_exit(STOP_TIMEOUT).is_ok() {
            return;
        }
        eprintln!("bench: {} ignored SIGTERM; killing it", self.name);
        let ck = self.pid();
        let _ = kill(ck, Signal::SIGSTOP);
        for pid in children_of(ck) {
            let _ = kill(pid, Signal::SIGKILL);
        }
        let _ = self.child.kill();
        self.exited = self.child.wait().ok();
        remove_leftovers(&self.name);
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// Spawns `ck ARGS...` with stdout and stderr appended to `log`.
fn spawn_run(bin: &Path, args: &[String], env: &[(String, String)], log: &Path) -> Result<Child> {
    let file = fs::OpenOptions::new()
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    let mut cmd = ck_command_at(bin);
    cmd.args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file);
    cmd.spawn()
        .with_context(|| format!("could not start `{}`", crate::paths::describe(&cmd)))
}

/// Runs `cmd` with its output captured and returns it, killing it after `timeout`.
fn output_within(cmd: &mut Command, timeout: Duration) -> Result<Output> {
    let what = crate::paths::describe(cmd);
    try_output_within(cmd, timeout)
        .with_context(|| format!("could not start `{what}`"))?
        .ok_or_else(|| anyhow!("`{what}` did not exit within {timeout:?}"))
}
