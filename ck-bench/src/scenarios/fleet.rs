//! The fleets `recovery` and `chaos` compare on the Node hello app, as contenders of their
//! rounds: ck (`examples/worker.js` on the socket ck hands over, with the flags and environment
//! each contender names) and ck `--no-bpf`, started by the rounds' [`Contender::start`] with
//! [`node_app`]'s workers; node:cluster and pm2 in cluster mode (`ck-bench/apps/hello.js`,
//! [`super::peers`]), the contenders of role peer. [`AnyFleet`] starts, lists (its worker pids),
//! waits for and stops any of them the same way; [`Pick`] is the victim picker every scenario
//! shares.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use ck_tests::ck::Ck;
use ck_tests::sys::{children_of, free_port};

use super::peers::{self, NodeCluster, Pm2};
use crate::Bench;
use crate::rounds::{App, Contender, Fleet, Group, Role};

/// node:cluster's label.
pub const NODE_CLUSTER: &str = "node:cluster";
/// pm2's label.
pub const PM2: &str = "pm2";
/// How long a fleet gets to be whole again (every worker serving, ck's spares standing by).
const WHOLE_WITHIN: Duration = Duration::from_secs(20);

/// `workers` workers of the Node hello app under ck: `node examples/worker.js`.
pub fn node_app(workers: u32) -> Result<Group> {
    Ok(node_script(
        &crate::paths::workspace_root()?.join("examples/worker.js"),
        workers,
    ))
}

/// `workers` workers of `node SCRIPT`, with no environment of their own.
pub fn node_script(script: &Path, workers: u32) -> Group {
    Group {
        workers,
        udp: false,
        app: App::Program {
            argv: vec!["node".into(), script.to_string_lossy().into_owned()],
            env: Vec::new(),
            bare_env: Vec::new(),
        },
    }
}

/// How long a fresh fleet gets to answer its first request.
const FIRST_ANSWER_WITHIN: Duration = Duration::from_secs(20);

/// Returns once a fresh fleet at `addr` answered its first `GET /` (polled every millisecond,
/// each try waiting up to a second): the moment a balancer's pool or a service's HTTP agent
/// reconnects after a restart.
pub fn first_answer(addr: SocketAddr) -> Result<()> {
    let deadline = Instant::now() + FIRST_ANSWER_WITHIN;
    while ck_tests::load::get_once(addr, Duration::from_secs(1)).is_err() {
        if Instant::now() > deadline {
            bail!("{addr} did not answer within {FIRST_ANSWER_WITHIN:?}");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// node:cluster and pm2, as contenders.
pub fn peer_contenders() -> [Contender; 2] {
    [Contender::peer(NODE_CLUSTER), Contender::peer(PM2)]
}

/// What the peers need: `node` on PATH, and pm2 (installed if missing); its binary.
pub fn peer_tools() -> Result<PathBuf> {
    peers::ensure_node()?;
    peers::ensure_pm2()
}

/// A running fleet of any contender: ck's (with or without its program) or a peer's.
pub enum AnyFleet {
    /// ck, with or without its program.
    Ck(Fleet),
    /// node:cluster.
    Cluster(NodeCluster),
    /// pm2.
    Pm2(Pm2),
}

impl AnyFleet {
    /// Starts `contender` with `group`'s workers (a peer runs the Node hello app, with as many
    /// workers), as `what`, and waits until they serve; `pm2` is pm2's binary.
    pub fn start(
        bench: &Bench,
        contender: &Contender,
        what: &str,
        group: &Group,
        pm2: &Path,
    ) -> Result<AnyFleet> {
        AnyFleet::launch(bench, contender, what, group, pm2, true)
    }

    /// As [`AnyFleet::start`], but a ck contender is not waited for (its workers may still be
    /// booting: see [`first_answer`]); a peer is still waited for until its processes serve,
    /// as neither says when its workers are ready.
    pub fn spawn(
        bench: &Bench,
        contender: &Contender,
        what: &str,
        group: &Group,
        pm2: &Path,
    ) -> Result<AnyFleet> {
        AnyFleet::launch(bench, contender, what, group, pm2, false)
    }

    /// Starts `contender`, waiting for a ck contender's workers to be ready when `wait`.
    fn launch(
        bench: &Bench,
        contender: &Contender,
        what: &str,
        group: &Group,
        pm2: &Path,
        wait: bool,
    ) -> Result<AnyFleet> {
        let workers = group.workers as usize;
        Ok(match (contender.role, contender.label.as_str()) {
            (Role::Peer, NODE_CLUSTER) => AnyFleet::Cluster(NodeCluster::start(
                &bench.log_dir.join(format!("{what}-node-cluster.log")),
                free_port(),
                workers,
            )?),
            (Role::Peer, PM2) => AnyFleet::Pm2(Pm2::start(
                pm2,
                &bench.log_dir.join(format!("{what}-pm2-home")),
                free_port(),
                workers,
            )?),
            (Role::Peer, other) => bail!("no peer is called {other}: {NODE_CLUSTER} or {PM2}"),
            _ if wait => AnyFleet::Ck(contender.start(bench, what, group)?),
            _ => AnyFleet::Ck(contender.spawn(bench, what, group)?),
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        match self {
            AnyFleet::Ck(fleet) => fleet.addr(),
            AnyFleet::Cluster(c) => c.addr,
            AnyFleet::Pm2(p) => p.addr,
        }
    }

    /// The `ck run`, for a ck contender.
    pub fn ck(&self) -> Option<&Ck> {
        match self {
            AnyFleet::Ck(fleet) => fleet.instance(),
            _ => None,
        }
    }

    /// The `ck run`, mutable (to wait for states of it).
    pub fn ck_mut(&mut self) -> Option<&mut Ck> {
        match self {
            AnyFleet::Ck(fleet) => fleet.instance_mut(),
            _ => None,
        }
    }

    /// ck's own pid (none for the peers, whose master or daemon also serves or forwards).
    pub fn supervisor(&self) -> Option<u32> {
        self.ck().map(Ck::pid)
    }

    /// Its worker processes (for ck, the serving ones: not its spares).
    pub fn workers(&self) -> Vec<u32> {
        match self {
            AnyFleet::Ck(fleet) => match fleet.instance() {
                Some(ck) => ck
                    .status()
                    .map(|s| s.serving_pids())
                    .unwrap_or_else(|_| children_of(ck.pid())),
                None => Vec::new(),
            },
            AnyFleet::Cluster(c) => c.workers(),
            AnyFleet::Pm2(p) => p.workers(),
        }
    }

    /// Waits until it is whole: `workers` workers serve and, under ck, every slot is ready or
    /// a spare standing by (nothing starting or restarting).
    pub fn wait_whole(&mut self, workers: usize) -> Result<()> {
        match self {
            AnyFleet::Ck(fleet) => {
                if let Some(ck) = fleet.instance_mut() {
                    ck.wait_status("a whole fleet", WHOLE_WITHIN, |s| {
                        s.ready_count() >= workers
                            && s.slots
                                .iter()
                                .all(|slot| slot.state == "ready" || slot.state == "standby")
                    })?;
                }
                Ok(())
            }
            AnyFleet::Cluster(c) => peers::wait_serving(c.addr, workers, || c.workers()),
            AnyFleet::Pm2(p) => peers::wait_serving(p.addr, workers, || p.workers()),
        }
    }

    /// Stops it (ck's log's complaints reported; a peer's whole process tree).
    pub fn stop(self, bench: &Bench) -> Result<()> {
        match self {
            AnyFleet::Ck(fleet) => fleet.stop(bench),
            AnyFleet::Cluster(c) => {
                drop(c);
                Ok(())
            }
            AnyFleet::Pm2(p) => {
                drop(p);
                Ok(())
            }
        }
    }
}

/// Stops every fleet of `fleets` (all of them, even when one fails; the first failure is
/// returned).
pub fn stop_all(bench: &Bench, fleets: Vec<AnyFleet>) -> Result<()> {
    let mut first = Ok(());
    for fleet in fleets {
        let stopped = fleet.stop(bench);
        if first.is_ok() {
            first = stopped;
        }
    }
    first
}

/// A tiny xorshift: the same victims for every contender of a round.
pub struct Pick(pub u64);

impl Pick {
    /// The picker of round `round` of a scenario whose victims start from `seed`.
    pub fn of_round(seed: u64, round: usize) -> Pick {
        Pick(seed ^ (round as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15))
    }

    /// A number in `0..n`.
    pub fn next(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}
