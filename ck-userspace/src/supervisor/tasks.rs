//! The small tasks that feed the event loop: signal watchers, tickers and timers. They only send
//! [`Event`]s; all state stays in the loop.
use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use anyhow::Context as _;
use tokio::{
    signal::unix::{SignalKind, signal},
    sync::mpsc,
};

use super::Event;

/// Sends [`Event::Tick`] every `period` (microseconds, changed by the supervisor as it goes:
/// the time to its next queue sample or readiness check, see `health`) until the event loop is
/// gone; `wake` ends a wait early.
pub(super) fn start_sampler(
    events: &mpsc::UnboundedSender<Event>,
    period: Arc<AtomicU64>,
    wake: Arc<tokio::sync::Notify>,
) {
    let events = events.clone();
    tokio::spawn(async move {
        loop {
            let wait = Duration::from_micros(period.load(Ordering::Relaxed));
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = wake.notified() => {}
            }
            if events.send(Event::Tick).is_err() {
                return;
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
