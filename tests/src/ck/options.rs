//! How to start a `ck run` under test ([`StartOptions`]): the binary, its listening group, the
//! `--no-bpf` baseline, the arguments and environment, where its log goes, and the time limits
//! of its control commands and status polls.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ::ck::settings::run_config::Proto;
use anyhow::Result;

use super::{Ck, binary};

/// How long one `ck status`/`drain`/... call may take before it is abandoned (a `ck reload`
/// waits for every replacement to boot: 10 s each for `ready_slow.rs`'s server).
const CTL_TIMEOUT: Duration = Duration::from_secs(60);
/// How often [`Ck::wait_status`] and [`Ck::wait_ready`] ask for the status.
const STATUS_POLL: Duration = Duration::from_millis(50);

/// How to start `ck run --name NAME ...` ([`StartOptions::start`]); [`Ck::start`] is the plain
/// case. The flags these options add come before [`StartOptions::args`], which may end with
/// `--` and an APP.
///
/// ```no_run
/// # fn main() -> anyhow::Result<()> {
/// use ck_tests::ck::{Proto, StartOptions};
/// let port = ck_tests::sys::free_port();
/// let mut ck = StartOptions::new()
///     .listen(Proto::Udp, port)
///     .no_bpf(true)
///     .args(&["-w", "2"])
///     .log_dir(std::path::Path::new("target/bench/logs"))
///     .start(&format!("bench-udp-{port}"))?;
/// ck.wait_ready(2, std::time::Duration::from_secs(15))?;
/// ck.stop()?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct StartOptions {
    /// The ck binary to run and to send control commands with; `None`: [`binary::ck_bin`].
    pub(super) bin: Option<PathBuf>,
    /// The flags the options stand for (`--port`, `--listen`, `--no-bpf`).
    flags: Vec<String>,
    /// The caller's arguments, after `flags`.
    args: Vec<String>,
    /// Environment variables set for `ck run`.
    env: Vec<(String, String)>,
    /// Where the log file goes and stays; `None`: a temporary directory.
    pub(super) log_dir: Option<PathBuf>,
    /// Where the group given by `port` or `listen` is reached.
    pub(super) addr: Option<SocketAddr>,
    /// The time limit of each control command.
    pub(super) ctl_timeout: Duration,
    /// How often the waits ask for the status.
    pub(super) poll: Duration,
}

impl Default for StartOptions {
    fn default() -> Self {
        StartOptions {
            bin: None,
            flags: Vec::new(),
            args: Vec::new(),
            env: Vec::new(),
            log_dir: None,
            addr: None,
            ctl_timeout: CTL_TIMEOUT,
            poll: STATUS_POLL,
        }
    }
}

impl StartOptions {
    /// No flags, the binary under test, a temporary log, a 60 s limit per control command and
    /// a status poll every 50 ms.
    pub fn new() -> StartOptions {
        StartOptions::default()
    }

    /// Runs the ck binary `bin` (e.g. another build to compare with), for `ck run` and the
    /// control commands alike.
    pub fn bin(mut self, bin: &Path) -> StartOptions {
        self.bin = Some(bin.to_path_buf());
        self
    }

    /// Adds `args` to `ck run`'s arguments (after the flags of the other options).
    pub fn args(mut self, args: &[&str]) -> StartOptions {
        self.args.extend(args.iter().map(|a| a.to_string()));
        self
    }

    /// Sets `env` (name, value) in `ck run`'s environment.
    pub fn env(mut self, env: &[(&str, &str)]) -> StartOptions {
        self.env
            .extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        self
    }

    /// `--port PORT`: one TCP group on every address; [`Ck::addr`] is `127.0.0.1:PORT`.
    pub fn port(mut self, port: u16) -> StartOptions {
        self.flags.extend(["--port".to_string(), port.to_string()]);
        self.addr = Some(loopback(port));
        self
    }

    /// `--listen PROTO://127.0.0.1:PORT`: one group of `proto` on loopback; [`Ck::addr`] is
    /// that address.
    pub fn listen(mut self, proto: Proto, port: u16) -> StartOptions {
        let addr = loopback(port);
        self.flags
            .extend(["--listen".to_string(), format!("{}://{addr}", proto.word())]);
        self.addr = Some(addr);
        self
    }

    /// When `on`, `--no-bpf`: the plain `SO_REUSEPORT` baseline, no steering program (the
    /// waits then do not wait for one).
    pub fn no_bpf(mut self, on: bool) -> StartOptions {
        if on {
            self.flags.push("--no-bpf".to_string());
        }
        self
    }

    /// Logs to `<dir>/<name>.log`, kept after the run (the errors then name the file rather
    /// than quote it), instead of a temporary file removed with the handle.
    pub fn log_dir(mut self, dir: &Path) -> StartOptions {
        self.log_dir = Some(dir.to_path_buf());
        self
    }

    /// Gives each control command (`ck status`, `ck reload`, ...) at most `limit`.
    pub fn ctl_timeout(mut self, limit: Duration) -> StartOptions {
        self.ctl_timeout = limit;
        self
    }

    /// Makes [`Ck::wait_status`] and [`Ck::wait_ready`] ask for the status every `every`.
    pub fn poll_every(mut self, every: Duration) -> StartOptions {
        self.poll = every;
        self
    }

    /// Starts `ck run --name NAME FLAGS... ARGS...` with these options.
    pub fn start(&self, name: &str) -> Result<Ck> {
        let bin = match &self.bin {
            Some(bin) => bin.clone(),
            None => binary::find_ck_bin()?,
        };
        let mut cmd = binary::ck_command_at(&bin);
        cmd.arg("run")
            .args(["--name", name])
            .args(&self.flags)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        Ck::launch(name, cmd, None, self)
    }
}

/// `127.0.0.1:port`.
fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}
