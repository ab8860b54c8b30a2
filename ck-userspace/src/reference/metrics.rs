//! `metrics.md`: every metric family `/metrics` serves, read back from the real encoder
//! ([`Exposition::encode`]) over a specimen scrape in which every optional part is present
//! (one TCP group, one UDP group, one slot, a cgroup, ck's own process): names, types, units, help and labels come
//! from what prometheus-client writes, so a family added to the collector appears here.
use std::{collections::BTreeSet, fmt::Write as _};

use super::text::{GENERATED, cell};
use crate::control::{UdpGroupReport, UdpSlotReport};
use crate::metrics::{
    GroupScrape, GroupSlot, Scrape, SlotScrape, families::Exposition, process::ProcessStats,
};

/// One family as the encoder wrote it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Family {
    /// The family's name in `# TYPE` (`ck_upgrades`, `ck_worker_memory_bytes`).
    pub name: String,
    /// The names its samples have (`ck_upgrades_total`).
    pub series: BTreeSet<String>,
    /// `counter` or `gauge`.
    pub kind: String,
    /// Its unit (`bytes`, `seconds`), if any.
    pub unit: Option<String>,
    /// Its help text.
    pub help: String,
    /// Its samples' label names.
    pub labels: BTreeSet<String>,
}

/// A scrape with every optional part present.
fn specimen() -> Exposition {
    let scrape = Scrape {
        groups: vec![GroupScrape {
            name: "tcp4-8080".into(),
            listen: "0.0.0.0:8080".into(),
            since_last_connection: Some(1.0),
            dropped: Some(0),
            slots: vec![GroupSlot {
                slot: 0,
                stats: Some(Default::default()),
                queue_depth: Some(0),
                resets: Some(0),
                listen_drops: Some(0),
            }],
        }],
        slots: vec![SlotScrape {
            slot: 0,
            state: "ready".into(),
            ready: true,
            memory_bytes: Some(1),
            cpu_usec: Some(1),
            ..Default::default()
        }],
        udp: vec![UdpGroupReport {
            group: "udp4-443".into(),
            mode: "flow".into(),
            routes: [("flow".to_string(), 1)].into(),
            slots: vec![UdpSlotReport {
                slot: 0,
                routes: [("flow".to_string(), 1)].into(),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    Exposition {
        scrape,
        connections: [(0, 0)].into(),
        process: Some(ProcessStats {
            resident_bytes: 1,
            virtual_bytes: 1,
            cpu_seconds: 1.0,
            open_fds: 1,
            max_fds: Some(1),
            threads: 1,
            start_time_seconds: 1.0,
        }),
    }
}

/// Every family `/metrics` serves, in the order it serves them.
pub fn families() -> Vec<Family> {
    parse(&specimen().encode())
}

/// The families of an OpenMetrics text.
pub fn parse(text: &str) -> Vec<Family> {
    let mut families: Vec<Family> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# ") {
            let mut words = rest.splitn(3, ' ');
            let (Some(what), Some(name)) = (words.next(), words.next()) else {
                continue;
            };
            let value = words.next().unwrap_or_default().to_string();
            if families.last().is_none_or(|f| f.name != name) {
                families.push(Family {
                    name: name.to_string(),
                    ..Default::default()
                });
            }
            let family = families.last_mut().expect("pushed above");
            match what {
                "HELP" => family.help = value,
                "TYPE" => family.kind = value,
                "UNIT" => family.unit = Some(value),
                _ => {}
            }
        } else if let Some(family) = families.last_mut() {
            let series = line.split([' ', '{']).next().unwrap_or_default();
            family.series.insert(series.to_string());
            if let Some((_, labels)) = line.split_once('{') {
                let labels = labels.split('}').next().unwrap_or_default();
                for pair in labels.split(',') {
                    if let Some((label, _)) = pair.split_once('=') {
                        family.labels.insert(label.to_string());
                    }
                }
            }
        }
    }
    families
}

/// `metrics.md`.
pub fn markdown() -> String {
    let mut out = format!(
        "{GENERATED}\n\n# Metrics\n\n`ck run --metrics ADDR` serves these on `GET /metrics` in \
         the OpenMetrics text format (Prometheus scrapes it), beside `GET /healthz` and `GET \
         /readyz`. Series with a `slot` label exist for every slot in use; `group` is a listen \
         group (`tcp4-8080`). A family whose source is missing on the host (no cgroup for a \
         worker, no BPF program with `--no-bpf`) has no series.\n\n| Series | Type | Labels | \
         Help |\n| --- | --- | --- | --- |\n"
    );
    for f in families() {
        let series: Vec<String> = f.series.iter().map(|s| format!("`{s}`")).collect();
        let labels: Vec<String> = f.labels.iter().map(|l| format!("`{l}`")).collect();
        let kind = match &f.unit {
            Some(unit) => format!("{} ({unit})", f.kind),
            None => f.kind.clone(),
        };
        let _ = writeln!(
            out,
            "| {} | {kind} | {} | {} |",
            series.join(", "),
            if labels.is_empty() {
                "(none)".to_string()
            } else {
                labels.join(", ")
            },
            cell(&f.help)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_is_listed_with_its_labels() {
        let families = families();
        let find = |name: &str| families.iter().find(|f| f.series.contains(name)).cloned();
        let upgrades = find("ck_upgrades_total").expect("ck_upgrades_total");
        assert_eq!(upgrades.kind, "counter");
        assert!(upgrades.labels.is_empty());
        let memory = find("ck_worker_memory_bytes").expect("memory");
        assert_eq!(memory.unit.as_deref(), Some("bytes"));
        assert_eq!(memory.labels, ["slot".to_string()].into());
        let selected = find("ck_connections_selected_total").expect("selected");
        assert_eq!(
            selected.labels,
            ["group".to_string(), "slot".to_string()].into()
        );
        assert!(find("process_max_fds").is_some());
        let page = markdown();
        for f in &families {
            assert!(!f.help.is_empty(), "{f:?}");
            for s in &f.series {
                assert!(page.contains(&format!("`{s}`")), "{s}");
            }
        }
    }
}
