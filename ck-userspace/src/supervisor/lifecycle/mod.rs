//! A slot's lifecycle as one state machine, without I/O: [`State`] (one enum), [`Input`]s
//! (spawned, ready, notify, exited, health, drain, roll/scale/stop decisions, timers) and one
//! transition function, [`step`], that returns [`Effect`]s. The supervisor's executor runs the
//! effects in one fixed order ([`Effect::rank`]: publish the maps, then signal, then close
//! sockets, then forget, then spawn, then arm timers), so "out of the maps before anything is
//! signalled or closed" holds by construction. Roll, scale, health and the control socket only
//! produce inputs.
//!
//! | state | worker | socket | selected | leaves on |
//! | --- | --- | --- | --- | --- |
//! | `Idle` | - | closed | no | `Start` -> spawn |
//! | `Starting` | yes | open | fallback | `Ready` -> Ready/Unhealthy; ready timeout -> Stopping(Crash); exit -> crash rule |
//! | `Ready` | yes | open | yes (unless drained/standby) | health -> Unhealthy; `STOPPING=1` -> Draining; stop -> Stopping; exit -> crash rule |
//! | `Unhealthy` | yes | open | fallback | healthy -> Ready; stop; exit |
//! | `Draining` | yes | open | fallback | `READY=1` -> Ready; stop; exit |
//! | `Leaving` | yes | open | fallback | what it was given done (`Finished`) or linger -> Stopping(Retire); exit -> removed |
//! | `Stopping` | yes | open | fallback | exit -> Idle / removed / crash rule; stop timeout -> SIGKILL |
//! | `Waiting` | - | closed | no | restart timer or `ck reload` -> spawn |
//! | `Held` | - | open (last of its group) | last resort | restart timer (or at once) or `ck reload` -> spawn on the same socket |
//! | `Broken` | - | closed | no | cool-down timer or `ck reload` -> spawn |
//!
//! The crash rule (`crash`): a worker that served is replaced at once; a boot crash waits a
//! backoff; too many boot crashes open the breaker unless the group would have fewer than
//! `--min-workers` trying slots (then half-open: retried at the maximum backoff). Whatever the
//! verdict, a slot whose sockets are the last open ones of the group keeps them (`Held`).
//!
//! A retired worker that served (a roll, a scale-down) is `Leaving` first: out of the active
//! set, signalled only once what it was given is done (`Finished`, from what the supervisor
//! reads: its connections, what its UDP sockets held at the flip; see `fleet::leave`) or at
//! the linger's end (`--drain-timeout`).
mod active;
pub mod crash;
mod effect;
pub(super) mod instant_age;
mod state;
mod step;
mod words;

#[cfg(test)]
mod adopt_tests;
#[cfg(test)]
mod crash_tests;
#[cfg(test)]
mod kept_tests;
#[cfg(test)]
mod leaving_tests;
#[cfg(test)]
mod tests;

pub use active::{Tier, active_set, needed, retire_order, tier};
pub use effect::{Effect, schedule};
pub use state::{After, Life, Run, State};
pub use step::{Context, Settings, step};
pub use words::{Input, Note, Sig, Timer};
