//! `ck maps`: every pinned map of every group of an instance, decoded by name (see
//! `ck::bpf::dump`), as text or JSON, for people without bpftool.
use std::{fmt::Write as _, process::ExitCode};

use anyhow::bail;
use ck::{
    bpf::dump::{self, GroupMaps, InstanceMaps},
    control::instances::{self, Which},
};

use super::control::status_of;

/// `ck maps [--json]` of the instance `which` names.
pub fn run(which: &Which, json: bool) -> anyhow::Result<ExitCode> {
    let name = instances::resolve(which)?;
    let report = status_of(&name)?;
    if report.no_bpf {
        bail!(
            "instance {name} runs without BPF (--no-bpf): it has no maps; `ck status` shows its slots"
        );
    }
    if report.pins.is_none() {
        bail!(
            "instance {name} has not pinned its maps yet (its BPF program is still loading); \
             try again in a moment"
        );
    }
    let maps = dump::read_instance(&name, &report.groups)?;
    if json {
        super::stdout::print_line(&serde_json::to_string_pretty(&maps)?)?;
    } else {
        super::stdout::print(&render(&maps))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The maps as text: one block per group, one section per map.
pub fn render(maps: &InstanceMaps) -> String {
    let mut out = format!("ck maps of {} (pins {})\n", maps.instance, maps.pins);
    for group in &maps.groups {
        render_group(&mut out, group);
    }
    out
}

fn render_group(out: &mut String, g: &GroupMaps) {
    let _ = writeln!(out, "\ngroup {} ({})", g.group, g.dir);
    for m in &g.maps {
        let _ = writeln!(
            out,
            "  {:<8} {} id {}: {} entries, key {} B, value {} B",
            m.name, m.kind, m.id, m.max_entries, m.key_size, m.value_size
        );
    }
    let c = &g.config;
    let [selected, backlog, syn_recv, head, synack] = c.queue_offsets;
    let _ = writeln!(
        out,
        "config:   policy {}, live half {}, probe base {}, flags {}, queue offsets (selected_sk/sk_ack_backlog/qlen/rskq_accept_head/snt_synack) {selected}/{backlog}/{syn_recv}/{head}/{synack}, queue patience {} us",
        c.policy, c.live_half, c.probe_base, c.flags, c.queue_patience_us
    );
    let a = &g.active;
    let _ = writeln!(
        out,
        "active:   live half {}: ready {:?} fallback {:?}; idle half {}: ready {:?} fallback {:?}",
        a.live_half,
        a.live.ready,
        a.live.fallback,
        a.live_half ^ 1,
        a.idle.ready,
        a.idle.fallback
    );
    let _ = writeln!(out, "slots:    {} record(s) in use", g.slots.len());
    let _ = writeln!(
        out,
        "  {:>4}  {:<12}  {:>8}  {:>10}  {:>6}  {:>5}  {:>5}",
        "slot", "state", "pid", "generation", "weight", "queue", "flags"
    );
    for s in &g.slots {
        let _ = writeln!(
            out,
            "  {:>4}  {:<12}  {:>8}  {:>10}  {:>6}  {:>5}  {:>5}",
            s.slot, s.state, s.pid, s.generation, s.weight, s.queue_depth, s.flags
        );
    }
    let _ = writeln!(out, "stats:    summed over {} CPUs", g.cursor.len());
    let _ = writeln!(
        out,
        "  {:>4}  {:>10}  {:>8}  {:>9}  {:>6}  {:>10}",
        "slot", "selected", "migrated", "fallbacks", "errors", "probe_hits"
    );
    for s in &g.stats {
        let c = &s.counters;
        let _ = writeln!(
            out,
            "  {:>4}  {:>10}  {:>8}  {:>9}  {:>6}  {:>10}",
            s.slot, c.selected, c.migrated, c.fallbacks, c.errors, c.probe_hits
        );
    }
    let _ = writeln!(
        out,
        "  no slot (index {}): {} connection(s) dropped",
        ck_common::STATS_NO_SLOT,
        g.no_slot.errors
    );
    let _ = writeln!(out, "cursor:   per CPU {:?}", g.cursor);
    let _ = writeln!(out, "sockets:  {}", g.sockets);
    let s = &g.sticky;
    if s.used {
        let shares = |half: &[dump::SlotShare]| {
            let words: Vec<String> = half
                .iter()
                .map(|h| format!("{}:{}", h.slot, h.entries))
                .collect();
            if words.is_empty() {
                "no slot".to_string()
            } else {
                words.join(" ")
            }
        };
        let _ = writeln!(
            out,
            "sticky:   positions per slot (slot:entries); live half {}: {}; idle half {}: {}",
            g.active.live_half,
            shares(&s.live),
            g.active.live_half ^ 1,
            shares(&s.idle)
        );
    } else {
        let _ = writeln!(out, "sticky:   unused (policy {})", g.config.policy);
    }
    let open: Vec<String> = g
        .conns
        .iter()
        .map(|c| format!("{}={}", c.slot, c.open))
        .collect();
    let _ = writeln!(
        out,
        "conns:    open per slot, summed over CPUs: {}",
        open.join(" ")
    );
    let _ = writeln!(
        out,
        "listeners: {} tagged (cookie=slot: {})",
        g.listeners.len(),
        g.listeners
            .iter()
            .map(|(c, s)| format!("{c}={s}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let _ = writeln!(
        out,
        "moved:    {} re-homed connection(s) still open",
        g.moved
    );
    let _ = writeln!(out, "conn_tags: {}", g.conn_tags);
    if let Some(udp) = &g.udp {
        render_udp(out, udp);
    }
}

/// A UDP group's `udp_stats` and `flows`.
fn render_udp(out: &mut String, udp: &dump::UdpEntry) {
    let words = |routes: &[(String, u64)]| {
        let counted: Vec<String> = routes
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(route, n)| format!("{route}={n}"))
            .collect();
        if counted.is_empty() {
            "none".to_string()
        } else {
            counted.join(" ")
        }
    };
    let _ = writeln!(
        out,
        "udp_stats: datagrams by route, summed over CPUs ({} mode)",
        udp.mode
    );
    for r in &udp.routes {
        let _ = writeln!(out, "  slot {:>3}: {}", r.slot, words(&r.routes));
    }
    let _ = writeln!(
        out,
        "  no slot (index {}): {}",
        ck_common::STATS_NO_SLOT,
        words(&udp.no_slot)
    );
    let _ = writeln!(out, "flows:    {} remembered (client -> slot)", udp.flows);
    if udp.mode == "quic" {
        let _ = writeln!(
            out,
            "pending:  {} QUIC handshake(s) by original connection ID",
            udp.pending
        );
    }
    const SHOWN: usize = 20;
    for f in udp.flows_listed.iter().take(SHOWN) {
        let _ = writeln!(
            out,
            "  {} -> slot {} (generation {})",
            f.client, f.slot, f.generation
        );
    }
    if udp.flows > SHOWN {
        let _ = writeln!(
            out,
            "  ... and {} more (--json lists up to 4096)",
            udp.flows - SHOWN
        );
    }
}
