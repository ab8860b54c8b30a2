//! Where ck's log records go: one bounded queue of formatted lines, written to stderr by a
//! thread of its own, so that a slow stderr (a blocked terminal, a pipe nobody reads) never
//! blocks the event loop or the output readers, and ck's memory stays bounded. Records keep
//! the order in which they were made. When the queue is full, a worker's line (target
//! `worker`) is dropped and its reader told so ([`take_dropped`]); ck's own records have a
//! reserve beyond that and are dropped (counted, and reported once the output moves again)
//! only when that is full too.
use std::{
    collections::VecDeque,
    io::Write as _,
    sync::{
        Condvar, Mutex, OnceLock,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

/// The most bytes of workers' lines waiting for stderr.
pub const MAX_QUEUED_BYTES: usize = 1 << 20;
/// The most bytes of records of any kind waiting (ck's own have the difference).
pub const MAX_WITH_RESERVE: usize = 2 << 20;
/// The target of workers' lines.
pub const WORKER_TARGET: &str = "worker";

#[derive(Default)]
struct State {
    lines: VecDeque<Vec<u8>>,
    bytes: usize,
    /// The writer is writing a line it took.
    writing: bool,
}

/// The queue and its writer.
struct Sink {
    state: Mutex<State>,
    changed: Condvar,
    /// ck's own records dropped so far, and reported so far.
    own_dropped: AtomicU64,
    own_reported: AtomicU64,
}

static SINK: OnceLock<Sink> = OnceLock::new();

thread_local! {
    /// The last worker line this thread logged was dropped.
    static DROPPED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl Sink {
    fn push(&self, line: &[u8], limit: usize) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.bytes + line.len() > limit {
            return false;
        }
        state.bytes += line.len();
        state.lines.push_back(line.to_vec());
        self.changed.notify_all();
        true
    }

    fn pop(&self) -> Vec<u8> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.writing = false;
        self.changed.notify_all();
        loop {
            if let Some(line) = state.lines.pop_front() {
                state.bytes -= line.len();
                state.writing = true;
                return line;
            }
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn wait_empty(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while !state.lines.is_empty() || state.writing {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            state = self
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Writes lines to stderr for ever; reports ck's own dropped records at most once a
    /// second.
    fn write_all(&'static self) {
        let mut reported_at = Instant::now();
        loop {
            let line = self.pop();
            let _ = std::io::stderr().write_all(&line);
            let dropped = self.own_dropped.load(Ordering::Relaxed);
            let reported = self.own_reported.load(Ordering::Relaxed);
            if dropped > reported && reported_at.elapsed() >= Duration::from_secs(1) {
                reported_at = Instant::now();
                self.own_reported.store(dropped, Ordering::Relaxed);
                tracing::warn!(
                    dropped = dropped - reported,
                    total = dropped,
                    "ck's own log records dropped: its stderr could not keep up"
                );
            }
        }
    }
}

/// The `tracing` writer of `ck run`: records into the queue, never blocking.
#[derive(Clone, Copy, Debug)]
pub struct LogSink {
    _private: (),
}

/// The writer thread runs (else records go to stderr directly).
static WRITING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Starts the queue's writer thread (once) and returns the writer for `tracing_subscriber`.
pub fn start() -> std::io::Result<LogSink> {
    if SINK.get().is_none() {
        let _ = SINK.set(Sink {
            state: Default::default(),
            changed: Condvar::new(),
            own_dropped: AtomicU64::new(0),
            own_reported: AtomicU64::new(0),
        });
        let sink = SINK.get().expect("just set");
        std::thread::Builder::new()
            .name("ck-log-write".into())
            .spawn(move || sink.write_all())?;
        WRITING.store(true, Ordering::SeqCst);
    }
    Ok(LogSink { _private: () })
}

impl LogSink {
    /// A writer without the queue's thread (its start failed): records go to stderr directly.
    pub fn direct() -> LogSink {
        LogSink { _private: () }
    }
}

/// Waits up to `timeout` until every record queued so far is written (before ck exits or
/// re-executes). Does nothing if the sink was never started.
pub fn flush(timeout: Duration) {
    if let Some(sink) = SINK.get() {
        sink.wait_empty(timeout);
    }
}

/// Whether the queue has room for workers' lines now (a reader drops a line without even
/// formatting it when not).
pub fn worker_room() -> bool {
    SINK.get()
        .filter(|_| WRITING.load(Ordering::Relaxed))
        .is_none_or(|sink| {
            sink.state.lock().unwrap_or_else(|e| e.into_inner()).bytes < MAX_QUEUED_BYTES
        })
}

/// Whether the last worker line this thread logged was dropped (and forgets it).
pub fn take_dropped() -> bool {
    DROPPED.with(|d| d.replace(false))
}

/// One record's writer.
pub struct RecordWriter {
    worker: bool,
}

impl std::io::Write for RecordWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let Some(sink) = SINK.get().filter(|_| WRITING.load(Ordering::Relaxed)) else {
            return std::io::stderr().write(buf);
        };
        let limit = match self.worker {
            true => MAX_QUEUED_BYTES,
            false => MAX_WITH_RESERVE,
        };
        if !sink.push(buf, limit) {
            match self.worker {
                true => DROPPED.with(|d| d.set(true)),
                false => {
                    sink.own_dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogSink {
    type Writer = RecordWriter;

    fn make_writer(&'a self) -> RecordWriter {
        RecordWriter { worker: false }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> RecordWriter {
        RecordWriter {
            worker: meta.target() == WORKER_TARGET,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sink() -> Sink {
        Sink {
            state: Default::default(),
            changed: Condvar::new(),
            own_dropped: AtomicU64::new(0),
            own_reported: AtomicU64::new(0),
        }
    }

    #[test]
    fn workers_lines_stop_at_the_bound_and_ck_s_own_have_a_reserve() {
        let sink = sink();
        let line = vec![b'x'; 16 * 1024];
        let mut queued = 0;
        while sink.push(&line, MAX_QUEUED_BYTES) {
            queued += 1;
        }
        assert_eq!(queued, MAX_QUEUED_BYTES / line.len());
        assert!(
            sink.push(&line, MAX_WITH_RESERVE),
            "ck's own records have a reserve"
        );
        while sink.push(&line, MAX_WITH_RESERVE) {}
        assert!(!sink.push(b"x", MAX_WITH_RESERVE));
        assert_eq!(sink.pop().len(), line.len());
        assert!(sink.push(&line, MAX_WITH_RESERVE), "room again");
    }

    #[test]
    fn lines_leave_in_order() {
        let sink = sink();
        for n in 0..100 {
            assert!(sink.push(n.to_string().as_bytes(), MAX_QUEUED_BYTES));
        }
        for n in 0..100 {
            assert_eq!(sink.pop(), n.to_string().into_bytes());
        }
    }
}
