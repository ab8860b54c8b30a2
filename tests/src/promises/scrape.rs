//! `/metrics` is complete from the first scrape: scraped as soon as `/healthz` answers 200 (as
//! a pod's Prometheus does), it has exactly the metric families of a scrape taken once the
//! fleet is ready and has served (none missing, none that later vanishes), and the program's
//! per-slot counters of every slot from the first.
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Instant;

use crate::http::{Failure, burst, get_path};
use crate::sys::free_port;
use crate::{READY_TIMEOUT, local, start};

/// The per-slot counters of the program, which must have a series for every slot from the
/// first scrape (at 0).
const PER_SLOT_COUNTERS: [&str; 2] = ["ck_connections_selected", "ck_worker_connections"];

/// The families of a scrape (`# TYPE` lines) that have at least one sample, each with the
/// series (name and labels) of its samples.
pub fn families(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let declared: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let mut found: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let Some((series, _value)) = line.rsplit_once(' ') else {
            continue;
        };
        let name = series.split('{').next().unwrap_or(series);
        // A counter's samples add `_total` (histograms `_bucket`, `_sum`, `_count`) to its
        // family's name: the family is the longest declared name the sample's starts with.
        let family = declared
            .iter()
            .filter(|f| name == **f || name.strip_prefix(**f).is_some_and(|s| s.starts_with('_')))
            .max_by_key(|f| f.len())
            .unwrap_or(&name);
        found
            .entry(family.to_string())
            .or_default()
            .insert(series.to_string());
    }
    found
}

/// The values of label `label` in `series` (`name{a="1",slot="2"}`).
fn label_values(series: &BTreeSet<String>, label: &str) -> BTreeSet<String> {
    let key = format!("{label}=\"");
    series
        .iter()
        .filter_map(|s| {
            let rest = &s[s.find(&key)? + key.len()..];
            Some(rest[..rest.find('"')?].to_string())
        })
        .collect()
}

/// GETs `path` on `addr` as soon as it answers (refused: tried again at once).
fn first_answer(addr: SocketAddr, path: &str) -> (u16, String) {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        match get_path(addr, path) {
            Ok(answer) => return answer,
            Err(Failure::Refused) if Instant::now() < deadline => {}
            Err(e) => panic!("GET {path} on {addr}: {e}"),
        }
    }
}

/// What differs between the first scrape and a later one: families of one missing from the
/// other (both ways), and slots of the later one without their per-slot counters in the
/// first. Empty when the first scrape is complete.
pub fn first_scrape_gaps(first: &str, later: &str) -> Vec<String> {
    let (first, later) = (families(first), families(later));
    let names = |m: &BTreeMap<String, BTreeSet<String>>| m.keys().cloned().collect::<BTreeSet<_>>();
    let mut gaps = Vec::new();
    let missing: Vec<_> = names(&later).difference(&names(&first)).cloned().collect();
    if !missing.is_empty() {
        gaps.push(format!(
            "families missing from the first scrape: {missing:?}"
        ));
    }
    let vanished: Vec<_> = names(&first).difference(&names(&later)).cloned().collect();
    if !vanished.is_empty() {
        gaps.push(format!(
            "families of the first scrape gone later: {vanished:?}"
        ));
    }
    let empty = BTreeSet::new();
    for counter in PER_SLOT_COUNTERS {
        let had = label_values(first.get(counter).unwrap_or(&empty), "slot");
        let has = label_values(later.get(counter).unwrap_or(&empty), "slot");
        if has.is_empty() || !has.is_subset(&had) {
            gaps.push(format!(
                "{counter}: slots {has:?} later, {had:?} in the first scrape"
            ));
        }
    }
    gaps
}

/// `/metrics` scraped as soon as `/healthz` answers 200 has exactly the families of a scrape
/// taken once both workers are ready and have served, and the per-slot counters of both
/// slots.
pub fn the_first_scrape_is_complete() {
    let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let metrics_arg = metrics.to_string();
    let (mut ck, port) =
        start("first-scrape", &["-w", "2", "--metrics", &metrics_arg]).expect("start ck");
    let (code, _) = first_answer(metrics, "/healthz");
    assert_eq!(code, 200, "/healthz");
    let (code, first) = first_answer(metrics, "/metrics");
    assert_eq!(code, 200, "/metrics");
    ck.wait_ready(2, READY_TIMEOUT)
        .expect("wait for ready slots");
    let tally = burst(local(port), 20);
    assert_eq!(tally.failed(), 0, "{tally:?}");
    let later = get_path(metrics, "/metrics").expect("a later scrape").1;
    let gaps = first_scrape_gaps(&first, &later);
    assert!(
        gaps.is_empty(),
        "the first scrape is not complete: {}\n--- first ---\n{first}\n--- later ---\n{later}",
        gaps.join("; ")
    );
    eprintln!(
        "first-scrape: {} families in both scrapes",
        families(&later).len()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIRST: &str = "# TYPE ck_connections_selected counter\n\
        ck_connections_selected_total{group=\"g\",slot=\"0\"} 0\n\
        ck_connections_selected_total{group=\"g\",slot=\"1\"} 0\n\
        # TYPE ck_worker_connections gauge\n\
        ck_worker_connections{slot=\"0\"} 0\n\
        ck_worker_connections{slot=\"1\"} 0\n\
        # TYPE ck_worker_state gauge\n\
        ck_worker_state{slot=\"0\",state=\"starting\"} 1\n";

    #[test]
    fn families_hold_their_samples_under_the_declared_name() {
        let found = families(FIRST);
        assert_eq!(found.len(), 3, "{found:?}");
        assert_eq!(found["ck_connections_selected"].len(), 2);
    }

    #[test]
    fn a_family_missing_either_way_or_a_slot_without_counters_is_a_gap() {
        let later = FIRST.replace("state=\"starting\"", "state=\"ready\"");
        assert_eq!(first_scrape_gaps(FIRST, &later), Vec::<String>::new());
        let more = format!("{later}# TYPE ck_reloads counter\nck_reloads_total 0\n");
        assert!(first_scrape_gaps(FIRST, &more)[0].contains("missing"));
        assert!(first_scrape_gaps(&more, FIRST)[0].contains("gone later"));
        let third = format!("{later}ck_worker_connections{{slot=\"2\"}} 0\n");
        assert!(first_scrape_gaps(FIRST, &third)[0].contains("ck_worker_connections"));
    }
}
