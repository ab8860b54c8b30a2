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

use super::{Scrape, process::ProcessStats};
use crate::supervisor::lifecycle::Shown;

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
type Labels = Vec<(&'static str, String)>;

fn slot_label(slot: u32) -> Labels {
    vec![("slot", slot.to_string())]
}

fn group_slot_labels(group: &str, slot: u32) -> Labels {
    vec![("group", group.to_string()), ("slot", slot.to_string())]
}

/// One family: its descriptor, then a sample per series.
fn family<V>(
    encoder: &mut DescriptorEncoder,
    (name, help, unit): (&str, &str, Option<Unit>),
    kind: MetricType,
    series: impl IntoIterator<Item = (Labels, V)>,
) -> fmt::Result
where
    V: EncodeCounterValue + EncodeGaugeValue,
{
    let mut metric = encoder.encode_descriptor(name, help, unit.as_ref(), kind)?;
    for (labels, value) in series {
        let mut sample = metric.encode_family(&labels)?;
        match kind {
            MetricType::Counter => sample.encode_counter::<NoLabelSet, _, u64>(&value, None)?,
            _ => sample.encode_gauge(&value)?,
        }
    }
    Ok(())
}

/// One family of one sample without labels.
fn single<V>(
    encoder: &mut DescriptorEncoder,
    (name, help, unit): (&str, &str, Option<Unit>),
    kind: MetricType,
    value: V,
) -> fmt::Result
where
    V: EncodeCounterValue + EncodeGaugeValue,
{
    let mut metric = encoder.encode_descriptor(name, help, unit.as_ref(), kind)?;
    match kind {
        MetricType::Counter => metric.encode_counter::<NoLabelSet, _, u64>(&value, None),
        _ => metric.encode_gauge(&value),
    }
}

/// `(name, help, unit)` of a family.
type Describe<'a> = (&'a str, &'a str, Option<Unit>);

/// A per-group, per-slot counter read from the program's `stats` map.
fn group_counter(
    encoder: &mut DescriptorEncoder,
    scrape: &Scrape,
    describe: Describe,
    pick: fn(&ck_common::SlotStats) -> u64,
) -> fmt::Result {
    let series = scrape.groups.iter().flat_map(|g| {
        g.slots.iter().filter_map(move |s| {
            let stats = s.stats.as_ref()?;
            Some((group_slot_labels(&g.name, s.slot), pick(stats)))
        })
    });
    family(encoder, describe, MetricType::Counter, series)
}

/// A per-slot value of [`super::SlotScrape`].
fn slot_family<V>(
    encoder: &mut DescriptorEncoder,
    scrape: &Scrape,
    describe: Describe,
    kind: MetricType,
    pick: fn(&super::SlotScrape) -> Option<V>,
) -> fmt::Result
where
    V: EncodeCounterValue + EncodeGaugeValue,
{
    let series = scrape
        .slots
        .iter()
        .filter_map(|s| Some((slot_label(s.slot), pick(s)?)));
    family(encoder, describe, kind, series)
}

impl Exposition {
    fn encode_traffic(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let scrape = &self.scrape;
        group_counter(
            encoder,
            scrape,
            (
                "ck_connections_selected",
                "New connections (and migrated requests) the BPF program sent to the slot",
                None,
            ),
            |s| s.selected,
        )?;
        group_counter(
            encoder,
            scrape,
            (
                "ck_connections_migrated",
                "Requests re-homed to the slot from a closing listener",
                None,
            ),
            |s| s.migrated,
        )?;
        group_counter(
            encoder,
            scrape,
            (
                "ck_connections_fallback",
                "Connections sent to the slot while no slot was ready (it was live but not ready)",
                None,
            ),
            |s| s.fallbacks,
        )?;
        let dropped = scrape
            .groups
            .iter()
            .filter_map(|g| Some((vec![("group", g.name.clone())], g.dropped?)));
        family(
            encoder,
            (
                "ck_connections_dropped",
                "Connections the BPF program dropped because no slot could take them",
                None,
            ),
            MetricType::Counter,
            dropped,
        )?;
        let depths = scrape.groups.iter().flat_map(|g| {
            g.slots
                .iter()
                .filter_map(move |s| Some((group_slot_labels(&g.name, s.slot), s.queue_depth?)))
        });
        family(
            encoder,
            (
                "ck_accept_queue_depth",
                "Connections waiting in the slot's accept queue",
                None,
            ),
            MetricType::Gauge,
            depths,
        )
    }

    fn encode_workers(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let scrape = &self.scrape;
        slot_family(
            encoder,
            scrape,
            (
                "ck_worker_restarts",
                "Times the slot's worker was restarted",
                None,
            ),
            MetricType::Counter,
            |s| Some(u64::from(s.restarts)),
        )?;
        let states = scrape.slots.iter().flat_map(|s| {
            Shown::ALL.iter().map(|state| {
                let labels = vec![
                    ("slot", s.slot.to_string()),
                    ("state", state.name().to_string()),
                ];
                (labels, u64::from(s.state == state.name()))
            })
        });
        family(
            encoder,
            (
                "ck_worker_state",
                "1 for the slot's current state (as `ck status` shows it), 0 for the others",
                None,
            ),
            MetricType::Gauge,
            states,
        )?;
        slot_family(
            encoder,
            scrape,
            (
                "ck_worker_ready",
                "1 while the slot is in the active set (selected for new connections)",
                None,
            ),
            MetricType::Gauge,
            |s| Some(u64::from(s.ready)),
        )?;
        slot_family(
            encoder,
            scrape,
            (
                "ck_breaker_open",
                "1 while the slot's circuit breaker is open or held half-open (crash loop)",
                None,
            ),
            MetricType::Gauge,
            |s| Some(u64::from(s.breaker_open)),
        )?;
        slot_family(
            encoder,
            scrape,
            (
                "ck_worker_memory",
                "Memory of the worker's process tree (its cgroup)",
                Some(Unit::Bytes),
            ),
            MetricType::Gauge,
            |s| s.memory_bytes,
        )?;
        slot_family(
            encoder,
            scrape,
            (
                "ck_worker_cpu",
                "CPU time of the worker's process tree (its cgroup)",
                Some(Unit::Seconds),
            ),
            MetricType::Counter,
            |s| Some(s.cpu_usec? as f64 / 1e6),
        )?;
        slot_family(
            encoder,
            scrape,
            (
                "ck_probe_failures",
                "Failed probes of the slot's workers",
                None,
            ),
            MetricType::Counter,
            |s| Some(s.probe_failures),
        )?;
        let connections = self
            .connections
            .iter()
            .map(|(slot, count)| (slot_label(*slot), *count));
        family(
            encoder,
            (
                "ck_worker_connections",
                "Established connections the worker's process tree holds (sock_diag)",
                None,
            ),
            MetricType::Gauge,
            connections,
        )?;
        let reloads = [
            ("ok", scrape.reloads.ok),
            ("aborted", scrape.reloads.aborted),
        ]
        .map(|(result, n)| (vec![("result", result.to_string())], n));
        family(
            encoder,
            (
                "ck_reloads",
                "Rolling restarts (ck reload, SIGHUP) that ended, by result",
                None,
            ),
            MetricType::Counter,
            reloads,
        )
    }

    fn encode_process(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let Some(p) = self.process else {
            return Ok(());
        };
        let gauge = MetricType::Gauge;
        single(
            encoder,
            (
                "process_cpu",
                "Total user and system CPU time spent by ck",
                Some(Unit::Seconds),
            ),
            MetricType::Counter,
            p.cpu_seconds,
        )?;
        single(
            encoder,
            (
                "process_resident_memory",
                "Resident memory of ck",
                Some(Unit::Bytes),
            ),
            gauge,
            p.resident_bytes,
        )?;
        single(
            encoder,
            (
                "process_virtual_memory",
                "Virtual memory of ck",
                Some(Unit::Bytes),
            ),
            gauge,
            p.virtual_bytes,
        )?;
        single(
            encoder,
            ("process_open_fds", "Open file descriptors of ck", None),
            gauge,
            p.open_fds,
        )?;
        if let Some(max) = p.max_fds {
            single(
                encoder,
                (
                    "process_max_fds",
                    "ck's limit on open file descriptors",
                    None,
                ),
                gauge,
                max,
            )?;
        }
        single(
            encoder,
            ("process_threads", "Threads of ck", None),
            gauge,
            p.threads,
        )?;
        single(
            encoder,
            (
                "process_start_time",
                "Start time of ck since the Unix epoch",
                Some(Unit::Seconds),
            ),
            gauge,
            p.start_time_seconds,
        )
    }
}

impl Collector for Exposition {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        self.encode_traffic(&mut encoder)?;
        self.encode_workers(&mut encoder)?;
        self.encode_process(&mut encoder)
    }
}
