//! Adopted fleets for the continuity tests (`ck upgrade` and `--survive-supervisor` with
//! `--adopt`, in `tests/tests/upgrade.rs` and `survive.rs`): the two kinds of server that bind
//! the port themselves ([`Server`]), the shape of the fleet ck reports (slots, pids, members),
//! and the checks that every listener is still steered and a drain still drains.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::ck::{Ck, Status, control_socket, pins_dir};
use crate::http::{burst, local};
use crate::sys::{cgroup_dir, cgroup_of, instance_processes, kill_hard, wait_all_dead};
use crate::{READY_TIMEOUT, ck_bin};

/// A server that binds the instance's port itself.
#[derive(Clone, Copy, Debug)]
pub enum Server {
    /// Three of ck's demo workers, each binding `$PORT` (one slot each).
    Demo,
    /// One server that forks four children, each binding the port and serving keep-alive
    /// connections on threads: the root slot (its socket held by a child, not by the worker)
    /// and three member slots.
    Forking,
}

/// The forking server (Python's standard library: the C example serves one connection at a
/// time per child, so a keep-alive load would hold every child).
const FORKING: &str = r#"
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = ("slot=%s pid=%d\n" % (os.environ.get("CK_SLOT", "0"), os.getpid())).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

for _ in range(4):
    if os.fork() == 0:
        ThreadingHTTPServer(("0.0.0.0", int(os.environ["PORT"])), Handler).serve_forever()
while True:
    os.wait()
"#;

impl Server {
    /// The worker count (`-w`).
    pub fn workers(self) -> usize {
        match self {
            Server::Demo => 3,
            Server::Forking => 1,
        }
    }

    /// How many slots its fleet steers (roots and members).
    pub fn listeners(self) -> usize {
        match self {
            Server::Demo => 3,
            Server::Forking => 4,
        }
    }

    /// `ck run`'s arguments after the port: `-w`, `extra`, `--adopt` and the app.
    pub fn args(self, extra: &[&str]) -> Vec<String> {
        let mut args = vec!["-w".to_string(), self.workers().to_string()];
        args.extend(extra.iter().map(|a| a.to_string()));
        args.extend(["--adopt", "--policy", "round-robin", "--"].map(String::from));
        match self {
            Server::Demo => args.extend([ck_bin().display().to_string(), "demo-worker".into()]),
            Server::Forking => args.extend(["python3", "-c", FORKING].map(String::from)),
        }
        args
    }
}

/// Each slot ck reports: its worker's (or member's) pid and the root slot it belongs to.
pub type Shape = BTreeMap<u32, (Option<u32>, Option<u32>)>;

/// The fleet's [`Shape`].
pub fn shape(status: &Status) -> Shape {
    status
        .slots
        .iter()
        .map(|s| (s.slot, (s.pid, s.member_of)))
        .collect()
}

/// Waits until every listener of `server` is adopted and ready, steering verified, and `more`
/// holds; the status then.
pub fn wait_fleet(ck: &mut Ck, server: Server, more: impl Fn(&Status) -> bool) -> Status {
    let status = ck
        .wait_status("every listener adopted and ready", READY_TIMEOUT, |s| {
            s.bpf
                && s.slots.len() == server.listeners()
                && s.ready_count() == server.listeners()
                && more(s)
        })
        .expect("wait for the status");
    let members = status
        .slots
        .iter()
        .filter(|s| s.member_of.is_some())
        .count();
    assert_eq!(
        members,
        server.listeners() - server.workers(),
        "{status:#?}"
    );
    status
}

/// `now` is the fleet `was` was: the same slots, pids and members, the same active set (read
/// from the maps), every slot ready with the same generation and restarts, selections only
/// grown.
pub fn assert_same_fleet(was: &Status, now: &Status) {
    assert_eq!(shape(now), shape(was), "{was:#?}\n{now:#?}");
    let active = |s: &Status| s.active.iter().copied().collect::<BTreeSet<u32>>();
    assert_eq!(active(now), active(was), "{was:#?}\n{now:#?}");
    for slot in &now.slots {
        let before = was.slot(slot.slot);
        assert_eq!(slot.state, "ready", "{now:#?}");
        assert_eq!(
            (slot.generation, slot.restarts),
            (before.generation, before.restarts),
            "slot {}: {now:#?}",
            slot.slot
        );
        assert!(slot.selected >= before.selected, "{was:#?}\n{now:#?}");
    }
}

/// Every slot of `now` was selected for more connections than in `was` (the kernel's counts:
/// a forking server's root answers from a child, whose pid ck does not report).
pub fn assert_every_slot_selected(was: &Status, now: &Status) {
    for slot in &now.slots {
        assert!(
            slot.selected > was.slot(slot.slot).selected,
            "slot {} got no connection: {was:#?}\n{now:#?}",
            slot.slot
        );
    }
}

/// Every slot of the fleet still gets new connections: ten per listener on new connections,
/// all answered, and every slot's kernel count grew.
pub fn assert_every_slot_gets_connections(ck: &Ck, port: u16) {
    let before = ck.status().expect("ck status");
    let n = 10 * before.slots.len() as u32;
    let tally = burst(local(port), n);
    assert_eq!(tally.ok, n, "{tally:?}");
    assert_every_slot_selected(&before, &ck.status().expect("ck status"));
}

/// `ck drain` of the fleet's last slot still works: 30 new connections all answered, none
/// selected for it, every other slot some; then `ck undrain`.
pub fn assert_drain_works(ck: &mut Ck, port: u16) {
    let before = ck.status().expect("ck status");
    let drained = before.slots.last().expect("a slot").slot;
    ck.ctl_ok(&["drain", &drained.to_string()])
        .expect("ck drain");
    let at = ck
        .wait_status("the slot drained", READY_TIMEOUT, |s| {
            !s.active.contains(&drained)
        })
        .expect("wait for the status");
    let tally = burst(local(port), 30);
    assert_eq!(tally.ok, 30, "{tally:?}");
    let after = ck.status().expect("ck status");
    assert_eq!(
        after.slot(drained).selected,
        at.slot(drained).selected,
        "the drained slot {drained} got connections: {after:#?}"
    );
    for slot in after.slots.iter().filter(|s| s.slot != drained) {
        assert!(slot.selected > at.slot(slot.slot).selected, "{after:#?}");
    }
    ck.ctl_ok(&["undrain", &drained.to_string()])
        .expect("ck undrain");
    ck.wait_status("the slot back", READY_TIMEOUT, |s| {
        s.active.contains(&drained)
    })
    .expect("wait for the status");
}

/// This ck watches every process of the fleet: a member that exits takes its slot with it and
/// the child holding the root's socket gives that up when it exits (a forking server); a worker
/// that is killed is replaced and its socket adopted (demo).
pub fn assert_exits_seen(ck: &mut Ck, port: u16, server: Server) {
    let before = ck.status().expect("ck status");
    match server {
        Server::Forking => {
            let member = before
                .slots
                .iter()
                .find(|s| s.member_of.is_some())
                .expect("a member slot");
            let (gone, pid) = (member.slot, member.pid.expect("a member has a pid"));
            kill_hard(pid);
            ck.wait_status("the member's slot removed", READY_TIMEOUT, |s| {
                s.slots.iter().all(|slot| slot.slot != gone)
            })
            .expect("wait for the status");
            let tally = burst(local(port), 20);
            assert_eq!(tally.ok, 20, "{tally:?}");
            // The root's socket is a child's: neither the root's pid nor a member's.
            let known: BTreeSet<u32> = ck.status().expect("ck status").worker_pids();
            let tree = instance_processes(ck.name());
            let holder = tree
                .iter()
                .find(|p| !known.contains(p))
                .expect("the holder");
            kill_hard(*holder);
            ck.wait_status("the root gave its socket up", READY_TIMEOUT, |s| {
                s.slot(0).state == "starting"
            })
            .expect("wait for the status");
            return;
        }
        Server::Demo => {
            let victim = before.worker_pid(0);
            kill_hard(victim);
            wait_fleet(ck, server, |s| s.slot(0).pid.is_some_and(|p| p != victim));
        }
    }
    let tally = burst(local(port), 20);
    assert_eq!(tally.ok, 20, "{tally:?}");
}

/// `ck stop`, then nothing is left: ck exited 0, no process of the fleet (`pids`, every
/// process of its cgroup), no cgroup, nothing listening on `port`, no control socket, no pins.
pub fn stop_and_assert_clean(mut ck: Ck, port: u16, mut pids: BTreeSet<u32>) {
    let name = ck.name().to_string();
    pids.extend(instance_processes(&name));
    ck.ctl_ok(&["stop"]).expect("ck stop");
    ck.wait_clean_exit().expect("ck exits cleanly");
    let left = wait_all_dead(&pids, Duration::from_secs(10));
    assert!(left.is_empty(), "processes {left:?} left");
    assert!(cgroup_dir(&name).is_none_or(|d| !d.exists()), "cgroup left");
    assert!(
        std::net::TcpStream::connect(local(port)).is_err(),
        "something still listens on {port}"
    );
    assert!(!control_socket(&name).exists(), "control socket left");
    assert!(!pins_dir(&name).exists(), "pins left");
}

/// Whether a new process in the cgroup of fleet process `pid` can bind the fleet's `port`
/// without setting `SO_REUSEPORT` itself: only ck's bind hook gives it that while the fleet's
/// sockets hold the port (it binds, never listens, and exits).
pub fn binds_beside(pid: u32, port: u16) -> bool {
    let procs = cgroup_of(&pid.to_string())
        .expect("cgroup2")
        .join("cgroup.procs");
    let bind = format!("import socket; socket.socket().bind(('0.0.0.0', {port}))");
    std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "echo $$ > '{}' && exec python3 -c \"{bind}\"",
            procs.display()
        ))
        .stderr(std::process::Stdio::null())
        .status()
        .expect("running sh")
        .success()
}
