//! Reading an instance's pinned maps back for people (`ck maps`): every map of every group
//! opened from its pin, decoded by name (policy and slot states as words, per-CPU counters
//! summed), the same data `bpftool map dump pinned ...` prints. Read-only: nothing is written.
use std::path::Path;

use aya::maps::{Array, HashMap, Map, MapData, MapError, MapType, PerCpuArray};
use ck_common::{
    ActiveSet, Config, MAX_SLOTS, MovedConn, STATS_NO_SLOT, SlotEvents, SlotInfo, SlotStats,
    policy, sticky::StickyTable,
};

use super::{maglev, pins, pins::PINNED_MAPS};
use ck_common::SlotState;

use crate::settings::run_config::Policy;

mod report;
mod udp;

pub use report::{
    ActiveEntry, ActiveHalf, ConfigEntry, ConnsEntry, Counters, GroupMaps, InstanceMaps, MapMeta,
    SlotEntry, SlotShare, StatsEntry, StickyEntry,
};
pub use udp::{FlowEntry, RoutesEntry, UdpEntry};

/// Why the maps could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    /// A group's pin directory, or one of its maps, is not there.
    #[error(
        "{what} missing at {path}: the instance's maps are pinned while it runs with BPF; \
         if it runs, something removed them (restart it to pin them again)"
    )]
    Missing {
        /// What is missing.
        what: String,
        /// Where it should be.
        path: String,
    },
    /// A pinned map could not be opened.
    #[error("opening the pinned map {path}: {error:#} (ck maps needs root, as ck run does)")]
    Open {
        /// The pin.
        path: String,
        /// What aya said, with its causes (part of the message, not a separate cause).
        error: anyhow::Error,
    },
    /// A map is not of the type and layout this ck reads (pinned by another version of ck).
    #[error(
        "the pinned map {path} is not the {expected} this ck reads ({error:#}); was the instance \
         started by another version of ck?"
    )]
    Layout {
        /// The pin.
        path: String,
        /// The type and value this ck expects.
        expected: &'static str,
        /// What aya said, with its causes (part of the message, not a separate cause).
        error: anyhow::Error,
    },
    /// A lookup failed.
    #[error("reading entry {key} of the pinned map {path}: {error:#}")]
    Read {
        /// The pin.
        path: String,
        /// The key.
        key: u32,
        /// What aya said, with its causes (part of the message, not a separate cause).
        error: anyhow::Error,
    },
}

/// The bpftool word of a map type.
fn kind_word(kind: Result<MapType, MapError>) -> String {
    match kind {
        Ok(MapType::Array) => "array".into(),
        Ok(MapType::PerCpuArray) => "percpu_array".into(),
        Ok(MapType::ReuseportSockArray) => "reuseport_sockarray".into(),
        Ok(MapType::Hash) => "hash".into(),
        Ok(MapType::RingBuf) => "ringbuf".into(),
        Ok(MapType::LruHash) => "lru_hash".into(),
        Ok(MapType::SkStorage) => "sk_storage".into(),
        Ok(other) => format!("{other:?}").to_lowercase(),
        Err(_) => "unknown".into(),
    }
}

/// Reads every group's maps of instance `name` (its groups as `ck status` lists them).
pub fn read_instance(name: &str, groups: &[String]) -> Result<InstanceMaps, DumpError> {
    Ok(InstanceMaps {
        instance: name.to_string(),
        pins: pins::instance_dir(name).display().to_string(),
        groups: groups
            .iter()
            .map(|g| read_group(g, &pins::group_dir(name, g)))
            .collect::<Result<_, _>>()?,
    })
}

/// Opens the pinned maps of one group's directory, noting each one's kernel description.
struct Reader<'a> {
    dir: &'a Path,
    maps: Vec<MapMeta>,
}

impl Reader<'_> {
    /// Pinned map `map`, opened (checked to exist first, for a clear message) and described.
    fn open(&mut self, map: &str) -> Result<(String, MapData), DumpError> {
        let path = self.dir.join(map);
        let shown = path.display().to_string();
        if !path.exists() {
            return Err(DumpError::Missing {
                what: format!("map `{map}`"),
                path: shown,
            });
        }
        let open_err = |error: MapError| DumpError::Open {
            path: shown.clone(),
            error: error.into(),
        };
        let data = MapData::from_pin(&path).map_err(open_err)?;
        let info = data.info().map_err(open_err)?;
        self.maps.push(MapMeta {
            name: map.to_string(),
            id: info.id(),
            kind: kind_word(info.map_type()),
            key_size: info.key_size(),
            value_size: info.value_size(),
            max_entries: info.max_entries(),
        });
        Ok((shown, data))
    }

    /// Pinned map `map` as the typed wrapper `T` (`expected` names it for the error).
    fn typed<T>(&mut self, map: &str, expected: &'static str) -> Result<(String, T), DumpError>
    where
        T: TryFrom<Map, Error = MapError>,
    {
        let (path, data) = self.open(map)?;
        let typed = Map::from_map_data(data)
            .and_then(T::try_from)
            .map_err(|error| DumpError::Layout {
                path: path.clone(),
                expected,
                error: error.into(),
            })?;
        Ok((path, typed))
    }
}

fn read_err(path: &str, key: u32) -> impl FnOnce(MapError) -> DumpError + '_ {
    move |error| DumpError::Read {
        path: path.to_string(),
        key,
        error: error.into(),
    }
}

/// Reads and decodes one group's maps from `dir`.
pub fn read_group(group: &str, dir: &Path) -> Result<GroupMaps, DumpError> {
    if !dir.is_dir() {
        return Err(DumpError::Missing {
            what: format!("the pin directory of group {group}"),
            path: dir.display().to_string(),
        });
    }
    let mut reader = Reader {
        dir,
        maps: Vec::new(),
    };
    let (path, config_map): (_, Array<MapData, Config>) =
        reader.typed("config", "array of Config")?;
    let config = config_map.get(&0, 0).map_err(read_err(&path, 0))?;

    let (path, active_map): (_, Array<MapData, ActiveSet>) =
        reader.typed("active", "array of ActiveSet")?;
    let half = |index: u32| -> Result<ActiveHalf, DumpError> {
        let set = active_map.get(&index, 0).map_err(read_err(&path, index))?;
        let ready = set.ready_len.min(MAX_SLOTS) as usize;
        let live = set.live_len.clamp(ready as u32, MAX_SLOTS) as usize;
        Ok(ActiveHalf {
            ready: set.slots[..ready].to_vec(),
            fallback: set.slots[ready..live].to_vec(),
        })
    };
    let live_half = config.live_half & 1;
    let active = ActiveEntry {
        live_half,
        live: half(live_half)?,
        idle: half(live_half ^ 1)?,
    };

    let (path, slots_map): (_, Array<MapData, SlotInfo>) =
        reader.typed("slots", "array of SlotInfo")?;
    let mut slots = Vec::new();
    for slot in 0..MAX_SLOTS {
        let info = slots_map.get(&slot, 0).map_err(read_err(&path, slot))?;
        if info.state != 0 || info.pid != 0 || info.generation != 0 {
            slots.push(slot_entry(slot, &info));
        }
    }

    let (path, stats_map): (_, PerCpuArray<MapData, SlotEvents>) =
        reader.typed("stats", "per-CPU array of SlotEvents")?;
    let (selected_path, selected_map): (_, PerCpuArray<MapData, u64>) =
        reader.typed("selected", "per-CPU array of u64")?;
    let summed = |slot: u32| -> Result<SlotStats, DumpError> {
        let events = stats_map.get(&slot, 0).map_err(read_err(&path, slot))?;
        let selected = match slot < MAX_SLOTS {
            true => Some(
                selected_map
                    .get(&slot, 0)
                    .map_err(read_err(&selected_path, slot))?,
            ),
            false => None,
        };
        Ok(super::stats::summed(
            Some(&events[..]),
            selected.as_ref().map(|v| &v[..]),
        ))
    };
    let mut stats = Vec::new();
    for slot in 0..MAX_SLOTS {
        let counters = summed(slot)?;
        if counters != SlotStats::default() || slots.iter().any(|s| s.slot == slot) {
            stats.push(StatsEntry {
                slot,
                counters: counters.into(),
            });
        }
    }
    let no_slot = summed(STATS_NO_SLOT)?.into();

    let (path, cursor_map): (_, PerCpuArray<MapData, u32>) =
        reader.typed("cursor", "per-CPU array of u32")?;
    let cursor = cursor_map.get(&0, 0).map_err(read_err(&path, 0))?.to_vec();

    let (path, sticky_map): (_, Array<MapData, StickyTable>) =
        reader.typed("sticky", "array of StickyTable")?;
    // A UDP group's new flows take the table whatever the policy.
    let udp_group = group.starts_with("udp");
    let used = config.policy == policy::STICKY || udp_group;
    let shares = |index: u32| -> Result<Vec<SlotShare>, DumpError> {
        if !used {
            return Ok(Vec::new());
        }
        let table = sticky_map.get(&index, 0).map_err(read_err(&path, index))?;
        Ok(maglev::entries_per_slot(&table)
            .into_iter()
            .map(|(slot, entries)| SlotShare { slot, entries })
            .collect())
    };
    let sticky = StickyEntry {
        used,
        live: shares(live_half)?,
        idle: shares(live_half ^ 1)?,
    };

    let (path, conns_map): (_, PerCpuArray<MapData, i64>) =
        reader.typed("conns", "per-CPU array of i64")?;
    let mut conns = Vec::new();
    for slot in 0..MAX_SLOTS {
        let open: i64 = conns_map
            .get(&slot, 0)
            .map_err(read_err(&path, slot))?
            .iter()
            .sum();
        if open != 0 || slots.iter().any(|s| s.slot == slot) {
            conns.push(ConnsEntry { slot, open });
        }
    }
    let (_, listeners_map): (_, HashMap<MapData, u64, u32>) =
        reader.typed("listeners", "hash of u64 to u32")?;
    let mut listeners: Vec<(u64, u32)> = listeners_map.iter().filter_map(Result::ok).collect();
    listeners.sort_unstable();
    let (_, moved_map): (_, HashMap<MapData, u64, MovedConn>) =
        reader.typed("moved", "LRU hash of u64 to MovedConn")?;
    let moved = moved_map.keys().filter(Result::is_ok).count();

    let udp = match udp_group {
        true => Some(udp::read(&mut reader, config.udp_mode)?),
        false => None,
    };

    // Maps this ck pins but does not decode (`sockets`, `conn_tags`): described only.
    for map in PINNED_MAPS {
        if !reader.maps.iter().any(|m| m.name == map) {
            reader.open(map)?;
        }
    }
    let maps = reader.maps;
    let sockets_meta = maps.iter().find(|m| m.name == "sockets");
    let sockets = format!(
        "{} entries of {}-byte fds; not readable from userspace: the kernel answers lookups in a \
         REUSEPORT_SOCKARRAY only for 8-byte values (as socket cookies). Which slots hold a \
         socket shows in `active` and in the states of `slots` (ck status too)",
        sockets_meta.map_or(0, |m| m.max_entries),
        sockets_meta.map_or(0, |m| m.value_size),
    );

    Ok(GroupMaps {
        group: group.to_string(),
        dir: dir.display().to_string(),
        maps,
        config: ConfigEntry {
            policy: policy_word(config.policy),
            live_half: config.live_half & 1,
            probe_base: config.probe_base,
            flags: config.flags,
            queue_offsets: [
                config.queue.selected_sk,
                config.queue.ack_backlog,
                config.queue.syn_recv,
                config.queue.accept_head,
                config.queue.synack_sent,
            ],
            queue_patience_us: config.queue_patience_us,
        },
        active,
        slots,
        stats,
        no_slot,
        cursor,
        sockets,
        sticky,
        conns,
        listeners,
        moved,
        udp,
        conn_tags: "socket storage (BPF_F_CLONE): one {slot, counted} value on each tagged \
                    listener and on each connection it created; read through the socket only"
            .to_string(),
    })
}

fn slot_entry(slot: u32, info: &SlotInfo) -> SlotEntry {
    SlotEntry {
        slot,
        state: state_word(info.state),
        pid: info.pid,
        generation: info.generation,
        weight: info.weight,
        queue_depth: info.queue_depth,
        flags: info.flags,
    }
}

/// The word of a `slots` state code (`ready`), or `unknown(N)`.
pub fn state_word(code: u32) -> String {
    SlotState::from_code(code).map_or_else(|| format!("unknown({code})"), |s| s.name().to_string())
}

/// The word of a `config` policy code (`round-robin`), or `unknown(N)`.
pub fn policy_word(code: u32) -> String {
    Policy::from_code(code).map_or_else(|| format!("unknown({code})"), |p| p.name().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_read_as_words() {
        assert_eq!(state_word(ck_common::SlotState::Ready.code()), "ready");
        assert_eq!(
            state_word(ck_common::SlotState::Draining.code()),
            "draining"
        );
        assert_eq!(state_word(ck_common::SlotState::Standby.code()), "standby");
        assert_eq!(state_word(77), "unknown(77)");
        assert_eq!(policy_word(ck_common::policy::ROUND_ROBIN), "round-robin");
        assert_eq!(policy_word(ck_common::policy::LEAST_QUEUE), "least-queue");
        assert_eq!(policy_word(ck_common::policy::LEAST_CONN), "least-conn");
        assert_eq!(policy_word(9), "unknown(9)");
    }

    #[test]
    fn a_missing_group_says_where_its_pins_should_be() {
        let dir = Path::new("/nonexistent/ck/x/tcp4-1");
        let err = read_group("tcp4-1", dir).unwrap_err().to_string();
        assert!(
            err.contains("pin directory of group tcp4-1 missing at /nonexistent/ck/x/tcp4-1"),
            "{err}"
        );
    }
}
