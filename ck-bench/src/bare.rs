//! The baseline with no supervisor at all: the same demo workers, started by the bench itself
//! (`ck demo-worker --reuse-port` with `PORT`), each binding the port with `SO_REUSEPORT`, so
//! the kernel's plain hash spreads connections over them and no other process runs beside
//! them: the physical limit ck's own cost is measured against.

use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use ck_tests::sys::free_port;
use nix::sys::signal::Signal;

use crate::instance::kill;

/// How long the workers get to answer.
const READY_TIMEOUT: Duration = Duration::from_secs(15);

/// Demo workers on one port with no supervisor; stopped (SIGTERM, then SIGKILL) when dropped.
pub struct BareFleet {
    children: Vec<Child>,
    port: u16,
}

impl BareFleet {
    /// Starts `workers` demo workers of `bin` on a free loopback port, logging to
    /// `<log_dir>/bench-bare-<port>.log`, and waits until every one has answered.
    pub fn start(bin: &Path, log_dir: &Path, workers: u32) -> Result<BareFleet> {
        let port = free_port();
        let log = log_dir.join(format!("bench-bare-{port}.log"));
        let file = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut fleet = BareFleet {
            children: Vec::new(),
            port,
        };
        for slot in 0..workers {
            let child = Command::new(bin)
                .args(["demo-worker", "--reuse-port"])
                // Not socket-activated: it binds $CK_LISTEN itself ($PORT says it may).
                .env("PORT", port.to_string())
                .env("CK_LISTEN", fleet.addr().to_string())
                .env("CK_SLOT", slot.to_string())
                .env_remove("NOTIFY_SOCKET")
                .stdin(Stdio::null())
                .stdout(file.try_clone()?)
                .stderr(file.try_clone()?)
                .spawn()
                .with_context(|| format!("starting {} demo-worker", bin.display()))?;
            fleet.children.push(child);
        }
        fleet.wait_answered(workers as usize)?;
        Ok(fleet)
    }

    /// Where the workers listen.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// Waits until `n` different workers have answered.
    fn wait_answered(&self, n: usize) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut seen = std::collections::BTreeSet::new();
        while seen.len() < n {
            if Instant::now() > deadline {
                bail!(
                    "only {} of {n} bare demo workers answered on {} within {READY_TIMEOUT:?}",
                    seen.len(),
                    self.addr()
                );
            }
            match ck_tests::get_new_conn(self.addr()) {
                Ok(answer) => {
                    seen.insert(answer.pid);
                }
                Err(_) => thread::sleep(Duration::from_millis(10)),
            }
        }
        Ok(())
    }
}

impl Drop for BareFleet {
    fn drop(&mut self) {
        for child in &self.children {
            let _ = kill(child.id(), Signal::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        for child in &mut self.children {
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
