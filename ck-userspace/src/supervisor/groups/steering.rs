//! BPF steering: loading the program and its maps for every group on a thread of its own while
//! ck sets up (a fresh fleet starts once they are in; a resumed one meanwhile), adopting them
//! into the running supervisor (maps filled before the program is attached, so that its first
//! run finds a complete picture), and checking from the kernel that every group still has the
//! program, re-attaching it where it does not.
//!
//! The check is a canary: a loopback SYN from the probe source port of [`CANARY_SLOT`], a slot
//! that never has a socket. With the program attached, probe steering sends it to that slot,
//! finds no socket, drops it (the kernel answers with a reset) and counts an error there;
//! without it, the kernel hashes it to a worker and the handshake completes. So "steering on" in `ck status` is what the kernel did
//! with the last canary, never a flag ck set when it attached.
use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use tokio::{
    net::{TcpSocket, TcpStream},
    sync::oneshot,
};

use crate::supervisor::{
    event::Event,
    fleet::CANARY_SLOT,
    groups::{Groups, Join},
    slots::SlotTable,
};
use crate::{
    bpf::{
        BpfError, BpfGroup, GroupSpec, conn_steering::ConnSteering, pins, queue_depth::QueueDepth,
    },
    os::probe,
    settings::run_config::{ListenAddr, RunConfig},
};

/// How long a canary SYN may take to be answered before it counts as dropped.
const CANARY_WAIT: Duration = Duration::from_millis(50);
/// How often every group is checked.
pub(in crate::supervisor) const CHECK_EVERY: Duration = Duration::from_secs(1);

/// A load under way; resolves to the groups' programs in group order.
pub(in crate::supervisor) type Loading = oneshot::Receiver<anyhow::Result<Vec<BpfGroup>>>;

/// What a [`Loading`] resolves to.
pub(in crate::supervisor) type Loaded =
    Result<anyhow::Result<Vec<BpfGroup>>, oneshot::error::RecvError>;

/// The last word from the kernel on one group's program.
#[derive(Clone, Copy, Debug, Default)]
pub(in crate::supervisor) struct SteeringCheck {
    /// What the last canary showed (None: no canary has come back yet).
    pub attached: Option<bool>,
    /// When that canary came back.
    pub at: Option<Instant>,
    /// A canary is out.
    pub in_flight: bool,
}

/// Starts loading the program of every group of `cfg` on its own thread: on fresh maps, or
/// (`resume`, after `ck upgrade`) on the maps the earlier image pinned, which keep steering
/// with the program it attached meanwhile.
pub(in crate::supervisor) fn load_in_background(
    cfg: &RunConfig,
    resume: bool,
    cgroup: Option<PathBuf>,
) -> Loading {
    let (tx, rx) = oneshot::channel();
    let cfg = cfg.clone();
    std::thread::spawn(move || {
        let cgroup = cgroup.as_deref();
        let loaded = match resume {
            true => reload(&cfg, cgroup),
            false => load(&cfg, cgroup),
        };
        if let Ok(groups) = &loaded {
            log_queue_depth(&cfg, groups);
        }
        // Parsing the object and the kernel's BTF takes a few MiB of this thread's malloc
        // arena, freed by now but kept by glibc: give it back, so that ck's resident memory
        // is what it runs with, not what it loaded with.
        crate::os::memory::trim_heap();
        let _ = tx.send(loaded);
    });
    rx
}

/// Says once, with `least-queue` or `least-conn`, what it steers by: a warning when it is the
/// sampled depths or counts.
fn log_queue_depth(cfg: &RunConfig, groups: &[BpfGroup]) {
    let counts: Vec<ConnSteering> = groups.iter().filter_map(BpfGroup::conn_steering).collect();
    let unsummed = counts.iter().find(|c| **c != ConnSteering::Kernel).cloned();
    match unsummed {
        Some(ConnSteering::Sampled(why)) => tracing::warn!(
            "least-conn steers by sampled connection counts (written every --sample-interval \
             under traffic, behind bursts), not by the program's own sums: {why}"
        ),
        Some(ConnSteering::RoundRobin(why)) => tracing::warn!(
            "least-conn has no connection counts to steer by and spreads round-robin: {why}"
        ),
        _ if !counts.is_empty() => {
            tracing::info!("least-conn sums each candidate's kernel-counted connections in BPF")
        }
        _ => {}
    }
    if !cfg.policy.reads_queue() {
        return;
    }
    let policy = cfg.policy.name();
    let sampled = groups.iter().find_map(|g| match g.queue_depth() {
        QueueDepth::Exact => None,
        QueueDepth::Sampled(why) => Some(why),
    });
    match sampled {
        Some(why) => tracing::warn!(
            "{policy} steers by sampled queue depths (TCP_INFO every --sample-interval, \
             behind bursts), not by the exact ones: {why}"
        ),
        None => tracing::info!("{policy} reads each candidate's exact queue depth in BPF"),
    }
}

/// What the program of `addr`'s group (named `group`) is loaded for, from the run's options.
fn spec_of<'a>(
    cfg: &'a RunConfig,
    addr: &ListenAddr,
    group: &'a str,
    cgroup: Option<&'a Path>,
) -> GroupSpec<'a> {
    GroupSpec {
        name: &cfg.name,
        group,
        policy: cfg.policy.code(),
        udp_mode: addr.is_udp().then(|| cfg.udp_mode.code()),
        probe_base: cfg.health.probe_port_base,
        log: cfg.bpf_log,
        cgroup,
        own_sockets: !cfg.adopt,
        watch_queues: cfg.canary_limits.max_queue_age_ms.is_some()
            || cfg
                .canary
                .is_some_and(|c| c.limits.max_queue_age_ms.is_some()),
    }
}

/// Loads one program per group on the maps pinned by the image ck re-executed from.
fn reload(cfg: &RunConfig, cgroup: Option<&Path>) -> anyhow::Result<Vec<BpfGroup>> {
    cfg.listen
        .iter()
        .map(|addr| {
            let group = BpfGroup::resume(&spec_of(cfg, addr, &addr.group_name(), cgroup));
            with_patience(group, cfg).map_err(anyhow::Error::from)
        })
        .collect()
}

/// `group` with `--queue-patience` written to its `config` map.
fn with_patience(group: Result<BpfGroup, BpfError>, cfg: &RunConfig) -> Result<BpfGroup, BpfError> {
    let mut group = group?;
    group.set_queue_patience(cfg.queue_patience)?;
    Ok(group)
}

/// Mounts bpffs if needed, removes stale pins of the same name, and loads and pins one program
/// per group. On failure nothing is left pinned.
fn load(cfg: &RunConfig, cgroup: Option<&Path>) -> anyhow::Result<Vec<BpfGroup>> {
    pins::ensure_bpffs()?;
    if pins::remove_stale(&cfg.name)? {
        tracing::warn!(
            name = %cfg.name,
            dir = %pins::instance_dir(&cfg.name).display(),
            "removed stale pins left by an earlier instance that did not stop cleanly"
        );
    }
    let mut loaded = Vec::new();
    for addr in &cfg.listen {
        let group = BpfGroup::load(&spec_of(cfg, addr, &addr.group_name(), cgroup));
        match with_patience(group, cfg) {
            Ok(bpf) => loaded.push(bpf),
            Err(e) => {
                drop(loaded);
                let _ = pins::remove_instance(&cfg.name);
                return Err(e.into());
            }
        }
    }
    Ok(loaded)
}

/// Sends one canary SYN from `source` to `target`: `Ok(Some(connection))` when the handshake
/// completed (the kernel, not the program, chose a socket: a worker's, whose connection the
/// caller ends politely, `os::probe::conn::finish`), `Ok(None)` when it was refused or not
/// answered (the program's `SK_DROP` makes the kernel answer the SYN with a reset), `Err` when
/// it could not be sent (nothing to conclude).
async fn canary(target: SocketAddr, source: SocketAddr) -> std::io::Result<Option<TcpStream>> {
    let socket = TcpSocket::from_std_stream(probe::conn::bound_socket(target, source)?.into());
    match tokio::time::timeout(CANARY_WAIT, socket.connect(target)).await {
        Ok(Ok(stream)) => Ok(Some(stream)),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => Ok(None),
        Ok(Err(e)) => Err(e),
        Err(_) => Ok(None),
    }
}

/// Sends one canary datagram from `source` to `target` (a UDP group): always `Ok(false)` once
/// sent, since UDP says nothing back either way; the program's count of it, read after a short
/// wait for the kernel to have delivered it, is the verdict.
async fn udp_canary(target: SocketAddr, source: SocketAddr) -> std::io::Result<bool> {
    // SO_REUSEADDR, as for the TCP canary: every ck on the host sends its canaries from the
    // same source port (the probe base's slot 127) once a second, and instances started
    // together tick together; without it all but one would fail to bind, each second.
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(source),
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&source.into())?;
    let socket = tokio::net::UdpSocket::from_std(socket.into())?;
    socket.send_to(b"ck-canary", target).await?;
    tokio::time::sleep(UDP_CANARY_WAIT).await;
    Ok(false)
}

/// How long a UDP canary's verdict waits after the send (loopback delivers in microseconds).
const UDP_CANARY_WAIT: Duration = Duration::from_millis(20);

impl Groups {
    /// Takes the loaded programs (in group order) into use, before anything is written to
    /// their maps or attached (see `Supervisor::use_loaded_bpf`).
    pub(in crate::supervisor) fn take_loaded(
        &mut self,
        loaded: Vec<BpfGroup>,
        bpf_log: bool,
    ) -> anyhow::Result<()> {
        for (group, mut bpf) in self.iter_mut().zip(loaded) {
            if bpf_log {
                bpf.forward_logs()?;
            }
            group.bpf = Some(bpf);
            group.pinned_stats = None;
        }
        Ok(())
    }

    /// Every slot's socket joins its group's `sockets` map, the program attached through the
    /// first (`how`: fresh maps, or pinned maps an earlier ck filled).
    pub(in crate::supervisor) fn join_all(
        &mut self,
        table: &SlotTable,
        how: Join,
    ) -> anyhow::Result<()> {
        for (position, group) in self.iter_mut().enumerate() {
            let members: Vec<(u32, &socket2::Socket)> = table
                .slots
                .values()
                .filter_map(|slot| Some((slot.index, slot.sockets.get(position)?)))
                .collect();
            // Every socket in the map before the program is attached, through the first.
            for (n, (index, socket)) in members.iter().enumerate().rev() {
                group.join(*index, socket, how, n == 0)?;
            }
        }
        Ok(())
    }

    /// Warns once the programs are loaded if open connections are counted by a scan.
    pub(in crate::supervisor) fn warn_if_scanned(&self) {
        if let Some(why) = self
            .tcp()
            .find_map(|g| g.bpf.as_ref()?.conn_count_fallback())
        {
            tracing::warn!(
                "open connections are counted by a sock_diag scan (slower, and only those the \
                 workers accepted), not by the kernel: {why}; kernel counting needs Linux 5.12+ \
                 with BTF (/sys/kernel/btf/vmlinux) and CK_CONN_COUNT unset"
            );
        }
    }

    /// `--adopt`: every group tags the sockets its workers bind, from their cgroups (those
    /// running now included).
    pub(in crate::supervisor) fn tag_binds(&mut self, table: &SlotTable, adopt: bool) {
        let Some(instance) = table.cgroups.as_ref().filter(|_| adopt) else {
            return;
        };
        let ports: Vec<u16> = self.iter().map(|g| g.addr.addr.port()).collect();
        for group in self.iter_mut() {
            let port = group.addr.addr.port();
            let alone = ports.iter().filter(|p| **p == port).count() == 1;
            if let Some(bpf) = group.bpf.as_mut() {
                bpf.tag_binds(instance.dir(), group.addr.addr, alone);
            }
        }
        let running: Vec<_> = table
            .slots
            .values()
            .filter_map(|s| {
                Some((
                    s.index,
                    s.worker.as_ref()?.cgroup.as_ref()?.dir().to_owned(),
                ))
            })
            .collect();
        for (slot, dir) in running {
            for bpf in self.iter_mut().filter_map(|g| g.bpf.as_mut()) {
                bpf.bind_slot(&dir, slot);
            }
        }
    }

    /// Sends a canary to every group that has a member and no canary out. A group without a
    /// member (`--adopt` before the first worker bound) has nothing to steer yet: a canary
    /// sent then would prove nothing when it came back after the first adoption, and would
    /// hold back the one that adoption asks for.
    pub(in crate::supervisor) fn check_steering_soon(
        &mut self,
        table: &SlotTable,
        base: u16,
        events: &tokio::sync::mpsc::UnboundedSender<Event>,
    ) {
        for (position, group) in self.iter_mut().enumerate() {
            let Some(bpf) = &group.bpf else { continue };
            let has_member = table.member_socket(position).is_some();
            if group.steering.in_flight || base == 0 || !has_member {
                continue;
            }
            let target = probe::target_of(group.addr.addr);
            let Some(source) = probe::source_of(target, base, CANARY_SLOT) else {
                continue;
            };
            group.steering.in_flight = true;
            let before = bpf.canary_count(CANARY_SLOT);
            let udp = group.addr.is_udp();
            let events = events.clone();
            tokio::spawn(async move {
                let (connected, reached) = match udp {
                    true => (udp_canary(target, source).await, None),
                    false => match canary(target, source).await {
                        Ok(reached) => (Ok(reached.is_some()), reached),
                        Err(e) => (Err(e), None),
                    },
                };
                let _ = events.send(Event::Canary {
                    group: position,
                    before,
                    connected,
                });
                // A canary the kernel hashed to a worker leaves it as a polite client would.
                if let Some(stream) = reached {
                    probe::conn::finish(stream).await;
                }
            });
        }
    }

    /// A canary came back: the program steered it if it was dropped and counted. If not, the
    /// group lost its program (or never had it): attach it again through an open member.
    pub(in crate::supervisor) fn on_canary(
        &mut self,
        table: &SlotTable,
        stopping: bool,
        position: usize,
        before: u64,
        connected: std::io::Result<bool>,
    ) {
        let has_member = table.member_socket(position).is_some();
        let Some(group) = self.get_mut(position) else {
            return;
        };
        group.steering.in_flight = false;
        let Some(bpf) = group.bpf.as_ref() else {
            return;
        };
        if !has_member || stopping {
            // No member, no group: nothing to steer, nothing to conclude.
            group.steering.attached = None;
            return;
        }
        let connected = match connected {
            Ok(connected) => connected,
            Err(e) => {
                tracing::debug!(group = %group.name, "steering canary not sent: {e}");
                return;
            }
        };
        let attached = !connected && bpf.canary_count(CANARY_SLOT) > before;
        let was = group.steering.attached.replace(attached);
        group.steering.at = Some(Instant::now());
        if attached {
            if was != Some(true) {
                tracing::info!(group = %group.name, "BPF steering on (checked by the kernel)");
            }
            return;
        }
        tracing::error!(
            group = %group.name,
            "BPF steering is not in effect on the group (a canary connection was not steered): \
             attaching the program again"
        );
        let member = table.member_socket(position);
        let (Some(member), Some(bpf)) = (member, self[position].bpf.as_mut()) else {
            return;
        };
        // The next tick's canary checks it (no immediate re-check: no loop if it keeps failing).
        if let Err(e) = bpf.attach(member) {
            tracing::error!(group = %self[position].name, "{e}");
        }
    }
}
