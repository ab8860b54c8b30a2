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
    kept_line(report, &mut out);
    if let Some(canary) = &report.canary {
        let slots: Vec<String> = report
            .slots
            .iter()
            .filter(|s| s.canary)
            .map(|s| s.slot.to_string())
            .collect();
        let _ = writeln!(out, "canary {canary} (slots {})", slots.join(", "));
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

/// `previous release kept ...`: the workers `--keep-previous` keeps for `ck rollback`, and the
/// memory they hold.
fn kept_line(report: &StatusReport, out: &mut String) {
    use std::fmt::Write as _;
    let kept: Vec<&ck::control::SlotReport> =
        report.slots.iter().filter(|s| s.state == "kept").collect();
    let Some(window) = report.keep_previous_ms else {
        return;
    };
    let window = ck::settings::defaults::duration_text(std::time::Duration::from_millis(window));
    if kept.is_empty() {
        let _ = writeln!(
            out,
            "previous release: none kept (--keep-previous {window})"
        );
        return;
    }
    let memory: u64 = kept.iter().filter_map(|s| s.memory_bytes).sum();
    let slots: Vec<String> = kept.iter().map(|s| s.slot.to_string()).collect();
    let _ = writeln!(
        out,
        "previous release: {} worker(s) kept (slots {}), {:.1} MiB, for {window} after the \
         reload: `ck rollback` puts them back",
        kept.len(),
        slots.join(", "),
        memory as f64 / 1048576.0
    );
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
mod tests;
