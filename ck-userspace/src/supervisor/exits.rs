//! Exits seen as the kernel begins them. The exit watch ([`crate::bpf::exits`]) reports a
//! watched worker's death from `sched_process_exit`, before the kernel frees its memory; the
//! pidfd reports it once the process is torn down (8-11 ms later for a Node server of 100 MB,
//! more for a larger heap). A worker that died on its own is replaced at the first report; the
//! pidfd's, for a worker already replaced, is ignored (its waiter still reaps the zombie).
//!
//! A worker ck asked to stop (a roll, a scale-down, `ck stop`) is left to the pidfd: nothing
//! waits on it, and ck reports such a worker gone only once no process of it is left.
use std::os::unix::process::ExitStatusExt as _;
use std::process::ExitStatus;

use ck_common::exits::ExitEvent;

use super::{Event, Supervisor, lifecycle::State};
use crate::bpf::exits::{self, ExitWatch};

/// How ck learned that a worker exited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ExitReport {
    /// Its pidfd: the process is gone.
    Pidfd,
    /// The kernel's exit tracepoint: its last thread is exiting.
    Tracepoint,
}

impl ExitReport {
    /// The log field's value.
    pub(super) fn name(self) -> &'static str {
        match self {
            ExitReport::Pidfd => "pidfd",
            ExitReport::Tracepoint => "exit tracepoint",
        }
    }
}

/// Loads the exit watch off the event loop (parsing the kernel's BTF takes tens of
/// milliseconds) and forwards its reports; the loop gets the watch as [`Event::ExitWatch`]. One
/// log line says why where the kernel refuses it. Started once steering is in use (`--no-bpf`
/// goes without it).
pub(super) fn start(events: &tokio::sync::mpsc::UnboundedSender<Event>) {
    let events = events.clone();
    tokio::spawn(async move {
        let attached = match tokio::task::spawn_blocking(|| {
            let attached = ExitWatch::attach();
            // As after the steering load: the BTF parse's freed arena goes back to the kernel.
            crate::os::memory::trim_heap();
            attached
        })
        .await
        {
            Ok(attached) => attached,
            Err(e) => Err(anyhow::anyhow!("the loading task failed: {e}")),
        };
        let forwarded = attached.and_then(|(watch, ring)| {
            let reports = events.clone();
            exits::forward_exits(ring, move |exit| reports.send(Event::Exiting(exit)).is_ok())?;
            Ok(watch)
        });
        match forwarded {
            Ok(watch) => {
                let _ = events.send(Event::ExitWatch(watch));
            }
            Err(e) => tracing::info!(
                "worker exits are seen when the kernel reports the process gone (pidfd), not \
                 as it begins to exit: {e:#}"
            ),
        }
    });
}

impl Supervisor {
    /// The exit watch is loaded: it watches every worker from now on, the running ones first.
    pub(super) fn on_exit_watch(&mut self, mut watch: ExitWatch) {
        // Member slots (`--adopt`'s further listeners) are left to their own watcher.
        for (index, slot) in self.slots.iter().filter(|(_, s)| s.member_of.is_none()) {
            if let Some(worker) = &slot.worker {
                watch.watch(worker.pid, *index);
            }
        }
        self.exit_watch = Some(watch);
    }

    /// Watches slot `index`'s new worker `pid`.
    pub(super) fn watch_exit(&mut self, index: u32, pid: u32) {
        if let Some(watch) = &mut self.exit_watch {
            watch.watch(pid, index);
        }
    }

    /// A watched process began to exit: a worker that died on its own is handled as exited now.
    pub(super) fn on_exiting(&mut self, exit: ExitEvent) {
        let found = self.slots.iter().find_map(|(index, slot)| {
            slot.worker
                .as_ref()
                .filter(|w| w.pid == exit.pid && slot.member_of.is_none())?;
            let asked = matches!(slot.life.state, State::Stopping(..));
            Some((*index, slot.worker_id()?, asked))
        });
        let Some((index, id, asked)) = found else {
            return;
        };
        if asked || self.stopping {
            return;
        }
        self.on_exit(
            index,
            id,
            Ok(ExitStatus::from_raw(exit.status)),
            ExitReport::Tracepoint,
        );
    }
}
