//! What a worker says on `NOTIFY_SOCKET` (its reader, the messages turned into lifecycle
//! inputs), readiness from any source, and the lifecycle's timers coming back.
use crate::os::notify::{self, NotifyMsg};
use crate::settings::run_config::RunConfig;
use crate::supervisor::{
    event::Event,
    inputs::{Found, detect, health::Signal, healths::Healths},
    lifecycle::Input,
    slots::SlotTable,
};

/// The worker of `index` is ready for `why`: its `Ready` input, or None (no worker; with
/// `--adopt` before its socket is adopted, noted for the adoption to ask again).
pub(in crate::supervisor) fn ready(
    table: &mut SlotTable,
    healths: &Healths,
    adopt: bool,
    index: u32,
    why: String,
) -> Option<Input> {
    let slot = table.slots.get_mut(&index)?;
    // --adopt: not before its socket is adopted; adoption asks again.
    let adopted = slot.life.state.run().is_some_and(|run| run.adopted);
    if let Some(worker) = slot.worker.as_mut().filter(|_| adopt && !adopted) {
        worker.said_ready = true;
        return None;
    }
    if let Some(worker) = slot.worker.as_mut() {
        worker.accept_probe.end();
    }
    let healthy = healths.of_worker(slot).is_some_and(|h| h.is_healthy());
    Some(Input::Ready { why, healthy })
}

/// What one notify message of worker `id` on slot `index` says, beside what it changes on the
/// worker (its status, its heartbeat): readiness, a health change, a drain, or nothing.
pub(in crate::supervisor) fn heard(
    table: &mut SlotTable,
    healths: &mut Healths,
    cfg: &RunConfig,
    index: u32,
    id: u64,
    msg: NotifyMsg,
) -> Option<Found> {
    let probe_decides = detect::probe_decides(cfg, table, index);
    let worker = table.worker_of_mut(index, id)?;
    worker.spoke_notify = true;
    // It speaks the protocol: READY=1 decides, its accept probe (if sent) is reset.
    worker.accept_probe.end();
    match msg {
        // --ready probe: the probe, not READY=1, makes a starting worker ready.
        NotifyMsg::Ready if probe_decides => None,
        NotifyMsg::Ready => Some(Found::Ready("READY=1".into())),
        NotifyMsg::Stopping => Some(Found::Input(Input::WorkerDraining)),
        NotifyMsg::Status(text) => {
            worker.status = Some(text);
            None
        }
        NotifyMsg::Watchdog => {
            let health = healths.of_mut(index, id);
            health.last_watchdog = Some(std::time::Instant::now());
            health.watchdog.then(|| Found::Health {
                signal: Signal::Watchdog,
                bad: false,
                detail: "WATCHDOG=1 again".into(),
            })
        }
        NotifyMsg::Other => None,
    }
}

/// Counts a notify message from outside worker `pid`'s tree, and logs the first of them and
/// then every power of two (a flood must not flood the log).
fn refuse_notify(slot: u32, pid: u32, sender: Option<u32>, refused: &std::sync::atomic::AtomicU64) {
    let n = refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    if n.is_power_of_two() {
        tracing::warn!(
            slot,
            pid,
            sender = sender.map_or("unknown".into(), |p| p.to_string()),
            refused = n,
            "notify message ignored: its sender is not the worker or a process of its tree"
        );
    }
}

/// Starts the task that reads worker `worker_id`'s notify socket and turns what its tree
/// sends into [`Event::Notify`] (setting `heard` first), counting in `refused` what others
/// send.
pub(in crate::supervisor) fn watch_notify(
    events: &tokio::sync::mpsc::UnboundedSender<Event>,
    index: u32,
    worker_id: u64,
    speakers: notify::Speakers,
    socket: std::sync::Arc<tokio::net::UnixDatagram>,
    refused: std::sync::Arc<std::sync::atomic::AtomicU64>,
    heard: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    let events = events.clone();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        while let Ok((len, sender)) = notify::recv(&socket, &mut buf).await {
            if !speakers.allow(sender) {
                refuse_notify(index, speakers.worker, sender, &refused);
                continue;
            }
            // Before the event: a readiness check between this read and the event's handling
            // finds the socket empty, and must still know the worker spoke.
            heard.store(true, std::sync::atomic::Ordering::Release);
            let msgs = notify::parse(&buf[..len]);
            let event = Event::Notify {
                slot: index,
                worker: worker_id,
                msgs,
            };
            if events.send(event).is_err() {
                return;
            }
        }
    })
}
