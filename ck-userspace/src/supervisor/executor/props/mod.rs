//! Property test: random input sequences over a small fleet, driven through the supervisor's
//! own code: the fleet executor ([`executor::decisions`]) runs the fleet core's decisions (deaths,
//! rolls, scales, spares, the shutdown) and the slot executor ([`executor::run`]) runs their
//! inputs, acting on a model of the OS (open, adopted and replaced sockets, live workers, armed
//! timers, the published active set) that implements its [`World`]. Only what comes from
//! outside is the model's: the OS's events, the operator's commands, `--adopt`'s listeners.
//! After every step the invariants of ARCHITECTURE.md are checked, the fleet's among them;
//! the slots' UDP sockets are modelled too (`udp`), so that a leaving worker is read by the
//! leave's own decision and is checked to be signalled only once what it was given is done.
use std::{
    collections::{BTreeMap, BTreeSet, VecDeque},
    time::{Duration, Instant},
};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

use crate::settings::restart_policy::RestartPolicy;
use crate::supervisor::lifecycle::*;
use crate::supervisor::{
    executor::{self, Outcome, decisions},
    fleet::{Core, Shape, death::Death},
};

mod invariants;
mod operator;
mod ops;
mod os;
mod udp;

use ops::{Op, op};

/// What the supervisor's event loop handles after the event that sent it.
#[derive(Debug)]
enum Later {
    /// A slot became ready (`Event::BecameReady`).
    Ready(u32),
    /// The roll may be over (`Event::RollCheck`).
    RollCheck,
    /// Boot spares again (`Event::SpareDue`).
    SpareDue,
    /// A worker faltered (`Event::Faltered`).
    Faltered(u32, String),
}

/// The fleet (its lives and the fleet core's state) and the OS as the effects leave them.
struct Model {
    settings: Settings,
    shape: Shape,
    core: Core,
    lives: BTreeMap<u32, Life>,
    /// What the OS has: slots whose sockets are open, slots whose worker runs.
    os_open: BTreeMap<u32, bool>,
    os_worker: BTreeMap<u32, u64>,
    /// The last published active set.
    published: ck_common::ActiveSet,
    timers: Vec<(u32, Timer, u64)>,
    now: Instant,
    next_id: u64,
    /// The next spawn fails (`Some(true)`: while opening the sockets).
    fail_next_spawn: Option<bool>,
    stopping: bool,
    /// Slots whose worker's sockets ck copied and has not installed yet (`--adopt`).
    os_adopting: BTreeSet<u32>,
    /// Slots whose adoption replaced an open socket, until it is closed.
    os_replaced: BTreeSet<u32>,
    /// Member slots (`--adopt`: further listeners) and their roots.
    members: BTreeMap<u32, u32>,
    /// A serving slot had open sockets at some point (in adopt mode, ck holds the group from
    /// the first adoption on).
    opened_once: bool,
    /// The event loop's queue.
    queue: VecDeque<Later>,
    /// Workers whose exit was handled.
    dead: BTreeSet<u64>,
    /// The program steers by maps of an earlier image (an upgrade) until `Op::Loaded`.
    maps_pending: bool,
    /// The slots' UDP sockets.
    udp: udp::Udp,
    /// `--slow-start`: when the roll goes on after waiting for a ramp (`Event::RollNext`).
    roll_next_at: Option<Instant>,
    /// `ck reload --canary`: the verdicts due (`Event::CanaryVerdict`), each with the canary it
    /// is for; a withdrawn canary's stays, as the event loop's timer does.
    verdicts: Vec<(Instant, u64)>,
}

impl Model {
    fn new(
        workers: u32,
        min_workers: u32,
        adopt: bool,
        spares: u32,
        batch: u32,
        resumed: bool,
    ) -> Model {
        let restart = RestartPolicy {
            crash_limit: 3,
            ..RestartPolicy::DEFAULT
        };
        let mut m = Model {
            settings: Settings {
                ready_on_spawn: false,
                ready_grace: None,
                ready_timeout: Duration::from_secs(30),
                stop_timeout: Duration::from_secs(10),
                restart,
                min_workers,
                adopt,
                linger: Some(Duration::from_secs(10)),
            },
            shape: Shape {
                reload_batch: batch,
                spares,
                min_workers,
                restart,
                keep_previous: None,
                slow_start: None,
            },
            core: Core::default(),
            lives: BTreeMap::new(),
            os_open: BTreeMap::new(),
            os_worker: BTreeMap::new(),
            published: ck_common::ActiveSet::EMPTY,
            timers: Vec::new(),
            now: Instant::now(),
            next_id: 1,
            fail_next_spawn: None,
            stopping: false,
            os_adopting: BTreeSet::new(),
            os_replaced: BTreeSet::new(),
            members: BTreeMap::new(),
            opened_once: false,
            queue: VecDeque::new(),
            dead: BTreeSet::new(),
            maps_pending: resumed,
            udp: udp::Udp::default(),
            roll_next_at: None,
            verdicts: Vec::new(),
        };
        for _ in 0..workers {
            let _ = decisions::open_slot(&mut m);
        }
        decisions::replenish_spares(&mut m);
        m.handle_queue();
        m
    }

    /// What the event loop does with what the batches sent it.
    fn handle_queue(&mut self) {
        while let Some(later) = self.queue.pop_front() {
            match later {
                Later::Ready(index) => decisions::on_ready(self, index),
                Later::RollCheck => decisions::finish_when_left(self),
                Later::SpareDue => decisions::replenish_spares(self),
                Later::Faltered(index, why) => decisions::on_faltered(self, index, why),
            }
        }
    }

    /// A process of root slot `index`'s tree listens (`on_listened`): the slot's socket while
    /// it has none adopted, else a member slot of its own.
    fn listen(&mut self, index: u32) {
        let adopted = self.lives[&index].state.run().is_some_and(|r| r.adopted);
        if !adopted {
            self.os_adopting.insert(index);
            self.apply(vec![(index, Input::Adopted)]);
            assert!(
                !self.os_adopting.contains(&index),
                "slot {index}: adopted sockets not installed"
            );
            assert!(
                self.os_replaced.is_empty(),
                "a replaced socket was not closed"
            );
            return;
        }
        let member = self.free_index();
        let id = self.next_id;
        self.next_id += 1;
        self.lives
            .insert(member, Life::member(self.settings.restart, index));
        self.members.insert(member, index);
        self.os_worker.insert(member, id);
        self.os_adopting.insert(member);
        self.apply(vec![(member, Input::Spawned { id })]);
        self.apply(vec![(member, Input::Adopted)]);
        let ready = Input::Ready {
            why: "a listener of the tree".into(),
            healthy: true,
        };
        self.apply(vec![(member, ready)]);
    }

    fn free_index(&self) -> u32 {
        crate::supervisor::fleet::free_slot(&self.fleet_lives()).expect("a free slot")
    }

    fn fleet_lives(&self) -> crate::supervisor::fleet::Lives<'_> {
        crate::supervisor::fleet::lives(self.lives.iter().map(|(i, l)| (*i, l)))
    }

    fn listed(&self, index: u32) -> (bool, bool) {
        let set = &self.published;
        let ready = set.slots[..set.ready_len as usize].contains(&index);
        let live = set.slots[..set.live_len as usize].contains(&index);
        (ready, live)
    }

    /// Runs a batch through the executor (the supervisor's own, on this model of the OS).
    fn apply(&mut self, inputs: Vec<(u32, Input)>) -> Outcome<String> {
        executor::run(self, inputs)
    }

    fn nth_slot(&self, n: usize) -> Option<u32> {
        let keys: Vec<u32> = self.lives.keys().copied().collect();
        (!keys.is_empty()).then(|| keys[n % keys.len()])
    }

    /// Runs one thing that happens, then what it sent the event loop.
    fn run(&mut self, op: Op) {
        match op {
            Op::Exit(n, outside) => {
                let live: Vec<(u32, u64)> = self.os_worker.iter().map(|(i, w)| (*i, *w)).collect();
                if !live.is_empty() {
                    let (index, id) = live[n % live.len()];
                    let kept = self.maps_pending
                        && !self.stopping
                        && self
                            .lives
                            .get(&index)
                            .is_some_and(|l| l.serving() && l.socket_open);
                    let death = Death {
                        outside,
                        why: "exited".into(),
                        how: "exit 1".into(),
                    };
                    super::on_death(self, index, death);
                    // A spare that takes over retires the slot instead (its own socket was
                    // placed when it booted).
                    let restarted = self.lives.get(&index).is_some_and(Life::serving);
                    assert!(
                        !kept || !restarted || self.os_open.get(&index) == Some(&true),
                        "slot {index}'s socket closed at its worker's death while the program \
                         steers by maps not taken into use: its replacement's socket could not \
                         be placed"
                    );
                    assert!(
                        self.dead.contains(&id),
                        "worker {id}'s exit was not handled"
                    );
                    assert!(
                        self.lives
                            .values()
                            .all(|l| l.state.run().is_none_or(|r| r.id != id)),
                        "dead worker {id} is still some slot's run"
                    );
                }
            }
            Op::Ready(n, healthy) => self.on_nth(
                n,
                Input::Ready {
                    why: "READY=1".into(),
                    healthy,
                },
            ),
            Op::ReadyAll => {
                let starting: Vec<u32> = self
                    .lives
                    .iter()
                    .filter(|(_, l)| matches!(l.state, State::Starting(_)))
                    .map(|(i, _)| *i)
                    .collect();
                for index in starting {
                    let why = "READY=1".into();
                    self.apply(vec![(index, Input::Ready { why, healthy: true })]);
                }
            }
            Op::StopMsg(n) => self.on_nth(n, Input::WorkerDraining),
            Op::Health(n, healthy) => self.on_nth(
                n,
                Input::Health {
                    healthy,
                    why: "probe".into(),
                },
            ),
            Op::Drain(n, drained) => self.on_nth(n, Input::Drain(drained)),
            Op::Fire(n) if !self.timers.is_empty() => {
                let (index, timer, epoch) = self.timers.remove(n % self.timers.len());
                let leaving = self
                    .lives
                    .get(&index)
                    .is_some_and(|l| matches!(l.state, State::Leaving(_)) && l.epoch == epoch);
                if timer == Timer::Linger && leaving {
                    self.udp.capped(index);
                }
                self.apply(vec![(index, Input::Timer(timer, epoch))]);
            }
            Op::Fire(_) => {}
            op @ (Op::Scale(_) | Op::Roll(_) | Op::Rollback) => self.operator(op),
            Op::FailSpawn(at_open) => self.fail_next_spawn = Some(at_open),
            Op::Listen(n) if self.settings.adopt => {
                let roots: Vec<u32> = self
                    .os_worker
                    .keys()
                    .copied()
                    .filter(|i| !self.members.contains_key(i))
                    .collect();
                if !roots.is_empty() {
                    self.listen(roots[n % roots.len()]);
                }
            }
            Op::Listen(_) => {}
            Op::Unadopt(n) if self.settings.adopt => {
                // Only a root slot's socket has a holder ck watches.
                if let Some(index) = self.nth_slot(n).filter(|i| !self.members.contains_key(i)) {
                    self.apply(vec![(index, Input::Unadopted)]);
                }
            }
            Op::Unadopt(_) => {}
            Op::SpareDue => decisions::replenish_spares(self),
            Op::Loaded => {
                self.maps_pending = false;
                let all = self.lives.keys().map(|i| (*i, Input::Republish)).collect();
                self.apply(all);
            }
            Op::Finish(n) => {
                let leaving: Vec<(u32, u64)> = self
                    .lives
                    .iter()
                    .filter_map(|(i, l)| match l.state {
                        State::Leaving(run) => Some((*i, run.id)),
                        _ => None,
                    })
                    .collect();
                if let Some(&(index, id)) = leaving.get(n % leaving.len().max(1))
                    && let Some(why) = self.udp.leave_done(index, id, self.now)
                {
                    self.apply(vec![(index, Input::Finished(why))]);
                }
            }
            Op::Datagram(n, handshake) => {
                // A new handshake goes to a ready-listed slot, a known flow's datagram to any
                // slot with an open socket.
                let to: Vec<u32> = self
                    .os_open
                    .iter()
                    .filter(|(i, open)| **open && (!handshake || self.listed(**i).0))
                    .map(|(i, _)| *i)
                    .collect();
                if let Some(&index) = to.get(n % to.len().max(1)) {
                    self.udp.datagram(index, handshake.then_some(self.now));
                }
            }
            Op::HandshakeAgain(n) => self.udp.handshake_again(n, self.now),
            Op::Read(n) => {
                let workers: Vec<u32> = self.os_worker.keys().copied().collect();
                if let Some(&index) = workers.get(n % workers.len().max(1)) {
                    self.udp.read(index);
                }
            }
            Op::Quiet(n) => self.on_nth_in(
                n,
                |s| matches!(s, State::Stopping(..)),
                Input::Quiet("quiet".into()),
            ),
            Op::Wait(ms) => {
                self.now += Duration::from_millis(ms);
                if self.roll_next_at.is_some_and(|at| at <= self.now) {
                    self.roll_next_at = None;
                    decisions::continue_roll(self);
                }
                // Every verdict due, a withdrawn canary's too (as the event loop gets them).
                let now = self.now;
                let (due, later) = self.verdicts.drain(..).partition(|(at, _)| *at <= now);
                self.verdicts = later;
                for (_, canary) in due {
                    let judged = decisions::judged_canary(self);
                    decisions::canary_verdict(self, canary);
                    // A verdict due for another canary (one withdrawn) leaves the one judged.
                    if judged.is_some() && judged != Some(canary) {
                        assert_eq!(
                            decisions::judged_canary(self),
                            judged,
                            "the verdict of canary {canary} ended canary {judged:?}'s window early"
                        );
                    }
                }
            }
            Op::Shutdown if !self.stopping => {
                self.stopping = true;
                decisions::shutdown(self, "test");
            }
            Op::Shutdown => {}
        }
        self.handle_queue();
    }

    /// Sends `input` to the n-th (modulo) slot whose state is `of`, if any.
    fn on_nth_in(&mut self, n: usize, of: fn(&State) -> bool, input: Input) {
        let picked: Vec<u32> = self
            .lives
            .iter()
            .filter(|(_, l)| of(&l.state))
            .map(|(i, _)| *i)
            .collect();
        if !picked.is_empty() {
            let index = picked[n % picked.len()];
            self.apply(vec![(index, input)]);
        }
    }

    fn on_nth(&mut self, n: usize, input: Input) {
        if let Some(index) = self.nth_slot(n) {
            self.apply(vec![(index, input)]);
        }
    }
}

proptest! {
    #![proptest_config(Config {
        cases: 3000,
        rng_seed: RngSeed::Fixed(0x636b),
        failure_persistence: None,
        ..Config::default()
    })]

    #[test]
    fn invariants_hold_for_random_input_sequences(
        workers in 1..4u32,
        min_workers in 0..3u32,
        adopt in any::<bool>(),
        spares in prop::sample::select(vec![0u32, 0, 1, 2]),
        batch in 1..3u32,
        resumed in any::<bool>(),
        keep in any::<bool>(),
        slow in any::<bool>(),
        ops in prop::collection::vec(op(), 1..60),
    ) {
        let mut model = Model::new(workers, min_workers, adopt, spares, batch, resumed);
        model.shape.keep_previous = keep.then_some(Duration::from_secs(5));
        model.shape.slow_start = slow.then_some(Duration::from_secs(2));
        model.check();
        for op in ops {
            model.run(op);
            model.check();
        }
    }
}
