//! One group's loaded program and maps: attach to the group, insert and remove slot sockets,
//! publish the active set (fill the idle half, then flip), write slot records, read counters.
use std::os::fd::AsRawFd;

use anyhow::Context as _;
use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, MapData, PerCpuArray, ReusePortSockArray},
    programs::SkReuseport,
};
use ck_common::{ActiveSet, Config, STATS_NO_SLOT, SlotInfo, SlotStats};
use socket2::Socket;

use super::{BpfError, conns::ConnCounter, pins};

/// Maps pinned for people and tools (`bpftool map dump pinned ...`); the last five are the
/// open-connection counting's ([`super::conns::MAPS`]).
pub(crate) const PINNED_MAPS: [&str; 11] = [
    "sockets",
    "slots",
    "active",
    "config",
    "stats",
    "cursor",
    "conn_tags",
    "conns",
    "listeners",
    "moved",
    "moved_any",
];
const _: () = assert!(super::conns::MAPS.len() == 5);

/// The program and maps of one group.
pub struct BpfGroup {
    ebpf: Ebpf,
    sockets: ReusePortSockArray<MapData>,
    slots: Array<MapData, SlotInfo>,
    active: Array<MapData, ActiveSet>,
    config_map: Array<MapData, Config>,
    stats: PerCpuArray<MapData, SlotStats>,
    config: Config,
    /// Open connections counted by the kernel, or why the kernel does not count them here.
    conns: Result<ConnCounter, String>,
}

fn load_err(what: &str) -> impl FnOnce(anyhow::Error) -> BpfError + '_ {
    move |error| BpfError::Load {
        what: what.to_string(),
        error,
        advice: super::load_advice(
            &crate::os::capabilities::needed_for_bpf(false),
            "run with --no-bpf",
        ),
    }
}

fn write_err(map: &'static str) -> impl FnOnce(aya::maps::MapError) -> BpfError {
    move |error| BpfError::MapWrite {
        map,
        error: error.into(),
    }
}

impl BpfGroup {
    /// Loads the program for group `group` of instance `name`, pins its maps and sets the policy.
    /// The program is attached later, to the group's first socket ([`BpfGroup::insert`]).
    pub fn load(
        name: &str,
        group: &str,
        policy: u32,
        probe_base: u16,
        log: bool,
    ) -> Result<BpfGroup, BpfError> {
        Self::load_with(name, group, policy, probe_base, log, false)
    }

    /// Loads the program for group `group` of instance `name` on the maps an earlier image of
    /// ck pinned (`ck upgrade`): counters, slot records, the active set and its live half are
    /// kept as they are; only the policy and probe base are written.
    pub fn resume(
        name: &str,
        group: &str,
        policy: u32,
        probe_base: u16,
        log: bool,
    ) -> Result<BpfGroup, BpfError> {
        Self::load_with(name, group, policy, probe_base, log, true)
    }

    fn load_with(
        name: &str,
        group: &str,
        policy: u32,
        probe_base: u16,
        log: bool,
        reuse: bool,
    ) -> Result<BpfGroup, BpfError> {
        let pin_dir = pins::group_dir(name, group);
        let started = std::time::Instant::now();
        // No CO-RE relocations in the program: do not relocate against the kernel's BTF. (aya
        // 0.14's `EbpfLoader::new` still reads and parses it, ~20 ms of ck's start-up; its API
        // has no way around that.)
        // aya-log's level lives in the object's read-only data: 0 turns every log statement off
        // (the verifier then drops them), so the program writes no record without --bpf-log.
        let level: u8 = if log { u8::MAX } else { 0 };
        let mut loader = EbpfLoader::new();
        loader
            .btf(None)
            .override_global(aya_log::LEVEL, &level, true);
        let paths: Vec<_> = PINNED_MAPS.iter().map(|m| (*m, pin_dir.join(m))).collect();
        if reuse {
            // aya opens a map pinned at the path instead of creating one.
            for (map, path) in &paths {
                if !path.exists() {
                    return Err(BpfError::Pin {
                        what: "finding the pinned map",
                        path: path.display().to_string(),
                        error: std::io::Error::from(std::io::ErrorKind::NotFound),
                        advice: String::new(),
                    });
                }
                loader.map_pin_path(map, path.as_path());
            }
        }
        let mut ebpf = super::object()
            .and_then(|object| loader.load(object).context("loading the BPF object"))
            .map_err(load_err("loading the BPF program"))?;
        tracing::debug!(
            group,
            ms = started.elapsed().as_secs_f64() * 1e3,
            "BPF object parsed, maps created"
        );
        {
            let program: &mut SkReuseport = ebpf
                .program_mut("ck_select")
                .context("program ck_select missing from the object")
                .and_then(|p| {
                    p.try_into()
                        .context("ck_select is not an sk_reuseport program")
                })
                .map_err(load_err("finding the program"))?;
            program
                .load()
                .context("the kernel refused the program")
                .map_err(load_err("loading the program"))?;
        }
        tracing::debug!(
            group,
            ms = started.elapsed().as_secs_f64() * 1e3,
            "BPF object and program loaded"
        );
        if !reuse {
            pins::create_group_dir(&pin_dir)?;
        }
        for map_name in PINNED_MAPS.iter().filter(|_| !reuse) {
            let map = ebpf
                .map(map_name)
                .with_context(|| format!("map {map_name} missing from the object"))
                .map_err(load_err("finding maps"))?;
            let path = pin_dir.join(map_name);
            map.pin(&path).map_err(|e| {
                pins::error("pinning map", &path, std::io::Error::other(e.to_string()))
            })?;
        }
        let conns = ConnCounter::start(&mut ebpf, &pin_dir, reuse).map_err(|e| format!("{e:#}"));
        let sockets = take(&mut ebpf, "sockets")?;
        let slots = take(&mut ebpf, "slots")?;
        let active = take(&mut ebpf, "active")?;
        let config_map = take(&mut ebpf, "config")?;
        let stats = take(&mut ebpf, "stats")?;
        let mut group = BpfGroup {
            ebpf,
            sockets,
            slots,
            active,
            config_map,
            stats,
            conns,
            config: Config {
                policy,
                probe_base: u32::from(probe_base),
                ..Config::default()
            },
        };
        if reuse {
            // The program reads the live half of `active` from `config`: keep it.
            let live = group.config_map.get(&0, 0).map_err(write_err("config"))?;
            group.config.live_half = live.live_half;
        }
        group.write_config()?;
        tracing::debug!(
            group = name,
            ms = started.elapsed().as_secs_f64() * 1e3,
            "BPF maps pinned and configured"
        );
        Ok(group)
    }

    /// Starts forwarding the program's aya-log records to the `log` crate (and so to tracing).
    pub fn forward_logs(&mut self) -> anyhow::Result<()> {
        let logger = aya_log::EbpfLogger::init(&mut self.ebpf).context("starting aya-log")?;
        super::read_when_ready(logger, |logger| {
            logger.flush();
            true
        })
    }

    /// Attaches the program to the group `socket` belongs to (`SO_ATTACH_REUSEPORT_EBPF`): from
    /// then on it chooses for every member, until the group dies (its last socket closes).
    /// Call it after the maps hold the group's sockets and active set, so that the program's
    /// first run finds them. Attaching again replaces the program with itself.
    pub fn attach(&mut self, socket: &Socket) -> Result<(), BpfError> {
        let program: &SkReuseport = self
            .ebpf
            .program("ck_select")
            .context("program ck_select missing")
            .and_then(|p| p.try_into().context("not an sk_reuseport program"))
            .map_err(load_err("attaching the program"))?;
        program
            .attach(socket)
            .context("SO_ATTACH_REUSEPORT_EBPF")
            .map_err(load_err("attaching the program"))
    }

    /// Puts `socket` in the group's `sockets` map at `slot` (and tags it for counting).
    pub fn insert(&mut self, slot: u32, socket: &Socket) -> Result<(), BpfError> {
        self.sockets
            .set(slot, &socket.as_raw_fd(), 0)
            .map_err(write_err("sockets"))?;
        self.tag(slot, socket);
        Ok(())
    }

    /// Tags `socket` so the kernel counts its connections for `slot` (when it counts them).
    fn tag(&mut self, slot: u32, socket: &Socket) {
        if let Ok(conns) = &mut self.conns
            && let Err(e) = conns.tag(slot, socket)
        {
            tracing::warn!(
                slot,
                "open connections of this socket will not be counted: {e:#}; ck status \
                 and /metrics undercount the slot (restart ck to tag it again)"
            );
        }
    }

    /// Open connections of `slot` counted by the kernel (None: it does not count them here,
    /// see [`BpfGroup::conn_count_fallback`]).
    pub fn connections(&self, slot: u32) -> Option<i64> {
        self.conns.as_ref().ok().map(|c| c.count(slot))
    }

    /// Why open connections are not counted by the kernel in this group (None: they are).
    pub fn conn_count_fallback(&self) -> Option<&str> {
        self.conns.as_ref().err().map(String::as_str)
    }

    /// Puts `socket` in the `sockets` map at `slot` unless it is in the map already (the
    /// kernel answers EBUSY then): after an upgrade or a take-over, the pinned map holds the
    /// sockets the earlier ck put there.
    pub fn insert_if_absent(&mut self, slot: u32, socket: &Socket) -> Result<(), BpfError> {
        match self.sockets.set(slot, &socket.as_raw_fd(), 0) {
            Err(aya::maps::MapError::SyscallError(e))
                if e.io_error.raw_os_error() == Some(libc::EBUSY) => {}
            other => other.map_err(write_err("sockets"))?,
        }
        // The pinned storage keeps the tag; writing it again also refills `listeners`' cookies.
        self.tag(slot, socket);
        Ok(())
    }

    /// Removes `slot` from the `sockets` map (closing the socket does this too).
    pub fn remove(&mut self, slot: u32) {
        // A socket that already closed has left the map by itself; nothing to report then.
        let _ = self.sockets.clear_index(&slot);
    }

    /// Publishes a new active set: writes the idle half, then flips `config.live_half`, so the
    /// program never reads a half-written set.
    pub fn publish(&mut self, set: &ActiveSet) -> Result<(), BpfError> {
        let idle = self.config.live_half ^ 1;
        self.active.set(idle, set, 0).map_err(write_err("active"))?;
        self.config.live_half = idle;
        self.write_config()
    }

    fn write_config(&mut self) -> Result<(), BpfError> {
        self.config_map
            .set(0, self.config, 0)
            .map_err(write_err("config"))
    }

    /// Writes one slot's record in the `slots` map.
    pub fn write_slot(&mut self, slot: u32, info: &SlotInfo) -> Result<(), BpfError> {
        self.slots.set(slot, info, 0).map_err(write_err("slots"))
    }

    /// The slot record the kernel holds for `slot`.
    pub fn read_slot(&self, slot: u32) -> Option<SlotInfo> {
        self.slots.get(&slot, 0).ok()
    }

    /// The live half of the active set as the kernel holds it: `(ready, fallback)` slots.
    pub fn read_active(&self) -> Option<(Vec<u32>, Vec<u32>)> {
        let config = self.config_map.get(&0, 0).ok()?;
        let set = self.active.get(&(config.live_half & 1), 0).ok()?;
        let ready = set.ready_len.min(set.slots.len() as u32) as usize;
        let live = set.live_len.clamp(ready as u32, set.slots.len() as u32) as usize;
        Some((set.slots[..ready].to_vec(), set.slots[ready..live].to_vec()))
    }

    /// Zeroes a slot's counters (a slot index used again starts from zero).
    pub fn reset_stats(&mut self, slot: u32) {
        let cpus = aya::util::nr_cpus().unwrap_or(1);
        if let Ok(zero) = aya::maps::PerCpuValues::try_from(vec![SlotStats::default(); cpus]) {
            let _ = self.stats.set(slot, zero, 0);
        }
    }

    /// A slot's counters summed over CPUs.
    pub fn stats(&self, slot: u32) -> SlotStats {
        let mut total = SlotStats::default();
        if slot > STATS_NO_SLOT {
            return total;
        }
        if let Ok(values) = self.stats.get(&slot, 0) {
            for v in values.iter() {
                total.add(v);
            }
        }
        total
    }
}

/// Takes map `name` out of `ebpf` as a `T`.
pub(super) fn take<T>(ebpf: &mut Ebpf, name: &str) -> Result<T, BpfError>
where
    T: TryFrom<aya::maps::Map>,
    <T as TryFrom<aya::maps::Map>>::Error: std::error::Error + Send + Sync + 'static,
{
    let map = ebpf
        .take_map(name)
        .with_context(|| format!("map {name} missing"))
        .map_err(load_err("taking maps"))?;
    T::try_from(map)
        .with_context(|| format!("map {name} has an unexpected type"))
        .map_err(load_err("taking maps"))
}

/// A group's pinned `stats` map opened on its own (`ck upgrade`: the counters the new image
/// reports while it loads its program, so they go on from the old image's).
pub struct PinnedStats(PerCpuArray<MapData, SlotStats>);

impl PinnedStats {
    /// Opens the `stats` map pinned for group `group` of instance `name`.
    pub fn open(name: &str, group: &str) -> Result<PinnedStats, BpfError> {
        let path = pins::group_dir(name, group).join("stats");
        let pin_err = |e: &dyn std::fmt::Display| BpfError::Pin {
            what: "opening the pinned map",
            path: path.display().to_string(),
            error: std::io::Error::other(e.to_string()),
            advice: String::new(),
        };
        let data = MapData::from_pin(&path).map_err(|e| pin_err(&e))?;
        let map = aya::maps::Map::PerCpuArray(data);
        PerCpuArray::try_from(map)
            .map(PinnedStats)
            .map_err(|e| pin_err(&e))
    }

    /// A slot's counters summed over CPUs.
    pub fn stats(&self, slot: u32) -> SlotStats {
        let mut total = SlotStats::default();
        if let Ok(values) = self.0.get(&slot, 0) {
            for v in values.iter() {
                total.add(v);
            }
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A runtime map write the kernel refuses is reported as a map-write error, not as a load
    /// error that tells the user to run as root or with --no-bpf. (Loads the program: root.)
    #[test]
    fn a_refused_map_write_has_its_own_message() {
        let name = format!("unit-mapwrite-{}", std::process::id());
        let mut group = BpfGroup::load(&name, "tcp4-1", 1, 0, false).expect("loading as root");
        // A socket that is not in a reuseport group cannot go into a REUSEPORT_SOCKARRAY.
        let plain = Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        let err = group.insert(3, &plain).expect_err("the kernel refuses it");
        let text = err.to_string();
        drop(group);
        pins::remove_instance(&name).unwrap();
        assert!(
            matches!(err, BpfError::MapWrite { map: "sockets", .. }),
            "{err:?}"
        );
        assert!(
            text.contains("updating the BPF map `sockets` failed"),
            "{text}"
        );
        assert!(
            !text.contains("--no-bpf") && !text.contains("root"),
            "{text}"
        );
    }
}
