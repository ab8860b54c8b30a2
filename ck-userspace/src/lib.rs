//! ck: a supervisor for multi-process network servers on Linux in which the kernel dispatches
//! connections (`SO_REUSEPORT`) and an eBPF program chooses the worker for each one.
//!
//! See `ARCHITECTURE.md` at the repository root for the map of these modules. `unsafe` is
//! allowed only at the operating system's edges ([`os`]) and in the BPF loader ([`bpf`]).
//! The worker's side of the protocol (socket activation, `sd_notify`, the graceful drain and
//! `ck demo-worker`) is the `ck-worker` crate, which servers can depend on without ck's own
//! dependencies.
#![deny(unsafe_code)]
#[allow(unsafe_code)]
pub mod bpf;
pub mod control;
#[cfg(test)]
mod error_causes;
pub mod metrics;
#[allow(unsafe_code)]
pub mod os;
pub mod settings;
pub mod supervisor;
