//! What a worker says on `NOTIFY_SOCKET` (its reader, the messages turned into lifecycle
//! inputs), readiness from any source, and the lifecycle's timers coming back.
use crate::os::notify::{self, NotifyMsg};
use crate::supervisor::{
    Event, Supervisor,
    lifecycle::{Input, Timer},
};

impl Supervisor {
    /// The worker of `index` is ready for `why` (a roll waiting for it may flip: see the
    /// executor).
    pub(in crate::supervisor) fn mark_ready(&mut self, index: u32, why: String) {
        let Some(slot) = self.table.slots.get_mut(&index) else {
            return;
        };
        // --adopt: not before its socket is adopted; adoption asks again.
        let adopted = slot.life.state.run().is_some_and(|run| run.adopted);
        if let Some(worker) = slot.worker.as_mut().filter(|_| self.cfg.adopt && !adopted) {
            worker.said_ready = true;
            return;
        }
        if let Some(worker) = slot.worker.as_mut() {
            worker.accept_probe.end();
        }
        let healthy = slot.worker.as_ref().is_some_and(|w| w.health.is_healthy());
        self.apply(index, Input::Ready { why, healthy });
    }

    pub(in crate::supervisor) fn on_notify(&mut self, index: u32, id: u64, msgs: Vec<NotifyMsg>) {
        for msg in msgs {
            let probe_decides = self.probe_decides(index);
            let Some(worker) = self.table.worker_of_mut(index, id) else {
                return;
            };
            worker.spoke_notify = true;
            // It speaks the protocol: READY=1 decides, its accept probe (if sent) is reset.
            worker.accept_probe.end();
            match msg {
                // --ready probe: the probe, not READY=1, makes a starting worker ready.
                NotifyMsg::Ready if probe_decides => {}
                NotifyMsg::Ready => self.mark_ready(index, "READY=1".into()),
                NotifyMsg::Stopping => {
                    self.apply(index, Input::WorkerDraining);
                }
                NotifyMsg::Status(text) => worker.status = Some(text),
                NotifyMsg::Watchdog => self.on_watchdog(index),
                NotifyMsg::Other => {}
            }
        }
    }

    pub(in crate::supervisor) fn on_timer(&mut self, index: u32, epoch: u64, timer: Timer) {
        if timer == Timer::ReadyGrace {
            self.on_ready_grace(index, epoch);
        } else {
            self.apply(index, Input::Timer(timer, epoch));
        }
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
