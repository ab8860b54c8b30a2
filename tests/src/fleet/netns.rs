//! The network of a fleet rig: named network namespaces ([`Netns`], deleted on drop with every
//! process still in them), and a LAN ([`Lan`]): a bridge in a namespace of its own that the
//! other namespaces join through veth pairs. Every link is created inside the rig's namespaces
//! (`ip -n NS link add ... peer ... netns OTHER`), never in the caller's, so nothing of a rig
//! outlives its namespaces.
//!
//! Programs run in a namespace through `nsenter --net=/run/netns/NAME`, which changes the
//! network namespace only: `ip netns exec` would also unshare the mount namespace and remount
//! `/sys`, hiding `/sys/fs/bpf` where ck pins its maps.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::sys;

/// The rig's private network: every address is `10.77.0.x/24`.
pub const SUBNET: [u8; 3] = [10, 77, 0];

/// Address `10.77.0.<last>`.
pub fn addr(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(SUBNET[0], SUBNET[1], SUBNET[2], last)
}

/// A name prefix unique to this process and call (`ckf<pid>x<n>`), so that parallel rigs (tests,
/// benches) never share a namespace.
pub fn unique_prefix() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "ckf{}x{}",
        std::process::id() % 100_000,
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Runs `cmd` to completion (at most 20 s), panicking with its output unless it exits 0.
pub fn run(cmd: &mut Command) -> String {
    let out = sys::output_within(cmd, Duration::from_secs(20))
        .unwrap_or_else(|| panic!("{cmd:?} did not exit within 20 s"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Names of the network namespaces that exist (`ip netns list`).
pub fn namespaces() -> Vec<String> {
    run(Command::new("ip").args(["netns", "list"]))
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Names of the links of the caller's network namespace (`ip -o link`).
pub fn links() -> Vec<String> {
    run(Command::new("ip").args(["-o", "link"]))
        .lines()
        .filter_map(|line| line.split(':').nth(1))
        .map(|name| name.trim().split('@').next().unwrap_or("").to_string())
        .collect()
}

/// A named network namespace with its loopback up; deleted on drop, after every process in it
/// was killed.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates namespace `name` (`ip netns add`) and brings its loopback up (ck's canary and
    /// probes connect over it).
    pub fn add(name: &str) -> Netns {
        run(Command::new("ip").args(["netns", "add", name]));
        let ns = Netns {
            name: name.to_string(),
        };
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its file, `/run/netns/NAME` (for `setns`).
    pub fn path(&self) -> PathBuf {
        Path::new("/run/netns").join(&self.name)
    }

    /// `ip -n NAME ARGS...`, which must succeed; returns its stdout.
    pub fn ip(&self, args: &[&str]) -> String {
        run(Command::new("ip").arg("-n").arg(&self.name).args(args))
    }

    /// A command that runs `program` in this namespace (`nsenter --net=... program`): the
    /// process is `program` itself (nsenter execs it), its pid the child's.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net={}", self.path().display()))
            .arg("--")
            .arg(program);
        cmd
    }

    /// Sets the sysctl `key` to `value` in this namespace (`net.*` keys are per namespace).
    pub fn sysctl(&self, key: &str, value: &str) {
        run(self
            .command("sysctl")
            .args(["-q", "-w", &format!("{key}={value}")]));
    }

    /// Pids of the processes in this namespace (`ip netns pids`).
    pub fn pids(&self) -> BTreeSet<u32> {
        run(Command::new("ip").args(["netns", "pids", &self.name]))
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }

    /// SIGKILLs every process in this namespace and waits (at most 5 s) until they are gone.
    pub fn kill_all(&self) {
        let pids = self.pids();
        for pid in &pids {
            sys::kill_hard(*pid);
        }
        sys::wait_all_dead(&pids, Duration::from_secs(5));
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        self.kill_all();
        let _ = sys::output_within(
            Command::new("ip").args(["netns", "del", &self.name]),
            Duration::from_secs(20),
        );
    }
}

/// A LAN: a bridge `br0` in a namespace of its own that other namespaces join by a veth pair
/// (their end `eth0`, with an address of [`SUBNET`]). The bridge's namespace has no address.
#[derive(Debug)]
pub struct Lan {
    ns: Netns,
    ports: u32,
}

impl Lan {
    /// Creates the LAN's namespace `name` and its bridge.
    pub fn new(name: &str) -> Lan {
        let ns = Netns::add(name);
        ns.ip(&["link", "add", "br0", "type", "bridge", "forward_delay", "0"]);
        ns.ip(&["link", "set", "br0", "up"]);
        Lan { ns, ports: 0 }
    }

    /// Its namespace.
    pub fn netns(&self) -> &Netns {
        &self.ns
    }

    /// Joins `member` to the LAN with address `10.77.0.<last>/24` on its `eth0`.
    pub fn join(&mut self, member: &Netns, last: u8) {
        let port = format!("p{}", self.ports);
        self.ports += 1;
        self.ns.ip(&[
            "link",
            "add",
            &port,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            member.name(),
        ]);
        self.ns.ip(&["link", "set", &port, "master", "br0", "up"]);
        let cidr = format!("{}/24", addr(last));
        member.ip(&["addr", "add", &cidr, "dev", "eth0"]);
        member.ip(&["link", "set", "eth0", "up"]);
    }
}
