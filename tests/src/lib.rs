//! Harness for ck's integration tests (`tests/tests/*.rs`) and benchmarks: start a `ck run`
//! instance on a free port under a name of its own ([`ck::Ck`], the one handle on a running ck;
//! its methods and the `start*` functions here return `Result`, which a test `.expect`s and a
//! benchmark passes on), give it a wrapper app ([`app`]), talk HTTP to its demo workers
//! ([`http`]), put it under load while its fleet changes ([`churn`]), and inspect processes,
//! ports and CPUs ([`sys`]), what a process costs ([`cpu`]) and the machine itself
//! ([`machine`]); run real servers
//! ([`pyservers`], [`real_servers`]) through one checklist ([`server_checks`]); run a program
//! in a real terminal ([`tmux`]), read the files of `deploy/` ([`deploy`]), tell a static
//! binary from a dynamic one ([`elf`]), read the import graph of ck's sources ([`layers`]), put ck hosts behind a real balancer in network
//! namespaces ([`fleet`]), hold ck to README's promises ([`promises`]), run the docs' shell
//! blocks and check their links and tables ([`docs`]), regenerate the reference to compare
//! it with the committed one ([`reference`]), and take servers written in a hurry through
//! every operation ([`zoo`]).
//!
//! The tests run the real `ck` binary (`target/debug/ck`, or `$CK_BIN`) as root: they load
//! BPF programs and pin maps under `/sys/fs/bpf/ck/`. `cargo xtask test` builds ck and runs
//! them. Every test uses its own port and `--name`, so they can run in parallel.

pub mod adopted;
pub mod app;
pub mod bpf_stats;
pub mod canary;
pub mod churn;
pub mod ck;
pub mod cpu;
pub mod cserver;
pub mod deploy;
pub mod docs;
pub mod elf;
pub mod fleet;
pub mod http;
pub mod layers;
pub mod load;
pub mod machine;
pub mod once;
pub mod privs;
pub mod promises;
pub mod pyservers;
pub mod quic_client;
pub mod quic_servers;
pub mod real_servers;
pub mod reference;
pub mod server_checks;
pub mod slow_boot;
pub mod sys;
pub mod tmux;
pub mod udp;
pub mod udp_refusals;
pub mod zoo;

use std::time::Duration;

use anyhow::{Context as _, Result};

pub use crate::ck::{Ck, StartOptions, Status, ck_bin};
/// One slot of a [`Status`]: ck's own schema.
pub use ::ck::control::SlotReport;
pub use http::{Answer, Failure, KeepAlive, Tally, burst, burst_pinned, get_new_conn, local};

/// How long a fleet gets to become ready.
pub const READY_TIMEOUT: Duration = Duration::from_secs(15);

/// The instance name for a test: `t-<what>-<port>` (unique while the port is in use).
pub fn instance_name(what: &str, port: u16) -> String {
    format!("t-{what}-{port}")
}

/// A probe port base of the test's own, derived from its listening port: within 19000–19999,
/// below every port `free_port` hands out (20000 and up), so parallel tests never share one.
pub fn probe_base_for(port: u16) -> u16 {
    19_000 + (port % 100) * 8
}

/// Starts `ck run --name t-<what>-<port> --port <port> --probe-port-base <base> ARGS...` on a
/// free port (base from [`probe_base_for`]) and returns it with the port. `args` may end with
/// `--` and an APP.
pub fn start(what: &str, args: &[&str]) -> Result<(Ck, u16)> {
    start_with_env(what, args, &[])
}

/// Starts like [`start`] with `env` set for ck.
pub fn start_with_env(what: &str, args: &[&str], env: &[(&str, &str)]) -> Result<(Ck, u16)> {
    let port = sys::free_port();
    Ok((start_on(what, port, args, env)?, port))
}

/// Starts like [`start_with_env`] on `port` (from [`sys::free_port`]), e.g. one a client is
/// already trying to reach.
pub fn start_on(what: &str, port: u16, args: &[&str], env: &[(&str, &str)]) -> Result<Ck> {
    StartOptions::new()
        .port(port)
        .args(&["--probe-port-base", &probe_base_for(port).to_string()])
        .args(args)
        .env(env)
        .start(&instance_name(what, port))
}

/// Starts like [`start`] and waits until `workers` slots are ready (`-w <workers>` is added).
pub fn start_ready(what: &str, workers: usize, args: &[&str]) -> Result<(Ck, u16, Status)> {
    start_ready_with_env(what, workers, args, &[])
}

/// Starts like [`start_ready`] with `env` set for ck.
pub fn start_ready_with_env(
    what: &str,
    workers: usize,
    args: &[&str],
    env: &[(&str, &str)],
) -> Result<(Ck, u16, Status)> {
    let w = workers.to_string();
    let mut all = vec!["-w", w.as_str()];
    all.extend_from_slice(args);
    let (mut ck, port) = start_with_env(what, &all, env)?;
    let status = ck.wait_ready(workers, READY_TIMEOUT)?;
    Ok((ck, port, status))
}

/// Starts `-w 1` with `flags` and a demo worker that says READY=1 only after 1.5 s, and waits
/// until it is spawned and steering is on: while it starts, every connection is a fallback to
/// it. Returns the instance, its port and that status.
pub fn start_one_starting(what: &str, flags: &[&str]) -> Result<(Ck, u16, Status)> {
    let bin = ck::find_ck_bin()?;
    let bin = bin
        .to_str()
        .with_context(|| format!("{} is not a UTF-8 path", bin.display()))?;
    let mut args = vec!["-w", "1"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["--", bin, "demo-worker", "--ready-after", "1500ms"]);
    let (mut ck, port) = start(what, &args)?;
    let status = ck.wait_status("the worker is starting", READY_TIMEOUT, |s| {
        s.bpf && s.slots.len() == 1 && s.slots[0].state == "starting"
    })?;
    Ok((ck, port, status))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_valid_ck_names() {
        let name = instance_name("spread-round-robin", 65535);
        assert!(name.len() <= 48);
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        );
    }
}
