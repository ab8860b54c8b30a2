//! `--ready auto`'s accept probe: a silent starting worker is ready when it takes a connection
//! off its own accept queue. ck leaves one connection there (probe steering: from the slot's
//! probe port, so the program hands it to that slot's socket, which is not in the active set
//! yet), then reads the queue's length on its own copy of the socket (`TCP_INFO`, one
//! `getsockopt`) at each readiness tick. The queue only shrinks when someone `accept`s, and
//! only the worker does, so a shorter queue than the last reading is the worker accepting: seen
//! by the kernel, a millisecond after it happens, for microseconds of ck's CPU where the
//! `/proc` scan (`os::readiness`) costs ~0.1 ms a tick (a fifth of a core for two booting
//! workers). The connection ends as a polite client's does (`os::probe::conn`): ck shuts down
//! writing as soon as it is in the queue, so the worker that accepts it reads the end of a
//! request that never came, and ck reads until the worker closes it.
//!
//! Where the probe cannot work, the `/proc` scan decides as before: no steering yet (the program
//! not attached or not checked), a probe port another socket holds (tried again at each tick:
//! a replaced worker's connections free it once the kernel has torn that worker down), a
//! connection that never shows in the queue (the worker set `TCP_DEFER_ACCEPT`, so a
//! connection without data stays in SYN_RECV; or it accepted within the same tick), or
//! `CK_READY_DETECT=proc` ([`FORCE_ENV`]), which tests use to check the scan on its own.
use std::{net::SocketAddr, time::Instant};

use crate::os::probe::conn::ProbeConn;

/// The environment variable that turns the accept probe off (`CK_READY_DETECT=proc`): only the
/// `/proc` scan then sees a silent worker accept.
pub const FORCE_ENV: &str = "CK_READY_DETECT";

/// How long a connecting probe may take before ck gives up on it (loopback completes a
/// handshake in microseconds; a probe this late is lost, e.g. to a full SYN queue).
const CONNECT_LIMIT: std::time::Duration = std::time::Duration::from_millis(100);

/// Whether `CK_READY_DETECT=proc` asks for the `/proc` scan alone (read once: the readiness
/// tick asks every millisecond).
pub fn forced_off() -> bool {
    static FORCED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FORCED.get_or_init(|| std::env::var(FORCE_ENV).is_ok_and(|v| v == "proc"))
}

/// The accept probe of one starting worker.
#[derive(Debug, Default)]
pub enum AcceptProbe {
    /// Not sent yet (waiting for steering).
    #[default]
    Unsent,
    /// Connecting; `before` is the queue length before it was sent.
    Connecting {
        /// The probe's connection (ended politely when dropped).
        conn: ProbeConn,
        /// The accept queue's length before the probe.
        before: u32,
        /// When it was sent.
        sent: Instant,
    },
    /// In the queue, writing shut down: the worker accepts once the queue is shorter than
    /// `last`.
    Armed {
        /// The queue's length at the last reading.
        last: u32,
        /// The probe's connection, held until the probe ends: dropping it ends it politely.
        conn: ProbeConn,
    },
    /// Not usable for this worker: the `/proc` scan decides.
    Off,
}

/// What a step of the probe found.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing yet.
    Waiting,
    /// The worker took a connection off its queue.
    Accepted,
}

impl AcceptProbe {
    /// Whether the probe watches the queue, so the `/proc` scan can rest.
    pub fn armed(&self) -> bool {
        matches!(self, AcceptProbe::Armed { .. })
    }

    /// Ends the probe (the worker is ready, or spoke on `NOTIFY_SOCKET`): its connection is
    /// ended politely now (read until the worker, which has it or will take it off its queue,
    /// closes it), not held while the worker lives.
    pub fn end(&mut self) {
        *self = AcceptProbe::Off;
    }

    /// Whether the probe cannot be used for this worker (the `/proc` scan decides alone).
    pub fn off(&self) -> bool {
        matches!(self, AcceptProbe::Off)
    }

    /// The probe's connection, if it has one, taken out (the probe is off): its worker died,
    /// and the connection may still wait in the queue of the slot's socket for the next one.
    pub fn take_conn(&mut self) -> Option<ProbeConn> {
        match std::mem::replace(self, AcceptProbe::Off) {
            AcceptProbe::Connecting { conn, .. } | AcceptProbe::Armed { conn, .. } => Some(conn),
            AcceptProbe::Unsent | AcceptProbe::Off => None,
        }
    }

    /// Takes over `queued`, the probe of the slot's previous worker that died before it took
    /// it (see [`AcceptProbe::take_conn`]), if this probe is not sent yet and the queue (`queue`
    /// long) still holds something: the next accept shrinks it. Says whether it did; else
    /// `queued` is ended.
    pub fn take_over(&mut self, queued: Option<ProbeConn>, queue: u32) -> bool {
        match queued {
            Some(conn) if queue > 0 && matches!(self, AcceptProbe::Unsent) => {
                *self = AcceptProbe::Armed { last: queue, conn };
                true
            }
            _ => false,
        }
    }

    /// Sends the probe from `source` to `target` if it is not sent yet, given the queue's
    /// length `queue` before it; says whether it sent it now.
    pub fn send(
        &mut self,
        target: SocketAddr,
        source: SocketAddr,
        queue: u32,
        now: Instant,
    ) -> bool {
        if !matches!(self, AcceptProbe::Unsent) {
            return false;
        }
        *self = match ProbeConn::connect(target, source) {
            Ok(conn) => AcceptProbe::Connecting {
                conn,
                before: queue,
                sent: now,
            },
            // The probe port, or its connection to this socket, is still taken: by ck's end of
            // an earlier connection (a health probe, the accept probe of the worker this one
            // replaces) that the worker has not closed yet, or that waits out TIME_WAIT where
            // TCP timestamps are off (see `os::probe::conn`). Tried again at the next tick.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EADDRINUSE | libc::EADDRNOTAVAIL)
                ) =>
            {
                tracing::debug!(%source, error = %e, "accept probe port taken; tried again");
                return false;
            }
            Err(e) => {
                tracing::debug!(%source, error = %e, "accept probe not sent; /proc decides");
                AcceptProbe::Off
            }
        };
        true
    }

    /// One reading of the accept queue's length `queue`: moves the probe on, and says whether
    /// the worker accepted.
    pub fn step(&mut self, queue: u32, now: Instant) -> Step {
        match self {
            AcceptProbe::Unsent | AcceptProbe::Off => Step::Waiting,
            AcceptProbe::Connecting { conn, before, sent } => {
                match conn.connected() {
                    Ok(false) if now.duration_since(*sent) < CONNECT_LIMIT => {}
                    // In the queue: writing is shut down now, so the worker that takes it
                    // reads its end.
                    Ok(true) if queue > *before => {
                        if let Err(e) = conn.shut_down_writing() {
                            tracing::debug!(error = %e, "accept probe: shutting down writing");
                        }
                        let AcceptProbe::Connecting { conn, .. } = std::mem::take(self) else {
                            unreachable!("matched above")
                        };
                        *self = AcceptProbe::Armed { last: queue, conn };
                    }
                    // Connected but not queued (TCP_DEFER_ACCEPT, or accepted at once), failed
                    // or lost: the queue says nothing sure, the scan decides.
                    other => {
                        tracing::debug!(?other, queue, before = *before, "accept probe off");
                        *self = AcceptProbe::Off
                    }
                }
                Step::Waiting
            }
            AcceptProbe::Armed { last, .. } => {
                if queue < *last {
                    return Step::Accepted;
                }
                *last = queue;
                Step::Waiting
            }
        }
    }
}

/// Why the worker counts as ready when its probe says so, for logs.
pub const REASON: &str =
    "it accepted a connection from its listening socket's queue (accept probe)";

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Write as _};
    use std::net::TcpListener;

    use socket2::Socket;

    use super::*;

    /// A listener of its own (the "slot socket") and the queue length ck reads on it.
    fn listener() -> (Socket, SocketAddr) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        (Socket::from(l), addr)
    }

    fn queue(s: &Socket) -> u32 {
        crate::os::sockets::accept_queue_len(s).unwrap()
    }

    /// A probe sent to `addr`, whose queue is `queue` long before it.
    fn sent(addr: SocketAddr, queue: u32) -> AcceptProbe {
        let mut p = AcceptProbe::default();
        assert!(p.send(addr, "127.0.0.1:0".parse().unwrap(), queue, Instant::now()));
        p
    }

    /// Steps until the probe leaves `Connecting` (loopback: microseconds).
    fn settle(p: &mut AcceptProbe, s: &Socket) {
        for _ in 0..1000 {
            p.step(queue(s), Instant::now());
            if !matches!(p, AcceptProbe::Connecting { .. }) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
    }

    #[test]
    fn an_accept_is_seen_and_nothing_before_it() {
        let (l, addr) = listener();
        let mut p = sent(addr, queue(&l));
        settle(&mut p, &l);
        assert!(p.armed(), "{p:?}");
        assert_eq!(queue(&l), 1, "the probe stays queued");
        for _ in 0..3 {
            assert_eq!(p.step(queue(&l), Instant::now()), Step::Waiting);
        }
        let (mut conn, _) = l.accept().unwrap();
        assert_eq!(p.step(queue(&l), Instant::now()), Step::Accepted);
        // What the worker gets: the end of a request that never came; what it answers is read,
        // before and after the probe ends.
        let mut buf = [0u8; 8];
        assert_eq!(conn.read(&mut buf).unwrap(), 0);
        conn.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").unwrap();
        p.end();
        for _ in 0..20 {
            conn.write_all(b"more").unwrap();
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert_eq!(conn.read(&mut buf).unwrap(), 0);
    }

    #[test]
    fn the_queued_probe_of_a_dead_worker_is_the_next_ones() {
        let (l, addr) = listener();
        let mut first = sent(addr, queue(&l));
        settle(&mut first, &l);
        let queued = first.take_conn();
        assert!(queued.is_some() && first.off(), "{first:?}");
        // The next worker of the slot: the connection still waits in the queue.
        let mut next = AcceptProbe::default();
        assert!(next.take_over(queued, queue(&l)));
        assert!(next.armed(), "{next:?}");
        let (mut conn, _) = l.accept().unwrap();
        assert_eq!(next.step(queue(&l), Instant::now()), Step::Accepted);
        let mut buf = [0u8; 8];
        assert_eq!(conn.read(&mut buf).unwrap(), 0, "a live client's end");
        // Nothing left in the queue: nothing to take over.
        let mut last = AcceptProbe::default();
        assert!(!last.take_over(next.take_conn(), queue(&l)));
        assert!(matches!(last, AcceptProbe::Unsent), "{last:?}");
    }

    #[test]
    fn a_connection_that_never_queues_turns_the_probe_off() {
        let (l, addr) = listener();
        l.set_nonblocking(true).unwrap();
        let mut p = sent(addr, queue(&l));
        // Accepted before ck reads the queue: nothing sure to compare with.
        let mut taken = None;
        for _ in 0..1000 {
            if let Ok(c) = l.accept() {
                taken = Some(c);
                break;
            }
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        assert!(taken.is_some());
        settle(&mut p, &l);
        assert!(matches!(p, AcceptProbe::Off), "{p:?}");
        assert_eq!(p.step(0, Instant::now()), Step::Waiting);
    }

    #[test]
    fn a_probe_port_still_taken_is_tried_again() {
        let (l, addr) = listener();
        // ck's end of an earlier connection from the probe port to the same socket.
        let held = Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        held.set_reuse_address(true).unwrap();
        held.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into())
            .unwrap();
        let source = held.local_addr().unwrap().as_socket().unwrap();
        held.connect(&addr.into()).unwrap();
        let mut p = AcceptProbe::default();
        assert!(!p.send(addr, source, queue(&l), Instant::now()));
        assert!(matches!(p, AcceptProbe::Unsent), "{p:?}");
        drop(held);
        drop(l.accept().unwrap());
        assert!(p.send(addr, source, queue(&l), Instant::now()));
        settle(&mut p, &l);
        assert!(p.armed(), "{p:?}");
    }

    #[test]
    fn a_refused_probe_turns_the_probe_off() {
        let (l, addr) = listener();
        drop(l);
        let mut p = sent(addr, 0);
        for _ in 0..1000 {
            p.step(0, Instant::now());
            if matches!(p, AcceptProbe::Off) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        assert!(matches!(p, AcceptProbe::Off), "{p:?}");
    }
}
