//! The rig's endpoint controller: what the kubelet's readiness probes, the EndpointSlice
//! controller and kube-proxy do for a Service, on one thread. Each host's `/readyz` is probed
//! every `period` (from the front's namespace); `failure_threshold` failures in a row make it
//! not ready, `success_threshold` successes ready; each change reaches the nftables set after
//! `propagation`. A terminating host (a pod being deleted) leaves the endpoints after
//! `propagation` whatever its probe says, as Kubernetes removes a terminating pod at once; a
//! host started again (a new pod) is not ready until its probe succeeds.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::nft::Table;

/// The probe and propagation timings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probes {
    /// `periodSeconds`.
    pub period: Duration,
    /// `failureThreshold`.
    pub failure_threshold: u32,
    /// `successThreshold`.
    pub success_threshold: u32,
    /// `timeoutSeconds`.
    pub timeout: Duration,
    /// From a change of a pod's readiness (or its deletion) to kube-proxy's rules.
    pub propagation: Duration,
}

impl Probes {
    /// Kubernetes' defaults (`periodSeconds: 10`, `failureThreshold: 3`, `successThreshold: 1`,
    /// `timeoutSeconds: 1`) and a propagation of 1.5 s (EndpointSlice update, watch, kube-proxy's
    /// sync: typically one to two seconds on a small cluster).
    pub const KUBERNETES: Probes = Probes {
        period: Duration::from_secs(10),
        failure_threshold: 3,
        success_threshold: 1,
        timeout: Duration::from_secs(1),
        propagation: Duration::from_millis(1500),
    };

    /// The longest a host that went down stays in the endpoints: `failure_threshold` periods,
    /// one more for the phase, the probe's timeout and the propagation.
    pub fn detection_bound(&self) -> Duration {
        self.period * (self.failure_threshold + 1) + self.timeout + self.propagation
    }
}

/// What the controller knows of one host.
#[derive(Debug, Clone)]
struct Endpoint {
    /// `/readyz` of the host.
    probe: SocketAddr,
    /// Being deleted: out of the endpoints, probes ignored.
    terminating: bool,
    /// The probe's verdict (a new pod starts not ready).
    ready: bool,
    /// Verdicts in a row that disagree with `ready`.
    streak: u32,
    /// When the next probe is due.
    next_probe: Instant,
    /// Whether it is in the nftables set.
    applied: bool,
    /// A change on its way to the set: (when it lands, in or out).
    pending: Option<(Instant, bool)>,
    /// When it last left the set.
    removed_at: Option<Instant>,
    /// When it last entered the set.
    added_at: Option<Instant>,
}

impl Endpoint {
    /// A new endpoint probing `probe`, not ready, its first probe due at `now`.
    fn new(probe: SocketAddr, now: Instant) -> Endpoint {
        Endpoint {
            probe,
            terminating: false,
            ready: false,
            streak: 0,
            next_probe: now,
            applied: false,
            pending: None,
            removed_at: None,
            added_at: None,
        }
    }

    /// Takes the verdict of one probe at `now`: a change of readiness once the threshold is
    /// reached, on its way to the set after the propagation. Ignored while terminating.
    fn verdict(&mut self, ok: bool, now: Instant, timings: Probes) {
        if self.terminating {
            return;
        }
        if ok == self.ready {
            self.streak = 0;
            return;
        }
        self.streak += 1;
        let needed = if ok {
            timings.success_threshold
        } else {
            timings.failure_threshold
        };
        if self.streak >= needed {
            self.ready = ok;
            self.streak = 0;
            self.pending = Some((now + timings.propagation, ok));
        }
    }
}

/// The changes that have reached the set by `now` (index, in or out), taken off their
/// endpoints; a change that would leave the set as it is is dropped.
fn landed(endpoints: &mut [Endpoint], now: Instant) -> Vec<(usize, bool)> {
    endpoints
        .iter_mut()
        .enumerate()
        .filter_map(|(i, ep)| {
            let (_, up) = ep.pending.filter(|(at, _)| *at <= now)?;
            ep.pending = None;
            (ep.applied != up).then_some((i, up))
        })
        .collect()
}

/// The controller's shared state.
#[derive(Debug)]
struct State {
    endpoints: Vec<Endpoint>,
}

/// The endpoint controller thread; stopped on drop.
#[derive(Debug)]
pub struct Controller {
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Controller {
    /// Starts the controller for `table`, probing `probes` (each host's `/readyz` address)
    /// from the network namespace `netns` (a `/run/netns/` file).
    pub fn start(
        table: Table,
        netns: &std::path::Path,
        probes: &[SocketAddr],
        timings: Probes,
    ) -> Controller {
        let now = Instant::now();
        let endpoints = probes.iter().map(|&p| Endpoint::new(p, now)).collect();
        let state = Arc::new(Mutex::new(State { endpoints }));
        let stop = Arc::new(AtomicBool::new(false));
        let ns = std::fs::File::open(netns).expect("opening the front's namespace");
        let thread = {
            let (state, stop) = (state.clone(), stop.clone());
            std::thread::Builder::new()
                .name("ck-fleet-endpoints".into())
                .spawn(move || {
                    nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)
                        .expect("entering the front's namespace");
                    run(&table, &state, &stop, timings);
                })
                .expect("starting the endpoint controller")
        };
        Controller {
            state,
            stop,
            thread: Some(thread),
        }
    }

    /// Host `i` is being deleted: it leaves the endpoints after the propagation delay.
    pub fn terminating(&self, i: usize, timings: Probes) {
        let mut state = self.state.lock().expect("controller state");
        let ep = &mut state.endpoints[i];
        ep.terminating = true;
        ep.ready = false;
        ep.streak = 0;
        if ep.applied || ep.pending.is_some_and(|(_, up)| up) {
            ep.pending = Some((Instant::now() + timings.propagation, false));
        }
    }

    /// Host `i` runs a new pod: not ready until its probe succeeds.
    pub fn started(&self, i: usize) {
        let mut state = self.state.lock().expect("controller state");
        let ep = &mut state.endpoints[i];
        ep.terminating = false;
        ep.ready = false;
        ep.streak = 0;
        ep.next_probe = Instant::now();
    }

    /// Whether host `i` is in the nftables set.
    pub fn in_rotation(&self, i: usize) -> bool {
        self.state.lock().expect("controller state").endpoints[i].applied
    }

    /// When host `i` last left (`false`) or entered (`true`) the set, if it did.
    pub fn changed_at(&self, i: usize, entered: bool) -> Option<Instant> {
        let state = self.state.lock().expect("controller state");
        let ep = &state.endpoints[i];
        if entered { ep.added_at } else { ep.removed_at }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The controller's loop: probes that are due, changes that landed, the set written when it
/// changed. Probes run without the lock.
fn run(table: &Table, state: &Mutex<State>, stop: &AtomicBool, timings: Probes) {
    let tick = (timings.period / 10).clamp(Duration::from_millis(5), Duration::from_millis(50));
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let due: Vec<(usize, SocketAddr)> = {
            let mut state = state.lock().expect("controller state");
            state
                .endpoints
                .iter_mut()
                .enumerate()
                .filter(|(_, ep)| !ep.terminating && ep.next_probe <= now)
                .map(|(i, ep)| {
                    ep.next_probe = now + timings.period;
                    (i, ep.probe)
                })
                .collect()
        };
        let verdicts: Vec<(usize, bool)> = due
            .into_iter()
            .map(|(i, addr)| (i, probe(addr, timings.timeout)))
            .collect();
        let mut state = state.lock().expect("controller state");
        let now = Instant::now();
        for (i, ok) in verdicts {
            state.endpoints[i].verdict(ok, now, timings);
        }
        let landed = landed(&mut state.endpoints, now);
        if !landed.is_empty() {
            let ready: Vec<usize> = (0..state.endpoints.len())
                .filter(|&i| {
                    landed
                        .iter()
                        .find(|(l, _)| *l == i)
                        .map_or(state.endpoints[i].applied, |(_, up)| *up)
                })
                .collect();
            // Written with the lock held: nobody sees a change before the kernel has it.
            table.set_ready(&ready);
            let written = Instant::now();
            for (i, up) in landed {
                let ep = &mut state.endpoints[i];
                ep.applied = up;
                if up {
                    ep.added_at = Some(written);
                } else {
                    ep.removed_at = Some(written);
                }
            }
        }
        drop(state);
        std::thread::sleep(tick);
    }
}

/// One readiness probe: `GET /readyz` answered with a 2xx status within `timeout`.
fn probe(addr: SocketAddr, timeout: Duration) -> bool {
    let attempt = || -> std::io::Result<bool> {
        let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        stream.write_all(b"GET /readyz HTTP/1.0\r\nHost: ck\r\n\r\n")?;
        let mut head = [0u8; 12];
        stream.read_exact(&mut head)?;
        Ok(head.starts_with(b"HTTP/1.") && head[9] == b'2')
    };
    attempt().unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Probes = Probes {
        period: Duration::from_secs(10),
        failure_threshold: 3,
        success_threshold: 1,
        timeout: Duration::from_secs(1),
        propagation: Duration::from_millis(1500),
    };

    fn endpoint(now: Instant) -> Endpoint {
        Endpoint::new(SocketAddr::from(([10, 77, 0, 11], 9100)), now)
    }

    #[test]
    fn a_new_endpoint_joins_after_one_success_and_the_propagation() {
        let now = Instant::now();
        let mut eps = vec![endpoint(now)];
        eps[0].verdict(true, now, T);
        assert!(landed(&mut eps, now + Duration::from_millis(1400)).is_empty());
        assert_eq!(landed(&mut eps, now + T.propagation), vec![(0, true)]);
    }

    #[test]
    fn a_failing_endpoint_leaves_after_the_failure_threshold() {
        let now = Instant::now();
        let mut eps = vec![endpoint(now)];
        eps[0].ready = true;
        eps[0].applied = true;
        eps[0].verdict(false, now, T);
        eps[0].verdict(false, now, T);
        // A success in between starts the count again.
        eps[0].verdict(true, now, T);
        eps[0].verdict(false, now, T);
        eps[0].verdict(false, now, T);
        assert!(eps[0].pending.is_none(), "{:?}", eps[0]);
        eps[0].verdict(false, now, T);
        assert_eq!(eps[0].pending, Some((now + T.propagation, false)));
        assert_eq!(landed(&mut eps, now + T.propagation), vec![(0, false)]);
    }

    #[test]
    fn a_terminating_endpoint_ignores_its_probe() {
        let now = Instant::now();
        let mut eps = vec![endpoint(now)];
        eps[0].terminating = true;
        eps[0].verdict(true, now, T);
        assert!(landed(&mut eps, now + T.propagation).is_empty());
    }
}
