//! Property test: random input sequences over a small fleet, driven the way the supervisor
//! drives the machine (scale-down in [`retire_order`], rolls that flip a ready standby in and
//! the old slot out in one batch, spares that take a dead worker's place, `--adopt`'s adoptions
//! and further listeners) through the supervisor's own executor ([`executor::run`]), acting on
//! a model of the OS (open, adopted and replaced sockets, live workers, armed timers, the
//! published active set) that implements its [`World`]. After every step the invariants of
//! ARCHITECTURE.md are checked.
use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

use super::*;
use crate::settings::restart_policy::RestartPolicy;
use crate::supervisor::{
    executor::{self, Outcome},
    spares::succession,
};

mod os;

/// Random things that happen to the fleet.
#[derive(Clone, Debug)]
enum Op {
    /// The worker of the n-th live slot exits (`outside`: killed by SIGKILL).
    Exit(usize, bool),
    /// The n-th slot's worker says READY=1 (healthy or not).
    Ready(usize, bool),
    /// STOPPING=1.
    StopMsg(usize),
    /// A health verdict.
    Health(usize, bool),
    /// `ck drain` / `ck undrain`.
    Drain(usize, bool),
    /// The n-th armed timer fires.
    Fire(usize),
    /// `ck scale N`.
    Scale(u32),
    /// A roll starts a standby replacement for the n-th serving slot with a worker.
    Roll(usize),
    /// Flip in every ready standby, retiring the slots they replace, in one batch.
    Flip,
    /// Abort: every standby retires.
    Abort,
    /// The next spawn fails; `true`: before the slot's sockets could be opened.
    FailSpawn(bool),
    /// Time passes.
    Wait(u64),
    /// Shutdown.
    Shutdown,
    /// `--adopt`: a process of the n-th live worker's tree listens: adopted as the slot's
    /// socket, or, once the slot has one, steered as a member slot of its own.
    Listen(usize),
    /// `--adopt`: the child holding the n-th slot's adopted socket exits.
    Unadopt(usize),
    /// `--spares`: the supervisor boots spares again.
    SpareDue,
    /// The BPF program loaded (`adopt_bpf`): every slot re-published on the fresh maps.
    Loaded,
    /// The n-th leaving slot's connections are done (`leaving`).
    Finish(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..6usize, any::<bool>()).prop_map(|(n, o)| Op::Exit(n, o)),
        3 => (0..6usize, prop::bool::weighted(0.8)).prop_map(|(n, h)| Op::Ready(n, h)),
        1 => (0..6usize).prop_map(Op::StopMsg),
        1 => (0..6usize, any::<bool>()).prop_map(|(n, h)| Op::Health(n, h)),
        1 => (0..6usize, any::<bool>()).prop_map(|(n, d)| Op::Drain(n, d)),
        5 => (0..8usize).prop_map(Op::Fire),
        1 => (1..5u32).prop_map(Op::Scale),
        1 => (0..6usize).prop_map(Op::Roll),
        1 => Just(Op::Flip),
        1 => Just(Op::Abort),
        1 => any::<bool>().prop_map(Op::FailSpawn),
        2 => (0..3000u64).prop_map(Op::Wait),
        1 => Just(Op::Shutdown),
        3 => (0..6usize).prop_map(Op::Listen),
        1 => (0..6usize).prop_map(Op::Unadopt),
        1 => Just(Op::SpareDue),
        1 => Just(Op::Loaded),
        2 => (0..6usize).prop_map(Op::Finish),
    ]
}

/// The fleet, the supervisor's decisions and the OS as the machine's effects leave them.
struct Model {
    settings: Settings,
    lives: BTreeMap<u32, Life>,
    /// What the OS has: slots whose sockets are open, slots whose worker runs.
    os_open: BTreeMap<u32, bool>,
    os_worker: BTreeMap<u32, u64>,
    /// The last published active set.
    published: ck_common::ActiveSet,
    timers: Vec<(u32, Timer, u64)>,
    /// Roll pairs: (old, standby).
    roll: Vec<(u32, u32)>,
    now: Instant,
    next_id: u64,
    /// The next spawn fails (`Some(true)`: while opening the sockets).
    fail_next_spawn: Option<bool>,
    stopping: bool,
    /// Slots whose worker's sockets ck copied and has not installed yet (`--adopt`).
    os_adopting: BTreeSet<u32>,
    /// Slots whose adoption replaced an open socket, until it is closed.
    os_replaced: BTreeSet<u32>,
    /// `--spares`, and the slots that are spares.
    spares: u32,
    spare_slots: BTreeSet<u32>,
    /// Member slots (`--adopt`: further listeners) and their roots.
    members: BTreeMap<u32, u32>,
    /// A serving slot had open sockets at some point (in adopt mode, ck holds the group from
    /// the first adoption on).
    opened_once: bool,
}

impl Model {
    fn new(workers: u32, min_workers: u32, adopt: bool, spares: u32) -> Model {
        let mut m = Model {
            settings: Settings {
                ready_on_spawn: false,
                ready_grace: None,
                ready_timeout: Duration::from_secs(30),
                drain_timeout: Duration::from_secs(10),
                restart: RestartPolicy {
                    crash_limit: 3,
                    ..RestartPolicy::DEFAULT
                },
                min_workers,
                adopt,
                linger: Some(Duration::from_secs(10)),
            },
            lives: BTreeMap::new(),
            os_open: BTreeMap::new(),
            os_worker: BTreeMap::new(),
            published: ck_common::ActiveSet::EMPTY,
            timers: Vec::new(),
            roll: Vec::new(),
            now: Instant::now(),
            next_id: 1,
            fail_next_spawn: None,
            stopping: false,
            os_adopting: BTreeSet::new(),
            os_replaced: BTreeSet::new(),
            spares,
            spare_slots: BTreeSet::new(),
            members: BTreeMap::new(),
            opened_once: false,
        };
        for index in 0..workers {
            m.open_slot(index, false);
        }
        m.replenish_spares();
        m
    }

    fn open_slot(&mut self, index: u32, standby: bool) -> Outcome<()> {
        self.lives
            .insert(index, Life::new(self.settings.restart, standby));
        self.apply(vec![(index, Input::Start)])
    }

    /// Boots spares until there are `spares` (not while stopping or rolling), as
    /// `replenish_spares` does; stops at a spawn failure.
    fn replenish_spares(&mut self) {
        if self.stopping || !self.roll.is_empty() {
            return;
        }
        while (self.spare_slots.len() as u32) < self.spares {
            let index = self.free_index();
            self.spare_slots.insert(index);
            if self.open_slot(index, true).spawn_failure().is_some() {
                return;
            }
        }
    }

    /// A worker's process exits: a ready spare takes a dead serving worker's place, as in
    /// `on_exit`; otherwise the slot steps its exit.
    fn exit(&mut self, index: u32, outside: bool) {
        if !self.stopping && self.spares > 0 {
            let spares = self.spare_slots.iter().map(|i| (*i, &self.lives[i]));
            if let Some(batch) = succession((index, &self.lives[&index]), spares) {
                let (spare, drained) = (batch[0].0, self.lives[&index].drained);
                self.spare_slots.remove(&spare);
                self.apply(batch.into());
                let life = &self.lives[&spare];
                assert!(
                    life.serving() && life.drained == drained,
                    "spare {spare} took slot {index}'s place: {life:?}"
                );
                assert!(!self.lives.contains_key(&index), "slot {index} stayed");
                return;
            }
        }
        self.apply(vec![(index, Input::Exited { outside })]);
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
            .insert(member, Life::member(self.settings.restart));
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
        (0..).find(|i| !self.lives.contains_key(i)).unwrap()
    }

    fn listed(&self, index: u32) -> (bool, bool) {
        let set = &self.published;
        let ready = set.slots[..set.ready_len as usize].contains(&index);
        let live = set.slots[..set.live_len as usize].contains(&index);
        (ready, live)
    }

    /// Runs a batch through the executor (the supervisor's own, on this model of the OS).
    fn apply(&mut self, inputs: Vec<(u32, Input)>) -> Outcome<()> {
        executor::run(self, inputs)
    }

    fn nth_slot(&self, n: usize) -> Option<u32> {
        let keys: Vec<u32> = self.lives.keys().copied().collect();
        (!keys.is_empty()).then(|| keys[n % keys.len()])
    }

    fn run(&mut self, op: Op) {
        match op {
            Op::Exit(n, outside) => {
                let live: Vec<u32> = self.os_worker.keys().copied().collect();
                if !live.is_empty() {
                    self.exit(live[n % live.len()], outside);
                }
            }
            Op::Ready(n, healthy) => self.on_nth(
                n,
                Input::Ready {
                    why: "READY=1".into(),
                    healthy,
                },
            ),
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
                self.apply(vec![(index, Input::Timer(timer, epoch))]);
            }
            Op::Fire(_) => {}
            Op::Scale(target) if !self.stopping && self.roll.is_empty() => {
                let order = retire_order(self.lives.iter().map(|(i, l)| (*i, l)));
                let current = order.len() as u32;
                if target > current {
                    for _ in current..target {
                        let index = self.free_index();
                        self.open_slot(index, false);
                    }
                } else {
                    let victims = order.iter().take((current - target) as usize);
                    self.apply(
                        victims
                            .map(|i| (*i, Input::Retire("scaled down".into())))
                            .collect(),
                    );
                    let min = self.settings.min_workers;
                    let needed = needed(self.lives.iter().map(|(i, l)| (*i, l)), min);
                    self.apply(needed.into_iter().map(|i| (i, Input::Needed)).collect());
                }
            }
            Op::Scale(_) => {}
            Op::Roll(n) if !self.stopping => {
                let olds: Vec<u32> = self
                    .lives
                    .iter()
                    .filter(|(i, l)| {
                        l.serving()
                            && l.state.run().is_some()
                            && !self.roll.iter().any(|(o, _)| o == *i)
                    })
                    .map(|(i, _)| *i)
                    .collect();
                if !olds.is_empty() {
                    if self.roll.is_empty() {
                        // Spares run the old app: they go when a roll starts.
                        let spares = self
                            .spare_slots
                            .iter()
                            .map(|i| (*i, Input::Retire("replaced by the roll".into())))
                            .collect();
                        self.apply(spares);
                    }
                    let new = self.free_index();
                    self.roll.push((olds[n % olds.len()], new));
                    self.open_slot(new, true);
                }
            }
            Op::Roll(_) => {}
            Op::Flip => {
                let ready: Vec<(u32, u32)> = self
                    .roll
                    .iter()
                    .copied()
                    .filter(|(_, new)| matches!(self.lives[new].state, State::Ready(_)))
                    .collect();
                let mut batch = Vec::new();
                for (old, new) in ready {
                    batch.push((new, Input::FlipIn));
                    batch.push((old, Input::Retire("replaced".into())));
                    self.roll.retain(|pair| *pair != (old, new));
                }
                self.apply(batch);
                self.replenish_spares();
            }
            Op::Abort => {
                let batch = self
                    .roll
                    .drain(..)
                    .map(|(_, new)| (new, Input::Retire("aborted".into())))
                    .collect();
                self.apply(batch);
                self.replenish_spares();
            }
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
            Op::SpareDue => self.replenish_spares(),
            Op::Loaded => {
                let all = self.lives.keys().map(|i| (*i, Input::Republish)).collect();
                self.apply(all);
            }
            Op::Finish(n) => {
                let leaving: Vec<u32> = self
                    .lives
                    .iter()
                    .filter(|(_, l)| matches!(l.state, State::Leaving(_)))
                    .map(|(i, _)| *i)
                    .collect();
                if !leaving.is_empty() {
                    let index = leaving[n % leaving.len()];
                    self.apply(vec![(index, Input::Finished("done".into()))]);
                }
            }
            Op::Wait(ms) => self.now += Duration::from_millis(ms),
            Op::Shutdown => {
                self.stopping = true;
                let all = self
                    .lives
                    .keys()
                    .map(|i| (*i, Input::Shutdown("test".into())))
                    .collect();
                self.apply(all);
            }
        }
    }

    fn on_nth(&mut self, n: usize, input: Input) {
        if let Some(index) = self.nth_slot(n) {
            self.apply(vec![(index, input)]);
        }
    }

    /// The invariants of ARCHITECTURE.md, checked after every step.
    fn check(&mut self) {
        self.opened_once |= self.lives.values().any(|l| l.serving() && l.socket_open);
        let set = &self.published;
        for (position, index) in set.slots[..set.live_len as usize].iter().enumerate() {
            let life = &self.lives[index];
            assert_eq!(
                self.os_open.get(index),
                Some(&true),
                "slot {index} listed with its socket closed"
            );
            if position < set.ready_len as usize {
                assert!(
                    life.selectable(),
                    "slot {index} in the ready list: {life:?}"
                );
            }
        }
        for (index, life) in &self.lives {
            assert_eq!(
                life.socket_open,
                self.os_open.get(index) == Some(&true),
                "slot {index}: socket flag vs OS"
            );
            assert_eq!(
                life.state.run().map(|r| r.id),
                self.os_worker.get(index).copied(),
                "slot {index}: worker"
            );
            assert!(
                !(life.standby
                    && matches!(life.state, State::Waiting | State::Held | State::Broken))
            );
        }
        if self.stopping {
            assert_eq!(set.live_len, 0);
            return;
        }
        let serving: Vec<&Life> = self.lives.values().filter(|l| l.serving()).collect();
        assert!(!serving.is_empty(), "the fleet lost every serving slot");
        assert!(
            !self.opened_once || serving.iter().any(|l| l.socket_open),
            "the group emptied: {:#?}",
            self.lives
        );
        let trying = serving.iter().filter(|l| l.trying()).count();
        assert!(
            trying >= (self.settings.min_workers as usize).min(serving.len()),
            "the breaker took the group below --min-workers: {:#?}",
            self.lives
        );
        if set.live_len == 0 {
            assert!(
                self.lives.values().all(|l| !l.socket_open),
                "open sockets but nothing listed"
            );
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
        ops in prop::collection::vec(op(), 1..60),
    ) {
        let mut model = Model::new(workers, min_workers, adopt, spares);
        model.check();
        for op in ops {
            model.run(op);
            model.check();
        }
    }
}
