//! The transition function: `(life, input) -> effects`. It changes only the [`Life`] it is given
//! and says what must happen in the world as [`Effect`]s, which the supervisor's executor runs in
//! one fixed order (see [`Effect::rank`]).
use std::time::{Duration, Instant};

use super::{
    crash::Verdict,
    effect::Effect,
    state::{After, Life, Run, State},
    words::{Input, Note, Sig, Timer},
};
use crate::settings::restart_policy::RestartPolicy;

/// The settings the machine decides with.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// `--ready spawn`: ready as soon as spawned.
    pub ready_on_spawn: bool,
    /// `--ready auto` without probes: the grace after which a silent worker is ready.
    pub ready_grace: Option<Duration>,
    /// `--ready-timeout`.
    pub ready_timeout: Duration,
    /// How long a stopping worker has before SIGKILL (`--drain-timeout`, named for what a
    /// stop lets the worker do: finish its connections).
    pub stop_timeout: Duration,
    /// The crash policy.
    pub restart: RestartPolicy,
    /// `--min-workers`: serving slots the breaker never takes the group below.
    pub min_workers: u32,
    /// `--adopt`: a spawned worker opens its own sockets; the slot has them once adopted.
    pub adopt: bool,
    /// How long a retired worker that served may hold connections (or unread datagrams, or
    /// QUIC handshakes) before it gets the stop signal (None: at once, as where nothing counts
    /// them).
    pub linger: Option<Duration>,
}

/// What the machine needs to know of the rest of the fleet (see `Context::of`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Context {
    /// Now.
    pub now: Instant,
    /// A random number in [0, 1) for the backoff's jitter.
    pub random: f64,
    /// ck is shutting down.
    pub stopping: bool,
    /// Other serving slots with open sockets: 0 means this slot's sockets are the last ones
    /// that keep the group alive.
    pub others_open: usize,
    /// Other serving slots whose breaker is not open.
    pub others_trying: usize,
    /// The group's program, attached by an earlier ck image (an upgrade, a take-back), still
    /// steers by maps this image has not taken into use yet: a fresh socket could not be put in
    /// them, so a dead worker's socket is kept for its replacement, as the last one is.
    pub maps_pending: bool,
}

/// Feeds `input` to `life` and returns what must happen. Inputs that do not apply to the
/// current state (a stale timer, a late message) change nothing and return no effect.
pub fn step(life: &mut Life, input: Input, context: &Context, settings: &Settings) -> Vec<Effect> {
    use Effect::{Arm, CloseSockets, Publish, Remove, Signal, Spawn};
    let now = context.now;
    let mut out = Vec::new();
    if matches!(input, Input::Retire(_)) {
        // A kept worker told to leave is no longer there to roll back to.
        life.kept = None;
    }
    match (life.state, input) {
        (State::Idle, Input::Start) => out.push(Spawn),
        (State::Idle | State::Waiting | State::Held | State::Broken, Input::Spawned { id }) => {
            life.epoch = id;
            life.generation += 1;
            // Activation: ck opened the sockets for it. Adopt: they come with `Adopted` (a held
            // socket stays open meanwhile).
            life.socket_open |= !settings.adopt;
            let run = Run {
                id,
                started: now,
                ready_at: (settings.ready_on_spawn && !settings.adopt).then_some(now),
                adopted: !settings.adopt,
            };
            out.push(Effect::Note(Note::Started));
            out.push(Publish);
            if run.ready_at.is_some() {
                life.state = State::Ready(run);
                out.push(Effect::Note(Note::Ready(
                    "ready on spawn (--ready spawn)".into(),
                )));
            } else {
                life.state = State::Starting(run);
                out.push(Arm(Timer::ReadyTimeout, settings.ready_timeout, id));
                if let Some(grace) = settings.ready_grace {
                    out.push(Arm(Timer::ReadyGrace, grace, id));
                }
            }
        }
        (
            State::Idle | State::Waiting | State::Held | State::Broken,
            Input::SpawnFailed { socket_open },
        ) => {
            life.socket_open = socket_open;
            exit(life, None, false, context, settings, &mut out);
        }
        (state, Input::Adopted) if state.run().is_some() => {
            life.state = state.with_run(Run {
                adopted: true,
                ..state.run().expect("guarded")
            });
            let replaced = std::mem::replace(&mut life.socket_open, true);
            out.extend([Effect::Note(Note::Adopted), Effect::Install, Publish]);
            if replaced {
                out.push(Effect::CloseReplaced);
            }
        }
        // Not ready before its sockets are the slot's (`--adopt`): the supervisor asks again.
        (state, Input::Unadopted) if state.run().is_some_and(|r| r.adopted) => {
            let run = Run {
                adopted: false,
                ..state.run().expect("guarded")
            };
            life.state = match state {
                State::Stopping(_, after) => State::Stopping(run, after),
                State::Leaving(_) => State::Leaving(run),
                _ => State::Starting(run),
            };
            out.push(Publish);
            // The group's last open socket is kept until the next listener replaces it.
            if context.others_open > 0 {
                close(life, &mut out);
            }
        }
        (State::Starting(run) | State::Draining(run), Input::Ready { .. }) if !run.adopted => {}
        (State::Starting(run) | State::Draining(run), Input::Ready { why, healthy }) => {
            let run = Run {
                ready_at: run.ready_at.or(Some(now)),
                ..run
            };
            life.state = if healthy {
                State::Ready(run)
            } else {
                State::Unhealthy(run)
            };
            out.extend([Effect::Note(Note::Ready(why)), Publish]);
        }
        (
            State::Starting(run) | State::Ready(run) | State::Unhealthy(run),
            Input::WorkerDraining,
        ) => {
            life.state = State::Draining(run);
            out.extend([Effect::Note(Note::Draining("STOPPING=1".into())), Publish]);
        }
        (
            State::Ready(run),
            Input::Health {
                healthy: false,
                why,
            },
        ) => {
            life.state = State::Unhealthy(run);
            out.extend([Effect::Note(Note::Unhealthy(why)), Publish]);
        }
        (State::Unhealthy(run), Input::Health { healthy: true, why }) => {
            life.state = State::Ready(run);
            out.extend([Effect::Note(Note::Healthy(why)), Publish]);
        }
        (_, Input::Drain(drained)) if life.drained != drained => {
            life.drained = drained;
            let note = if drained {
                Note::Draining("ck drain".into())
            } else {
                Note::Undrained
            };
            out.extend([Effect::Note(note), Publish]);
        }
        (_, input @ (Input::FlipIn | Input::TakeOver { .. })) if life.standby => {
            life.standby = false;
            life.spare = false;
            life.kept = None;
            if let Input::TakeOver { drained } = input {
                life.drained = drained;
            }
            out.extend([Effect::Note(Note::FlippedIn), Publish]);
        }
        (_, Input::FlipInCanary) if life.standby => {
            life.standby = false;
            life.canary = true;
            out.extend([Effect::Note(Note::CanaryIn), Publish]);
        }
        (_, Input::Promote) if life.canary => {
            life.canary = false;
            out.extend([Effect::Note(Note::Promoted), Publish]);
        }
        (_, Input::Republish) => out.push(Publish),
        // Kept only if it served: a worker that never became ready has nothing to go back to.
        (State::Ready(run) | State::Unhealthy(run) | State::Draining(run), Input::Keep(window))
            if life.serving() && run.ready_at.is_some() =>
        {
            life.standby = true;
            life.kept = Some(now);
            out.extend([
                Effect::Note(Note::Kept(window)),
                Publish,
                Arm(Timer::KeptUntil, window, run.id),
            ]);
        }
        (_, Input::Keep(_)) if life.serving() => {
            let why = "replaced by a rolling restart".to_string();
            return step(life, Input::Retire(why), context, settings);
        }
        (State::Stopping(run, _), Input::Retire(_)) => {
            life.state = State::Stopping(run, After::Retire);
        }
        (State::Leaving(_), Input::Retire(_)) => {}
        // A worker that served may hold connections: they finish before it is signalled.
        (State::Ready(run) | State::Unhealthy(run) | State::Draining(run), Input::Retire(why))
            if run.ready_at.is_some() && settings.linger.is_some() =>
        {
            life.state = State::Leaving(run);
            out.extend([
                Effect::Note(Note::Leaving(why)),
                Publish,
                Arm(Timer::Linger, settings.linger.expect("guarded"), run.id),
            ]);
        }
        (State::Leaving(run), Input::Finished(why)) => {
            stop(life, run, After::Retire, why, settings, &mut out)
        }
        (state, Input::Retire(why)) => match state.run() {
            Some(run) => stop(life, run, After::Retire, why, settings, &mut out),
            None => {
                life.state = State::Idle;
                out.extend([Effect::Note(Note::Retired), Publish, Remove]);
                if std::mem::take(&mut life.socket_open) {
                    out.push(CloseSockets);
                }
            }
        },
        // Already stopping: only the (now empty) active set changes.
        (State::Stopping(..), Input::Shutdown(_)) => out.push(Publish),
        (state, Input::Shutdown(why)) => match state.run() {
            Some(run) => stop(life, run, After::Idle, why, settings, &mut out),
            None => {
                life.state = State::Idle;
                out.push(Publish);
                if std::mem::take(&mut life.socket_open) {
                    out.push(CloseSockets);
                }
            }
        },
        (state, Input::KillNow) if state.run().is_some() => out.push(Signal(Sig::Kill)),
        (State::Stopping(..), Input::Quiet(why)) => {
            out.extend([Effect::Note(Note::KilledQuiet(why)), Signal(Sig::Kill)]);
        }
        (State::Held | State::Broken, Input::Needed) if !life.trying() && life.serving() => {
            let every = life.crash.half_open();
            if life.state == State::Broken {
                life.state = State::Waiting;
            }
            out.extend([
                Effect::Note(Note::HalfOpen {
                    every,
                    min_workers: settings.min_workers,
                }),
                Publish,
                Arm(Timer::Restart, every, life.epoch),
            ]);
        }
        (State::Waiting | State::Held | State::Broken, Input::Revive) if life.serving() => {
            life.crash.forget();
            life.restarts += 1;
            out.extend([Effect::Note(Note::Revived), Spawn]);
        }
        (_, Input::Timer(_, epoch)) if epoch != life.epoch => {}
        (State::Starting(run), Input::Timer(Timer::ReadyTimeout, _)) => {
            life.state = State::Stopping(run, After::Crash);
            out.extend([
                Effect::Note(Note::NotReadyInTime(settings.ready_timeout)),
                Publish,
                Signal(Sig::Kill),
            ]);
        }
        (State::Leaving(run), Input::Timer(Timer::Linger, _)) => {
            let why = format!(
                "--drain-timeout {:?} reached before its connections, or what its UDP sockets \
                 held, were done",
                settings.linger.unwrap_or_default()
            );
            stop(life, run, After::Retire, why, settings, &mut out);
        }
        (_, Input::Timer(Timer::KeptUntil, _)) if life.kept.is_some() => {
            life.kept = None;
            life.standby = false;
            let why = "the previous release's --keep-previous window ended".to_string();
            return step(life, Input::Retire(why), context, settings);
        }
        (State::Stopping(..), Input::Timer(Timer::Kill, _)) => {
            out.extend([Effect::Note(Note::KilledAtStopTimeout), Signal(Sig::Kill)]);
        }
        (State::Waiting | State::Held | State::Broken, Input::Timer(Timer::Restart, _)) => {
            life.crash.cooled_down();
            life.restarts += 1;
            out.extend([Effect::Note(Note::Restarting), Spawn]);
        }
        (state, Input::Superseded) => {
            if let Some(run) = state.run() {
                life.state = State::Stopping(run, After::Retire);
                exit(life, Some((run, false)), true, context, settings, &mut out);
            }
        }
        (state, Input::Exited { outside }) => {
            if let Some(run) = state.run() {
                exit(
                    life,
                    Some((run, outside)),
                    matches!(state, State::Stopping(..) | State::Leaving(_)),
                    context,
                    settings,
                    &mut out,
                );
            }
        }
        _ => {}
    }
    out
}

/// Sends the worker SIGTERM (SIGKILL after the stop timeout); the slot stops being selected.
fn stop(
    life: &mut Life,
    run: Run,
    after: After,
    why: String,
    settings: &Settings,
    out: &mut Vec<Effect>,
) {
    life.state = State::Stopping(run, after);
    out.extend([
        Effect::Note(Note::Stopping(why)),
        Effect::Publish,
        Effect::Signal(Sig::Term),
        Effect::Arm(Timer::Kill, settings.stop_timeout, run.id),
    ]);
}

/// The worker is gone (or never started): decide what the slot becomes. `exited` is the run and
/// whether it was killed from outside; `asked` whether ck had asked it to stop.
fn exit(
    life: &mut Life,
    exited: Option<(Run, bool)>,
    asked: bool,
    context: &Context,
    settings: &Settings,
    out: &mut Vec<Effect>,
) {
    out.push(Effect::Publish);
    let after = match life.state {
        State::Stopping(_, after) if after != After::Crash => after,
        State::Leaving(_) => After::Retire,
        _ if context.stopping => After::Idle,
        _ if life.standby || life.canary || life.member_of.is_some() => After::Retire,
        _ => After::Crash,
    };
    debug_assert!(asked || after != After::Idle || context.stopping);
    match after {
        After::Idle => {
            life.state = State::Idle;
            close(life, out);
            return;
        }
        After::Retire => {
            life.state = State::Idle;
            let note = if asked || life.member_of.is_some() || life.kept.is_some() || life.canary {
                Note::Retired
            } else {
                Note::StandbyFailed
            };
            out.extend([Effect::Note(note), Effect::Remove]);
            close(life, out);
            return;
        }
        After::Crash => {}
    }
    let (ready_for, outside) = match exited {
        Some((run, outside)) if !asked => (
            run.ready_at
                .map(|at| context.now.saturating_duration_since(at)),
            outside,
        ),
        _ => (None, false),
    };
    let verdict = if life.crash.served(ready_for, outside) {
        life.crash.on_served_exit()
    } else {
        life.crash.on_boot_crash(context.now, context.random)
    };
    // The last open socket of its group is kept: connections queue on it, and the replacement
    // gets it. So is every socket while the program steers by maps not taken into use yet:
    // the one the program knows stays valid.
    let hold = (context.others_open == 0 || context.maps_pending) && life.socket_open;
    life.state = if hold { State::Held } else { State::Waiting };
    if hold {
        out.push(Effect::Note(Note::Held));
    } else {
        close(life, out);
    }
    match verdict {
        Verdict::Now => {
            life.restarts += 1;
            out.extend([Effect::Note(Note::RestartNow), Effect::Spawn]);
        }
        Verdict::After(delay) => {
            out.extend([
                Effect::Note(Note::RestartIn(delay)),
                Effect::Arm(Timer::Restart, delay, life.epoch),
            ]);
        }
        Verdict::Open(cooldown) => {
            let crashes = life.crash.policy().crash_limit;
            if context.others_trying < settings.min_workers as usize {
                let every = life.crash.half_open();
                out.extend([
                    Effect::Note(Note::HalfOpen {
                        every,
                        min_workers: settings.min_workers,
                    }),
                    Effect::Arm(Timer::Restart, every, life.epoch),
                ]);
            } else {
                life.crash.open();
                if !hold {
                    life.state = State::Broken;
                }
                out.extend([
                    Effect::Note(Note::BreakerOpen { crashes, cooldown }),
                    Effect::Arm(Timer::Restart, cooldown, life.epoch),
                ]);
            }
        }
    }
}

/// Marks the sockets closed and asks the executor to close them.
fn close(life: &mut Life, out: &mut Vec<Effect>) {
    if std::mem::take(&mut life.socket_open) {
        out.push(Effect::CloseSockets);
    }
}
