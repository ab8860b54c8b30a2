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
pub mod reference;
pub mod settings;
pub mod supervisor;

/// What `ck --version` prints after `ck`, and what `ck status` and `ck upgrade` show of a
/// binary: the version, the git commit it was built from (short hash, `-dirty` with uncommitted
/// changes, `unknown` outside git) and [`bpf::OBJECT_SHA256`], e.g.
/// `0.1.0 (commit 97598a0, bpf 3f2a9c01d4e7)`. Set by `build.rs`.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("CK_GIT_COMMIT"),
    ", bpf ",
    env!("CK_BPF_SHA256"),
    ")"
);
