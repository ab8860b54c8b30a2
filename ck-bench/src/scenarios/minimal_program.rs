//! `ck_udp_minimal` on a plain `SO_REUSEPORT` group (a `--no-bpf` fleet): the yardstick of
//! `udp-cost` and `bpf-cost` (it picks a TCP listener as it picks a UDP socket), or beside it in
//! `udp-cost` `ck_udp_minimal_recall`, the least a program that remembers flows does. It is loaded
//! from the very object the measured ck embeds (found by the SHA-256 that `ck --version`
//! prints), its `sockets` map is filled with copies of the workers' sockets (`pidfd_getfd`),
//! and it is attached to the group, where the kernel's accounting measures it as it measures
//! ck's own program. `bench conn-count` also attaches one of the object's minimal counters to
//! the cgroup the fleet's listening sockets were created in.

use std::os::fd::{AsFd as _, AsRawFd as _, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, bail};
use aya::{
    Ebpf, EbpfLoader,
    maps::ReusePortSockArray,
    programs::{CgroupAttachMode, CgroupSock, SkReuseport, SockOps},
};
use nix::sys::socket::{SockType, SockaddrStorage, getsockname, getsockopt, sockopt};

use ck_tests::ck::Ck;

/// A yardstick select program of ck's object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Select {
    /// `ck_udp_minimal`: `hash % n`, nothing read or written.
    Hash,
    /// `ck_udp_minimal_recall`: `hash % n`, remembered in one 8-byte entry per hash position.
    Recall,
}

impl Select {
    /// The program's name in the object.
    fn program(self) -> &'static str {
        match self {
            Select::Hash => "ck_udp_minimal",
            Select::Recall => "ck_udp_minimal_recall",
        }
    }
}
/// Its read-only count of sockets.
const SOCKETS: &str = "CK_MINIMAL_SOCKETS";

/// The minimal program, loaded and attached to one fleet's group.
pub struct Minimal {
    /// Holds the program and its maps (the group holds them too while it lives).
    ebpf: Ebpf,
    /// The program's id, for [`ck_tests::bpf_stats::read`].
    pub id: u32,
}

impl Minimal {
    /// Loads `ck_udp_minimal` from `ck`'s object and attaches it to the group of `fleet` (a
    /// `--no-bpf` instance with one group, of UDP sockets or of TCP listeners as `kind` says):
    /// slot `i` of its `sockets` map is the socket of the `i`-th serving worker.
    pub fn attach(ck: &Path, fleet: &Ck, kind: SockType) -> Result<Minimal> {
        Minimal::attach_select(ck, fleet, kind, Select::Hash)
    }

    /// As [`Minimal::attach`], with the yardstick `select`.
    pub fn attach_select(ck: &Path, fleet: &Ck, kind: SockType, select: Select) -> Result<Minimal> {
        let name = select.program();
        let pids = fleet.status()?.serving_pids();
        let sockets = pids
            .iter()
            .map(|pid| socket_of(*pid, fleet.addr().port(), kind))
            .collect::<Result<Vec<_>>>()?;
        let count = u32::try_from(sockets.len()).context("socket count")?;
        let object = std::fs::read(object_of(ck)?).context("reading ck's BPF object")?;
        let mut ebpf = EbpfLoader::new()
            .btf(None)
            .override_global(SOCKETS, &count, true)
            // Only ck's UDP groups need these tables full; the yardsticks read none.
            .map_max_entries("flows", 1)
            .map_max_entries("flow_cache", 1)
            .map_max_entries("pending", 1)
            .load(&object)
            .context("loading ck's BPF object")?;
        {
            let map = ebpf
                .map_mut("sockets")
                .context("no sockets map in the object")?;
            let mut array = ReusePortSockArray::try_from(map).context("the sockets map")?;
            for (slot, socket) in (0u32..).zip(&sockets) {
                array
                    .set(slot, &socket.as_raw_fd(), 0)
                    .with_context(|| format!("putting a worker's socket in slot {slot}"))?;
            }
        }
        let program: &mut SkReuseport = ebpf
            .program_mut(name)
            .with_context(|| format!("{name} missing from ck's object"))?
            .try_into()
            .with_context(|| format!("{name} is not an sk_reuseport program"))?;
        program.load().with_context(|| format!("loading {name}"))?;
        program
            .attach(sockets[0].as_fd())
            .context("attaching the minimal program to the group")?;
        let id = program.info().context("the minimal program's id")?.id();
        // The copies go: the workers (and ck) hold the sockets, the group holds the program.
        drop(sockets);
        Ok(Minimal { ebpf, id })
    }

    /// Attaches the object's minimal counter (`way`) to the cgroup at `cgroup` (where the
    /// fleet's listening sockets were created: the kernel runs it for their connections only)
    /// and returns the ids of its programs, for [`ck_tests::bpf_stats::read`]. It stays
    /// attached while this lives.
    pub fn attach_counter(&mut self, cgroup: &Path, way: Count) -> Result<Vec<u32>> {
        let dir = std::fs::File::open(cgroup)
            .with_context(|| format!("opening the cgroup {}", cgroup.display()))?;
        let (ops, release) = match way {
            Count::StateChanges => ("ck_minimal_count", None),
            Count::Release => ("ck_minimal_open", Some("ck_minimal_release")),
        };
        let mut ids = Vec::new();
        let program: &mut SockOps = self
            .ebpf
            .program_mut(ops)
            .with_context(|| format!("{ops} missing from ck's object"))?
            .try_into()
            .with_context(|| format!("{ops} is not a sock_ops program"))?;
        program.load().with_context(|| format!("loading {ops}"))?;
        program
            .attach(&dir, CgroupAttachMode::Single)
            .with_context(|| format!("attaching {ops} to {}", cgroup.display()))?;
        ids.push(program.info().context("the minimal counter's id")?.id());
        if let Some(name) = release {
            let program: &mut CgroupSock = self
                .ebpf
                .program_mut(name)
                .with_context(|| format!("{name} missing from ck's object"))?
                .try_into()
                .with_context(|| format!("{name} is not a cgroup/sock program"))?;
            program.load().with_context(|| format!("loading {name}"))?;
            program
                .attach(&dir, CgroupAttachMode::Single)
                .with_context(|| format!("attaching {name} to {}", cgroup.display()))?;
            ids.push(program.info().context("the release counter's id")?.id());
        }
        Ok(ids)
    }
}

/// How a minimal counter sees a connection close.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    /// At its `CLOSE` state change, as ck's counter (`ck_minimal_count`).
    StateChanges,
    /// When its last descriptor is closed (`ck_minimal_open` + `ck_minimal_release`).
    Release,
}

/// A copy of the socket of `kind` that worker `pid` has bound to `port` (for TCP, its
/// listener: not a connection it accepted there).
fn socket_of(pid: u32, port: u16, kind: SockType) -> Result<OwnedFd> {
    let pidfd = ck::os::pidfd::open(pid).with_context(|| format!("pidfd_open {pid}"))?;
    let dir = format!("/proc/{pid}/fd");
    for entry in std::fs::read_dir(&dir).with_context(|| format!("listing {dir}"))? {
        let entry = entry?;
        let is_socket = std::fs::read_link(entry.path())
            .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"));
        let Some(fd) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        if !is_socket {
            continue;
        }
        let copy = ck::os::pidfd::get_fd(&pidfd, fd)
            .with_context(|| format!("pidfd_getfd of worker {pid}'s fd {fd}"))?;
        let of_kind = getsockopt(&copy, sockopt::SockType).is_ok_and(|t| t == kind);
        let listener = kind != SockType::Stream
            || getsockopt(&copy, sockopt::AcceptConn).is_ok_and(|listening| listening);
        let bound = getsockname::<SockaddrStorage>(copy.as_raw_fd())
            .ok()
            .and_then(|a| {
                a.as_sockaddr_in()
                    .map(|a| a.port())
                    .or_else(|| a.as_sockaddr_in6().map(|a| a.port()))
            });
        if of_kind && listener && bound == Some(port) {
            return Ok(copy);
        }
    }
    bail!("worker {pid} has no {kind:?} socket bound to port {port}")
}

/// The BPF object `ck` embeds: the build output whose SHA-256 starts with what `ck --version`
/// prints after `bpf`.
fn object_of(ck: &Path) -> Result<PathBuf> {
    let version = Command::new(ck)
        .arg("--version")
        .output()
        .context("running ck --version")?;
    let version = String::from_utf8_lossy(&version.stdout);
    let sha = version
        .split("bpf ")
        .nth(1)
        .map(|rest| rest.trim_end_matches([')', '\n']).to_string())
        .filter(|sha| sha.len() == 12)
        .with_context(|| format!("no BPF object hash in `ck --version`: {version}"))?;
    let build = ck.parent().context("ck's directory")?.join("build");
    for entry in
        std::fs::read_dir(&build).with_context(|| format!("listing {}", build.display()))?
    {
        let object = entry?.path().join("out/ck");
        if object.is_file() && sha256_of(&object)?.starts_with(&sha) {
            return Ok(object);
        }
    }
    bail!(
        "no BPF object with SHA-256 {sha}… under {}: build ck with `cargo xtask build --release`",
        build.display()
    )
}

/// `sha256sum` of `path` (coreutils; the bench hashes one or two files, so no crate for it).
fn sha256_of(path: &Path) -> Result<String> {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .context("running sha256sum")?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string())
}
