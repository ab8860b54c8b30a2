//! The fleets `cargo xtask bench` compares on the Node hello app: ck (`examples/worker.js` on
//! the socket ck hands over, default settings), ck `--no-bpf`, node:cluster and pm2 in cluster
//! mode (`ck-bench/apps/hello.js`), each started, listed (its worker pids) and stopped the
//! same way; and the victim picker every scenario shares.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use ck_tests::sys::{children_of, free_port};

use super::peers::{NodeCluster, Pm2};
use crate::Bench;
use crate::instance::{Instance, Variant};

/// Who supervises the Node app.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contender {
    /// ck with its BPF program.
    Ck,
    /// ck whose replacements boot at the fleet's CPU priority (`--boot-boost 0`), as before
    /// the boost.
    CkNoBoost,
    /// ck learning of exits from the pidfds alone (`CK_EXIT_WATCH=pidfd`: no exit watch), as
    /// before the watch.
    CkPidfdExits,
    /// ck with two hot spares (`--spares 2`).
    CkSpares,
    /// ck `--no-bpf`.
    CkNoBpf,
    /// node:cluster.
    NodeCluster,
    /// pm2 in cluster mode.
    Pm2,
}

impl Contender {
    /// ck (default settings), its baseline, and the two peers, in table order.
    pub const ALL: [Contender; 4] = [
        Contender::Ck,
        Contender::CkNoBpf,
        Contender::NodeCluster,
        Contender::Pm2,
    ];

    /// The `recovery` scenario's: [`Contender::ALL`] with ck without its boot boost, ck
    /// without its exit watch and ck's hot spares beside ck.
    pub const RECOVERY: [Contender; 7] = [
        Contender::Ck,
        Contender::CkNoBoost,
        Contender::CkPidfdExits,
        Contender::CkSpares,
        Contender::CkNoBpf,
        Contender::NodeCluster,
        Contender::Pm2,
    ];

    /// Its column title.
    pub fn label(self) -> &'static str {
        match self {
            Contender::Ck => "ck",
            Contender::CkNoBoost => "ck --boot-boost 0",
            Contender::CkPidfdExits => "ck, exits by pidfd",
            Contender::CkSpares => "ck --spares 2",
            Contender::CkNoBpf => "ck --no-bpf",
            Contender::NodeCluster => "node:cluster",
            Contender::Pm2 => "pm2",
        }
    }
}

/// A fleet under test.
pub enum Fleet {
    /// ck, with or without its program.
    Ck(Instance),
    /// node:cluster.
    Cluster(NodeCluster),
    /// pm2.
    Pm2(Pm2),
}

impl Fleet {
    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        match self {
            Fleet::Ck(inst) => inst.addr(),
            Fleet::Cluster(c) => c.addr,
            Fleet::Pm2(p) => p.addr,
        }
    }

    /// ck's own pid (none for the peers, whose master or daemon also serves or forwards).
    pub fn supervisor(&self) -> Option<u32> {
        match self {
            Fleet::Ck(inst) => Some(inst.pid()),
            _ => None,
        }
    }

    /// ck's log file (none for the peers).
    pub fn log(&self) -> Option<&std::path::Path> {
        match self {
            Fleet::Ck(inst) => Some(inst.log()),
            _ => None,
        }
    }

    /// Its worker processes (for ck, the serving ones: not its spares).
    pub fn workers(&self) -> Vec<u32> {
        match self {
            Fleet::Ck(inst) => inst
                .serving_pids()
                .unwrap_or_else(|_| children_of(inst.pid())),
            Fleet::Cluster(c) => c.workers(),
            Fleet::Pm2(p) => p.workers(),
        }
    }

    /// Starts `contender` with `workers` workers of the Node hello app and waits until they
    /// serve.
    pub fn start(
        bench: &Bench,
        contender: Contender,
        what: &str,
        workers: usize,
        pm2: &Path,
    ) -> Result<Fleet> {
        let worker_js = crate::paths::workspace_root()?.join("examples/worker.js");
        let worker_js = worker_js.to_string_lossy().to_string();
        let node_app = ["--", "node", worker_js.as_str()];
        Ok(match contender {
            Contender::Ck
            | Contender::CkNoBoost
            | Contender::CkPidfdExits
            | Contender::CkSpares
            | Contender::CkNoBpf => {
                let variant = match contender {
                    Contender::CkNoBpf => Variant::Baseline,
                    _ => Variant::Ck,
                };
                let mut args = Vec::new();
                match contender {
                    Contender::CkSpares => args.extend(["--spares", "2"]),
                    Contender::CkNoBoost => args.extend(["--boot-boost", "0"]),
                    _ => {}
                }
                args.extend(node_app);
                let env: &[(&str, &str)] = match contender {
                    Contender::CkPidfdExits => &[(ck::bpf::exits::FORCE_ENV, "pidfd")],
                    _ => &[],
                };
                let mut inst = Instance::start_with_env(
                    &bench.bin,
                    &bench.log_dir,
                    what,
                    variant,
                    workers as u32,
                    &args,
                    env,
                )?;
                inst.wait_ready(workers)?;
                if contender == Contender::CkSpares {
                    inst.wait_status(Duration::from_secs(15), Duration::from_millis(10), |s| {
                        s.slots
                            .iter()
                            .filter(|slot| slot.state == "standby")
                            .count()
                            == 2
                    })?;
                }
                Fleet::Ck(inst)
            }
            Contender::NodeCluster => Fleet::Cluster(NodeCluster::start(
                &bench.log_dir.join(format!("{what}-node-cluster.log")),
                free_port(),
                workers,
            )?),
            Contender::Pm2 => Fleet::Pm2(Pm2::start(
                pm2,
                &bench.log_dir.join(format!("{what}-pm2-home")),
                free_port(),
                workers,
            )?),
        })
    }

    /// Stops it (ck: `ck stop`, its log's complaints reported; the others on drop).
    pub fn stop(self, bench: &Bench) -> Result<()> {
        if let Fleet::Ck(inst) = self {
            bench.report_log(&inst);
            inst.stop()?;
        }
        Ok(())
    }
}

/// Runs `measure` on a fleet of each of `contenders` in turn (`what` names the scenario in logs and
/// instance names), stopping each before the next starts.
pub fn each<T>(
    bench: &Bench,
    what: &str,
    workers: usize,
    contenders: &[Contender],
    mut measure: impl FnMut(&Fleet) -> Result<T>,
) -> Result<Vec<T>> {
    super::peers::ensure_node()?;
    let pm2 = super::peers::ensure_pm2()?;
    let mut outcomes = Vec::new();
    for contender in contenders.iter().copied() {
        bench.progress(format_args!("{what}: {} ...", contender.label()));
        let fleet = Fleet::start(bench, contender, what, workers, &pm2)?;
        outcomes.push(measure(&fleet)?);
        fleet.stop(bench)?;
    }
    Ok(outcomes)
}

/// A tiny xorshift: the same victims sequence for every fleet.
pub struct Pick(pub u64);

impl Pick {
    /// A number in `0..n`.
    pub fn next(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}
