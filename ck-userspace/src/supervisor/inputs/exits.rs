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

use crate::bpf::exits::{self, ExitWatch};
use nix::sys::signal::Signal;

use crate::settings::run_config::RunConfig;
use crate::settings::stop_signal::StopSignal;
use crate::supervisor::fleet::death::Death;
use crate::supervisor::slots::boot_mistake::BootMistake;
use crate::supervisor::{
    event::Event,
    inputs::Inputs,
    lifecycle::{After, State},
    slots::SlotTable,
};

/// How ck learned that a worker exited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::supervisor) enum ExitReport {
    /// Its pidfd: the process is gone.
    Pidfd,
    /// The kernel's exit tracepoint: its last thread is exiting.
    Tracepoint,
}

impl ExitReport {
    /// The log field's value.
    pub(in crate::supervisor) fn name(self) -> &'static str {
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
pub(in crate::supervisor) fn start(events: &tokio::sync::mpsc::UnboundedSender<Event>) {
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

/// How long the death of a booting worker waits for the end of its stderr, so that the roll
/// it aborts quotes its last error line.
const LAST_ERROR_PATIENCE: std::time::Duration = std::time::Duration::from_millis(50);

/// The processes of the worker's cgroup other than `pid`, with their command names: what an
/// exiting worker leaves behind.
fn left_behind(worker: &crate::supervisor::slots::slot::Worker) -> Vec<(u32, String)> {
    let Some(cgroup) = &worker.cgroup else {
        return Vec::new();
    };
    cgroup
        .pids()
        .into_iter()
        .filter(|p| *p != worker.pid)
        .map(|p| {
            let command = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
            (p, command.trim().to_string())
        })
        .collect()
}

/// A watched process began to exit: the slot, worker and status to handle as exited now, for a
/// worker that died on its own (one ck asked to stop, or any while ck stops, is left to its
/// pidfd).
fn exiting(table: &SlotTable, stopping: bool, exit: ExitEvent) -> Option<(u32, u64, ExitStatus)> {
    let (index, id, asked) = table.slots.iter().find_map(|(index, slot)| {
        slot.worker
            .as_ref()
            .filter(|w| w.pid == exit.pid && slot.life.member_of.is_none())?;
        let asked = matches!(slot.life.state, State::Stopping(..));
        Some((*index, slot.worker_id()?, asked))
    })?;
    if asked || stopping {
        return None;
    }
    Some((index, id, ExitStatus::from_raw(exit.status)))
}

/// Describes how a process ended: `exit 0`, `exit 3`, `signal SIGKILL`.
pub(crate) fn describe_exit(status: &std::io::Result<ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("exit {code}"),
            (None, Some(sig)) => match Signal::try_from(sig) {
                Ok(sig) => format!("signal {}", sig.as_str()),
                Err(_) => format!("signal {sig}"),
            },
            _ => "unknown".to_string(),
        },
        Err(e) => format!("wait failed: {e}"),
    }
}

/// Whether the process was killed by a signal that only others send (an operator, the OOM
/// killer, a chaos test): SIGKILL, SIGTERM, SIGINT, or the app's `--stop-signal` (an operator
/// stops nginx with SIGQUIT). Crashes of its own (exit codes, SIGSEGV, SIGABRT, ...) are not.
/// (A worker ck itself stopped is a clean stop whatever it died of: the machine knows it asked.)
pub(crate) fn killed_from_outside(
    status: &std::io::Result<ExitStatus>,
    stop_signal: StopSignal,
) -> bool {
    use std::os::unix::process::ExitStatusExt as _;
    let Ok(status) = status else {
        return false;
    };
    let Some(signal) = status.signal().and_then(|s| Signal::try_from(s).ok()) else {
        return false;
    };
    matches!(signal, Signal::SIGKILL | Signal::SIGTERM | Signal::SIGINT)
        || signal == stop_signal.signal()
}

impl Inputs {
    /// The exit watch saw a watched process begin to exit: for a worker that died on its own,
    /// its slot and its death, read now (see [`exiting`] and [`Inputs::exited`]).
    pub(in crate::supervisor) fn exit_began(
        &mut self,
        table: &mut SlotTable,
        cfg: &RunConfig,
        stopping: bool,
        exit: ExitEvent,
    ) -> Option<(u32, Death)> {
        let (index, id, status) = exiting(table, stopping, exit)?;
        let death = self.exited(table, cfg, index, id, Ok(status), ExitReport::Tracepoint)?;
        Some((index, death))
    }

    /// Slot `index`'s worker `id` exited with `status`, as `seen` says: its exit recorded and
    /// logged, the death for the fleet executor returned (None: not the slot's worker).
    pub(in crate::supervisor) fn exited(
        &mut self,
        table: &mut SlotTable,
        cfg: &RunConfig,
        index: u32,
        id: u64,
        status: std::io::Result<ExitStatus>,
        seen: ExitReport,
    ) -> Option<Death> {
        let slot = table.slots.get_mut(&index)?;
        let (Some(worker), Some(ran)) = (slot.worker_of(id), slot.uptime()) else {
            return None;
        };
        let pid = worker.pid;
        // Read before ck kills the worker's cgroup (`World::exited`).
        let starting = matches!(slot.life.state, State::Starting(_));
        let left = match starting {
            true => left_behind(worker),
            false => Vec::new(),
        };
        if let Some(watch) = &mut self.exit_watch {
            watch.unwatch(pid);
        }
        let reason = describe_exit(&status);
        let never_ready = matches!(slot.life.state, State::Stopping(_, After::Crash));
        let booting = never_ready || starting;
        // A worker that dies while it boots may abort a roll, whose message quotes it: its
        // last lines may still be on their way to the reader (waited for briefly; such a death
        // waits a backoff anyway).
        let patience = if booting {
            LAST_ERROR_PATIENCE
        } else {
            std::time::Duration::ZERO
        };
        let last_error = table
            .output
            .as_ref()
            .and_then(|hub| hub.last_error(pid, patience))
            .map_or(String::new(), |line| {
                format!("; its last error on stderr: {line:?}")
            });
        slot.boot_mistake = match starting {
            true => boot_mistake(pid, ran, &status, left),
            false => None,
        };
        let how = if never_ready {
            format!("{reason} (never became ready)")
        } else {
            reason.clone()
        };
        slot.last_exit = Some(how.clone());
        tracing::info!(
            slot = index,
            pid,
            reason = %how,
            ran_ms = ran.as_millis() as u64,
            seen = seen.name(),
            "worker exited"
        );
        if let Some(mistake) = &slot.boot_mistake {
            tracing::warn!(slot = index, pid, "DEGRADED: {}", mistake.describe(index));
        }
        let outside = killed_from_outside(&status, cfg.stop_signal);
        // Words for the roll's abort, should the worker be one of its replacements.
        let why = if never_ready {
            format!(
                "was not ready within --ready-timeout {:?}{last_error}",
                cfg.ready_timeout
            )
        } else {
            format!("exited before it was flipped in ({reason}){last_error}")
        };
        Some(Death { outside, why, how })
    }
}

/// The mistake of worker `pid`, which ran `ran` and ended with `status` while starting,
/// leaving `left` in its cgroup (None: no mistake ck can name).
fn boot_mistake(
    pid: u32,
    ran: std::time::Duration,
    status: &std::io::Result<ExitStatus>,
    left: Vec<(u32, String)>,
) -> Option<BootMistake> {
    let ran_ms = ran.as_millis() as u64;
    if !left.is_empty() {
        return Some(BootMistake::Daemonized {
            pid,
            ran_ms,
            exit: describe_exit(status),
            left,
        });
    }
    let clean = status.as_ref().is_ok_and(|s| s.code() == Some(0));
    clean.then_some(BootMistake::ExitedAtOnce { pid, ran_ms })
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt as _;

    use super::*;

    fn killed_by(signal: Signal) -> std::io::Result<ExitStatus> {
        Ok(ExitStatus::from_raw(signal as i32))
    }

    #[test]
    fn a_worker_that_ends_while_starting_is_named_by_how_it_ended_and_what_it_left() {
        let ran = std::time::Duration::from_millis(30);
        let exit = |code: i32| Ok(ExitStatus::from_raw(code << 8));
        assert_eq!(
            boot_mistake(7, ran, &exit(0), Vec::new()),
            Some(BootMistake::ExitedAtOnce { pid: 7, ran_ms: 30 })
        );
        // A crash says why in its own output: nothing to name here.
        assert_eq!(boot_mistake(7, ran, &exit(1), Vec::new()), None);
        let left = vec![(8, "python3".to_string())];
        let daemon = boot_mistake(7, ran, &exit(0), left).expect("named");
        let text = daemon.describe(2);
        for words in [
            "slot 2 (pid 7)",
            "daemonized",
            "exit 0",
            "leaving pid 8 (python3)",
        ] {
            assert!(text.contains(words), "{words}: {text}");
        }
        let at_once = boot_mistake(7, ran, &exit(0), Vec::new()).expect("named");
        assert!(
            at_once.describe(2).contains("exits 0 at once (30 ms"),
            "{at_once:?}"
        );
    }

    #[test]
    fn the_stop_signal_counts_as_from_outside_beside_kill_term_and_int() {
        let quit: StopSignal = "QUIT".parse().unwrap();
        for signal in [Signal::SIGKILL, Signal::SIGTERM, Signal::SIGINT] {
            assert!(killed_from_outside(&killed_by(signal), StopSignal::TERM));
            assert!(killed_from_outside(&killed_by(signal), quit));
        }
        assert!(killed_from_outside(&killed_by(Signal::SIGQUIT), quit));
        assert!(!killed_from_outside(
            &killed_by(Signal::SIGQUIT),
            StopSignal::TERM
        ));
        assert!(!killed_from_outside(&killed_by(Signal::SIGSEGV), quit));
        assert!(!killed_from_outside(
            &Ok(ExitStatus::from_raw(3 << 8)),
            quit
        ));
    }
}
