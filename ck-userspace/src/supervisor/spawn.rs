//! Spawning a worker on a slot, the OS-side step the executor's world (`world`) runs for the
//! machine's `Spawn` effect: the slot's sockets opened and put in the maps (the program
//! attached when a socket founds its group), the worker's cgroup, notify reader, output pipes
//! and exit waiter. What the worker then does (notify messages, exits) comes back through
//! `inputs`.
use std::os::fd::AsRawFd as _;

use anyhow::Context as _;

use tokio::sync::mpsc::UnboundedSender;

use crate::supervisor::{
    event::Event,
    groups::{Groups, Join},
    inputs::notify::watch_notify,
    lifecycle::State,
    output,
    slots::{SlotTable, slot::Worker},
};
use crate::{
    os::notify::{self, NotifySocket},
    os::sockets,
    os::spawn::{self, SpawnSpec},
    settings::run_config::{RunConfig, UdpMode},
};

/// `--udp-mode quic` with a UDP group: the server ID (hex) of slot `index`'s worker of
/// generation `generation`, which its QUIC connection IDs carry (`ck_common::udp::cookie`).
fn quic_server_id(cfg: &RunConfig, index: u32, generation: u32) -> Option<String> {
    let quic = cfg.udp_mode == UdpMode::Quic && cfg.listen.iter().any(|l| l.is_udp());
    quic.then(|| {
        ck_common::udp::cookie::server_id(index, generation)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    })
}

/// A worker spawned by `SlotTable::spawn_worker`.
pub(in crate::supervisor) struct Spawned {
    /// Its id (`CK_WORKER_ID`).
    pub id: u64,
    /// Its pid.
    pub pid: u32,
    /// Its slot's sockets opened a group that had no other member.
    pub founding: bool,
}

impl SlotTable {
    /// Opens the slot's sockets if they are closed (putting them in the maps, and attaching the
    /// program to a socket that founds its group), then spawns a worker on them. Returns its id.
    /// The rest (the exit watch, the steering check, the pacer) is the caller's.
    pub(in crate::supervisor) fn spawn_worker(
        &mut self,
        index: u32,
        cfg: &RunConfig,
        groups: &mut Groups,
        events: &UnboundedSender<Event>,
    ) -> anyhow::Result<Spawned> {
        let worker_id = self.next_worker_id;
        self.next_worker_id += 1;
        let founding = !self
            .slots
            .values()
            .any(|s| s.index != index && !s.sockets.is_empty());
        let slot = self.slots.get_mut(&index).context("no such slot")?;
        // With --adopt the worker opens its own sockets; the slot gets them when they are
        // adopted (a held socket stays the slot's until then).
        if slot.sockets.is_empty() && !cfg.adopt {
            for group in groups.iter_mut() {
                let socket = sockets::bind_member(group.addr, self.cgroups.as_ref(), index)?;
                // Tagged before it listens: the kernel counts its first connection too.
                if let Some(bpf) = &mut group.bpf {
                    bpf.tag(index, &socket);
                }
                sockets::listen_member(&socket, group.addr)?;
                group.join(index, &socket, Join::Tagged, founding)?;
                slot.sockets.push(socket);
            }
        }
        let notify = NotifySocket::bind(&cfg.name, index, worker_id)
            .context("binding the worker's NOTIFY_SOCKET")?;
        let cgroup = self.worker_cgroup(worker_id, cfg.worker_memory_max)?;
        if let Some(cgroup) = &cgroup
            && cfg.adopt
        {
            groups.bind_cgroup(cgroup, index);
        }
        let pipes = self
            .output
            .as_ref()
            .map(|_| capture_pipes())
            .transpose()
            .context("making the worker's output pipes")?;
        let slot = self.slots.get_mut(&index).context("no such slot")?;
        let socket_fds = match cfg.adopt {
            true => 0,
            false => slot.sockets.len(),
        };
        // --survive-supervisor: the worker holds its pipes' read ends too (after its sockets),
        // so its writes block, and never fail, while no ck reads; the next ck copies them.
        let keep = cfg.survive_supervisor && pipes.is_some();
        // A replacement of a worker that died (its slot waits or holds its socket; not a spare):
        // the fleet is short of it until it boots.
        let replacing = matches!(
            slot.life.state,
            State::Waiting | State::Held | State::Broken
        ) && !slot.life.spare;
        let spawned = spawn::spawn(SpawnSpec {
            app: &cfg.app,
            slot: index,
            worker_id,
            // The generation the worker gets once spawned (`Input::Spawned` counts it).
            quic_server_id: quic_server_id(cfg, index, slot.life.generation + 1),
            fds: match cfg.adopt {
                true => Vec::new(),
                false => slot.sockets.iter().map(|s| s.as_raw_fd()).collect(),
            },
            fd_names: groups.iter().map(|g| g.name.clone()).collect(),
            notify_socket: notify.env_value.clone(),
            watchdog_usec: cfg.health.watchdog.map(|d| d.as_micros() as u64),
            cgroup: cgroup.as_ref(),
            adopt_port: cfg.adopt.then(|| cfg.listen[0].addr.port()),
            adopt_listen: match cfg.adopt {
                // TCP ones as HOST:PORT (as ever), UDP ones as udp://HOST:PORT.
                true => cfg
                    .listen
                    .iter()
                    .map(|a| match a.is_udp() {
                        true => a.to_string(),
                        false => a.addr.to_string(),
                    })
                    .collect(),
                false => Vec::new(),
            },
            fd_limit: self.fd_limit,
            user: cfg.user.as_ref(),
            pdeathsig: !cfg.survive_supervisor,
            output: pipes.as_ref().map(|p| p.writes()).transpose()?,
            keep_fds: match (&pipes, keep) {
                (Some(p), true) => p.reads().to_vec(),
                _ => Vec::new(),
            },
        });
        let spawned = match spawned {
            Ok(spawned) => spawned,
            Err(e) => {
                if let Some(cgroup) = cgroup {
                    groups.unbind_cgroup(&cgroup);
                    cgroup.remove();
                }
                return Err(e).with_context(|| format!("spawning {}", cfg.app.program.display()));
            }
        };
        let pid = spawned.pid;
        let generation = slot.life.generation + 1;
        let output = match (pipes, &self.output) {
            (Some(pipes), Some(hub)) => {
                let first = 3 + socket_fds as i32;
                let ends = pipes.into_ends(keep.then_some([first, first + 1]))?;
                let from = output::Source {
                    slot: index,
                    pid,
                    // The `Spawned` input that follows this spawn counts the new generation.
                    generation,
                    stream: output::Stream::Stdout,
                };
                hub.read(&ends, from, &slot.output_dropped)
                    .context("reading the worker's output")?;
                Some(ends)
            }
            _ => None,
        };
        let exits = events.clone();
        let waiter = spawned
            .pidfd
            .try_clone()
            .context("duplicating the worker's pidfd")?;
        let (exec, program) = (spawned.exec, cfg.app.program.clone());
        tokio::spawn(async move {
            // Read here, not in `spawn`: the loop does not wait for the child's exec. A child
            // that could not exec exits 127 (a boot crash).
            if let Err(e) = exec.result().await {
                tracing::error!(slot = index, pid, "spawning {}: {e}", program.display());
            }
            let status = crate::os::pidfd::wait_child(waiter, pid).await;
            let _ = exits.send(Event::Exited {
                slot: index,
                worker: worker_id,
                status,
            });
        });
        let notify_socket = notify.socket.clone();
        let notify_name = notify.env_value.clone();
        let refused = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let heard = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let speakers = notify::Speakers {
            worker: pid,
            cgroup: cgroup.as_ref().map(|c| c.dir().to_path_buf()),
        };
        let notify_task = watch_notify(
            events,
            index,
            worker_id,
            speakers,
            notify.socket.clone(),
            refused.clone(),
            heard.clone(),
        );
        slot.last_pid = pid;
        let selected_base = groups.slot_stats(index).selected;
        let requests_limit = crate::supervisor::operations::recycle::requests_limit(
            cfg.max_requests,
            crate::supervisor::world::jitter(),
        );
        let slot = self.slots.get_mut(&index).context("no such slot")?;
        let mut worker = Worker::spawned(pid, spawned.pidfd, selected_base, replacing);
        worker.tasks.push(notify_task);
        worker.notify = Some(notify_socket);
        worker.cgroup = cgroup;
        worker.requests_limit = requests_limit;
        worker.notify_refused = refused;
        worker.notify_heard = heard;
        worker.notify_name = Some(notify_name);
        worker.output = output;
        slot.worker = Some(worker);
        Ok(Spawned {
            id: worker_id,
            pid,
            founding,
        })
    }
}

/// A new worker's stdout and stderr pipes.
struct CapturePipes {
    stdout: crate::os::pipe::OutputPipe,
    stderr: crate::os::pipe::OutputPipe,
}

fn capture_pipes() -> std::io::Result<CapturePipes> {
    Ok(CapturePipes {
        stdout: crate::os::pipe::OutputPipe::new()?,
        stderr: crate::os::pipe::OutputPipe::new()?,
    })
}

impl CapturePipes {
    /// Copies of the write ends, for the child's fds 1 and 2 (ck's own close with `self`).
    fn writes(&self) -> std::io::Result<[std::os::fd::OwnedFd; 2]> {
        Ok([
            self.stdout.write.try_clone()?,
            self.stderr.write.try_clone()?,
        ])
    }

    /// The read ends' numbers in ck.
    fn reads(&self) -> [std::os::fd::RawFd; 2] {
        [self.stdout.read.as_raw_fd(), self.stderr.read.as_raw_fd()]
    }

    /// ck's read ends (the write ends close here: the worker holds its own).
    fn into_ends(self, in_worker: Option<[i32; 2]>) -> std::io::Result<output::OutputEnds> {
        use std::os::fd::AsFd as _;
        let inodes = [
            crate::os::pipe::inode(self.stdout.read.as_fd())?,
            crate::os::pipe::inode(self.stderr.read.as_fd())?,
        ];
        Ok(output::OutputEnds {
            ends: [self.stdout.read, self.stderr.read],
            inodes,
            in_worker,
        })
    }
}
