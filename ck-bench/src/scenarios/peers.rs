//! The other supervisors ck is compared with in `cargo xtask bench chaos`: node:cluster (the
//! primary in `ck-bench/apps/cluster.js`) and pm2 in cluster mode (installed from the npm
//! registry into `target/bench-tools`), both running the Node hello app
//! (`ck-bench/apps/hello.js`) on a loopback port. Each is stopped (its whole process group,
//! or `pm2 kill`) when dropped.

use std::fs::{self, File};
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use ck_tests::sys::children_of;
use nix::sys::signal::Signal;

use crate::paths as cmd;
use crate::process::kill;

/// The pm2 version installed for the benchmark.
const PM2: &str = "pm2@5";

/// The directory of the bench apps.
pub fn apps_dir() -> Result<PathBuf> {
    Ok(crate::paths::workspace_root()?.join("ck-bench/apps"))
}

/// Fails with what to do when `node` is missing.
pub fn ensure_node() -> Result<()> {
    if cmd::has_program("node") {
        return Ok(());
    }
    bail!(
        "the chaos benchmark runs Node apps and needs `node` on PATH: install Node.js \
         (`apt-get install nodejs`)"
    )
}

/// The pm2 binary, installed from the npm registry into `target/bench-tools` if it is not
/// there yet (one `xtask:` line says so).
pub fn ensure_pm2() -> Result<PathBuf> {
    let prefix = crate::paths::workspace_root()?.join("target/bench-tools");
    let bin = prefix.join("node_modules/.bin/pm2");
    if bin.is_file() {
        return Ok(bin);
    }
    eprintln!(
        "ck-bench: installing {PM2} from the npm registry into {}",
        prefix.display()
    );
    fs::create_dir_all(&prefix)?;
    cmd::run(
        Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--silent", "--prefix"])
            .arg(&prefix)
            .arg(PM2),
        "check access to the npm registry, or install pm2 by hand with `npm install -g pm2`",
    )?;
    Ok(bin)
}

/// Waits until `pids()` has `workers` processes and the port answers.
fn wait_serving(addr: SocketAddr, workers: usize, pids: impl Fn() -> Vec<u32>) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if pids().len() >= workers && ck_tests::load::get_once(addr, Duration::from_secs(1)).is_ok()
        {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("{workers} workers did not come up on {addr} within 20 s")
}

/// `node cluster.js` with WORKERS workers on 127.0.0.1:port.
pub struct NodeCluster {
    primary: Child,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl NodeCluster {
    /// Starts the primary, logging to `log`, and waits until its workers serve.
    pub fn start(log: &Path, port: u16, workers: usize) -> Result<NodeCluster> {
        let file = File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let primary = Command::new("node")
            .arg(apps_dir()?.join("cluster.js"))
            .env("PORT", port.to_string())
            .env("HOST", "127.0.0.1")
            .env("WORKERS", workers.to_string())
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .process_group(0)
            .spawn()
            .context("starting node cluster.js")?;
        let cluster = NodeCluster {
            primary,
            addr: (Ipv4Addr::LOCALHOST, port).into(),
        };
        wait_serving(cluster.addr, workers, || cluster.workers())?;
        Ok(cluster)
    }

    /// The worker processes.
    pub fn workers(&self) -> Vec<u32> {
        children_of(self.primary.id())
    }
}

impl Drop for NodeCluster {
    fn drop(&mut self) {
        let group = -(self.primary.id() as i32);
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(group), Signal::SIGKILL);
        let _ = self.primary.wait();
    }
}

/// pm2 in cluster mode (`pm2 start hello.js -i WORKERS`) with a PM2_HOME of its own.
pub struct Pm2 {
    bin: PathBuf,
    home: PathBuf,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl Pm2 {
    /// Starts pm2's daemon and the app, and waits until its workers serve.
    pub fn start(bin: &Path, home: &Path, port: u16, workers: usize) -> Result<Pm2> {
        fs::create_dir_all(home)?;
        let pm2 = Pm2 {
            bin: bin.to_path_buf(),
            home: home.to_path_buf(),
            addr: (Ipv4Addr::LOCALHOST, port).into(),
        };
        let hello = apps_dir()?.join("hello.js");
        cmd::run(
            pm2.command()
                .arg("start")
                .arg(&hello)
                .args(["-i", &workers.to_string(), "--name", "hello"])
                .env("PORT", port.to_string())
                .env("HOST", "127.0.0.1")
                .stdout(Stdio::null()),
            "see pm2's logs under PM2_HOME",
        )?;
        wait_serving(pm2.addr, workers, || pm2.workers())?;
        Ok(pm2)
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.env("PM2_HOME", &self.home).stdin(Stdio::null());
        cmd
    }

    /// The worker processes (children of pm2's daemon).
    pub fn workers(&self) -> Vec<u32> {
        fs::read_to_string(self.home.join("pm2.pid"))
            .ok()
            .and_then(|pid| pid.trim().parse().ok())
            .map(children_of)
            .unwrap_or_default()
    }
}

impl Drop for Pm2 {
    fn drop(&mut self) {
        let workers = self.workers();
        let _ = self
            .command()
            .arg("kill")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        for pid in workers {
            let _ = kill(pid, Signal::SIGKILL);
        }
    }
}
