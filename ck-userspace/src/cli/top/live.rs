//! The live `ck top`: a terminal owned for the run (raw mode, alternate screen, given back on
//! every way out: quit, error, panic, SIGTERM/SIGHUP/SIGINT), a thread that fetches a status
//! report every second, a thread that reads keys, one that waits for those signals, and control
//! requests (drain, undrain, reload) on threads of their own so the screen never waits for them.
//! Everything reaches the loop through one channel.
use std::{
    io::IsTerminal as _,
    process::ExitCode,
    sync::mpsc::{self, Sender},
    thread,
    time::Instant,
};

use anyhow::{Context as _, bail};
use ck::control::{Request, Response, StatusReport, client};
use nix::sys::signal::{SigSet, Signal};
use ratatui::{
    DefaultTerminal,
    crossterm::event::{self, Event, KeyEvent},
};

use super::{
    REFRESH,
    keys::{Action, action_of},
    model::Frame,
    view::{self, View},
};
use crate::cli::control::status_of;

/// What the loop reacts to.
enum Update {
    /// A key was pressed.
    Key(KeyEvent),
    /// The terminal changed size (or something else asks for a redraw).
    Redraw,
    /// Reading the terminal failed.
    InputFailed(std::io::Error),
    /// A fresh status report.
    Report(Box<StatusReport>),
    /// The instance could not be asked (it went away), and why.
    Unreachable(String),
    /// A drain, undrain or reload ended, and how.
    Outcome(String),
    /// A signal asks `ck top` to end.
    Signal(Signal),
}

/// The terminal in raw mode on the alternate screen; dropping it gives the terminal back.
struct Terminal(DefaultTerminal);

impl Terminal {
    fn enter() -> anyhow::Result<Terminal> {
        // try_init also installs a panic hook that gives the terminal back before the message.
        match ratatui::try_init() {
            Ok(terminal) => Ok(Terminal(terminal)),
            Err(e) => {
                ratatui::restore();
                Err(e).context("setting up the terminal")
            }
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = self.0.show_cursor();
        ratatui::restore();
    }
}

/// Runs the live view of instance `name` until a quit key; exit status 0 then.
pub fn run(name: String) -> anyhow::Result<ExitCode> {
    // Fail before taking the terminal when there is no such instance at all.
    let first = status_of(&name)?;
    if !std::io::stdout().is_terminal() {
        bail!(
            "ck top needs a terminal (stdout is not one); `ck top --once` prints one frame as text"
        );
    }
    let (tx, rx) = mpsc::channel();
    tx.send(Update::Report(first)).ok();
    // Blocked here, before any thread starts, so that only the signal thread takes them.
    let mut signals = SigSet::empty();
    for signal in [Signal::SIGTERM, Signal::SIGHUP, Signal::SIGINT] {
        signals.add(signal);
    }
    signals.thread_block().context("blocking signals")?;
    let mut terminal = Terminal::enter()?;
    spawn_sampler(name.clone(), tx.clone());
    spawn_input(tx.clone());
    spawn_signals(signals, tx.clone());
    let mut view = View {
        name: name.clone(),
        ..View::default()
    };
    let mut last: Option<Box<StatusReport>> = None;
    for update in rx.iter() {
        match update {
            Update::Key(key) => match action_of(key) {
                Some(Action::Quit) => return Ok(ExitCode::SUCCESS),
                Some(Action::Up) => view.selection.step(&view.slots(), -1),
                Some(Action::Down) => view.selection.step(&view.slots(), 1),
                Some(action) => act(&name, action, &mut view, &tx),
                None => continue,
            },
            Update::Redraw => {}
            Update::InputFailed(e) => return Err(e).context("reading the terminal"),
            Update::Report(report) => {
                view.frame = Some(Frame::new(last.as_deref(), &report));
                view.problem = None;
                last = Some(report);
            }
            Update::Unreachable(why) => view.problem = Some(why),
            Update::Outcome(text) => view.message = Some(text),
            Update::Signal(signal) => return Ok(ExitCode::from(128 + signal as u8)),
        }
        terminal
            .0
            .draw(|screen| view::draw(screen, &mut view))
            .context("drawing")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Sends `action`'s control request for the selected slot (or the instance) on a thread.
fn act(name: &str, action: Action, view: &mut View, tx: &Sender<Update>) {
    let slot = view.selection.slot(&view.slots());
    let (request, what) = match (action, slot) {
        (Action::Reload, _) => (Request::Reload { canary: None }, "reload".to_string()),
        (Action::Drain, Some(slot)) => (Request::Drain { slot }, format!("drain {slot}")),
        (Action::Undrain, Some(slot)) => (Request::Undrain { slot }, format!("undrain {slot}")),
        _ => {
            view.message = Some("no slot selected".into());
            return;
        }
    };
    view.message = Some(format!("{what}: asked, waiting for the answer"));
    let (name, tx) = (name.to_string(), tx.clone());
    thread::spawn(move || {
        let text = match client::request(&name, &request) {
            Ok(Response::Ok(msg)) => format!("{what}: {msg}"),
            Ok(Response::Error(msg)) => format!("{what} refused: {msg}"),
            Ok(Response::Status(_)) => format!("{what}: unexpected answer"),
            Err(e) => format!("{what} failed: {e:#}"),
        };
        let _ = tx.send(Update::Outcome(text));
    });
}

/// Fetches a status report every [`REFRESH`] until the loop is gone.
fn spawn_sampler(name: String, tx: Sender<Update>) {
    thread::spawn(move || {
        let mut next = Instant::now() + REFRESH;
        loop {
            thread::sleep(next.saturating_duration_since(Instant::now()));
            next += REFRESH;
            let update = match status_of(&name) {
                Ok(report) => Update::Report(report),
                Err(e) => Update::Unreachable(format!("{e:#}")),
            };
            if tx.send(update).is_err() {
                return;
            }
            // Fell behind (a slow answer): start again from now rather than catching up.
            next = next.max(Instant::now());
        }
    });
}

/// Reads terminal events until the loop is gone.
fn spawn_input(tx: Sender<Update>) {
    thread::spawn(move || {
        loop {
            let update = match event::read() {
                Ok(Event::Key(key)) => Update::Key(key),
                Ok(Event::Resize(..)) => Update::Redraw,
                Ok(_) => continue,
                Err(e) => Update::InputFailed(e),
            };
            let failed = matches!(update, Update::InputFailed(_));
            if tx.send(update).is_err() || failed {
                return;
            }
        }
    });
}

/// Waits for one of `signals` (blocked in every thread) and passes it on.
fn spawn_signals(signals: SigSet, tx: Sender<Update>) {
    thread::spawn(move || {
        if let Ok(signal) = signals.wait() {
            let _ = tx.send(Update::Signal(signal));
        }
    });
}
