//! The executor of the lifecycle machine: feeds inputs to [`lifecycle::step`] and runs the
//! effects it returns in their fixed order (install, publish, signal, close, forget, spawn,
//! arm), one publish per batch. It is generic over the [`World`] it acts on: the supervisor
//! implements it on the real OS (`world`), the property test (`props`, beside it) on its
//! model of the OS, so the invariants are checked against this very code. Nothing else changes
//! a slot's state, installs or closes a slot's sockets, publishes or signals a worker.
use std::time::{Duration, Instant};

use super::fleet::{self as core, Core, Shape};
use super::lifecycle::{self, Context, Effect, Input, Life, Note, Settings, Sig, Timer};

pub(super) mod decisions;
#[cfg(test)]
mod props;

/// What the executor acts on: the slots' lives, and the operating system their effects change.
pub(super) trait World {
    /// Why a spawn failed.
    type SpawnError: std::fmt::Display;

    /// Every slot's life, in index order.
    fn lives(&self) -> impl Iterator<Item = (u32, &Life)> + Clone;
    /// The life of slot `index`, if the slot exists.
    fn life_mut(&mut self, index: u32) -> Option<&mut Life>;
    /// The settings the machine decides with.
    fn settings(&self) -> &Settings;
    /// Now.
    fn now(&self) -> Instant;
    /// A number in [0, 1) for the backoff's jitter.
    fn random(&self) -> f64;
    /// ck is shutting down.
    fn stopping(&self) -> bool;
    /// The groups' program steers by maps of an earlier ck image that this one has not taken
    /// into use yet (see [`Context::maps_pending`]).
    fn maps_pending(&self) -> bool;

    /// Slot `index`'s process is gone (before its `Exited` or `Superseded` is stepped): drop
    /// its handles and whatever it left behind.
    fn exited(&mut self, index: u32);
    /// Writes the machine's note (a log line).
    fn note(&mut self, index: u32, note: Note);
    /// [`Effect::Install`]: the adopted sockets become the slot's.
    fn install(&mut self, index: u32);
    /// [`Effect::Publish`]: writes the active set and every slot record to the maps.
    fn publish(&mut self);
    /// [`Effect::Signal`]: signals the slot's worker.
    fn signal(&mut self, index: u32, sig: Sig);
    /// [`Effect::CloseSockets`]: closes the slot's sockets.
    fn close_sockets(&mut self, index: u32);
    /// [`Effect::CloseReplaced`]: closes the sockets an adoption replaced.
    fn close_replaced(&mut self, index: u32);
    /// [`Effect::Remove`]: forgets the slot.
    fn forget(&mut self, index: u32);
    /// [`Effect::Spawn`]: opens the slot's sockets if closed and spawns a worker; its id.
    fn spawn(&mut self, index: u32) -> Result<u64, Self::SpawnError>;
    /// Whether the slot's sockets are open (after a failed spawn).
    fn socket_open(&self, index: u32) -> bool;
    /// [`Effect::Arm`]: arms a timer that comes back as [`Input::Timer`].
    fn arm(&mut self, index: u32, timer: Timer, delay: Duration, epoch: u64);
    /// Creates slot `index` around `life`, nothing open yet (the only way a slot comes to be).
    fn open(&mut self, index: u32, life: Life);
    /// The fleet core's state.
    fn core(&self) -> &Core;
    /// The fleet core's state, to change.
    fn core_mut(&mut self) -> &mut Core;
    /// The fleet core's state with every slot's life, for a decision that changes the core.
    fn fleet(&mut self) -> (&mut Core, core::Lives<'_>);
    /// The numbers the fleet decides with.
    fn shape(&self) -> Shape;
    /// Something the fleet did (see [`decisions::FleetEvent`]): a log line, a timer, an answer.
    fn fleet_event(&mut self, event: decisions::FleetEvent);
    /// The batch is done: `ready` slots became ready (or healthy again) in it, `stopping` ones
    /// were asked to stop.
    fn batch_done(&mut self, ready: Vec<u32>, stopping: Vec<u32>);
    /// Slot `index`'s worker turned unhealthy or drains (`why`), in the batch just done: for
    /// [`decisions::on_faltered`], from the event loop.
    fn faltered(&mut self, index: u32, why: String);
    /// New connections the program sent to slot `index` so far (its `selected` count, read
    /// from the maps).
    fn selected(&self, index: u32) -> u64;
}

/// What a batch did that its caller may need to know.
pub(super) struct Outcome<E> {
    /// Spawns that failed in it (answered with [`Input::SpawnFailed`]), in order.
    pub spawn_failures: Vec<(u32, E)>,
}

impl<E> Outcome<E> {
    /// The first spawn failure of the batch, if any.
    pub fn spawn_failure(self) -> Option<E> {
        self.spawn_failures.into_iter().next().map(|(_, e)| e)
    }
}

/// Feeds several inputs (one, a roll's flip, a scale-down, the shutdown) and runs all their
/// effects together: one publish covers every change, before any signal or close. A spawn's
/// answer is a batch of its own, run before this one's later effects.
pub(super) fn run<W: World>(world: &mut W, inputs: Vec<(u32, Input)>) -> Outcome<W::SpawnError> {
    let mut outcome = Outcome {
        spawn_failures: Vec::new(),
    };
    run_into(world, inputs, &mut outcome);
    outcome
}

fn run_into<W: World>(
    world: &mut W,
    inputs: Vec<(u32, Input)>,
    outcome: &mut Outcome<W::SpawnError>,
) {
    let now = world.now();
    let settings = world.settings().clone();
    let mut effects = Vec::new();
    for (index, input) in inputs {
        let context = Context::of(
            index,
            world.lives(),
            now,
            world.random(),
            world.stopping(),
            world.maps_pending(),
        );
        if world.life_mut(index).is_none() {
            continue;
        }
        if matches!(input, Input::Exited { .. } | Input::Superseded) {
            world.exited(index);
        }
        let life = world.life_mut(index).expect("checked above");
        let out = lifecycle::step(life, input, &context, &settings);
        effects.extend(out.into_iter().map(|effect| (index, effect)));
    }
    lifecycle::schedule(&mut effects);
    let mut published = false;
    let mut became_ready = Vec::new();
    let mut stopping = Vec::new();
    let mut faltered = Vec::new();
    for (index, effect) in effects {
        match effect {
            Effect::Note(note) => {
                match note {
                    // Ready, or healthy again (a worker that was stalled while it booted is
                    // unhealthy when it becomes ready): a roll or a spare waits for either.
                    Note::Ready(_) | Note::Healthy(_) => became_ready.push(index),
                    Note::Stopping(_) => stopping.push(index),
                    Note::Unhealthy(ref why) | Note::Draining(ref why) => {
                        faltered.push((index, why.clone()));
                    }
                    _ => {}
                }
                world.note(index, note);
            }
            Effect::Install => world.install(index),
            Effect::Publish if published => {}
            Effect::Publish => {
                world.publish();
                published = true;
            }
            Effect::Signal(sig) => world.signal(index, sig),
            Effect::CloseSockets => world.close_sockets(index),
            Effect::CloseReplaced => world.close_replaced(index),
            Effect::Remove => world.forget(index),
            Effect::Spawn => {
                let answer = match world.spawn(index) {
                    Ok(id) => Input::Spawned { id },
                    Err(e) => {
                        outcome.spawn_failures.push((index, e));
                        Input::SpawnFailed {
                            socket_open: world.socket_open(index),
                        }
                    }
                };
                run_into(world, vec![(index, answer)], outcome);
            }
            Effect::Arm(timer, delay, epoch) => world.arm(index, timer, delay, epoch),
        }
    }
    world.batch_done(became_ready, stopping);
    for (index, why) in faltered {
        world.faltered(index, why);
    }
}

/// Slot `index`'s worker died ([`core::death::Death`]: whether others killed it, words for a
/// roll's abort, its exit as `ck status` shows it): a ready spare takes over, or the slot
/// steps its exit; a lost spare slows the next, a lost replacement aborts the roll, a slot a
/// reload revived has failed again.
pub fn on_death<W: World>(world: &mut W, index: u32, death: core::death::Death) {
    let core::death::Death { outside, why, how } = death;
    let aftermath = {
        let lives = core::lives(world.lives());
        core::death::decide(
            index,
            outside,
            &lives,
            world.core(),
            &world.shape(),
            world.stopping(),
        )
    };
    let Some(aftermath) = aftermath else { return };
    let revival_failed = world
        .core_mut()
        .roll
        .as_mut()
        .is_some_and(|roll| core::roll::revival_failed(roll, index, how));
    if let Some(spare) = aftermath.took_over {
        world.fleet_event(decisions::FleetEvent::TookOver { spare, dead: index });
        run(world, aftermath.inputs);
        return world.fleet_event(decisions::FleetEvent::SpareDue);
    }
    run(world, aftermath.inputs);
    if aftermath.spare_lost {
        decisions::spare_lost(world);
    }
    if aftermath.aborts_roll {
        decisions::abort_roll(world, index, why);
    } else if revival_failed {
        decisions::finish_when_left(world);
    }
}
