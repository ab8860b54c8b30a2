//! The text `ck status` prints (without `--json`): a header line about the instance, its
//! active set, warnings (degraded, steering not in effect, foreign listeners), then a table of
//! the slots. The report itself is the control channel's [`StatusReport`].
use ck::control::StatusReport;

/// The human-readable table `ck status` prints for `report`.
pub fn render(report: &StatusReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "ck {} (pid {}): {} worker(s), {} group(s) {}, policy {}, BPF steering {}, migration {}{}{}",
        report.name,
        report.pid,
        report.workers,
        report.groups.len(),
        report.groups.join(","),
        serde_json::to_value(report.policy)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        if report.bpf {
            "on"
        } else {
            "OFF (plain SO_REUSEPORT)"
        },
        if report.migration { "on" } else { "off" },
        if report.reloading { ", reloading" } else { "" },
        if report.stopping { ", stopping" } else { "" },
    );
    let _ = writeln!(
        out,
        "active set: {:?}   fallback: {:?}   dropped (no slot): {}",
        report.active, report.fallback, report.dropped
    );
    if !report.booting.is_empty() {
        let _ = writeln!(
            out,
            "booting: {:?} chosen beside the active set until ready (the fleet boots; at most \
             {} s after the first worker was ready)",
            report.booting,
            ck::supervisor::fleet::spread::SPREAD_FOR.as_secs()
        );
    }
    if let Some(wait) = &report.quiet_wait {
        let _ = writeln!(out, "stopping: {}", wait.words());
    }
    if report.host_drained {
        let _ = writeln!(
            out,
            "host drained (ck drain --all): /readyz answers 503; connections that still arrive \
             are served; `ck undrain --all` puts the host back"
        );
    }
    if !report.stop_signal.is_empty() {
        let _ = writeln!(
            out,
            "stop: {}, SIGKILL after {:?}",
            report.stop_signal,
            std::time::Duration::from_millis(report.drain_timeout_ms)
        );
    }
    if let Some(depth) = &report.queue_depth {
        let _ = writeln!(out, "{} depth: {depth}", report.policy.name());
    }
    if let Some(us) = report.queue_patience_us {
        let patience = std::time::Duration::from_micros(us);
        let _ = writeln!(
            out,
            "{} patience: {} (0: every non-empty queue compared)",
            report.policy.name(),
            ck::settings::defaults::duration_text(patience)
        );
    }
    if let Some(counts) = &report.conn_steering {
        let _ = writeln!(out, "{} counts: {counts}", report.policy.name());
    }
    let _ = match &report.exits_watched {
        Some(pids) => writeln!(
            out,
            "worker exits: seen as they begin (sched_process_exit), {} watched",
            pids.len()
        ),
        None => writeln!(out, "worker exits: seen when the process is gone (pidfd)"),
    };
    for line in &report.degraded {
        let _ = writeln!(out, "DEGRADED: {line}");
    }
    if let Some(addr) = &report.metrics {
        let _ = writeln!(out, "metrics: http://{addr}/metrics (/healthz, /readyz)");
    }
    if let Some(limit) = &report.memory_limit {
        let _ = writeln!(out, "worker memory limit: {limit}");
    }
    if report.connection_count.starts_with("scan") {
        let _ = writeln!(
            out,
            "open connections: counted by the sock_diag {}",
            report.connection_count
        );
    } else if report.connection_hook.as_deref() == Some("host") {
        let _ = writeln!(
            out,
            "open connections: counted on a host-wide tracepoint (no usable cgroup2, or \
             CK_CONN_COUNT=host): every TCP state change on this host runs it"
        );
    }
    let dropped: Vec<String> = report
        .slots
        .iter()
        .filter(|s| s.output_dropped > 0)
        .map(|s| format!("slot {}: {}", s.slot, s.output_dropped))
        .collect();
    if !dropped.is_empty() {
        let _ = writeln!(
            out,
            "worker output: lines dropped because ck's own output could not keep up ({})",
            dropped.join(", ")
        );
    }
    for s in report.steering.iter().filter(|s| s.attached != Some(true)) {
        let state = match s.attached {
            None => "not checked yet",
            Some(_) => "NOT in effect (being re-attached)",
        };
        let _ = writeln!(out, "steering on {}: {state}", s.group);
    }
    for f in &report.foreign {
        let _ = writeln!(
            out,
            "FOREIGN listener on {} ({}): inode {}, uid {}, pid {} {}: never steered to; stop it",
            f.addr,
            f.group,
            f.inode,
            f.uid,
            f.pid.map_or("?".into(), |p| p.to_string()),
            f.command.as_deref().unwrap_or(""),
        );
    }
    out.push_str(&slot_table(report));
    for udp in &report.udp {
        let _ = writeln!(
            out,
            "{} ({} mode): {} flow(s) and {} QUIC handshake(s) remembered, {} datagram(s) \
             dropped; by route: {}",
            udp.group,
            udp.mode,
            udp.flows,
            udp.pending,
            udp.dropped,
            routes_text(&udp.routes)
        );
        for s in &udp.slots {
            let _ = writeln!(
                out,
                "  slot {:>3}: {:>9} datagram(s), {:>8}/s, {:>6} flow(s)",
                s.slot,
                s.datagrams,
                s.datagrams_per_s.map_or("-".into(), |r| format!("{r:.1}")),
                s.flows
            );
        }
    }
    out
}

/// How a column of the slot table is aligned.
#[derive(Clone, Copy)]
enum Align {
    Left,
    Right,
}

/// The slot table's columns: header and alignment (the last, `status`, is not padded).
const COLUMNS: [(&str, Align); 13] = [
    ("slot", Align::Right),
    ("pid", Align::Right),
    ("state", Align::Left),
    ("uptime", Align::Right),
    ("restarts", Align::Right),
    ("selected", Align::Right),
    ("open", Align::Right),
    ("probes", Align::Right),
    ("memory", Align::Right),
    ("cpu", Align::Right),
    ("last exit", Align::Left),
    ("breaker", Align::Left),
    ("status", Align::Left),
];

/// The slot table: a header and one row per slot, each column as wide as its widest cell (a
/// long `last exit` or state widens its column instead of pushing the rest of its row out of
/// line). Hand-written: twenty lines, where a table crate would bring its own styling.
fn slot_table(report: &StatusReport) -> String {
    let rows: Vec<[String; 13]> = report.slots.iter().map(|s| slot_row(report, s)).collect();
    let widths: Vec<usize> = (0..COLUMNS.len())
        .map(|c| {
            rows.iter()
                .map(|row| row[c].chars().count())
                .chain([COLUMNS[c].0.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: [&str; 13]| {
        let last = COLUMNS.len() - 1;
        let mut text: Vec<String> = cells[..last]
            .iter()
            .zip(COLUMNS.iter().zip(&widths))
            .map(|(cell, ((_, align), width))| match align {
                Align::Left => format!("{cell:<width$}"),
                Align::Right => format!("{cell:>width$}"),
            })
            .collect();
        text.push(cells[last].to_string());
        format!("{}\n", text.join("  ").trim_end())
    };
    let mut out = line(COLUMNS.map(|(header, _)| header));
    for row in &rows {
        out.push_str(&line(std::array::from_fn(|c| row[c].as_str())));
    }
    out
}

/// The cells of slot `s`'s row.
fn slot_row(report: &StatusReport, s: &ck::control::SlotReport) -> [String; 13] {
    let state = match (&s.unhealthy, s.member_of, s.spare, s.nice) {
        (Some(why), ..) => format!("unhealthy:{why}"),
        (None, Some(root), ..) => format!("{} (of {root})", s.state),
        (None, None, true, _) => format!("{} (spare)", s.state),
        // Stepped back while a replacement boots (`--boot-boost`), or set by the app.
        (None, None, false, Some(nice)) if nice != report.nice => {
            format!("{} (nice {nice})", s.state)
        }
        (None, None, false, _) => s.state.clone(),
    };
    [
        s.slot.to_string(),
        s.pid.map_or("-".into(), |p| p.to_string()),
        state,
        format!("{:.1}s", s.uptime_ms as f64 / 1000.0),
        s.restarts.to_string(),
        s.selected.to_string(),
        s.connections.map_or("-".into(), |n| n.to_string()),
        s.probe_hits.to_string(),
        s.memory_bytes
            .map_or("-".into(), |b| format!("{:.1}M", b as f64 / 1048576.0)),
        s.cpu_ms
            .map_or("-".into(), |ms| format!("{:.2}s", ms as f64 / 1000.0)),
        s.last_exit.clone().unwrap_or_else(|| "-".into()),
        s.breaker.clone(),
        s.status.clone().unwrap_or_default(),
    ]
}

/// `flow 10, new 3` (routes with a count only).
fn routes_text(routes: &std::collections::BTreeMap<String, u64>) -> String {
    let text: Vec<String> = routes
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(route, n)| format!("{route} {n}"))
        .collect();
    if text.is_empty() {
        "none yet".into()
    } else {
        text.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::render;
    use ck::control::StatusReport;
    use serde_json::json;

    /// A report of a two-slot instance `web`, changed by `tweak` (a JSON object merged in).
    fn report(tweak: serde_json::Value) -> StatusReport {
        let mut value = json!({
            "name": "web", "pid": 42, "bpf": true, "steering": [], "policy": "round-robin",
            "groups": ["tcp4-8080"], "listen": ["0.0.0.0:8080"], "probe_port_base": 19800,
            "uptime_ms": 9_000, "active": [0], "fallback": [1], "degraded": [], "foreign": [],
            "min_workers": 1, "adopt": false, "dropped": 3, "stopping": false,
            "reloading": false, "migration": true, "workers": 2,
            "slots": [
                {"slot": 0, "pid": 100, "state": "ready", "drained": false, "uptime_ms": 1_500,
                 "restarts": 2, "generation": 3, "selected": 17, "fallbacks": 0, "migrated": 0,
                 "breaker": "closed", "queue_depth": 0, "probe_hits": 6, "connections": 4,
                 "memory_bytes": 3 * 1048576, "cpu_ms": 1_250, "spare": false,
                 "status": "serving"},
                {"slot": 1, "pid": null, "state": "restarting", "drained": false,
                 "uptime_ms": 0, "restarts": 5, "generation": 6, "selected": 0, "fallbacks": 0,
                 "migrated": 0, "breaker": "open", "queue_depth": 0, "probe_hits": 0,
                 "spare": false, "last_exit": "signal SIGKILL"},
            ],
        });
        if let (Some(base), Some(extra)) = (value.as_object_mut(), tweak.as_object()) {
            base.extend(extra.clone());
        }
        serde_json::from_value(value).expect("a valid report")
    }

    #[test]
    fn the_header_names_the_instance_policy_and_steering() {
        let text = render(&report(json!({})));
        let first = text.lines().next().unwrap();
        assert_eq!(
            first,
            "ck web (pid 42): 2 worker(s), 1 group(s) tcp4-8080, policy round-robin, \
             BPF steering on, migration on"
        );
        assert!(text.contains("active set: [0]   fallback: [1]   dropped (no slot): 3"));
        let text = render(&report(
            json!({"bpf": false, "migration": false, "reloading": true}),
        ));
        assert!(
            text.lines()
                .next()
                .unwrap()
                .ends_with("BPF steering OFF (plain SO_REUSEPORT), migration off, reloading"),
            "{text}"
        );
    }

    #[test]
    fn a_worker_at_another_priority_than_ck_shows_its_nice_value() {
        let mut r = report(json!({}));
        r.slots[0].nice = Some(0);
        assert!(
            !render(&r).contains("(nice"),
            "ck's own priority is not shown"
        );
        r.slots[0].nice = Some(-5);
        let text = render(&r);
        let row = text.lines().find(|l| l.contains(" 100 ")).unwrap();
        assert!(row.contains("ready (nice -5)"), "{text}");
    }

    #[test]
    fn dropped_worker_output_is_shown_per_slot() {
        assert!(!render(&report(json!({}))).contains("worker output"));
        let mut r = report(json!({}));
        r.slots[1].output_dropped = 12;
        let text = render(&r);
        assert!(
            text.contains(
                "\nworker output: lines dropped because ck's own output could not keep up \
                 (slot 1: 12)\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn the_stop_signal_is_shown_with_the_drain_timeout() {
        let text = render(&report(
            json!({"stop_signal": "SIGQUIT", "drain_timeout_ms": 10_000}),
        ));
        assert!(
            text.contains("\nstop: SIGQUIT, SIGKILL after 10s\n"),
            "{text}"
        );
    }

    #[test]
    fn each_slot_is_a_row_of_the_table() {
        let text = render(&report(json!({})));
        let rows: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("slot"))
            .collect();
        assert_eq!(rows.len(), 3, "{text}");
        let ready: Vec<&str> = rows[1].split_whitespace().collect();
        assert_eq!(
            ready,
            [
                "0", "100", "ready", "1.5s", "2", "17", "4", "6", "3.0M", "1.25s", "-", "closed",
                "serving"
            ]
        );
        let dead: Vec<&str> = rows[2].split_whitespace().collect();
        assert_eq!(
            dead,
            [
                "1",
                "-",
                "restarting",
                "0.0s",
                "5",
                "0",
                "-",
                "0",
                "-",
                "-",
                "signal",
                "SIGKILL",
                "open"
            ]
        );
    }

    /// Where each column starts in the header, and that every row's cell of it starts there
    /// too (left-aligned) or ends where the header ends (right-aligned).
    #[test]
    fn long_cells_widen_their_column_and_keep_the_table_aligned() {
        let mut r = report(json!({}));
        r.slots[1].last_exit = Some("exit 1 (never became ready)".into());
        r.slots[0].unhealthy = Some("probe failed: connection refused".into());
        r.slots[0].pid = Some(1234567);
        let text = render(&r);
        let table: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("slot"))
            .collect();
        assert_eq!(table.len(), 3, "{text}");
        let (header, ready, dead) = (table[0], table[1], table[2]);
        let start = |line: &str, word: &str| {
            line.find(word)
                .unwrap_or_else(|| panic!("no {word:?} in {line:?}"))
        };
        let end = |line: &str, word: &str| start(line, word) + word.len();
        // Left-aligned columns: state, last exit, breaker, status.
        assert_eq!(
            start(ready, "unhealthy:probe failed"),
            start(header, "state")
        );
        assert_eq!(start(dead, "restarting"), start(header, "state"));
        assert_eq!(start(dead, "exit 1 (never"), start(header, "last exit"));
        assert_eq!(start(ready, "closed"), start(header, "breaker"));
        assert_eq!(start(dead, "open"), start(header, "breaker"));
        assert_eq!(start(ready, "serving"), start(header, "status"));
        // Right-aligned columns: pid, selected, cpu.
        assert_eq!(end(ready, "1234567"), end(header, "pid"));
        assert_eq!(end(ready, "17"), end(header, "selected"));
        assert_eq!(end(ready, "1.25s"), end(header, "cpu"));
        assert_eq!(end(dead, "5"), end(header, "restarts"));
        // No row is wider than needed: the widest cell of a column is one gap from the next.
        assert!(dead.contains("exit 1 (never became ready)  open"), "{text}");
        assert!(
            !text.lines().any(|l| l.ends_with(' ')),
            "trailing blanks: {text}"
        );
    }

    #[test]
    fn warnings_come_before_the_table() {
        let text = render(&report(json!({
            "degraded": ["slot 1: breaker open"],
            "metrics": "127.0.0.1:9100",
            "steering": [{"group": "tcp4-8080", "attached": false, "checked_ms_ago": 10}],
            "foreign": [{"group": "tcp4-8080", "addr": "0.0.0.0:8080", "inode": 7, "uid": 0,
                         "pid": null, "command": null}],
            "connection_count": "scan (CK_CONN_COUNT=scan asks for the sock_diag scan)",
        })));
        let table = text.find("\nslot ").expect("the table's header");
        for line in [
            "DEGRADED: slot 1: breaker open",
            "metrics: http://127.0.0.1:9100/metrics (/healthz, /readyz)",
            "steering on tcp4-8080: NOT in effect (being re-attached)",
            "FOREIGN listener on 0.0.0.0:8080 (tcp4-8080): inode 7, uid 0, pid ? : never \
             steered to; stop it",
            "open connections: counted by the sock_diag scan (CK_CONN_COUNT=scan asks for",
        ] {
            let at = text
                .find(line)
                .unwrap_or_else(|| panic!("no {line:?} in {text}"));
            assert!(at < table, "{line:?} after the table: {text}");
        }
    }
}
