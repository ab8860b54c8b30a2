//! The fleet executor: runs the fleet core's decisions ([`crate::supervisor::fleet`]) through
//! the slot executor ([`super::run`]) on any [`World`]: the supervisor on the real OS, the
//! property test on its model. Opening a slot, starting a roll's batch, a scale, the spares and
//! a death all go through here, so the property test runs them as they run.
use std::collections::VecDeque;

use super::{World, run};
use crate::settings::choices::CanaryAsk;
use crate::supervisor::{
    fleet::{self, roll, rollback, scale, spares},
    lifecycle::{Input, Life},
};

/// Something the fleet did that the world words, counts or schedules.
#[derive(Debug)]
pub enum FleetEvent {
    /// A spare is starting on `slot`.
    SpareStarting(u32),
    /// A roll's replacement for `old` is starting on `slot`.
    ReplacementStarting {
        /// The slot it replaces.
        old: u32,
        /// Its own slot.
        slot: u32,
    },
    /// A ready spare took the place of a dead worker's slot.
    TookOver {
        /// The spare.
        spare: u32,
        /// The dead worker's slot.
        dead: u32,
    },
    /// Boot a spare again soon (from the event loop, after the exits already queued).
    SpareDue,
    /// A spare died before it was used: the next boots after `delay`.
    SpareLost(std::time::Duration),
    /// `--slow-start`: the roll's next batch waits this long for the last one's ramp.
    RollWaits(std::time::Duration),
    /// A canary's verdict: promoted (or withdrawn).
    CanaryEnded {
        /// Promoted into the roll; false: withdrawn.
        promoted: bool,
    },
    /// `ck reload --canary`: the canary's workers went in; its verdict is due after `window`,
    /// for the canary `canary` names (see [`canary_verdict`]).
    CanaryJudged {
        /// How long it is judged.
        window: std::time::Duration,
        /// Its first worker's id: the verdict is this canary's only.
        canary: u64,
    },
    /// A roll started.
    RollStarted {
        /// Old workers to replace.
        workers: usize,
    },
    /// A roll ended (`result`: what to answer whoever asked).
    RollEnded {
        /// The roll as it ended.
        roll: Box<roll::Roll>,
        /// Its outcome.
        result: Result<String, String>,
    },
}

/// Why a slot could not be opened.
#[derive(Debug)]
pub enum OpenError<E> {
    /// Every slot index is taken.
    NoFreeSlot,
    /// Its worker could not be started.
    Spawn(E),
}

impl<E: std::fmt::Display> std::fmt::Display for OpenError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::NoFreeSlot => write!(f, "no free slot left"),
            OpenError::Spawn(e) => write!(f, "could not start a worker: {e:#}"),
        }
    }
}

/// Opens a new serving slot and starts its worker (drained while the host is).
pub fn open_slot<W: World>(world: &mut W) -> Result<u32, OpenError<W::SpawnError>> {
    let lives = fleet::lives(world.lives());
    let index = fleet::free_slot(&lives).ok_or(OpenError::NoFreeSlot)?;
    let inputs = scale::opening(index, scale::host_drained(&lives));
    world.open(index, Life::new(world.shape().restart, false));
    match run(world, inputs).spawn_failure() {
        Some(e) => Err(OpenError::Spawn(e)),
        None => Ok(index),
    }
}

/// Scales the fleet to `target` serving slots; the count it scaled from.
pub fn scale_to<W: World>(
    world: &mut W,
    target: u32,
) -> Result<u32, Result<String, OpenError<W::SpawnError>>> {
    let rolling = world.core().roll.is_some();
    if let Some(why) = scale::refusal(target, world.stopping(), rolling, &world.shape()) {
        return Err(Ok(why));
    }
    let plan = scale::plan(&fleet::lives(world.lives()), target);
    for _ in 0..plan.open {
        open_slot(world).map_err(Err)?;
    }
    if !plan.retire.is_empty() {
        run(world, plan.retire);
        // A broken slot left among fewer slots may now be one the group needs.
        let needed = scale::needed_after(&fleet::lives(world.lives()), world.shape().min_workers);
        run(world, needed);
    }
    Ok(plan.from)
}

/// Boots spares until there are `--spares` (not while stopping, rolling or backing off).
pub fn replenish_spares<W: World>(world: &mut W) {
    let wanted = {
        let lives = fleet::lives(world.lives());
        let rolling = world.core().roll.is_some();
        let pacing = world.core().spares;
        spares::wanted(
            &lives,
            &world.shape(),
            &pacing,
            world.now(),
            world.stopping(),
            rolling,
        )
    };
    for _ in 0..wanted {
        let Some(index) = fleet::free_slot(&fleet::lives(world.lives())) else {
            return;
        };
        world.open(index, Life::spare(world.shape().restart));
        world.fleet_event(FleetEvent::SpareStarting(index));
        if run(world, vec![(index, Input::Start)])
            .spawn_failure()
            .is_some()
        {
            return spare_lost(world);
        }
    }
}

/// A spare died before it was used (or could not start): the next waits longer.
pub(super) fn spare_lost<W: World>(world: &mut W) {
    let now = world.now();
    let delay = world.core_mut().spares.failed(now);
    world.fleet_event(FleetEvent::SpareLost(delay));
}

/// Starts a rolling restart of the workers of `pending` slots (`reload`: of the whole fleet);
/// why not, if refused.
pub fn begin_roll<W: World>(
    world: &mut W,
    pending: VecDeque<u32>,
    reload: bool,
    canary: Option<CanaryAsk>,
) -> Result<(), &'static str> {
    if let Some(why) = roll::refusal(world.stopping(), world.core().roll.is_some()) {
        return Err(why);
    }
    world.fleet_event(FleetEvent::RollStarted {
        workers: pending.len(),
    });
    // Spares run the old app: they go now, and new ones boot when the roll ends. A release
    // kept from the reload before goes too: a reload keeps only the one it replaces.
    let lives = fleet::lives(world.lives());
    let mut retire = spares::retire_all(&lives);
    if reload {
        retire.extend(rollback::retire_kept(&lives));
    }
    if !retire.is_empty() {
        run(world, retire);
    }
    let workers = pending.len();
    let mut started = roll::begin(pending, reload);
    started.canary = canary
        .filter(|_| reload && workers > 0)
        .map(|ask| fleet::canary::CanaryRoll::new(ask, workers));
    world.core_mut().roll = Some(started);
    if reload {
        revive(world);
    }
    next_batch(world);
    Ok(())
}

/// A reload gives every slot without a worker a fresh one now (see [`roll::revive_targets`]);
/// the roll waits for each to be ready or to fail.
fn revive<W: World>(world: &mut W) {
    let inputs = {
        let (core, lives) = world.fleet();
        let Some(roll) = core.roll.as_mut() else {
            return;
        };
        roll::revive(roll, &roll::revive_targets(&lives))
    };
    if inputs.is_empty() {
        return;
    }
    for (index, e) in run(world, inputs).spawn_failures {
        if let Some(roll) = world.core_mut().roll.as_mut() {
            roll::revival_failed(roll, index, format!("could not start: {e:#}"));
        }
    }
}

/// Starts replacements while the batch has room, or ends the roll when nothing is left.
fn next_batch<W: World>(world: &mut W) {
    loop {
        let shape = world.shape();
        let now = world.now();
        // `--slow-start`: the last batch's old workers leave once its replacements are warm.
        let faded = {
            let (core, lives) = world.fleet();
            core.roll
                .as_mut()
                .and_then(|roll| roll::faded(roll, &lives, &core.ramps, &shape, now))
        };
        if let Some(inputs) = faded {
            run(world, inputs);
        }
        let next = {
            let (core, lives) = world.fleet();
            let Some(roll) = core.roll.as_mut() else {
                return;
            };
            match roll::next(roll, &lives, &core.ramps, &shape, now) {
                roll::Next::Wait => return,
                roll::Next::Ramp(left) => Err(Err(left)),
                roll::Next::Empty => break,
                roll::Next::Start { old, life } => match fleet::free_slot(&lives) {
                    Some(new) => {
                        roll.batch.push((old, new));
                        Ok((old, new, life))
                    }
                    None => Err(Ok(old)),
                },
            }
        };
        let (old, new, life) = match next {
            Ok(start) => start,
            Err(Ok(old)) => {
                return abort_roll(world, old, "found no free slot for its replacement".into());
            }
            Err(Err(left)) => return world.fleet_event(FleetEvent::RollWaits(left)),
        };
        world.open(new, *life);
        world.fleet_event(FleetEvent::ReplacementStarting { old, slot: new });
        if let Some(e) = run(world, vec![(new, Input::Start)]).spawn_failure() {
            return abort_roll(world, new, format!("could not start: {e:#}"));
        }
    }
    finish_when_left(world);
}

/// `--slow-start`: the roll waited for its last batch's ramp; it starts the next batch.
pub fn continue_roll<W: World>(world: &mut W) {
    if world.core().roll.is_some() {
        next_batch(world);
    }
}

/// Slot `index` became ready (or healthy again): a spare's pacing resets; a roll flips its
/// batch in once every replacement of it is ready, and starts the next.
pub fn on_ready<W: World>(world: &mut W, index: u32) {
    let (core, lives) = world.fleet();
    if lives.get(&index).is_some_and(|l| l.spare) {
        core.spares.ready();
    }
    let revived = core
        .roll
        .as_mut()
        .is_some_and(|r| roll::revived_ready(r, index));
    let shape = world.shape();
    let (core, lives) = world.fleet();
    let Some(flip) = core
        .roll
        .as_mut()
        .and_then(|r| roll::flip(r, &lives, index, &shape))
    else {
        if revived {
            finish_when_left(world);
        }
        return;
    };
    // One batch: the replacements in and the old workers out in the same publish, and only
    // then the stop signal to the old ones.
    run(world, flip);
    // A canary went in: its verdict is due at the window's end.
    let window = world.core().roll.as_ref().and_then(|r| r.canary.as_ref());
    if let Some(window) = window.map(|c| c.window()) {
        let canary = judged_canary(world).unwrap_or(0);
        return world.fleet_event(FleetEvent::CanaryJudged { window, canary });
    }
    next_batch(world);
}

/// The id of the judged canary's first worker: what names one canary apart from a later one
/// on the same slots.
pub fn judged_canary<W: World>(world: &W) -> Option<u64> {
    let canary = world.core().roll.as_ref()?.canary.as_ref()?;
    let (_, first) = canary.pairs.first()?;
    let (_, life) = world.lives().find(|(index, _)| index == first)?;
    life.state.run().map(|run| run.id)
}

/// The window of the canary `canary` ([`FleetEvent::CanaryJudged`]) ended: promoted, its
/// workers become the roll's first batch, and the roll goes on. Nothing when that canary was
/// withdrawn meanwhile, even if another is judged now (its own window is not over).
pub fn canary_verdict<W: World>(world: &mut W, canary: u64) {
    if judged_canary(world) != Some(canary) {
        return;
    }
    let shape = world.shape();
    let promoted = world
        .core_mut()
        .roll
        .as_mut()
        .and_then(|r| roll::promote(r, &shape));
    if let Some(inputs) = promoted {
        world.fleet_event(FleetEvent::CanaryEnded { promoted: true });
        run(world, inputs);
        next_batch(world);
    }
}

/// Slot `index`'s worker turned unhealthy or drains (`why`): a canary worker withdraws the
/// canary.
pub fn on_faltered<W: World>(world: &mut W, index: u32, why: String) {
    let canary = world.core().roll.as_ref().and_then(|r| r.canary.as_ref());
    if canary.is_some_and(|c| c.has(index)) {
        abort_roll(world, index, why);
    }
}

/// `ck rollback`: the kept release flipped back in and the serving one retired, in one batch
/// (see [`rollback::plan`]); mid-roll, what the roll brought in leaves and the roll ends, its
/// `ck reload` answered that it was rolled back. Why not, if refused.
pub fn rollback<W: World>(world: &mut W) -> Result<rollback::Plan, String> {
    if world.stopping() {
        return Err("ck is stopping".into());
    }
    let keep = world.shape().keep_previous.is_some();
    let plan = {
        let lives = fleet::lives(world.lives());
        rollback::plan(&lives, world.core().roll.as_ref(), keep)?
    };
    // Mid-roll: nothing more is replaced; the old workers it has not reached serve on.
    if let Some(roll) = world.core_mut().roll.as_mut() {
        roll.batch.clear();
        roll.pending.clear();
        roll.fading.clear();
    }
    run(world, plan.inputs.clone());
    let why = "rolling restart rolled back by `ck rollback`: the previous release serves again";
    finish_roll(world, Err(why.into()));
    Ok(plan)
}

/// Aborts the roll because its replacement `index` failed (`why`): every replacement of the
/// batch retires, the old workers keep serving.
pub fn abort_roll<W: World>(world: &mut W, index: u32, why: String) {
    let Some(roll) = world.core_mut().roll.as_mut() else {
        return;
    };
    let canary = roll.canary.as_ref().map(|c| c.ask.percent);
    let (retire, old) = roll::abort(roll, index);
    if canary.is_some() {
        world.fleet_event(FleetEvent::CanaryEnded { promoted: false });
    }
    run(world, retire);
    let result = match canary {
        // Read once it is out of the active set: every connection it was sent, to the last.
        Some(percent) => format!(
            "canary withdrawn: its worker on slot {index} {why} ({} new connections were sent \
             to it); the current release keeps serving (it had {percent} % of new connections) \
             and the reload is aborted",
            world.selected(index)
        ),
        None => format!(
            "rolling restart aborted: the replacement for slot {old} (slot {index}) {why}; \
             the old workers keep serving"
        ),
    };
    finish_roll(world, Err(result));
}

/// Ends the roll once it is done (see [`roll::done`]).
pub fn finish_when_left<W: World>(world: &mut W) {
    let (core, lives) = world.fleet();
    let Some(roll) = core.roll.as_ref().filter(|r| roll::done(r, &lives)) else {
        return;
    };
    let outcome = roll::outcome(roll);
    finish_roll(world, outcome);
}

/// ck is shutting down (`stopping` is already set): the roll in flight ends, every slot stops.
pub fn shutdown<W: World>(world: &mut W, reason: &str) {
    finish_roll(world, Err("rolling restart aborted: ck is stopping".into()));
    let all = world
        .lives()
        .map(|(index, _)| (index, Input::Shutdown(reason.into())))
        .collect();
    run(world, all);
}

/// Ends the roll (if one is in flight) with `result`; the spares boot again.
pub fn finish_roll<W: World>(world: &mut W, result: Result<String, String>) {
    let Some(roll) = world.core_mut().roll.take() else {
        return;
    };
    replenish_spares(world);
    world.fleet_event(FleetEvent::RollEnded {
        roll: Box::new(roll),
        result,
    });
}
