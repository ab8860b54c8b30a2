//! Property test: random input sequences over a small fleet, driven the way the supervisor
//! drives the machine (the executor's fixed effect order, scale-down in [`retire_order`], rolls
//! that flip a ready standby in and the old slot out in one batch), with a model of the OS
//! (open sockets, live workers, armed timers). After every step the invariants of
//! ARCHITECTURE.md are checked.
use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

use super::*;
use crate::settings::restart_policy::RestartPolicy;

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
    /// `--adopt`: the n-th slot's worker listens and its socket is adopted.
    Adopt(usize),
    /// `--adopt`: the child holding the n-th slot's adopted socket exits.
    Unadopt(usize),
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
        3 => (0..6usize).prop_map(Op::Adopt),
        1 => (0..6usize).prop_map(Op::Unadopt),
    ]
}

/// The fleet, its executor and the OS as the machine's effects leave them.
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
    /// Slots whose adoption replaced an open socket, until it is closed.
    os_replaced: BTreeMap<u32, bool>,
    /// A serving slot had open sockets at some point (in adopt mode, ck holds the group from
    /// the first adoption on).
    opened_once: bool,
}

impl Model {
    fn new(workers: u32, min_workers: u32, adopt: bool) -> Model {
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
            os_replaced: BTreeMap::new(),
            opened_once: false,
        };
        for index in 0..workers {
            m.open_slot(index, false);
        }
        m
    }

    fn open_slot(&mut self, index: u32, standby: bool) {
        self.lives
            .insert(index, Life::new(self.settings.restart, standby));
        self.apply(vec![(index, Input::Start)]);
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

    /// The executor: steps every input, then runs all effects in their fixed order.
    fn apply(&mut self, inputs: Vec<(u32, Input)>) {
        let mut effects = Vec::new();
        for (index, input) in inputs {
            let fleet = Fleet::of(
                index,
                self.lives.iter().map(|(i, l)| (*i, l)),
                self.now,
                0.5,
                self.stopping,
            );
            let Some(life) = self.lives.get_mut(&index) else {
                continue;
            };
            if matches!(input, Input::Exited { .. }) {
                self.os_worker.remove(&index);
            }
            effects.extend(
                step(life, input, &fleet, &self.settings)
                    .into_iter()
                    .map(|e| (index, e)),
            );
        }
        schedule(&mut effects);
        let mut published = false;
        for (index, effect) in effects {
            match effect {
                Effect::Note(_) => {}
                Effect::Publish if published => {}
                Effect::Publish => {
                    published = true;
                    self.published =
                        active_set(self.lives.iter().map(|(i, l)| (*i, l)), self.stopping);
                }
                Effect::Signal(_) => {
                    assert!(
                        self.os_worker.contains_key(&index),
                        "signal to slot {index} without a worker"
                    );
                    assert!(
                        !self.listed(index).0,
                        "slot {index} signalled while in the ready list"
                    );
                }
                Effect::CloseReplaced => {
                    assert_eq!(
                        self.os_replaced.remove(&index),
                        Some(true),
                        "slot {index}: nothing replaced"
                    );
                }
                Effect::CloseSockets => {
                    assert!(
                        !self.listed(index).1,
                        "slot {index} closed while in the active set"
                    );
                    assert_eq!(
                        self.os_open.insert(index, false),
                        Some(true),
                        "closing closed slot {index}"
                    );
                }
                Effect::Remove => {
                    assert!(!self.listed(index).1, "slot {index} removed while listed");
                    assert!(
                        !self.os_worker.contains_key(&index),
                        "slot {index} removed with a worker"
                    );
                    self.lives.remove(&index);
                    self.os_open.remove(&index);
                    self.roll
                        .retain(|(old, new)| *old != index && *new != index);
                }
                Effect::Spawn => {
                    let life = &self.lives[&index];
                    assert!(
                        life.serving() || life.standby,
                        "spawn on retiring slot {index}"
                    );
                    let was_open = self.os_open.get(&index) == Some(&true);
                    if let Some(at_open) = self.fail_next_spawn.take() {
                        let socket_open = was_open || !at_open;
                        self.os_open.insert(index, socket_open);
                        self.apply(vec![(index, Input::SpawnFailed { socket_open })]);
                    } else {
                        if !self.settings.adopt {
                            self.os_open.insert(index, true);
                        }
                        let id = self.next_id;
                        self.next_id += 1;
                        self.os_worker.insert(index, id);
                        self.apply(vec![(index, Input::Spawned { id })]);
                    }
                }
                Effect::Arm(timer, _, epoch) => self.timers.push((index, timer, epoch)),
            }
        }
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
                    let index = live[n % live.len()];
                    self.apply(vec![(index, Input::Exited { outside })]);
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
            }
            Op::Abort => {
                let batch = self
                    .roll
                    .drain(..)
                    .map(|(_, new)| (new, Input::Retire("aborted".into())))
                    .collect();
                self.apply(batch);
            }
            Op::FailSpawn(at_open) => self.fail_next_spawn = Some(at_open),
            Op::Adopt(n) if self.settings.adopt => {
                let live: Vec<u32> = self.os_worker.keys().copied().collect();
                if !live.is_empty() {
                    let index = live[n % live.len()];
                    let had = self.os_open.insert(index, true) == Some(true);
                    self.os_replaced.insert(index, had);
                    self.apply(vec![(index, Input::Adopted)]);
                    if !had {
                        self.os_replaced.remove(&index);
                    }
                    assert!(
                        self.os_replaced.is_empty(),
                        "a replaced socket was not closed"
                    );
                }
            }
            Op::Adopt(_) => {}
            Op::Unadopt(n) if self.settings.adopt => self.on_nth(n, Input::Unadopted),
            Op::Unadopt(_) => {}
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
        ops in prop::collection::vec(op(), 1..60),
    ) {
        let mut model = Model::new(workers, min_workers, adopt);
        model.check();
        for op in ops {
            model.run(op);
            model.check();
        }
    }
}
