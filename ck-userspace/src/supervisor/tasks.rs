//! The small tasks that feed the event loop: signal watchers, tickers and timers. They only send
//! [`Event`]s; all state stays in the loop.
use std::time::Duration;

use anyhow::Context as _;
use tokio::{
    signal::unix::{SignalKind, signal},
    sync::{mpsc, watch},
};

use super::event::Event;

/// Sends [`Event::Tick`] at each deadline the supervisor sets in `deadline` (its next queue
/// sample or readiness check, see `health`) until the event loop is gone. One tick per
/// deadline: after a tick the task waits for the loop to set the next one, so a tick the loop
/// has not handled yet is never sent again, and an earlier deadline (a worker began to boot)
/// ends the current wait at once.
pub(super) fn start_sampler(
    events: &mpsc::UnboundedSender<Event>,
    mut deadline: watch::Receiver<std::time::Instant>,
) {
    let events = events.clone();
    tokio::spawn(async move {
        let mut ticked_for = None;
        loop {
            let at = *deadline.borrow_and_update();
            if ticked_for == Some(at) {
                if deadline.changed().await.is_err() {
                    return;
                }
                continue;
            }
            tokio::select! {
                _ = tokio::time::sleep_until(at.into()) => {
                    ticked_for = Some(at);
                    if events.send(Event::Tick).is_err() {
                        return;
                    }
                }
                changed = deadline.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
        }
    });
}

/// Sends `event()` every `period` until the event loop is gone or the returned handle aborts
/// it.
pub(super) fn start_ticker(
    events: &mpsc::UnboundedSender<Event>,
    period: Duration,
    event: fn() -> Event,
) -> tokio::task::AbortHandle {
    let events = events.clone();
    let task = tokio::spawn(async move {
        let mut interval = tokio::time::interval(period);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            interval.tick().await;
            if events.send(event()).is_err() {
                return;
            }
        }
    });
    task.abort_handle()
}

/// Sends `event` once after `delay`.
pub(super) fn send_after(events: &mpsc::UnboundedSender<Event>, delay: Duration, event: Event) {
    let events = events.clone();
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        let _ = events.send(event);
    });
}

/// Turns SIGTERM/SIGINT (stop), SIGHUP (reload) and SIGTTIN/SIGTTOU (scale by one) into events.
pub(super) fn watch_signals(events: &mpsc::UnboundedSender<Event>) -> anyhow::Result<()> {
    /// A signal, its name, and the event it becomes.
    type Watched = (SignalKind, &'static str, fn() -> Event);
    let signals: [Watched; 6] = [
        (SignalKind::terminate(), "SIGTERM", || {
            Event::Signal("SIGTERM")
        }),
        (SignalKind::interrupt(), "SIGINT", || {
            Event::Signal("SIGINT")
        }),
        (SignalKind::hangup(), "SIGHUP", || Event::Reload),
        (SignalKind::user_defined2(), "SIGUSR2", || Event::Upgrade),
        (SignalKind::from_raw(libc::SIGTTIN), "SIGTTIN", || {
            Event::ScaleBy(1)
        }),
        (SignalKind::from_raw(libc::SIGTTOU), "SIGTTOU", || {
            Event::ScaleBy(-1)
        }),
    ];
    for (kind, name, event) in signals {
        let mut stream = signal(kind).with_context(|| format!("installing a {name} handler"))?;
        let events = events.clone();
        tokio::spawn(async move {
            while stream.recv().await.is_some() {
                if events.send(event()).is_err() {
                    return;
                }
            }
        });
    }
    Ok(())
}

/// Test-only: the environment variable that makes ck's event loop burn CPU on purpose (read
/// once at start, not part of ck's interface and left out of the reference). The test suite's
/// idle check proves with it that it catches a supervisor that costs more than it promises:
/// `CK_TEST_IDLE_BURN_US=2000` spins 2 ms of the loop thread's CPU every second.
pub const IDLE_BURN_ENV: &str = "CK_TEST_IDLE_BURN_US";

/// Test-only ([`IDLE_BURN_ENV`]): when the variable holds a number of microseconds, spins that
/// much CPU time on the event loop's thread once a second, for as long as ck runs.
pub(super) fn start_idle_burn() {
    let Some(burn) = std::env::var(IDLE_BURN_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map(Duration::from_micros)
    else {
        return;
    };
    tracing::warn!(
        "{IDLE_BURN_ENV} is set: the event loop burns {burn:?} of CPU every second (a test switch)"
    );
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(Duration::from_secs(1));
        loop {
            interval.tick().await;
            spin_cpu(burn);
        }
    });
}

/// Spins until this thread has spent `burn` more CPU time (its own clock: time it waited for
/// a CPU does not count).
fn spin_cpu(burn: Duration) {
    use nix::time::{ClockId, clock_gettime};
    let cpu = || clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).map(Duration::from);
    let Ok(start) = cpu() else { return };
    while cpu().is_ok_and(|now| now.saturating_sub(start) < burn) {
        std::hint::spin_loop();
    }
}
