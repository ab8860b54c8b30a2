//! The contenders of a scenario measured in rounds ([`Contender`]: a column, what it is and how
//! it starts) and the running fleet of one ([`Fleet`]), the one seam between the scenarios and
//! how a ck instance (the harness's [`Ck`], its log kept in the bench's log directory) or a
//! fleet with no supervisor is run: a scenario starts its contenders with [`start_all`] (or
//! [`Contender::start`]), loads [`Fleet::addr`], reaches ck's own controls through
//! [`Fleet::instance`], and ends with [`Fleet::stop`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};
use ck_tests::ck::{Ck, Proto, StartOptions};
use ck_tests::sys::free_port;

use crate::Bench;
use crate::bare::BareFleet;

/// How long a ck contender's workers get to be ready (and its program to steer); also what
/// a scenario gives a fleet it scaled.
pub const READY_TIMEOUT: Duration = Duration::from_secs(15);
/// How often a ck contender's status is asked while waiting for it.
const STATUS_POLL: Duration = Duration::from_millis(10);

/// What a contender is: which of ck's comparisons it stands in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// ck with its BPF program (whatever its flags): the columns a goal is about by default.
    Ck,
    /// `ck run --no-bpf`: the same supervisor, plain `SO_REUSEPORT`.
    NoBpf,
    /// The same workers with no supervisor, each binding the port with `SO_REUSEPORT`.
    Bare,
    /// Another supervisor (started by its scenario).
    Peer,
}

/// One contender: a column of the scenario's tables.
#[derive(Debug, Clone, PartialEq)]
pub struct Contender {
    /// Its column's name (`ck`, `ck --no-bpf`, `no supervisor`, `least-queue, 100ms`).
    pub label: String,
    /// What it is.
    pub role: Role,
    /// Flags of its `ck run` (besides `--no-bpf`, which its role adds).
    pub flags: Vec<String>,
    /// Environment variables of its `ck run` (name, value).
    pub env: Vec<(String, String)>,
    /// The ck binary it runs (its workers too, when they are ck's demo worker): the measured
    /// build's, or for a copy made by `--against`, that revision's.
    pub bin: PathBuf,
    /// `--against`'s revision when this is the copy of a contender on that build.
    pub build: Option<String>,
    /// The scenario's own index of its setup (which workers, which load), kept by the copy.
    pub setup: usize,
}

impl Contender {
    /// ck with its BPF program and `flags`.
    pub fn ck(label: &str, flags: &[&str]) -> Contender {
        Contender::new(label, Role::Ck, flags)
    }

    /// `ck run --no-bpf` with `flags`.
    pub fn no_bpf(label: &str, flags: &[&str]) -> Contender {
        Contender::new(label, Role::NoBpf, flags)
    }

    /// The workers with no supervisor, labelled `no supervisor`.
    pub fn bare() -> Contender {
        Contender::new(BARE, Role::Bare, &[])
    }

    /// Another supervisor, which its scenario starts.
    pub fn peer(label: &str) -> Contender {
        Contender::new(label, Role::Peer, &[])
    }

    fn new(label: &str, role: Role, flags: &[&str]) -> Contender {
        Contender {
            label: label.to_string(),
            role,
            flags: flags.iter().map(|f| f.to_string()).collect(),
            env: Vec::new(),
            bin: PathBuf::new(),
            build: None,
            setup: 0,
        }
    }

    /// Labelled `label` instead.
    pub fn labelled(mut self, label: &str) -> Contender {
        self.label = label.to_string();
        self
    }

    /// With `env` (name, value) in its `ck run`'s environment.
    pub fn with_env(mut self, env: &[(&str, &str)]) -> Contender {
        self.env
            .extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        self
    }

    /// Running `bin` instead of the measured build's ck (the static build ck ships); `--against`
    /// makes no copy of it.
    pub fn with_bin(mut self, bin: PathBuf) -> Contender {
        self.bin = bin;
        self
    }

    /// With the scenario's setup `index` (see [`Contender::setup`]).
    pub fn with_setup(mut self, index: usize) -> Contender {
        self.setup = index;
        self
    }

    /// Whether it runs the `ck` binary as its supervisor (`--against` measures it on both
    /// builds).
    pub fn runs_ck(&self) -> bool {
        matches!(self.role, Role::Ck | Role::NoBpf)
    }

    /// Whether a goal is about it when the goal names no columns: ck with its program, on the
    /// measured build.
    pub fn is_ck(&self) -> bool {
        self.role == Role::Ck && self.build.is_none()
    }

    /// Starts it: `ck run` (as `bench-<what>-...`) or the fleet with no supervisor, with
    /// `group`'s workers; returns once every worker is ready (or has answered).
    pub fn start(&self, bench: &Bench, what: &str, group: &Group) -> Result<Fleet> {
        let mut fleet = self.spawn(bench, what, group)?;
        fleet.wait_ready(group.workers, READY_TIMEOUT)?;
        Ok(fleet)
    }

    /// Starts it without waiting for its workers (the bare fleet does wait: it has no other
    /// way to tell): for a scenario that times the start itself.
    pub fn spawn(&self, bench: &Bench, what: &str, group: &Group) -> Result<Fleet> {
        let proto = if group.udp { Proto::Udp } else { Proto::Tcp };
        let port = free_port();
        match self.role {
            Role::Ck | Role::NoBpf => {
                let no_bpf = self.role == Role::NoBpf;
                let name = format!(
                    "bench-{what}-{}-{port}",
                    if no_bpf { "no-bpf" } else { "ck" }
                );
                let workers = group.workers.to_string();
                let mut args = vec!["-w", workers.as_str()];
                args.extend(self.flags.iter().map(String::as_str));
                let app = group.app.under_ck();
                if !app.is_empty() {
                    args.push("--");
                    args.extend(app.iter().map(String::as_str));
                }
                let env: Vec<(&str, &str)> = self
                    .env
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                let ck = StartOptions::new()
                    .bin(&self.bin)
                    .listen(proto, port)
                    .no_bpf(no_bpf)
                    .args(&args)
                    .env(&env)
                    .log_dir(&bench.log_dir)
                    .poll_every(STATUS_POLL)
                    .start(&name)
                    .with_context(|| format!("starting {} ({what})", self.label))?;
                Ok(Fleet::Ck(Box::new(ck)))
            }
            Role::Bare => {
                let log = bench.log_dir.join(format!("bench-{what}-bare-{port}.log"));
                let listen = format!("{}://127.0.0.1:{port}", proto.word());
                let fleet = BareFleet::start(&log, group.workers, port, group.udp, |_| {
                    group.app.bare(&self.bin, port, &listen)
                })
                .with_context(|| format!("starting {} ({what})", self.label))?;
                Ok(Fleet::Bare(fleet))
            }
            Role::Peer => bail!(
                "{} is another supervisor: its scenario starts it, not Contender::start",
                self.label
            ),
        }
    }
}

/// The label of the fleet with no supervisor.
pub const BARE: &str = "no supervisor";

/// The workers every contender of a scenario runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// How many.
    pub workers: u32,
    /// A UDP group (`udp://`) rather than TCP.
    pub udp: bool,
    /// What they run.
    pub app: App,
}

impl Group {
    /// `workers` of ck's demo worker on TCP.
    pub fn demo(workers: u32) -> Group {
        Group {
            workers,
            udp: false,
            app: App::Demo,
        }
    }
}

/// What a worker runs.
#[derive(Debug, Clone, PartialEq)]
pub enum App {
    /// ck's demo worker (`ck demo-worker`; with no supervisor, `--reuse-port` binding
    /// `$CK_LISTEN`).
    Demo,
    /// A program (`argv`) with `env`; with no supervisor it is also given `PORT` and
    /// `bare_env` (what makes it bind the port itself with `SO_REUSEPORT`).
    Program {
        /// The command line.
        argv: Vec<String>,
        /// Its environment, under ck and alone.
        env: Vec<(String, String)>,
        /// Its environment with no supervisor, besides `PORT`.
        bare_env: Vec<(String, String)>,
    },
}

impl App {
    /// The APP of `ck run ... -- APP` (empty: the demo worker).
    fn under_ck(&self) -> Vec<String> {
        match self {
            App::Demo => Vec::new(),
            App::Program { argv, env, .. } => {
                let mut app = Vec::new();
                if !env.is_empty() {
                    app.push("env".to_string());
                    app.extend(env.iter().map(|(k, v)| format!("{k}={v}")));
                }
                app.extend(argv.iter().cloned());
                app
            }
        }
    }

    /// One worker with no supervisor, binding `port` (`listen`: `tcp://` or `udp://` and the
    /// address) itself.
    fn bare(&self, ck: &std::path::Path, port: u16, listen: &str) -> Command {
        match self {
            App::Demo => {
                let mut cmd = Command::new(ck);
                cmd.args(["demo-worker", "--reuse-port"])
                    .env("PORT", port.to_string())
                    .env("CK_LISTEN", listen);
                cmd
            }
            App::Program {
                argv,
                env,
                bare_env,
            } => {
                let mut cmd = Command::new(&argv[0]);
                cmd.args(&argv[1..])
                    .envs(env.iter().chain(bare_env).map(|(k, v)| (k, v)))
                    .env("PORT", port.to_string());
                cmd
            }
        }
    }
}

/// A running contender.
#[derive(Debug)]
pub enum Fleet {
    /// A `ck run` (boxed: the handle is much larger than the fleet with no supervisor).
    Ck(Box<Ck>),
    /// Workers with no supervisor.
    Bare(BareFleet),
}

impl Fleet {
    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        match self {
            Fleet::Ck(ck) => ck.addr(),
            Fleet::Bare(bare) => bare.addr(),
        }
    }

    /// The `ck run`, for what only ck has (its status, its control commands, its pid).
    pub fn instance(&self) -> Option<&Ck> {
        match self {
            Fleet::Ck(ck) => Some(ck),
            Fleet::Bare(_) => None,
        }
    }

    /// The `ck run`, mutable (to wait for states of it, to start it again).
    pub fn instance_mut(&mut self) -> Option<&mut Ck> {
        match self {
            Fleet::Ck(ck) => Some(ck),
            Fleet::Bare(_) => None,
        }
    }

    /// Waits until `workers` slots are ready (and steering is on, with BPF), at most `within`.
    fn wait_ready(&mut self, workers: u32, within: Duration) -> Result<()> {
        if let Fleet::Ck(ck) = self {
            ck.wait_ready(workers as usize, within)?;
        }
        Ok(())
    }

    /// Stops it, after printing the WARN/ERROR lines of ck's log.
    pub fn stop(self, bench: &Bench) -> Result<()> {
        match self {
            Fleet::Ck(mut ck) => {
                bench.report_complaints(&ck);
                ck.stop()?;
                Ok(())
            }
            Fleet::Bare(bare) => {
                drop(bare);
                Ok(())
            }
        }
    }
}

/// Starts every contender of `contenders` (all spawned first, then each waited for), as
/// `bench-<what>-...`, with `group`'s workers.
pub fn start_all(
    bench: &Bench,
    contenders: &[Contender],
    what: &str,
    group: &Group,
) -> Result<Vec<Fleet>> {
    start_all_within(bench, contenders, what, group, READY_TIMEOUT)
}

/// Like [`start_all`], giving each ck fleet `within` to be ready (workers that take long to
/// boot).
pub fn start_all_within(
    bench: &Bench,
    contenders: &[Contender],
    what: &str,
    group: &Group,
    within: Duration,
) -> Result<Vec<Fleet>> {
    let mut fleets = Vec::new();
    for c in contenders {
        fleets.push(c.spawn(bench, what, group)?);
    }
    for fleet in &mut fleets {
        fleet.wait_ready(group.workers, within)?;
    }
    Ok(fleets)
}

/// Stops every fleet of `fleets` (all of them, even when one fails; the first failure is
/// returned).
pub fn stop_all(bench: &Bench, fleets: Vec<Fleet>) -> Result<()> {
    let mut first = Ok(());
    for fleet in fleets {
        let stopped = fleet.stop(bench);
        if first.is_ok() {
            first = stopped;
        }
    }
    first
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_runs_with_its_environment_under_ck_and_alone() {
        let app = App::Program {
            argv: vec!["/x/cork-server".into()],
            env: vec![("CORK".into(), "1".into())],
            bare_env: vec![("REUSEPORT".into(), "1".into())],
        };
        assert_eq!(app.under_ck(), ["env", "CORK=1", "/x/cork-server"]);
        let bare = app.bare("/x/ck".as_ref(), 20001, "tcp://127.0.0.1:20001");
        assert_eq!(
            crate::paths::describe(&bare),
            "CORK=1 PORT=20001 REUSEPORT=1 /x/cork-server"
        );
        let demo = App::Demo.bare("/x/ck".as_ref(), 20001, "udp://127.0.0.1:20001");
        assert_eq!(
            crate::paths::describe(&demo),
            "CK_LISTEN=udp://127.0.0.1:20001 PORT=20001 /x/ck demo-worker --reuse-port"
        );
        assert!(App::Demo.under_ck().is_empty());
    }

    #[test]
    fn goals_are_about_ck_on_the_measured_build() {
        let mut ck = Contender::ck("ck", &[]);
        assert!(ck.is_ck() && ck.runs_ck());
        ck.build = Some("abc".into());
        assert!(!ck.is_ck() && ck.runs_ck());
        assert!(!Contender::no_bpf("ck --no-bpf", &[]).is_ck());
        assert!(!Contender::bare().runs_ck());
    }
}
