//! Notify messages count only from the worker's own process tree: a foreign process that finds
//! a worker's `NOTIFY_SOCKET` (its abstract name can be read or guessed) and sends `STOPPING=1`
//! or `READY=1` changes nothing, and ck counts and logs what it ignored; a child of the worker
//! still speaks for it.

use std::os::linux::net::SocketAddrExt as _;
use std::os::unix::net::{SocketAddr, UnixDatagram};

use ck_tests::sys::TempDir;
use ck_tests::{READY_TIMEOUT, burst_pinned, local, start, start_ready};

/// The `NOTIFY_SOCKET` ck gave process `pid`. A worker that was just forked shows ck's own
/// environment until its exec, so this polls until the worker's own environment is there.
fn notify_socket_of(pid: u32) -> String {
    let deadline = std::time::Instant::now() + READY_TIMEOUT;
    loop {
        let env = std::fs::read(format!("/proc/{pid}/environ")).expect("reading the environment");
        let found = env
            .split(|b| *b == 0)
            .find_map(|kv| kv.strip_prefix(b"NOTIFY_SOCKET="))
            .map(|v| String::from_utf8_lossy(v).into_owned());
        match found {
            Some(socket) => return socket,
            None if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            None => panic!("no NOTIFY_SOCKET in worker {pid}'s environment after its exec"),
        }
    }
}

/// Sends `message` to `notify_socket` (`@name`: abstract) from this process, which is not of any
/// worker's tree.
fn send_from_outside(notify_socket: &str, message: &[u8]) {
    let name = notify_socket
        .strip_prefix('@')
        .expect("an abstract address");
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let s = UnixDatagram::unbound().unwrap();
    s.send_to_addr(message, &addr)
        .expect("sending to the notify socket");
}

#[test]
fn a_foreign_stopping_does_not_drain_a_worker() {
    let (mut ck, port, before) = start_ready("notify-foreign", 2, &[]).expect("start a ready ck");
    let victim = before.slot(0).pid.expect("slot 0 has a worker");
    send_from_outside(&notify_socket_of(victim), b"STOPPING=1\nSTATUS=hijacked\n");
    let after = ck
        .wait_status("the message counted as refused", READY_TIMEOUT, |s| {
            s.slot(0).notify_refused >= 1
        })
        .expect("wait for the status");
    let slot = after.slot(0);
    assert_eq!(slot.state, "ready", "{after:#?}");
    assert_ne!(slot.status.as_deref(), Some("hijacked"), "{after:#?}");
    assert!(after.active.contains(&0), "{after:#?}");
    let tally = burst_pinned(local(port), 20);
    assert_eq!(
        tally.pid(victim),
        10,
        "slot 0 still gets its share: {tally:?}"
    );
    assert!(ck.log().contains("notify message ignored"), "{}", ck.log());
}

#[test]
fn a_foreign_ready_does_not_make_a_worker_ready_but_its_child_does() {
    let dir = TempDir::new("notify-child");
    let go = dir.path().join("go");
    // The worker waits for `go`, then a child process (python) sends READY=1 for it and lingers
    // a moment (ck checks the sender's tree when it reads the message).
    let script = format!(
        "#!/bin/sh\n\
         while [ ! -e {go} ]; do sleep 0.02; done\n\
         python3 -c 'import os, socket, time\n\
a = os.environ[\"NOTIFY_SOCKET\"]\n\
a = \"\\0\" + a[1:] if a.startswith(\"@\") else a\n\
socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b\"READY=1\", a)\n\
time.sleep(1)'\n\
         exec sleep 600\n",
        go = go.display()
    );
    let app = dir.write("worker.sh", &script, true);
    let app = app.to_str().unwrap();
    let (mut ck, _port) =
        start("notify-child", &["-w", "1", "--ready", "notify", "--", app]).expect("start ck");
    let starting = ck
        .wait_status("a starting worker", READY_TIMEOUT, |s| {
            s.slots.first().is_some_and(|s| s.pid.is_some())
        })
        .expect("wait for the status");
    let pid = starting.slot(0).pid.unwrap();
    send_from_outside(&notify_socket_of(pid), b"READY=1\n");
    let refused = ck
        .wait_status("the foreign READY=1 refused", READY_TIMEOUT, |s| {
            s.slot(0).notify_refused >= 1
        })
        .expect("wait for the status");
    assert_eq!(refused.slot(0).state, "starting", "{refused:#?}");
    assert!(refused.active.is_empty(), "{refused:#?}");
    std::fs::write(&go, "").unwrap();
    let ready = ck
        .wait_ready(1, READY_TIMEOUT)
        .expect("wait for ready slots");
    assert_eq!(ready.slot(0).pid, Some(pid), "{ready:#?}");
    assert_eq!(ready.slot(0).notify_refused, 1, "{ready:#?}");
}
