//! `ck top`: a live view of an instance's slots (pid, state, new connections per second,
//! accept queue, memory, CPU, restarts) and totals, refreshed every second from its status
//! report, with keys to drain, undrain and reload; `--once` prints one frame as text.
//!
//! [`model`] turns two successive reports into rows (no terminal needed), [`text`] prints a
//! frame, [`view`] draws one with ratatui, [`keys`] maps keys to actions, [`live`] runs the loop.
mod keys;
mod live;
mod model;
mod text;
mod view;

#[cfg(test)]
mod tests;

use std::{process::ExitCode, time::Duration};

use ck::control::instances::{self, Which};

use super::control::status_of;

/// How often the view asks for a report, and the interval `--once` measures rates over.
pub const REFRESH: Duration = Duration::from_secs(1);

/// `ck top [--once]` on the instance `which` names.
pub fn run(which: &Which, once: bool) -> anyhow::Result<ExitCode> {
    let name = instances::resolve(which)?;
    if !once {
        return live::run(name);
    }
    // Rates need two reports: take them one refresh apart.
    let first = status_of(&name)?;
    std::thread::sleep(REFRESH);
    let second = status_of(&name)?;
    print!(
        "{}",
        text::render(&model::Frame::new(Some(&first), &second))
    );
    Ok(ExitCode::SUCCESS)
}
