//! One host of a fleet rig: a network namespace on the LAN running its own `ck run -w 2
//! --metrics 0.0.0.0:9100 --port 8080` (the demo worker or the Node example), started with
//! `nsenter` so that it sees the host's `/sys/fs/bpf`; stopped with SIGTERM and timed, crashed
//! (`--survive-supervisor`), or killed with every process of the namespace, as the scenarios
//! need.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::ck::{Ck, ck_bin};

use super::netns::{self, Lan, Netns};

/// The port each host serves on.
pub const SERVICE_PORT: u16 = 8080;
/// The port of each host's `--metrics` (`/readyz`).
pub const METRICS_PORT: u16 = 9100;
/// Workers per host.
pub const WORKERS: usize = 2;
/// How long a host's ck gets to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a stopping ck gets to exit before the scenario fails.
const STOP_TIMEOUT: Duration = Duration::from_secs(120);

/// What a host runs under ck.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum App {
    /// ck's built-in demo worker.
    Demo,
    /// `node examples/worker.js`.
    Node,
}

/// A host: its namespace, address and (while it runs) its ck.
#[derive(Debug)]
pub struct Host {
    /// Dropped first: ck and its workers go before the namespace.
    ck: Option<Ck>,
    index: usize,
    name: String,
    last: u8,
    app: App,
    /// `ck run` options besides the fixed ones, for the next start.
    options: Vec<String>,
    ns: Netns,
}

impl Host {
    /// Creates host `index` of the rig `prefix` (namespace and ck name `<prefix>-h<index>`,
    /// address `10.77.0.<11 + index>`) on `lan`; its ck is not started yet.
    pub fn new(prefix: &str, index: usize, lan: &mut Lan, app: App, options: &[String]) -> Host {
        let name = format!("{prefix}-h{index}");
        let ns = Netns::add(&name);
        let last = 11 + u8::try_from(index).expect("few hosts");
        lan.join(&ns, last);
        Host {
            ck: None,
            index,
            name,
            last,
            app,
            options: options.to_vec(),
            ns,
        }
    }

    /// Its index in the rig.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Its name (namespace and ck instance).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its address on the LAN.
    pub fn ip(&self) -> Ipv4Addr {
        netns::addr(self.last)
    }

    /// Where it serves.
    pub fn service(&self) -> SocketAddr {
        SocketAddr::from((self.ip(), SERVICE_PORT))
    }

    /// Its namespace.
    pub fn netns(&self) -> &Netns {
        &self.ns
    }

    /// Sets the `ck run` options of its next start (the fixed ones aside).
    pub fn set_options(&mut self, options: &[String]) {
        self.options = options.to_vec();
    }

    /// Its running ck.
    ///
    /// # Panics
    /// When it has none.
    pub fn ck(&self) -> &Ck {
        self.ck
            .as_ref()
            .unwrap_or_else(|| panic!("host {} runs no ck", self.name))
    }

    /// Starts its ck and waits until both workers are ready.
    pub fn start(&mut self) {
        assert!(self.ck.is_none(), "host {} already runs a ck", self.name);
        let mut cmd = self.ns.command(ck_bin());
        cmd.env_remove("CK_LOG").env("NO_COLOR", "1");
        let metrics = format!("0.0.0.0:{METRICS_PORT}");
        let (workers, port) = (WORKERS.to_string(), SERVICE_PORT.to_string());
        let mut args: Vec<&str> = vec!["-w", &workers, "--port", &port, "--metrics", &metrics];
        args.extend(self.options.iter().map(String::as_str));
        let node_app = node_example();
        if self.app == App::Node {
            let script = node_app.to_str().expect("UTF-8 path");
            args.extend(["--", "node", script]);
        }
        let mut ck = Ck::start_command(cmd, &self.name, &args, &[]).expect("start ck");
        ck.wait_ready(WORKERS, READY_TIMEOUT)
            .expect("wait for ready slots");
        self.ck = Some(ck);
    }

    /// Sends SIGTERM to its ck and waits until it exited 0; returns the time from the signal to
    /// the exit (what a pod's termination takes).
    pub fn stop(&mut self) -> Duration {
        let mut ck = self.ck.take().expect("a running ck");
        let at = Instant::now();
        ck.sigterm().expect("SIGTERM to ck");
        let code = ck.wait_exit(STOP_TIMEOUT).expect("wait for ck to exit");
        let took = at.elapsed();
        assert_eq!(
            code.code(),
            Some(0),
            "ck of {} exited with {code}\n--- ck log ---\n{}",
            self.name,
            ck.log()
        );
        took
    }

    /// SIGKILLs its supervisor alone (the workers of a `--survive-supervisor` ck keep
    /// serving) and leaves the instance to the next [`Host::start`].
    pub fn crash_supervisor(&mut self) {
        let mut ck = self.ck.take().expect("a running ck");
        ck.kill_supervisor().expect("kill the supervisor");
        ck.abandon().expect("abandon the dead ck");
    }

    /// Kills every process of the host's namespace at once (the host died) and removes what
    /// its ck left (pins, cgroups, run-time files).
    pub fn kill(&mut self) {
        self.ns.kill_all();
        // ck is dead: dropping it removes its leftovers.
        drop(self.ck.take());
    }

    /// Waits until its ck reports upgrade number `n` done, its steering checked.
    pub fn wait_upgraded(&mut self, n: u32) {
        let ck = self.ck.as_mut().expect("a running ck");
        ck.wait_status(&format!("upgrade {n} done"), READY_TIMEOUT, |s| {
            s.upgrades == n && s.bpf
        })
        .expect("wait for the status");
    }

    /// Pids of its ck's workers.
    pub fn worker_pids(&self) -> Vec<u32> {
        self.ck()
            .status()
            .expect("ck status")
            .worker_pids()
            .into_iter()
            .collect()
    }
}

/// `examples/worker.js` of the workspace.
fn node_example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/worker.js")
}
