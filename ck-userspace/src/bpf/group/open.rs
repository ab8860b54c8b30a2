//! Opening one group's program: [`BpfGroup::load`] pins fresh maps, [`BpfGroup::resume`] takes
//! back the ones an earlier image of ck pinned; both from one [`GroupSpec`]. The program is
//! attached later, to the group's first socket ([`BpfGroup::insert`]).
use std::path::Path;

use anyhow::Context as _;
use ck_common::{Config, MAX_SLOTS, QueueOffsets, config_flags, policy};

use super::super::{
    conn_steering::ConnSteering,
    conns::{ConnCounter, ConnHook},
    error::{BpfError, load_err, write_err},
    load::{Loaded, Target, open_for},
    object::take,
    pins::{self, PINNED_MAPS},
    sticky::Sticky,
};
use super::BpfGroup;

/// What one group's program is loaded for.
#[derive(Clone, Copy, Debug)]
pub struct GroupSpec<'a> {
    /// The instance's name (`--name`): its pins are under `/sys/fs/bpf/ck/<name>/`.
    pub name: &'a str,
    /// The group's name (`tcp4-8080`), its pin directory.
    pub group: &'a str,
    /// `--policy`, as `ck_common::policy`'s code.
    pub policy: u32,
    /// A UDP group's `--udp-mode` (`ck_common::udp::udp_mode`); None: a TCP group.
    pub udp_mode: Option<u32>,
    /// The first port of the probe range.
    pub probe_base: u16,
    /// `--bpf-log`: the program's log lines are forwarded.
    pub log: bool,
    /// The instance's cgroup, where the connection counter runs (see `conn_hook`).
    pub cgroup: Option<&'a Path>,
    /// ck makes the group's sockets (not `--adopt`), each slot's in a cgroup of its own under
    /// `cgroup`'s `sockets`: the counter runs on those.
    pub own_sockets: bool,
    /// A canary's queue ages may be watched (`--canary-max-queue-age` on `ck run`): a TCP
    /// group's program is loaded with its reads of kernel memory whatever the policy (they
    /// cost the verifier about 0.4 s at start-up, so only then, and for least-queue).
    pub watch_queues: bool,
}

impl<'a> GroupSpec<'a> {
    /// A TCP group `group` of instance `name` under `policy`, with no probe range, no log and
    /// the counter on the host-wide hook (the tests' groups).
    #[cfg(test)]
    pub(crate) fn tcp(name: &'a str, group: &'a str, policy: u32) -> GroupSpec<'a> {
        GroupSpec {
            name,
            group,
            policy,
            udp_mode: None,
            probe_base: 0,
            log: false,
            cgroup: None,
            own_sockets: true,
            watch_queues: false,
        }
    }
}

impl BpfGroup {
    /// Loads the program for a group, pins its maps and sets the policy (a UDP group: its own
    /// program and mode).
    pub fn load(spec: &GroupSpec<'_>) -> Result<BpfGroup, BpfError> {
        Self::load_with(spec, false)
    }

    /// Loads the program for a group on the maps an earlier image of ck pinned (`ck
    /// upgrade`): counters, slot records, the active set and its live half are kept as they
    /// are; only the policy and probe base are written.
    pub fn resume(spec: &GroupSpec<'_>) -> Result<BpfGroup, BpfError> {
        Self::load_with(spec, true)
    }

    fn load_with(spec: &GroupSpec<'_>, reuse: bool) -> Result<BpfGroup, BpfError> {
        let GroupSpec {
            name,
            group,
            policy,
            udp_mode,
            probe_base,
            log,
            cgroup,
            own_sockets,
            watch_queues,
        } = *spec;
        let udp = udp_mode.is_some();
        let pin_dir = pins::group_dir(name, group);
        let started = std::time::Instant::now();
        let Loaded {
            mut ebpf,
            queue,
            conn_sum,
            reads,
        } = open_for(
            &pin_dir,
            group,
            log,
            reuse,
            Target {
                policy,
                udp_mode,
                probe_base,
                watch_queues,
            },
            started,
        )?;
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
        let conns = match udp {
            true => Err("a UDP group has no connections".to_string()),
            false => ConnHook::choose(&pin_dir, reuse, cgroup, own_sockets, group)
                .and_then(|hook| ConnCounter::start(&mut ebpf, &pin_dir, reuse, &hook))
                .map_err(|e| format!("{e:#}")),
        };
        // Summed counts of a counter that does not run would be zeros: least-conn then has
        // nothing to steer by (its candidates tie: round-robin).
        let conn_steering = match (&conn_sum, &conns) {
            (_, Err(why)) => ConnSteering::RoundRobin(format!(
                "the kernel does not count connections here: {why}"
            )),
            (Ok(()), Ok(_)) => ConnSteering::Kernel,
            (Err(why), Ok(_)) => ConnSteering::Sampled(why.clone()),
        };
        let watch = super::super::canary_watch::CanaryWatch::take(
            &mut ebpf,
            reads.as_ref().map(|_| ()).map_err(String::clone),
            conns.is_ok(),
        )?;
        let conn_samples = take(&mut ebpf, "conn_samples")?;
        let sockets = take(&mut ebpf, "sockets")?;
        let slots = take(&mut ebpf, "slots")?;
        let active = take(&mut ebpf, "active")?;
        let config_map = take(&mut ebpf, "config")?;
        let counters = super::stats::Counters {
            events: take(&mut ebpf, "stats")?,
            selected: take(&mut ebpf, "selected")?,
        };
        let sock_gens = take(&mut ebpf, "sock_gens")?;
        let sticky = Sticky::new(take(&mut ebpf, "sticky")?);
        let udp_maps = match udp {
            true => Some(super::super::udp::UdpMaps::take(&mut ebpf)?),
            false => None,
        };
        let mut group = BpfGroup {
            ebpf,
            sockets,
            slots,
            active,
            config_map,
            counters,
            sock_gens,
            sock_gen: 0,
            udp: udp_maps,
            flips: Default::default(),
            by_client: false,
            watch,
            sticky,
            conns,
            config: Config {
                policy,
                probe_base: u32::from(probe_base),
                flags: match queue.is_ok() {
                    true => config_flags::EXACT_QUEUE,
                    false => 0,
                } | match conn_steering {
                    ConnSteering::Kernel => config_flags::KERNEL_CONNS,
                    _ => 0,
                },
                queue: reads.clone().unwrap_or(QueueOffsets::default()),
                udp_mode: udp_mode.unwrap_or(0),
                ..Config::default()
            },
            sampled_why: queue.err().unwrap_or_default(),
            conn_samples,
            conn_sampled: Default::default(),
            conn_steering: (policy == policy::LEAST_CONN).then_some(conn_steering),
            bind_tagger: None,
        };
        if reuse {
            // The program reads the live half of `active` from `config`: keep it.
            let live = group.config_map.get(&0, 0).map_err(write_err("config"))?;
            group.config.live_half = live.live_half;
            // Generations go on from the pinned ones: a flow remembered under one, or an
            // address the program keeps under one, must never match a later socket's.
            group.sock_gen = (0..MAX_SLOTS)
                .filter_map(|slot| group.sock_gens.get(&slot, 0).ok())
                .max()
                .unwrap_or(0);
        } else if policy == ck_common::policy::STICKY || udp {
            group.sticky.clear()?;
        }
        group.write_config()?;
        tracing::debug!(
            group = name,
            ms = started.elapsed().as_secs_f64() * 1e3,
            "BPF maps pinned and configured"
        );
        Ok(group)
    }
}
