//! Worker output as ck's own log records (`--worker-output capture`): each worker's stdout
//! and stderr are pipes; a reader thread (a tokio runtime of its own, so a flooding worker
//! costs that thread, never the event loop) splits what arrives into lines and logs each as a
//! `tracing` record (target `worker`, with slot, pid, generation and stream), which goes to
//! ck's stderr through the same bounded queue as ck's own records ([`sink`]), in order.
//!
//! Bounds: a line is at most [`MAX_LINE`] bytes (a longer one is split, each piece marked);
//! the queue holds at most [`sink::MAX_QUEUED_BYTES`] of workers' lines. The reader always
//! drains the pipes, so a worker never waits on ck while ck runs; when the queue is full
//! (ck's stderr is slower than the workers: a blocked terminal, a pipe nobody reads) lines
//! are dropped, counted per slot (`ck status`, `ck_worker_output_dropped_lines_total`) and
//! reported in the log at most once a second per stream. While no ck reads (the exec of
//! `ck upgrade`, a dead ck under `--survive-supervisor`), the pipe's own buffer fills and
//! then the worker's write blocks: it is never refused (see ARCHITECTURE.md, "Worker
//! output"). Each worker's last error line on stderr is kept until its death is handled
//! ([`last_error`]).
use std::{
    os::fd::OwnedFd,
    sync::{
        Arc, Mutex, Weak,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use crate::settings::run_config::LogFormat;

pub mod last_error;
pub(super) mod lines;
pub mod sink;

use last_error::LastErrors;
use lines::Splitter;

/// The longest line ck logs as one record; a longer one is split.
pub const MAX_LINE: usize = 16 * 1024;
/// At most one report of dropped lines per stream in this time.
const REPORT_EVERY: Duration = Duration::from_secs(1);

/// Which of a worker's streams a line came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// Its fd 1.
    Stdout,
    /// Its fd 2.
    Stderr,
}

impl Stream {
    /// `stdout` or `stderr`.
    pub fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// Who wrote a line.
#[derive(Clone, Copy, Debug)]
pub struct Source {
    /// The slot.
    pub slot: u32,
    /// The worker's pid.
    pub pid: u32,
    /// The slot's generation when the worker started.
    pub generation: u32,
    /// The stream.
    pub stream: Stream,
}

/// The capture of every worker's output: the reader runtime.
pub(super) struct Hub {
    readers: tokio::runtime::Handle,
    /// Pipes not at their end yet.
    reading: Arc<AtomicUsize>,
    /// Set by [`Hub::finish`]: ck's last line is written, so readers log nothing more.
    closed: Arc<AtomicBool>,
    /// Held by every read (and the logging of its lines); held by `ck upgrade` across its
    /// exec, so nothing read is lost there.
    gate: Arc<Mutex<()>>,
    format: LogFormat,
    /// Every reader's line in the making (logged as they are before `ck upgrade`'s exec).
    partials: Mutex<Vec<(Weak<Mutex<Splitter>>, Source)>>,
    /// Every worker's last error line on stderr, until its death takes it.
    last_errors: Arc<LastErrors>,
}

/// ck's read ends of one worker's pipes (stdout, stderr): kept for the handover; the readers
/// read copies of them.
pub struct OutputEnds {
    /// stdout's and stderr's read ends.
    pub ends: [OwnedFd; 2],
    /// The pipes' inodes (a ck that takes the worker back checks them).
    pub inodes: [u64; 2],
    /// With `--survive-supervisor`: the numbers of the worker's own copies of the read ends.
    pub in_worker: Option<[i32; 2]>,
}

impl Hub {
    /// Starts the reader thread; records are shaped for `format`.
    pub(super) fn start(format: LogFormat) -> anyhow::Result<Hub> {
        use anyhow::Context as _;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .context("starting the worker output reader")?;
        let readers = runtime.handle().clone();
        std::thread::Builder::new()
            .name("ck-output-read".into())
            .spawn(move || runtime.block_on(std::future::pending::<()>()))
            .context("starting the worker output reader")?;
        Ok(Hub {
            readers,
            reading: Default::default(),
            closed: Default::default(),
            gate: Default::default(),
            format,
            partials: Default::default(),
            last_errors: Default::default(),
        })
    }

    /// Worker `pid` died: its last error line on stderr (else its last line), quoted and
    /// forgotten; None when it wrote none. Waits at most `patience` for its stderr to end.
    pub(super) fn last_error(&self, pid: u32, patience: Duration) -> Option<String> {
        self.last_errors.take(pid, patience)
    }

    /// Reads the pipes of `ends` for the worker `from` (stream aside), counting lines that
    /// cannot be queued in `dropped`. Each reader ends at its pipe's end of file (the worker
    /// and every process holding its write end exited), after its last, partial, line.
    pub(super) fn read(
        &self,
        ends: &OutputEnds,
        from: Source,
        dropped: &Arc<AtomicU64>,
    ) -> std::io::Result<()> {
        for (end, stream) in ends.ends.iter().zip([Stream::Stdout, Stream::Stderr]) {
            let copy = end.try_clone()?;
            let from = Source { stream, ..from };
            let (reading, dropped, gate) =
                (self.reading.clone(), dropped.clone(), self.gate.clone());
            let closed = self.closed.clone();
            let last_errors = (stream == Stream::Stderr).then(|| {
                self.last_errors.open(from.pid);
                self.last_errors.clone()
            });
            reading.fetch_add(1, Ordering::SeqCst);
            // On the reader's runtime (its reactor registers the pipe).
            let _guard = self.readers.enter();
            let fd = match crate::os::pipe::AsyncReadEnd::new(copy) {
                Ok(fd) => fd,
                Err(e) => {
                    reading.fetch_sub(1, Ordering::SeqCst);
                    return Err(e);
                }
            };
            let format = self.format;
            let splitter = Arc::new(Mutex::new(Splitter::new(MAX_LINE)));
            let mut partials = self.partials.lock().unwrap_or_else(|e| e.into_inner());
            partials.retain(|(s, _)| s.strong_count() > 0);
            partials.push((Arc::downgrade(&splitter), from));
            self.readers.spawn(async move {
                let mut reader = Reader {
                    closed,
                    from,
                    format,
                    splitter,
                    dropped,
                    unreported: 0,
                    reported_at: None,
                    last_errors,
                };
                reader.run(fd, &gate).await;
                reading.fetch_sub(1, Ordering::SeqCst);
            });
        }
        Ok(())
    }

    /// Stops reading (until the guard is dropped) and waits up to `timeout` for the lines
    /// queued so far to be written: before `ck upgrade`'s exec, so what is still in the pipes
    /// is the new image's to read.
    /// A line a worker is in the middle of writing is logged as it is, marked; the rest comes
    /// in the new image.
    pub(super) fn pause(&self, timeout: Duration) -> std::sync::MutexGuard<'_, ()> {
        let paused = self.gate.lock().unwrap_or_else(|e| e.into_inner());
        let partials = self.partials.lock().unwrap_or_else(|e| e.into_inner());
        for (splitter, from) in partials.iter() {
            let Some(splitter) = splitter.upgrade() else {
                continue;
            };
            let partial = splitter.lock().unwrap_or_else(|e| e.into_inner()).finish();
            if let Some(text) = partial {
                line_record(*from, &text, MARK_UPGRADE, self.format);
            }
        }
        sink::flush(timeout);
        paused
    }

    /// Waits up to `timeout` for every pipe to end (after the last worker exited), so that
    /// the workers' last lines are logged before ck's last one; then closes the readers (under
    /// the gate, so a batch being logged ends first): nothing comes after ck's last line.
    pub(super) async fn finish(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.reading.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let _held = self.gate.lock().unwrap_or_else(|e| e.into_inner());
        self.closed.store(true, Ordering::SeqCst);
    }
}

/// One pipe's reader.
struct Reader {
    /// The hub's [`Hub::finish`] flag: set, lines are no longer logged.
    closed: Arc<AtomicBool>,
    from: Source,
    format: LogFormat,
    /// Its line in the making (shared with the hub, see [`Hub::pause`]).
    splitter: Arc<Mutex<Splitter>>,
    /// The slot's count of dropped lines.
    dropped: Arc<AtomicU64>,
    /// Dropped since the last report.
    unreported: u64,
    reported_at: Option<Instant>,
    /// For stderr: where its lines are kept for a quote at the worker's death.
    last_errors: Option<Arc<LastErrors>>,
}

impl Reader {
    async fn run(&mut self, fd: crate::os::pipe::AsyncReadEnd, gate: &Mutex<()>) {
        let splitter = self.splitter.clone();
        let closed = self.closed.clone();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let take = |bytes: &[u8]| {
                if closed.load(Ordering::SeqCst) {
                    return;
                }
                let lines = splitter
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(bytes);
                for (line, split) in lines {
                    self.emit(line, split);
                }
            };
            match fd.read_with(&mut buf, gate, take).await {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(
                        slot = self.from.slot,
                        pid = self.from.pid,
                        stream = self.from.stream.name(),
                        "reading the worker's output failed: {e}"
                    );
                    break;
                }
            }
        }
        // Under the gate, as every batch: not after ck's last line (see `Hub::finish`).
        let _held = gate.lock().unwrap_or_else(|e| e.into_inner());
        if !closed.load(Ordering::SeqCst) {
            let last = splitter.lock().unwrap_or_else(|e| e.into_inner()).finish();
            if let Some(last) = last {
                self.emit(last, false);
            }
            self.report(true);
        }
        if let Some(last_errors) = &self.last_errors {
            last_errors.end(self.from.pid);
        }
    }

    fn emit(&mut self, text: String, split: bool) {
        if let Some(last_errors) = &self.last_errors {
            last_errors.record(self.from.pid, &text);
        }
        self.report(false);
        let logged = sink::worker_room() && {
            let mark = if split { MARK_LONG } else { "" };
            line_record(self.from, &text, mark, self.format);
            !sink::take_dropped()
        };
        if !logged {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            self.unreported += 1;
        }
    }

    /// Logs how many lines were dropped since the last report, at most every
    /// [`REPORT_EVERY`] (`now`: at the pipe's end, whatever the time).
    fn report(&mut self, now: bool) {
        let due = now
            || self
                .reported_at
                .is_none_or(|at| at.elapsed() >= REPORT_EVERY);
        // A full queue would only drop the report too.
        if self.unreported == 0 || !due || !sink::worker_room() {
            return;
        }
        tracing::warn!(
            target: sink::WORKER_TARGET,
            slot = self.from.slot,
            pid = self.from.pid,
            generation = self.from.generation,
            stream = self.from.stream.name(),
            dropped = self.unreported,
            total = self.dropped.load(Ordering::Relaxed),
            "worker output dropped: ck's own output (its stderr) could not keep up"
        );
        if !sink::take_dropped() {
            self.unreported = 0;
            self.reported_at = Some(Instant::now());
        }
    }
}

/// The mark of a piece of a line longer than [`MAX_LINE`].
const MARK_LONG: &str = " [split: longer than 16 KiB]";
/// The mark of the part of a line written before `ck upgrade`'s exec (the rest follows).
const MARK_UPGRADE: &str = " [split: ck upgrade]";

/// Logs one line (target `worker`), `mark` after it: in text, the source before the line
/// (`slot=0 pid=123 gen=1 stdout: LINE`); in JSON, the line as `message` beside the fields
/// `slot`, `pid`, `generation` and `stream`.
fn line_record(from: Source, text: &str, mark: &str, format: LogFormat) {
    let (slot, pid, generation, stream) =
        (from.slot, from.pid, from.generation, from.stream.name());
    match format {
        LogFormat::Text => tracing::info!(
            target: sink::WORKER_TARGET,
            "slot={slot} pid={pid} gen={generation} {stream}: {text}{mark}"
        ),
        LogFormat::Json => tracing::info!(
            target: sink::WORKER_TARGET,
            slot,
            pid,
            generation,
            stream,
            "{text}{mark}"
        ),
    }
}
