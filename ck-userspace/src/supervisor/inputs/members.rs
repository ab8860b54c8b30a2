//! Forking servers under `--adopt`: every listener a worker's process tree opens on the port is
//! steered, each as a slot of its own tied to the process holding it. The first one is the root
//! slot's (the slot whose worker ck spawned); further ones become *members* of that root: selected
//! like any slot, removed when their process exits, retired with their root. If the process
//! holding the root slot's socket is not the worker itself (a forked child) and exits, the root
//! slot gives that socket up (`Unadopted`) and adopts the tree's next listener.
use std::os::fd::OwnedFd;

use socket2::Socket;
use tokio::task::JoinHandle;

use crate::os::pidfd;
use tokio::sync::mpsc::UnboundedSender;

use crate::settings::run_config::RunConfig;
use crate::supervisor::{
    event::Event,
    groups::Groups,
    lifecycle::{Input, Life},
    slots::{
        SlotTable,
        slot::{Slot, Worker},
    },
};

/// Makes `socket`, held by `pid` in `root`'s process tree, a member slot of `root`: the slot
/// and its worker in the table, its exit watched. The slot and the worker's id, for the
/// machine (`Spawned`, then `Adopted`), or None (no free slot, or the process is gone).
pub(in crate::supervisor) fn member_slot(
    table: &mut SlotTable,
    groups: &Groups,
    cfg: &RunConfig,
    events: &UnboundedSender<Event>,
    member: (u32, u32, Socket, Option<u64>),
) -> Option<(u32, u64)> {
    let (root, pid, socket, latency_us) = member;
    let Some(index) = table.free_slot() else {
        tracing::warn!(
            slot = root,
            pid,
            "no free slot for a further listener: not steered"
        );
        return None;
    };
    let (pidfd, watcher) = match pidfd::open(pid).and_then(|fd| Ok((fd.try_clone()?, fd))) {
        Ok(fds) => fds,
        Err(e) => {
            tracing::warn!(
                slot = root,
                pid,
                "watching a further listener's process: {e}"
            );
            return None;
        }
    };
    let id = table.next_worker_id;
    table.next_worker_id += 1;
    let task = watch_member(events, index, id, watcher);
    let selected_base = groups.slot_stats(index).selected;
    let worker = Worker::member(pid, pidfd, selected_base, latency_us, task);
    let life = Life::member(cfg.restart, root);
    // The lifecycle's `Adopted` installs the socket (into the maps, then as the slot's).
    let slot = Slot::member(index, life, socket, worker);
    table.slots.insert(index, slot);
    tracing::info!(
        slot = index,
        pid,
        root,
        "a further listener in a worker's process tree: steered as a slot of its own"
    );
    Some((index, id))
}

/// A member's process exited: the slot leaves (its socket closes after the publish).
pub(in crate::supervisor) fn member_exited(
    table: &mut SlotTable,
    index: u32,
    id: u64,
) -> Option<Input> {
    let slot = table.slots.get_mut(&index)?;
    slot.worker_of(id)?;
    slot.last_exit = Some("exited".into());
    tracing::info!(
        slot = index,
        pid = slot.pid(),
        "member listener's process exited"
    );
    Some(Input::Exited { outside: false })
}

/// The process holding the root slot's socket exited while the worker lives: the slot gives
/// the socket up and waits for the tree's next listener.
pub(in crate::supervisor) fn holder_exited(
    table: &mut SlotTable,
    index: u32,
    id: u64,
) -> Option<Input> {
    let slot = table.slots.get_mut(&index)?;
    let adopted = slot.life.state.run().is_some_and(|run| run.adopted);
    let worker = slot.worker_of_mut(id).filter(|_| adopted)?;
    worker.said_ready = false;
    worker.holder = None;
    tracing::info!(
        slot = index,
        pid = worker.pid,
        "the process holding the slot's socket exited: waiting for the tree's next listener"
    );
    Some(Input::Unadopted)
}

/// The members of every root in `roots` (their root is stopping), to retire.
pub(in crate::supervisor) fn retirements(table: &SlotTable, roots: &[u32]) -> Vec<(u32, Input)> {
    table
        .slots
        .values()
        .filter(|s| s.life.member_of.is_some_and(|root| roots.contains(&root)))
        .map(|s| (s.index, Input::Retire("its worker is stopping".into())))
        .collect()
}

/// The task that sends member slot `index`'s `MemberExited` once the process behind
/// `watcher` (not ck's child) exits.
pub(in crate::supervisor) fn watch_member(
    events: &UnboundedSender<Event>,
    index: u32,
    id: u64,
    watcher: OwnedFd,
) -> JoinHandle<()> {
    let events = events.clone();
    tokio::spawn(async move {
        let _ = pidfd::exited(watcher).await;
        let _ = events.send(Event::MemberExited {
            slot: index,
            worker: id,
        });
    })
}

/// Watches `holder`, the process holding root slot `index`'s adopted socket, when it is
/// not the worker itself.
pub(in crate::supervisor) fn watch_holder(
    table: &mut SlotTable,
    events: &UnboundedSender<Event>,
    index: u32,
    holder: u32,
) {
    let Some(slot) = table.slots.get(&index) else {
        return;
    };
    let (Some(worker), Some(id)) = (slot.worker.as_ref(), slot.worker_id()) else {
        return;
    };
    if worker.pid == holder {
        return;
    }
    let events = events.clone();
    let Ok(watcher) = pidfd::open(holder) else {
        // Gone already (e.g. while ck re-executed itself): as if it exited now.
        let _ = events.send(Event::HolderExited {
            slot: index,
            worker: id,
        });
        return;
    };
    let task = tokio::spawn(async move {
        let _ = pidfd::exited(watcher).await;
        let _ = events.send(Event::HolderExited {
            slot: index,
            worker: id,
        });
    });
    if let Some(worker) = table.worker_mut(index) {
        worker.tasks.push(task);
        worker.holder = Some(holder);
    }
}
