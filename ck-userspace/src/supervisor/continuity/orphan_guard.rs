//! `ck orphan-guard`: with `--survive-supervisor`, a small process per instance that outlives
//! ck. It waits on ck's pidfd; if ck dies and no new ck of the same name takes the fleet back
//! within `--orphan-timeout` (a live ck answers on the control socket), it takes the instance
//! lock, stops the workers and `--adopt`'s member processes recorded in the state file
//! (`--stop-signal`, SIGKILL after the stop timeout; only processes whose start time matches),
//! kills what is left in the instance's cgroup, and removes the pins, the state file and the
//! run-time files. A clean stop of ck removes the state file: the guard then just exits.
use std::{
    os::fd::AsFd as _,
    path::Path,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use nix::sys::signal::Signal;

use crate::{bpf::pins, os::instance, os::pidfd};

/// What the guard watches.
#[derive(Debug, Clone)]
pub struct GuardSpec {
    /// The instance.
    pub name: String,
    /// How long the workers wait for a new ck.
    pub timeout: Duration,
    /// How long a worker may take to stop after the stop signal (`--drain-timeout`).
    pub drain_timeout: Duration,
    /// The signal that stops a worker gracefully (`--stop-signal`).
    pub stop_signal: Signal,
    /// The ck it guards.
    pub supervisor: u32,
}

/// Detaches (a child of init, in a session of its own) and guards the instance; returns when
/// ck stopped cleanly, a new ck took over, or the orphans are stopped.
pub fn run(spec: GuardSpec) -> anyhow::Result<()> {
    // Returns in the detached grandchild only; ck waits for the first process.
    nix::unistd::daemon(true, true).context("detaching")?;
    if let Ok(ck) = pidfd::open(spec.supervisor) {
        let mut fds = [nix::poll::PollFd::new(
            ck.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        while nix::poll::poll(&mut fds, nix::poll::PollTimeout::NONE).is_err() {}
    }
    let state = super::survive::state_path(&spec.name);
    let deadline = Instant::now() + spec.timeout;
    loop {
        if !state.exists() || answers(&spec.name) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Nobody came back: hold the name while the fleet stops.
    let Ok(lock) = instance::InstanceLock::acquire(&spec.name) else {
        return Ok(());
    };
    eprintln!(
        "ck orphan-guard: no ck took instance {:?} back within {:?}: stopping its workers",
        spec.name, spec.timeout
    );
    stop_workers(&state, spec.stop_signal, spec.drain_timeout);
    let _ = std::fs::remove_file(&state);
    let _ = pins::remove_instance(&spec.name);
    drop(lock);
    Ok(())
}

/// Whether a ck answers on the instance's control socket.
fn answers(name: &str) -> bool {
    std::os::unix::net::UnixStream::connect(instance::control_path(name)).is_ok()
}

/// Sends `stop` to the workers the state names (those still the same process), `--adopt`'s
/// member processes among them (recorded with their start time, as ck's own stop signals them
/// too), SIGKILLs them after `stop_timeout`, then kills and removes the instance's cgroup.
fn stop_workers(state: &Path, stop: Signal, stop_timeout: Duration) {
    let Ok(text) = std::fs::read(state) else {
        return;
    };
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(&text) else {
        return;
    };
    // The signal of the ck that wrote the state (a reload may have changed it).
    let stop = value["stop_signal"]
        .as_str()
        .and_then(|s| s.parse::<crate::settings::stop_signal::StopSignal>().ok())
        .map_or(stop, |s| s.signal());
    let empty = Vec::new();
    let slots = value["slots"].as_array().unwrap_or(&empty);
    let mut live = Vec::new();
    for worker in slots.iter().map(|s| &s["worker"]) {
        let (Some(pid), Some(ticks)) = (worker["pid"].as_u64(), worker["start_ticks"].as_u64())
        else {
            continue;
        };
        let pid = pid as u32;
        if pidfd::start_ticks(pid) != Some(ticks) {
            continue;
        }
        if let Ok(fd) = pidfd::open(pid) {
            eprintln!(
                "ck orphan-guard: stopping worker pid={pid} ({}, SIGKILL after {stop_timeout:?})",
                stop.as_str()
            );
            let _ = pidfd::send_signal(&fd, stop);
            live.push((pid, fd));
        }
    }
    let deadline = Instant::now() + stop_timeout;
    while Instant::now() < deadline && live.iter().any(|(_, fd)| !pidfd::has_exited(fd)) {
        std::thread::sleep(Duration::from_millis(20));
    }
    for (_, fd) in &live {
        let _ = pidfd::send_signal(fd, Signal::SIGKILL);
    }
    if let Some(dir) = value["cgroup"][0].as_str() {
        crate::os::cgroup::InstanceCgroup::resume(dir.into(), false).remove();
    }
}
