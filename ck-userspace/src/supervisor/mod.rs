//! The supervisor: owns the slots' sockets, starts and watches workers, keeps the BPF maps true
//! to the fleet, answers the control socket and shuts everything down cleanly.
//!
//! Everything runs on one current-thread tokio runtime (`start`); all state lives in the
//! `Supervisor` (`event_loop`) and is changed only by its event loop, one `Event` (`event`) at
//! a time. Tasks (child waiters, notify readers, timers, the control server) only send events.
//!
//! Who decides what: a slot's state changes only through the lifecycle machine
//! ([`lifecycle`]); what spans slots (a death, a roll, a scale, the spares, a leave, the boot
//! window) is decided by the fleet core ([`fleet`]); the executor (`executor`) runs both on the
//! OS (`world`). The parts, each a folder or a file here, import each other only down the
//! layers ARCHITECTURE.md states (`tests/tests/layers.rs` checks): the pure core, then the slot
//! table (`slots`), the groups and their BPF state (`groups`), the input sources (`inputs`) and
//! the operations (`operations`), what outlives one image of ck (`continuity`), the reports
//! (`reports`, which read a `reports::View`), the event loop (`event_loop`), and at the top the
//! files that sequence what spans parts, one concern each: `feed` (what the inputs found, fed
//! to the machine), `operate` (the operations' plans applied), `steer` (the loaded programs
//! taken into use), `carry_on` (continuity's steps), `world` (the executor's effects), `spawn`
//! (a worker's spawn on the OS), then `start` (a run's start and end). This file only declares
//! them and re-exports.
mod carry_on;
pub mod continuity;
mod event;
mod event_loop;
mod executor;
mod feed;
pub mod fleet;
mod groups;
mod inputs;
pub mod lifecycle;
mod machine_config;
mod operate;
mod operations;
pub mod output;
mod reports;
mod slots;
mod spawn;
mod start;
mod steer;
mod tasks;
mod world;

pub use start::{run, run_with};

pub use crate::control::compat::Compat;
pub use crate::os::probe::accept::FORCE_ENV as READY_DETECT_ENV;
pub use tasks::IDLE_BURN_ENV;
