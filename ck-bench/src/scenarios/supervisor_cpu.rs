//! The `supervisor-cpu` scenario: the supervisor's own CPU idle, over [`IDLE`] with nothing
//! connecting, and while [`WORKERS`] demo workers take about [`RATE`] new connections per
//! second (`Connection: close`, the in-repo load client, paced open-loop), for ck with its
//! default policy (round-robin), with `--policy least-queue` and with `--no-bpf`, one after the
//! other in one run. CPU is read from `/proc/PID/task/*/schedstat` (nanoseconds on CPU per
//! thread, `ck_tests::cpu`) and from `/proc/PID/stat` (`utime` + `stime` of ck's process, all
//! its threads, not its workers, in 10 ms ticks) before and after each window; the load's
//! window starts [`WARM_UP`] into the load. Goals: idle at most 0.1 % of a core; under load at
//! most 0.3 % of a core per 10 k connections a second.

use std::thread;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use ck_tests::cpu::{CpuSnapshot, clock_ticks, ticks_cpu};
use ck_tests::load::{self, LoadReport, LoadSpec, Mode};

use crate::Bench;
use crate::instance::{Instance, Variant};
use crate::table::{Cell, Goal, Table};

/// Workers of every instance.
const WORKERS: u32 = 2;
/// New connections per second asked of the load client.
const RATE: f64 = 10_000.0;
/// Concurrent load connections (each sends one request at a time).
const CONNECTIONS: usize = 64;
/// Load before the CPU window starts (the supervisor reaches its steady pace).
const WARM_UP: Duration = Duration::from_secs(1);
/// The CPU window, under load all along.
const MEASURE: Duration = Duration::from_secs(10);
/// Limit of one request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// After the fleet is ready, before the idle window (the start's one-off work: the exit
/// watch's load, the first canaries).
const IDLE_SETTLE: Duration = Duration::from_secs(2);
/// The idle window: no connection at all.
const IDLE: Duration = Duration::from_secs(30);

/// One contender: its column and `ck run` setup.
struct Contender {
    label: &'static str,
    variant: Variant,
    extra: &'static [&'static str],
}

/// The contenders, in the table's order.
const CONTENDERS: [Contender; 3] = [
    Contender {
        label: "ck (round-robin)",
        variant: Variant::Ck,
        extra: &[],
    },
    Contender {
        label: "ck least-queue",
        variant: Variant::Ck,
        extra: &["--policy", "least-queue"],
    },
    Contender {
        label: "--no-bpf",
        variant: Variant::Baseline,
        extra: &[],
    },
];

/// One contender's measurements.
struct Sample {
    /// The threads' schedstat run time over [`IDLE`].
    idle_cpu: Duration,
    /// Times its threads were put on a CPU over [`IDLE`].
    idle_wakeups: u64,
    /// `utime` + `stime` over the window.
    ticks_cpu: Duration,
    /// The threads' schedstat run time over the window.
    sched_cpu: Duration,
    /// The load over its whole run.
    report: LoadReport,
}

/// Runs the scenario and returns its table.
pub fn run(bench: &Bench) -> Result<Table> {
    let mut samples = Vec::new();
    for contender in &CONTENDERS {
        bench.progress(format_args!("supervisor-cpu: {}", contender.label));
        samples.push(measure(bench, contender)?);
    }
    let columns: Vec<&str> = CONTENDERS.iter().map(|c| c.label).collect();
    let mut t = Table::with_columns(
        &format!(
            "supervisor-cpu: ck's own CPU, {WORKERS} demo workers, ~{RATE:.0} new connections/s \
             (Connection: close), {MEASURE:?} window"
        ),
        &columns,
    );
    t.ratio_between(0, 2);
    let per_window = |d: Duration| Cell::ms(d);
    let share = |d: Duration, of: Duration| {
        let pct = d.as_secs_f64() / of.as_secs_f64() * 100.0;
        Cell {
            text: format!("{pct:.3} %"),
            num: Some(pct),
        }
    };
    let percent = |d: Duration| share(d, MEASURE);
    t.row_of(
        &format!("idle: CPU per {IDLE:?} (schedstat)"),
        samples.iter().map(|s| per_window(s.idle_cpu)).collect(),
        Goal::None,
    );
    t.detail();
    t.row_of(
        "idle: % of a core (schedstat)",
        samples.iter().map(|s| share(s.idle_cpu, IDLE)).collect(),
        Goal::AtMost(0.1, "<= 0.1 %"),
    );
    t.row_of(
        &format!("idle: wake-ups per {IDLE:?}"),
        samples
            .iter()
            .map(|s| Cell::count(s.idle_wakeups))
            .collect(),
        Goal::None,
    );
    t.detail();
    t.row_of(
        &format!("CPU per {MEASURE:?} (utime+stime)"),
        samples.iter().map(|s| per_window(s.ticks_cpu)).collect(),
        Goal::None,
    );
    t.detail();
    t.row_of(
        "% of a core (utime+stime)",
        samples.iter().map(|s| percent(s.ticks_cpu)).collect(),
        Goal::AtMost(0.3, "<= 0.3 %"),
    );
    t.detail();
    t.row_of(
        &format!("CPU per {MEASURE:?} (schedstat, all threads)"),
        samples.iter().map(|s| per_window(s.sched_cpu)).collect(),
        Goal::None,
    );
    t.detail();
    t.row_of(
        "% of a core (schedstat)",
        samples.iter().map(|s| percent(s.sched_cpu)).collect(),
        Goal::AtMost(0.3, "<= 0.3 %"),
    );
    t.detail();
    t.row_of(
        "% of a core per 10 k connections/s (schedstat)",
        samples
            .iter()
            .map(|s| {
                let per = s.sched_cpu.as_secs_f64() / MEASURE.as_secs_f64() * 100.0;
                let pct = per / (s.report.rps() / 10_000.0).max(1e-9);
                Cell {
                    text: format!("{pct:.3} %"),
                    num: Some(pct),
                }
            })
            .collect(),
        Goal::AtMost(0.3, "<= 0.3 %"),
    );
    t.row_of(
        "new connections/s achieved",
        samples
            .iter()
            .map(|s| Cell::rate(s.report.rps(), "conn/s"))
            .collect(),
        Goal::None,
    );
    t.row_of(
        "failed requests",
        samples.iter().map(|s| Cell::failures(&s.report)).collect(),
        Goal::None,
    );
    let lq = &samples[1];
    let base = &samples[2];
    if !base.sched_cpu.is_zero() {
        t.note(format!(
            "least-queue / --no-bpf (schedstat): {:.2}",
            lq.sched_cpu.as_secs_f64() / base.sched_cpu.as_secs_f64()
        ));
    }
    for (contender, s) in CONTENDERS.iter().zip(&samples) {
        t.failure_notes(contender.label, &s.report, 3);
        if s.report.rps() < RATE * 0.9 {
            t.note(format!(
                "{}: the load client reached {:.0} of the {RATE:.0} conn/s asked (its CPUs are \
                 shared with ck, the workers and the machine's other processes); the paced \
                 requests it could not start in time went out as fast as answers came",
                contender.label,
                s.report.rps()
            ));
        }
    }
    t.note(format!(
        "utime+stime counts in clock ticks ({} ms each); schedstat in nanoseconds (threads alive \
         at both reads)",
        1000 / clock_ticks()
    ));
    Ok(t)
}

/// Runs one contender: ck started, load for [`WARM_UP`] + [`MEASURE`] + a little, CPU read at
/// both ends of the window.
fn measure(bench: &Bench, contender: &Contender) -> Result<Sample> {
    let mut inst = Instance::start(
        &bench.bin,
        &bench.log_dir,
        "supervisor-cpu",
        contender.variant,
        WORKERS,
        contender.extra,
    )?;
    inst.wait_ready(WORKERS as usize)?;
    let pid = inst.pid();
    thread::sleep(IDLE_SETTLE);
    let idle0 = sched_of(pid)?;
    let idle_window = Instant::now();
    thread::sleep(IDLE);
    let idle1 = sched_of(pid)?;
    let idle_scale = IDLE.as_secs_f64() / idle_window.elapsed().as_secs_f64();
    let mut spec = LoadSpec::for_duration(
        inst.addr(),
        Mode::NewConnection,
        CONNECTIONS,
        WARM_UP + MEASURE + Duration::from_millis(500),
    );
    spec.rate = Some(RATE);
    spec.timeout = REQUEST_TIMEOUT;
    let load = load::start(spec);
    thread::sleep(WARM_UP);
    let (ticks0, sched0) = (ticks_of(pid)?, sched_of(pid)?);
    let window = Instant::now();
    thread::sleep(MEASURE);
    let (ticks1, sched1) = (ticks_of(pid)?, sched_of(pid)?);
    let scale = MEASURE.as_secs_f64() / window.elapsed().as_secs_f64();
    let report = load.join();
    bench.progress(format_args!(
        "supervisor-cpu: {}: {}",
        contender.label,
        report.summary()
    ));
    bench.report_log(&inst);
    inst.stop()?;
    Ok(Sample {
        idle_cpu: idle1.since(&idle0).mul_f64(idle_scale),
        idle_wakeups: idle1.wakeups_since(&idle0),
        ticks_cpu: ticks1.saturating_sub(ticks0).mul_f64(scale),
        sched_cpu: sched1.since(&sched0).mul_f64(scale),
        report,
    })
}

/// `utime` + `stime` of ck's process.
fn ticks_of(pid: u32) -> Result<Duration> {
    ticks_cpu(pid).with_context(|| format!("reading /proc/{pid}/stat: ck is gone"))
}

/// The run time of each of ck's threads.
fn sched_of(pid: u32) -> Result<CpuSnapshot> {
    CpuSnapshot::take(pid).with_context(|| format!("reading /proc/{pid}/task: ck is gone"))
}
