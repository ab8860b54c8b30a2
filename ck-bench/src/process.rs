//! Signals to the processes a scenario starts or aims at (a worker it kills, the fleet with no
//! supervisor it stops, another supervisor's workers), failing with the pid and signal named.

use anyhow::{Context as _, Result};
use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;

/// Sends `signal` to `pid`; fails when the pid is out of range or the process is gone.
pub fn kill(pid: u32, signal: Signal) -> Result<()> {
    let raw = i32::try_from(pid).with_context(|| format!("pid {pid} out of range"))?;
    signal::kill(Pid::from_raw(raw), signal).with_context(|| format!("kill({pid}, {signal})"))?;
    Ok(())
}
