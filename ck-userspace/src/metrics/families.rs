//! The metric families of `/metrics`, encoded with `prometheus-client` (OpenMetrics text, which
//! Prometheus scrapes): each one built at scrape time from a [`Scrape`], the open connections
//! per worker and ck's own process ([`Exposition`], a `prometheus-client` collector).
use std::{collections::BTreeMap, fmt};

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, NoLabelSet},
    metrics::MetricType,
    registry::{Registry, Unit},
};

use super::{Scrape, SlotScrape, process::ProcessStats};
use ck_common::SlotState;

/// Everything one scrape shows.
#[derive(Debug)]
pub struct Exposition {
    /// What the event loop read.
    pub scrape: Scrape,
    /// Open connections per worker, by slot.
    pub connections: BTreeMap<u32, u64>,
    /// ck's own process.
    pub process: Option<ProcessStats>,
}

impl Exposition {
    /// The exposition in the OpenMetrics text format.
    pub fn encode(self) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self));
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &registry);
        text
    }
}

/// A series' labels.
pub(super) type Labels = Vec<(&'static str, String)>;

/// A family's name (without the `_total` of counters and the unit suffix, which the encoder
/// adds), help text, unit and type.
pub(super) struct Family {
    name: &'static str,
    help: &'static str,
    unit: Option<Unit>,
    kind: MetricType,
}

pub(super) const fn counter(name: &'static str, help: &'static str, unit: Option<Unit>) -> Family {
    Family {
        name,
        help,
        unit,
        kind: MetricType::Counter,
    }
}

pub(super) const fn gauge(name: &'static str, help: &'static str, unit: Option<Unit>) -> Family {
    Family {
        name,
        help,
        unit,
        kind: MetricType::Gauge,
    }
}

const SELECTED: Family = counter(
    "ck_connections_selected",
    "New connections (and migrated requests) of clients the BPF program sent to the slot \
     (ck's own probes count in ck_connections_probe)",
    None,
);
const PROBES: Family = counter(
    "ck_connections_probe",
    "ck's own probe connections (readiness, health, ck probe) the BPF program steered to the \
     slot through its socket: never counted as selected or as open connections",
    None,
);
const MIGRATED: Family = counter(
    "ck_connections_migrated",
    "Requests re-homed to the slot from a closing listener",
    None,
);
const FALLBACK: Family = counter(
    "ck_connections_fallback",
    "Connections sent to the slot (live, not ready) while no slot was ready",
    None,
);
const DROPPED: Family = counter(
    "ck_connections_dropped",
    "Connections the BPF program dropped because no slot could take them",
    None,
);
/// Named as it is (no unit suffix) so that balancer-side dashboards can match it by name.
const SINCE_LAST: Family = gauge(
    "ck_group_seconds_since_last_connection",
    "Seconds since the BPF program last selected a new connection for the group (from its \
     counters' last change; since ck first read them if none came since)",
    None,
);
const UDP_DATAGRAMS: Family = counter(
    "ck_udp_datagrams",
    "Datagrams a UDP group's BPF program routed, by slot and route (probe, flow, new, stale, \
     stateless, malformed; slot \"none\": dropped, no slot could take them)",
    None,
);
const UDP_FLOWS: Family = gauge(
    "ck_udp_flows",
    "Flows in a UDP group's flow table (the least recently seen make room when it is full)",
    None,
);
const UDP_FLOWS_MAX: Family = gauge("ck_udp_flows_max", "Size of a UDP group's flow table", None);
const QUEUE: Family = gauge(
    "ck_accept_queue_depth",
    "Connections waiting in the slot's accept queue",
    None,
);
const RESTARTS: Family = counter(
    "ck_worker_restarts",
    "Times the slot's worker was restarted",
    None,
);
const STATE: Family = gauge(
    "ck_worker_state",
    "1 for the slot's current state (as `ck status` shows it), 0 for the others",
    None,
);
const READY: Family = gauge(
    "ck_worker_ready",
    "1 while the slot is in the active set (selected for new connections)",
    None,
);
const BREAKER: Family = gauge(
    "ck_breaker_open",
    "1 while the slot's circuit breaker is open or held half-open (crash loop)",
    None,
);
const MEMORY: Family = gauge(
    "ck_worker_memory",
    "Memory of the worker's process tree (its cgroup)",
    Some(Unit::Bytes),
);
const CPU: Family = counter(
    "ck_worker_cpu",
    "CPU time of the worker's process tree (its cgroup)",
    Some(Unit::Seconds),
);
const PROBE_FAILURES: Family = counter(
    "ck_probe_failures",
    "Failed probes of the slot's workers (not counting a starting worker's)",
    None,
);
const OUTPUT_DROPPED: Family = counter(
    "ck_worker_output_dropped_lines",
    "Lines of the slot's workers' stdout and stderr dropped because ck's own output \
     (its stderr) could not keep up",
    None,
);
const CONNECTIONS: Family = gauge(
    "ck_worker_connections",
    "Open connections of clients of the slot (ck's own probes never count): counted by the \
     kernel (those its listeners created, queued ones included, until they close), else \
     established ones its worker's process tree holds",
    None,
);
const RELOADS: Family = counter(
    "ck_reloads",
    "Rolling restarts of the fleet (ck reload, SIGHUP) that ended, by result",
    None,
);
const UPGRADES: Family = counter(
    "ck_upgrades",
    "Upgrades of ck in place (ck upgrade, SIGUSR2) since the instance started",
    None,
);
const PROCESS_CPU: Family = counter(
    "process_cpu",
    "User and system CPU time of ck",
    Some(Unit::Seconds),
);
const PROCESS_RESIDENT: Family = gauge(
    "process_resident_memory",
    "Resident memory of ck",
    Some(Unit::Bytes),
);
const PROCESS_VIRTUAL: Family = gauge(
    "process_virtual_memory",
    "Virtual memory of ck",
    Some(Unit::Bytes),
);
const PROCESS_FDS: Family = gauge("process_open_fds", "Open file descriptors of ck", None);
const PROCESS_MAX_FDS: Family = gauge(
    "process_max_fds",
    "ck's limit on open file descriptors",
    None,
);
const PROCESS_THREADS: Family = gauge("process_threads", "Threads of ck", None);
const PROCESS_START: Family = gauge(
    "process_start_time",
    "Start time of ck since the Unix epoch",
    Some(Unit::Seconds),
);

impl Family {
    /// The descriptor, then one sample per series.
    pub(super) fn encode<V>(
        &self,
        encoder: &mut DescriptorEncoder,
        series: impl IntoIterator<Item = (Labels, V)>,
    ) -> fmt::Result
    where
        V: EncodeCounterValue + EncodeGaugeValue,
    {
        let mut metric =
            encoder.encode_descriptor(self.name, self.help, self.unit.as_ref(), self.kind)?;
        for (labels, value) in series {
            let mut sample = metric.encode_family(&labels)?;
            match self.kind {
                MetricType::Counter => sample.encode_counter::<NoLabelSet, _, u64>(&value, None)?,
                _ => sample.encode_gauge(&value)?,
            }
        }
        Ok(())
    }

    /// The descriptor and its one sample, without labels.
    pub(super) fn encode_one<V>(&self, encoder: &mut DescriptorEncoder, value: V) -> fmt::Result
    where
        V: EncodeCounterValue + EncodeGaugeValue,
    {
        let mut metric =
            encoder.encode_descriptor(self.name, self.help, self.unit.as_ref(), self.kind)?;
        match self.kind {
            MetricType::Counter => metric.encode_counter::<NoLabelSet, _, u64>(&value, None),
            _ => metric.encode_gauge(&value),
        }
    }
}

fn slot_label(slot: u32) -> Labels {
    vec![("slot", slot.to_string())]
}

impl Exposition {
    /// `{group, slot}` series of `pick` over every group's slots.
    pub(super) fn per_group_slot<V>(
        &self,
        pick: fn(&super::GroupSlot) -> Option<V>,
    ) -> impl Iterator<Item = (Labels, V)> {
        self.scrape.groups.iter().flat_map(move |g| {
            g.slots.iter().filter_map(move |s| {
                let labels = vec![("group", g.name.clone()), ("slot", s.slot.to_string())];
                Some((labels, pick(s)?))
            })
        })
    }

    /// `{slot}` series of `pick` over every slot.
    fn per_slot<V>(&self, pick: fn(&SlotScrape) -> Option<V>) -> impl Iterator<Item = (Labels, V)> {
        self.scrape
            .slots
            .iter()
            .filter_map(move |s| Some((slot_label(s.slot), pick(s)?)))
    }

    fn encode_traffic(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        SELECTED.encode(encoder, self.per_group_slot(|s| Some(s.stats?.selected)))?;
        PROBES.encode(encoder, self.per_group_slot(|s| Some(s.stats?.probe_hits)))?;
        MIGRATED.encode(encoder, self.per_group_slot(|s| Some(s.stats?.migrated)))?;
        FALLBACK.encode(encoder, self.per_group_slot(|s| Some(s.stats?.fallbacks)))?;
        let dropped = self.scrape.groups.iter();
        DROPPED.encode(
            encoder,
            dropped.filter_map(|g| Some((vec![("group", g.name.clone())], g.dropped?))),
        )?;
        SINCE_LAST.encode(
            encoder,
            self.scrape.groups.iter().filter_map(|g| {
                let labels = vec![("group", g.name.clone()), ("listen", g.listen.clone())];
                Some((labels, g.since_last_connection?))
            }),
        )?;
        QUEUE.encode(encoder, self.per_group_slot(|s| s.queue_depth))?;
        self.encode_udp(encoder)
    }

    fn encode_udp(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let udp = &self.scrape.udp;
        if udp.is_empty() {
            return Ok(());
        }
        let per_route = |group: &str, slot: String, routes: &BTreeMap<String, u64>| {
            let group = group.to_string();
            routes
                .iter()
                .map(move |(route, n)| {
                    let labels = vec![
                        ("group", group.clone()),
                        ("slot", slot.clone()),
                        ("route", route.clone()),
                    ];
                    (labels, *n)
                })
                .collect::<Vec<_>>()
        };
        let datagrams = udp.iter().flat_map(|g| {
            let slots = g
                .slots
                .iter()
                .flat_map(|s| per_route(&g.group, s.slot.to_string(), &s.routes));
            let dropped = g.routes.keys().map(|route| {
                let n = g.routes[route] - g.slots.iter().map(|s| s.routes[route]).sum::<u64>();
                let labels = vec![
                    ("group", g.group.clone()),
                    ("slot", "none".to_string()),
                    ("route", route.clone()),
                ];
                (labels, n)
            });
            slots.chain(dropped).collect::<Vec<_>>()
        });
        UDP_DATAGRAMS.encode(encoder, datagrams)?;
        let group = |g: &crate::control::UdpGroupReport| vec![("group", g.group.clone())];
        UDP_FLOWS.encode(encoder, udp.iter().map(|g| (group(g), g.flows)))?;
        let max = u64::from(ck_common::udp::MAX_FLOWS);
        UDP_FLOWS_MAX.encode(encoder, udp.iter().map(|g| (group(g), max)))
    }

    fn encode_workers(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let states = self.scrape.slots.iter().flat_map(|s| {
            SlotState::ALL.iter().map(|state| {
                let labels = vec![("slot", s.slot.to_string()), ("state", state.name().into())];
                (labels, u64::from(s.state == state.name()))
            })
        });
        STATE.encode(encoder, states)?;
        READY.encode(encoder, self.per_slot(|s| Some(u64::from(s.ready))))?;
        RESTARTS.encode(encoder, self.per_slot(|s| Some(u64::from(s.restarts))))?;
        BREAKER.encode(encoder, self.per_slot(|s| Some(u64::from(s.breaker_open))))?;
        MEMORY.encode(encoder, self.per_slot(|s| s.memory_bytes))?;
        CPU.encode(encoder, self.per_slot(|s| Some(s.cpu_usec? as f64 / 1e6)))?;
        PROBE_FAILURES.encode(encoder, self.per_slot(|s| Some(s.probe_failures)))?;
        OUTPUT_DROPPED.encode(encoder, self.per_slot(|s| Some(s.output_dropped)))?;
        let connections = self.connections.iter();
        CONNECTIONS.encode(encoder, connections.map(|(s, n)| (slot_label(*s), *n)))?;
        let reloads = [
            ("ok", self.scrape.reloads.ok),
            ("aborted", self.scrape.reloads.aborted),
        ];
        RELOADS.encode(
            encoder,
            reloads.map(|(r, n)| (vec![("result", r.into())], n)),
        )?;
        UPGRADES.encode_one(encoder, self.scrape.upgrades)
    }

    fn encode_process(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let Some(p) = self.process else {
            return Ok(());
        };
        PROCESS_CPU.encode_one(encoder, p.cpu_seconds)?;
        PROCESS_RESIDENT.encode_one(encoder, p.resident_bytes)?;
        PROCESS_VIRTUAL.encode_one(encoder, p.virtual_bytes)?;
        PROCESS_FDS.encode_one(encoder, p.open_fds)?;
        if let Some(max) = p.max_fds {
            PROCESS_MAX_FDS.encode_one(encoder, max)?;
        }
        PROCESS_THREADS.encode_one(encoder, p.threads)?;
        PROCESS_START.encode_one(encoder, p.start_time_seconds)
    }
}

impl Collector for Exposition {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        self.encode_traffic(&mut encoder)?;
        self.encode_releases(&mut encoder)?;
        self.encode_workers(&mut encoder)?;
        self.encode_process(&mut encoder)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{GroupScrape, GroupSlot};

    /// Counters get `_total`, units their suffix; every state of a slot is a series.
    #[test]
    fn encodes_the_families() {
        let stats = ck_common::SlotStats {
            selected: 7,
            probe_hits: 2,
            ..Default::default()
        };
        let scrape = Scrape {
            groups: vec![GroupScrape {
                name: "tcp4-8080".into(),
                listen: "0.0.0.0:8080".into(),
                since_last_connection: Some(2.5),
                dropped: Some(2),
                slots: vec![GroupSlot {
                    slot: 3,
                    stats: Some(stats),
                    queue_depth: Some(1),
                    ..Default::default()
                }],
            }],
            slots: vec![SlotScrape {
                slot: 3,
                state: "ready".into(),
                ready: true,
                cpu_usec: Some(1_500_000),
                ..Default::default()
            }],
            ..Default::default()
        };
        let text = Exposition {
            scrape,
            connections: [(3, 4)].into(),
            process: None,
        }
        .encode();
        for line in [
            "ck_connections_selected_total{group=\"tcp4-8080\",slot=\"3\"} 7\n",
            "ck_connections_probe_total{group=\"tcp4-8080\",slot=\"3\"} 2\n",
            "ck_connections_dropped_total{group=\"tcp4-8080\"} 2\n",
            "ck_accept_queue_depth{group=\"tcp4-8080\",slot=\"3\"} 1\n",
            "ck_group_seconds_since_last_connection{group=\"tcp4-8080\",listen=\"0.0.0.0:8080\"} 2.5\n",
            "ck_worker_state{slot=\"3\",state=\"ready\"} 1\n",
            "ck_worker_state{slot=\"3\",state=\"draining\"} 0\n",
            "ck_worker_ready{slot=\"3\"} 1\n",
            "ck_worker_cpu_seconds_total{slot=\"3\"} 1.5\n",
            "ck_worker_connections{slot=\"3\"} 4\n",
            "ck_reloads_total{result=\"ok\"} 0\n",
        ] {
            assert!(text.contains(line), "no {line:?} in\n{text}");
        }
        assert!(!text.contains("ck_worker_memory_bytes{"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
