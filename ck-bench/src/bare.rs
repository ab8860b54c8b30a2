//! The fleet with no supervisor at all: the same workers, started by the bench itself, each
//! binding the port with `SO_REUSEPORT` (ck's demo worker with `--reuse-port` and `$PORT` or
//! `$CK_LISTEN`, the cork server with `REUSEPORT=1`), so the kernel's plain hash spreads
//! connections (or datagrams) over them and no other process runs beside them: the physical
//! limit ck's own cost is measured against, and one side of the control pair.

use std::collections::BTreeSet;
use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use nix::sys::signal::Signal;

use crate::paths::describe;
use crate::process::kill;

/// How long the workers get to answer.
const READY_TIMEOUT: Duration = Duration::from_secs(15);

/// Workers on one port with no supervisor; stopped (SIGTERM, then SIGKILL) when dropped.
#[derive(Debug)]
pub struct BareFleet {
    children: Vec<Child>,
    port: u16,
    udp: bool,
}

impl BareFleet {
    /// Starts `workers` processes of `command(slot)` on `port` of 127.0.0.1 (UDP when `udp`),
    /// logging to `log`, and waits until every one has answered (a `GET /` or a datagram
    /// answered `slot=S pid=P`).
    pub fn start(
        log: &std::path::Path,
        workers: u32,
        port: u16,
        udp: bool,
        command: impl Fn(u32) -> Command,
    ) -> Result<BareFleet> {
        let file = File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let mut fleet = BareFleet {
            children: Vec::new(),
            port,
            udp,
        };
        for slot in 0..workers {
            let mut cmd = command(slot);
            cmd.env("CK_SLOT", slot.to_string())
                .env_remove("NOTIFY_SOCKET")
                .env_remove("LISTEN_FDS")
                .stdin(Stdio::null())
                .stdout(file.try_clone()?)
                .stderr(file.try_clone()?);
            let child = cmd
                .spawn()
                .with_context(|| format!("starting `{}`", describe(&cmd)))?;
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
    fn wait_answered(&mut self, n: usize) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut seen = BTreeSet::new();
        while seen.len() < n {
            if Instant::now() > deadline {
                bail!(
                    "only {} of {n} workers with no supervisor answered on {} within \
                     {READY_TIMEOUT:?}",
                    seen.len(),
                    self.addr()
                );
            }
            for child in &mut self.children {
                if let Ok(Some(status)) = child.try_wait() {
                    bail!(
                        "a worker with no supervisor exited ({status}) before it answered on {}",
                        self.addr()
                    );
                }
            }
            match self.ask_pid() {
                Some(pid) => {
                    seen.insert(pid);
                }
                None => thread::sleep(Duration::from_millis(10)),
            }
        }
        Ok(())
    }

    /// The pid of the worker that answers one request (over a new connection, or a datagram
    /// from a new socket), if one does.
    fn ask_pid(&self) -> Option<u32> {
        if !self.udp {
            return ck_tests::get_new_conn(self.addr()).ok().map(|a| a.pid);
        }
        let socket = UdpSocket::bind("127.0.0.1:0").ok()?;
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .ok()?;
        socket.send_to(b"ping", self.addr()).ok()?;
        let mut buf = [0u8; 128];
        let n = socket.recv(&mut buf).ok()?;
        let text = String::from_utf8_lossy(&buf[..n]);
        text.split_whitespace()
            .find_map(|w| w.strip_prefix("pid="))
            .and_then(|p| p.parse().ok())
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
