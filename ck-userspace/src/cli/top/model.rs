//! What `ck top` shows, computed from two successive status reports without a terminal: one row
//! per slot with rates (new connections per second from the `selected` counter, datagrams per
//! second from the UDP groups' counters, CPU from the worker's CPU time), the instance's
//! totals, and the cells both views print.
use ck::control::{SlotReport, StatusReport};

/// Column titles, widths and alignment, shared by the terminal view and the text frame.
pub const COLUMNS: [Column; 12] = [
    Column::right("slot", 4),
    Column::right("pid", 8),
    Column::left("state", 20),
    Column::right("conn/s", 8),
    Column::right("dgram/s", 8),
    Column::right("queue", 6),
    Column::right("open", 6),
    Column::right("memory", 9),
    Column::right("cpu", 7),
    Column::right("restarts", 8),
    Column::right("selected", 10),
    Column::right("uptime", 9),
];

/// One column of the slot table.
#[derive(Clone, Copy, Debug)]
pub struct Column {
    /// Its title.
    pub title: &'static str,
    /// Its width in characters.
    pub width: u16,
    /// Whether its cells are right-aligned (numbers).
    pub right: bool,
}

impl Column {
    const fn right(title: &'static str, width: u16) -> Column {
        Column {
            title,
            width,
            right: true,
        }
    }

    const fn left(title: &'static str, width: u16) -> Column {
        Column {
            title,
            width,
            right: false,
        }
    }
}

/// One slot as `ck top` shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct SlotRow {
    /// Slot index.
    pub slot: u32,
    /// Worker pid, when one runs.
    pub pid: Option<u32>,
    /// State word, with what qualifies it (`drained`, `unhealthy:probe`, `ready (spare)`).
    pub state: String,
    /// New connections per second since the previous report (None: no previous report).
    pub conn_rate: Option<f64>,
    /// Datagrams per second since the previous report, every UDP group summed (None: no
    /// previous report, or no UDP group).
    pub dgram_rate: Option<f64>,
    /// Accept-queue depth last sampled.
    pub queue: u32,
    /// Open connections (None: not counted).
    pub open: Option<u64>,
    /// Memory of the worker's tree.
    pub memory: Option<u64>,
    /// CPU use of the worker's tree since the previous report, in percent of one CPU.
    pub cpu_percent: Option<f64>,
    /// Restarts of the slot's worker.
    pub restarts: u32,
    /// Connections sent to the slot since it was opened.
    pub selected: u64,
    /// Worker uptime.
    pub uptime_ms: u64,
}

/// The instance's totals over every slot.
#[derive(Clone, Debug, PartialEq)]
pub struct Totals {
    /// Slots in use.
    pub slots: usize,
    /// Of those, ready ones.
    pub ready: usize,
    /// New connections per second.
    pub conn_rate: Option<f64>,
    /// Datagrams per second.
    pub dgram_rate: Option<f64>,
    /// Accept-queue depths summed.
    pub queue: u32,
    /// Open connections summed over the slots that report them.
    pub open: Option<u64>,
    /// Memory summed over the slots that report it.
    pub memory: Option<u64>,
    /// CPU summed over the slots that report it.
    pub cpu_percent: Option<f64>,
    /// Restarts summed.
    pub restarts: u32,
    /// Connections sent summed.
    pub selected: u64,
}

/// One frame of `ck top`.
#[derive(Clone, Debug, PartialEq)]
pub struct Frame {
    /// Lines above the table: the instance, its steering and active set, what is wrong.
    pub header: Vec<String>,
    /// The slots, by index.
    pub rows: Vec<SlotRow>,
    /// Their totals.
    pub totals: Totals,
    /// Seconds between the two reports the rates come from (None: only one report so far).
    pub interval_s: Option<f64>,
}

/// Seconds between `prev` and `cur`, measured on the supervisor's clock (its uptime in each
/// report), when both come from the same supervisor and time went forward.
fn interval_s(prev: &StatusReport, cur: &StatusReport) -> Option<f64> {
    let same = prev.pid == cur.pid && prev.name == cur.name;
    (same && cur.uptime_ms > prev.uptime_ms)
        .then(|| (cur.uptime_ms - prev.uptime_ms) as f64 / 1000.0)
}

/// Per-second rate of a counter that went from `prev` to `cur` in `seconds`. A counter that went
/// down was reset (its slot was reused) meanwhile: what it counts now is all new.
pub fn rate(prev: u64, cur: u64, seconds: f64) -> f64 {
    let delta = if cur >= prev { cur - prev } else { cur };
    delta as f64 / seconds
}

/// Datagrams the UDP groups of `report` sent `slot`, summed (None: no UDP group).
fn datagrams(report: &StatusReport, slot: u32) -> Option<u64> {
    if report.udp.is_empty() {
        return None;
    }
    let sent = report.udp.iter().flat_map(|g| &g.slots);
    Some(sent.filter(|s| s.slot == slot).map(|s| s.datagrams).sum())
}

/// CPU use in percent of one CPU: the worker's CPU time that grew from `prev_ms` to `cur_ms` in
/// `seconds`. None when it is another worker than before (its CPU time started again).
fn cpu_percent(prev: &SlotReport, cur: &SlotReport, seconds: f64) -> Option<f64> {
    if prev.pid != cur.pid || cur.pid.is_none() {
        return None;
    }
    let (before, now) = (prev.cpu_ms?, cur.cpu_ms?);
    Some(now.saturating_sub(before) as f64 / 10.0 / seconds)
}

/// The state word `ck top` shows: `drained` for a slot `ck drain` holds out, the health
/// reasons of an unhealthy one, and what a member, spare or canary slot is.
pub fn state_text(s: &SlotReport) -> String {
    match (&s.unhealthy, s.member_of, s.spare) {
        (Some(why), _, _) => format!("unhealthy:{why}"),
        (None, _, _) if s.canary => format!("{} (canary)", s.state),
        (None, Some(root), _) => format!("{} (of {root})", s.state),
        (None, None, true) => format!("{} (spare)", s.state),
        (None, None, false) if s.drained && s.state == "draining" => "drained".to_string(),
        (None, None, false) => s.state.clone(),
    }
}

impl Frame {
    /// The frame for report `cur`, with rates against `prev` (the report before it, if any).
    pub fn new(prev: Option<&StatusReport>, cur: &StatusReport) -> Frame {
        let interval = prev.and_then(|p| interval_s(p, cur).map(|dt| (p, dt)));
        let rows: Vec<SlotRow> = cur
            .slots
            .iter()
            .map(|s| {
                let before = interval
                    .and_then(|(p, dt)| p.slots.iter().find(|o| o.slot == s.slot).map(|o| (o, dt)));
                SlotRow {
                    slot: s.slot,
                    pid: s.pid,
                    state: state_text(s),
                    // A slot new since the previous report counted from zero.
                    conn_rate: interval
                        .map(|(_, dt)| rate(before.map_or(0, |(o, _)| o.selected), s.selected, dt)),
                    dgram_rate: interval.and_then(|(p, dt)| {
                        let earlier = datagrams(p, s.slot).unwrap_or(0);
                        Some(rate(earlier, datagrams(cur, s.slot)?, dt))
                    }),
                    queue: s.queue_depth,
                    open: s.connections,
                    memory: s.memory_bytes,
                    cpu_percent: before.and_then(|(o, dt)| cpu_percent(o, s, dt)),
                    restarts: s.restarts,
                    selected: s.selected,
                    uptime_ms: s.uptime_ms,
                }
            })
            .collect();
        let totals = Totals {
            slots: rows.len(),
            ready: cur.slots.iter().filter(|s| s.state == "ready").count(),
            conn_rate: interval.map(|_| rows.iter().filter_map(|r| r.conn_rate).sum()),
            dgram_rate: sum_known(rows.iter().map(|r| r.dgram_rate)),
            queue: rows.iter().map(|r| r.queue).sum(),
            open: sum_known(rows.iter().map(|r| r.open)),
            memory: sum_known(rows.iter().map(|r| r.memory)),
            cpu_percent: sum_known(rows.iter().map(|r| r.cpu_percent)),
            restarts: rows.iter().map(|r| r.restarts).sum(),
            selected: rows.iter().map(|r| r.selected).sum(),
        };
        Frame {
            header: header(cur),
            rows,
            totals,
            interval_s: interval.map(|(_, dt)| dt),
        }
    }
}

/// The sum of the values that are known, None when none is.
fn sum_known<T: std::iter::Sum<T>>(values: impl Iterator<Item = Option<T>>) -> Option<T> {
    let mut known = values.flatten().peekable();
    known.peek()?;
    Some(known.sum())
}

/// The lines above the table.
fn header(r: &StatusReport) -> Vec<String> {
    let policy = serde_json::to_value(r.policy)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let steering = if r.bpf {
        "BPF steering on"
    } else {
        "BPF steering OFF (plain SO_REUSEPORT)"
    };
    let mut lines = vec![
        format!(
            "ck {} (pid {}) up {}: {} worker(s), {}, policy {policy}, {steering}{}{}",
            r.name,
            r.pid,
            uptime(r.uptime_ms),
            r.workers,
            r.groups.join(","),
            if r.reloading { ", RELOADING" } else { "" },
            if r.stopping { ", STOPPING" } else { "" },
        ),
        // While the fleet boots, the starting slots chosen beside the ready ones.
        match r.booting.is_empty() {
            true => format!(
                "active set {:?}   fallback {:?}   dropped (no slot) {}",
                r.active, r.fallback, r.dropped
            ),
            false => format!(
                "active set {:?}   booting {:?}   fallback {:?}   dropped (no slot) {}",
                r.active, r.booting, r.fallback, r.dropped
            ),
        },
    ];
    // A canary judged: its share, limits and counts so far (both releases serve meanwhile).
    lines.extend(r.canary.iter().map(|c| format!("CANARY {c}")));
    lines.extend(r.degraded.iter().map(|d| format!("DEGRADED: {d}")));
    lines.extend(
        r.foreign
            .iter()
            .map(|f| format!("FOREIGN listener on {} (pid {:?})", f.addr, f.pid)),
    );
    lines
}

/// `12.5`, `1234`, or `-` when unknown.
pub fn fmt_rate(rate: Option<f64>) -> String {
    match rate {
        None => "-".into(),
        Some(r) if r < 100.0 => format!("{r:.1}"),
        Some(r) => format!("{r:.0}"),
    }
}

/// `812K`, `12.3M`, `1.50G`, or `-`.
pub fn fmt_bytes(bytes: Option<u64>) -> String {
    let Some(b) = bytes else { return "-".into() };
    let b = b as f64;
    if b < 1024.0 * 1024.0 {
        format!("{:.0}K", b / 1024.0)
    } else if b < 1024.0 * 1024.0 * 1024.0 {
        format!("{:.1}M", b / 1048576.0)
    } else {
        format!("{:.2}G", b / 1073741824.0)
    }
}

/// `3.5%`, or `-`.
pub fn fmt_cpu(percent: Option<f64>) -> String {
    percent.map_or("-".into(), |p| format!("{p:.1}%"))
}

/// `42s`, `12m05s`, `3h07m`, `2d04h`.
pub fn uptime(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

/// A count, or `-` when not known.
fn fmt_count(count: Option<u64>) -> String {
    count.map_or("-".into(), |n| n.to_string())
}

impl SlotRow {
    /// The row's cells, in [`COLUMNS`] order.
    pub fn cells(&self) -> [String; COLUMNS.len()] {
        [
            self.slot.to_string(),
            self.pid.map_or("-".into(), |p| p.to_string()),
            self.state.clone(),
            fmt_rate(self.conn_rate),
            fmt_rate(self.dgram_rate),
            self.queue.to_string(),
            fmt_count(self.open),
            fmt_bytes(self.memory),
            fmt_cpu(self.cpu_percent),
            self.restarts.to_string(),
            self.selected.to_string(),
            if self.pid.is_some() {
                uptime(self.uptime_ms)
            } else {
                "-".into()
            },
        ]
    }
}

impl Totals {
    /// The totals' cells, in [`COLUMNS`] order.
    pub fn cells(&self) -> [String; COLUMNS.len()] {
        [
            "all".into(),
            String::new(),
            format!("{}/{} ready", self.ready, self.slots),
            fmt_rate(self.conn_rate),
            fmt_rate(self.dgram_rate),
            self.queue.to_string(),
            fmt_count(self.open),
            fmt_bytes(self.memory),
            fmt_cpu(self.cpu_percent),
            self.restarts.to_string(),
            self.selected.to_string(),
            String::new(),
        ]
    }
}
