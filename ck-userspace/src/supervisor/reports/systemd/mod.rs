//! ck's own side of systemd's notify protocol, for `Type=notify` units (`deploy/ck.service`):
//! when ck runs with `NOTIFY_SOCKET` set, it tells the service manager `READY=1` once every
//! group has a ready worker in its active set (read from the kernel's maps), `STATUS=` with the
//! fleet's state whenever that changes (`4/4 workers ready, steering on`, `DEGRADED: slot 2
//! breaker open; ...`, `reloading 1/4; ...`), `RELOADING=1` + `MONOTONIC_USEC=` while a reload
//! rolls the fleet and `READY=1` after it (the `Type=notify-reload` protocol; plain
//! `Type=notify` accepts it too), `STOPPING=1` when it starts to shut down, and `WATCHDOG=1`
//! every half `WATCHDOG_USEC` from the event loop itself, so a stuck loop misses its heartbeat.
//!
//! Workers never see ck's `NOTIFY_SOCKET` or `WATCHDOG_*`: `spawn` gives each one its own notify
//! socket and removes the watchdog variables.
//!
//! Message text, `MONOTONIC_USEC` and the `WATCHDOG_USEC`/`WATCHDOG_PID` check come from the
//! `sd-notify` crate. Sending is ck's own (a few lines): `sd-notify` 0.5 cannot reach an abstract
//! `NOTIFY_SOCKET` (`@name`), which `sd_notify(3)` allows, and it reads the environment on every
//! call.
use std::{
    os::linux::net::SocketAddrExt as _,
    os::unix::net::{SocketAddr, UnixDatagram},
    time::Duration,
};

use sd_notify::NotifyState;

use crate::supervisor::{
    lifecycle::{active_set, crash::Breaker},
    reports::{Reports, View},
};

/// How long one message may wait for room in the service manager's queue before it is dropped
/// (the event loop must not stall behind a busy systemd).
const SEND_TIMEOUT: Duration = Duration::from_millis(250);

/// The fleet as the notify protocol needs it, read from the kernel where it holds the truth.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(in crate::supervisor) struct FleetView {
    /// The target worker count.
    pub workers: u32,
    /// Workers in the active set's ready part (the fewest over the groups; forking servers'
    /// further listeners not counted).
    pub ready: u32,
    /// Whether every group has at least one ready worker in its active set.
    pub every_group_ready: bool,
    /// What the kernel last showed of steering.
    pub steering: Steering,
    /// Serving slots whose circuit breaker is not closed, with the breaker's word.
    pub breakers: Vec<(u32, &'static str)>,
    /// A reload in progress: workers replaced so far, and in all.
    pub reloading: Option<(u32, u32)>,
    /// Shutting down, with the workers still running.
    pub stopping: Option<u32>,
    /// A stop's quiet wait: not ready, every worker still serving (see `quiet`).
    pub quiet_wait: bool,
}

/// Steering as [`FleetView`] reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(in crate::supervisor) enum Steering {
    /// The last canary of every group was steered by the program.
    On,
    /// Not known yet: the program is loading or no canary came back yet.
    #[default]
    Unverified,
    /// A group's last canary was answered by the kernel: ck is attaching the program again.
    Lost,
    /// `--no-bpf`.
    Off,
}

/// One message of the protocol (before formatting: `Reloading` takes the clock when sent).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::supervisor) enum Message {
    /// `READY=1` (the first one with `MAINPID=`).
    Ready { first: bool },
    /// `RELOADING=1` and `MONOTONIC_USEC=`.
    Reloading,
    /// `STOPPING=1`.
    Stopping,
    /// `STATUS=...`.
    Status(String),
}

/// What ck has told the service manager so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(in crate::supervisor) struct Told {
    ready: bool,
    reloading: bool,
    stopping: bool,
    status: String,
}

/// The `STATUS=` text for `view`, e.g. `DEGRADED: slot 2 breaker open; 3/4 workers ready,
/// steering on`.
pub(in crate::supervisor) fn status_text(view: &FleetView) -> String {
    if let Some(running) = view.stopping {
        return format!("stopping: {running} worker(s) stopping");
    }
    if view.quiet_wait {
        return format!(
            "stopping: waiting for traffic to stop before stopping the workers ({}/{} serving)",
            view.ready, view.workers
        );
    }
    let mut text = String::new();
    if !view.breakers.is_empty() {
        let slots: Vec<String> = view
            .breakers
            .iter()
            .map(|(slot, breaker)| format!("slot {slot} breaker {breaker}"))
            .collect();
        text += &format!("DEGRADED: {}; ", slots.join(", "));
    }
    if let Some((done, total)) = view.reloading {
        text += &format!("reloading {done}/{total}; ");
    }
    let steering = match view.steering {
        Steering::On => "steering on",
        Steering::Unverified => "steering not verified yet",
        Steering::Lost => "steering LOST (attaching the program again)",
        Steering::Off => "steering off (--no-bpf)",
    };
    text += &format!("{}/{} workers ready, {steering}", view.ready, view.workers);
    text
}

/// What to tell after `told`, now that the fleet is `view`; updates `told`. Pure.
pub(in crate::supervisor) fn messages(told: &mut Told, view: &FleetView) -> Vec<Message> {
    let mut out = Vec::new();
    if view.stopping.is_some() || view.quiet_wait {
        if !told.stopping {
            told.stopping = true;
            out.push(Message::Stopping);
        }
    } else if !told.ready {
        if view.every_group_ready {
            told.ready = true;
            out.push(Message::Ready { first: true });
        }
    } else if view.reloading.is_some() && !told.reloading {
        told.reloading = true;
        out.push(Message::Reloading);
    } else if view.reloading.is_none() && told.reloading {
        told.reloading = false;
        out.push(Message::Ready { first: false });
    }
    let status = status_text(view);
    if status != told.status {
        told.status.clone_from(&status);
        out.push(Message::Status(status));
    }
    out
}

/// ck's connection to the service manager: where to send, the watchdog, what was told.
pub(in crate::supervisor) struct Notifier {
    socket: UnixDatagram,
    addr: SocketAddr,
    /// `NOTIFY_SOCKET` as given, for log lines.
    name: String,
    watchdog: Option<Duration>,
    told: Told,
}

/// Where `NOTIFY_SOCKET` points: a path (`/run/systemd/notify`) or an abstract name (`@name`).
fn notify_address(value: &str) -> Result<SocketAddr, String> {
    let addr = match value.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes()),
        None if value.starts_with('/') => SocketAddr::from_pathname(value),
        None => {
            return Err(
                "ck speaks to AF_UNIX notify sockets only (a path, or @name for an abstract one)"
                    .into(),
            );
        }
    };
    addr.map_err(|e| e.to_string())
}

impl Notifier {
    /// The notifier for ck's environment: `None` when `NOTIFY_SOCKET` is unset (not run by a
    /// service manager that asked for notifications), or unusable (said in the log).
    pub fn from_env() -> Option<Notifier> {
        let name = std::env::var("NOTIFY_SOCKET").ok()?;
        let ready = notify_address(&name).and_then(|addr| {
            let socket = UnixDatagram::unbound().map_err(|e| e.to_string())?;
            socket
                .set_write_timeout(Some(SEND_TIMEOUT))
                .map_err(|e| e.to_string())?;
            Ok((socket, addr))
        });
        let (socket, addr) = match ready {
            Ok(ready) => ready,
            Err(e) => {
                tracing::warn!(notify_socket = %name, "not notifying the service manager: {e}");
                return None;
            }
        };
        // WATCHDOG_PID, when set, names the process the watchdog is for: ck only if it is ours.
        let watchdog = sd_notify::watchdog_enabled().filter(|usec| !usec.is_zero());
        tracing::info!(
            notify_socket = %name,
            watchdog_ms = watchdog.map(|w| w.as_millis() as u64),
            "notifying the service manager (READY=1 once every group has a ready worker)"
        );
        Some(Notifier {
            socket,
            addr,
            name,
            watchdog,
            told: Told::default(),
        })
    }

    /// How often to send `WATCHDOG=1`: half of `WATCHDOG_USEC`, as `sd_watchdog_enabled(3)`
    /// recommends; `None` when the service manager has no watchdog on ck.
    pub fn watchdog_period(&self) -> Option<Duration> {
        self.watchdog.map(|usec| usec / 2)
    }

    /// Sends `WATCHDOG=1`.
    pub fn watchdog(&self) {
        self.send(&[NotifyState::Watchdog]);
    }

    /// Tells what changed since the last call, now that the fleet is `view`.
    pub fn update(&mut self, view: &FleetView) {
        let messages = messages(&mut self.told, view);
        if messages.is_empty() {
            return;
        }
        let mut states = Vec::new();
        for message in &messages {
            match message {
                Message::Ready { first } => {
                    states.push(NotifyState::Ready);
                    if *first {
                        states.push(NotifyState::MainPid(std::process::id()));
                    }
                }
                Message::Reloading => {
                    states.push(NotifyState::Reloading);
                    match NotifyState::monotonic_usec_now() {
                        Ok(now) => states.push(now),
                        Err(e) => tracing::warn!("reading CLOCK_MONOTONIC: {e}"),
                    }
                }
                Message::Stopping => states.push(NotifyState::Stopping),
                Message::Status(text) => states.push(NotifyState::Status(text)),
            }
        }
        if messages.iter().any(|m| !matches!(m, Message::Status(_))) {
            tracing::info!(
                notify_socket = %self.name,
                told = ?messages,
                "told the service manager"
            );
        }
        self.send(&states);
    }

    /// Sends `states` as one datagram, one `KEY=VALUE` per line.
    fn send(&self, states: &[NotifyState]) {
        let text: String = states.iter().map(|s| format!("{s}\n")).collect();
        if let Err(e) = self.socket.send_to_addr(text.as_bytes(), &self.addr) {
            tracing::warn!(
                notify_socket = %self.name,
                message = %text.trim_end().replace('\n', " "),
                "could not notify the service manager: {e}"
            );
        }
    }
}

impl Reports {
    /// Tells the service manager what changed, if ck has one and something may have changed
    /// since the last call (a publish, a canary, a roll's step).
    pub(in crate::supervisor) fn tell_systemd(&mut self, view: View<'_>) {
        // After `ck upgrade` or a take-over, until the program is loaded again, the service
        // manager keeps what it was told last (the old program steers meanwhile).
        if view.continuity.bpf_resumed {
            return;
        }
        if self.systemd.is_none() || !std::mem::take(&mut self.systemd_due) {
            return;
        }
        let fleet = fleet_view(view);
        if let Some(notifier) = &mut self.systemd {
            notifier.update(&fleet);
        }
    }
}

/// The fleet for the notify protocol: the ready part of every group's active set from its
/// map (computed only with `--no-bpf`, where there is no map), breakers, roll, shutdown.
fn fleet_view(view: View<'_>) -> FleetView {
    let is_root = |index: &u32| {
        view.table
            .slots
            .get(index)
            .is_some_and(|s| s.life.member_of.is_none())
    };
    let ready_per_group: Vec<u32> = if view.cfg.no_bpf {
        let set = active_set(view.table.lives(), view.stopping, false);
        let ready = &set.slots[..set.ready_len as usize];
        vec![ready.iter().filter(|i| is_root(i)).count() as u32]
    } else {
        // While the program loads there is no map yet: nothing counts as ready.
        view.groups
            .iter()
            .map(|g| {
                g.bpf
                    .as_ref()
                    .and_then(|bpf| bpf.read_active())
                    .map_or(0, |lists| lists.ready.iter().filter(|i| is_root(i)).count())
                    as u32
            })
            .collect()
    };
    let steering = if view.cfg.no_bpf {
        Steering::Off
    } else if view.groups.steering_verified() {
        Steering::On
    } else if view
        .groups
        .iter()
        .any(|g| g.bpf.is_some() && g.steering.attached == Some(false))
    {
        Steering::Lost
    } else {
        Steering::Unverified
    };
    let breakers = view
        .table
        .slots
        .values()
        .filter(|s| s.life.serving())
        .map(|s| (s.index, s.life.crash.breaker()))
        .filter(|(_, breaker)| *breaker != Breaker::Closed)
        .map(|(index, breaker)| (index, breaker.name()))
        .collect();
    let running = view
        .table
        .slots
        .values()
        .filter(|s| s.worker.is_some())
        .count() as u32;
    FleetView {
        workers: view.cfg.workers,
        ready: ready_per_group.iter().copied().min().unwrap_or(0),
        every_group_ready: ready_per_group.iter().all(|ready| *ready > 0),
        steering,
        breakers,
        reloading: view.ops.reload_progress(),
        stopping: view.stopping.then_some(running),
        quiet_wait: view.ops.quiet.waiting(),
    }
}

#[cfg(test)]
mod tests;
