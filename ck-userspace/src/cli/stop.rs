//! `ck stop [--now] [--wait]`: asks an instance to stop; with `--wait`, returns only once its
//! ck, every worker and its control socket are gone, or fails after `--timeout` naming what is
//! still up. With `--pid`, the instance may still be starting: its control socket is waited
//! for first (at most `--timeout`, else 30 s).
use std::{process::ExitCode, time::Duration};

use anyhow::bail;
use ck::control::{
    Request, client,
    instances::{self, Which},
};

use super::{
    control::{answer, simple, status_of},
    finder::{Finder, POLL},
};

/// How long `ck stop --wait --pid PID` waits for that ck's control socket without --timeout.
const FIND_TIMEOUT: Duration = Duration::from_secs(30);

/// A process `ck stop --wait` waits for, held by pidfd (no pid-reuse race).
struct Watched {
    /// Its pid.
    pid: u32,
    /// What it is (`ck`, `worker of slot 2`).
    what: String,
    /// Its pidfd; None when it had already exited when looked up.
    pidfd: Option<std::os::fd::OwnedFd>,
}

impl Watched {
    /// Watches `pid` from now on.
    fn new(pid: u32, what: String) -> Watched {
        Watched {
            pid,
            what,
            pidfd: ck::os::pidfd::open(pid).ok(),
        }
    }

    /// Whether it has exited.
    fn gone(&self) -> bool {
        self.pidfd.as_ref().is_none_or(ck::os::pidfd::has_exited)
    }
}

/// Adds the workers of `report` not watched yet (a roll may have started some since).
fn watch_workers(watched: &mut Vec<Watched>, report: &ck::control::StatusReport) {
    for s in &report.slots {
        if let Some(pid) = s.pid
            && !watched.iter().any(|w| w.pid == pid)
        {
            watched.push(Watched::new(pid, format!("worker of slot {}", s.slot)));
        }
    }
}

/// Whether instance `name`'s control socket is gone: no file, or one nothing listens on any
/// more (left by a ck that was killed).
fn socket_gone(name: &str) -> bool {
    let path = ck::os::instance::control_path(name);
    !path.exists() || std::os::unix::net::UnixStream::connect(&path).is_err()
}

/// `ck stop [--now] [--wait [--timeout DUR]]`: asks the instance `which` names to stop; with
/// `wait`, returns once its ck process and every worker have exited and its control socket
/// is gone, or fails after `timeout` (default: the rest of its quiet wait, if one began, plus
/// its `--drain-timeout`, plus 10 s) naming what is still up.
pub fn stop(
    which: Which,
    now: bool,
    wait: bool,
    timeout: Option<Duration>,
) -> anyhow::Result<ExitCode> {
    let request = if now { Request::StopNow } else { Request::Stop };
    if !wait {
        return simple(&which, request);
    }
    let name = match which {
        Which::Pid(_) => {
            Finder::new(which)?.wait(std::time::Instant::now(), timeout.unwrap_or(FIND_TIMEOUT))?
        }
        which => instances::resolve(&which)?,
    };
    let before = status_of(&name)?;
    let mut watched = vec![Watched::new(before.pid, "ck".into())];
    watch_workers(&mut watched, &before);
    answer(client::request(&name, &request)?)?;
    let began = std::time::Instant::now();
    let quiet_left = match status_of(&name) {
        Ok(report) => {
            watch_workers(&mut watched, &report);
            report
                .quiet_wait
                .filter(|q| q.waiting)
                .map_or(0, |q| q.quiet_max_ms.saturating_sub(q.waited_ms))
        }
        Err(_) => 0,
    };
    let timeout = timeout.unwrap_or(
        Duration::from_millis(quiet_left + before.drain_timeout_ms) + Duration::from_secs(10),
    );
    loop {
        if watched.iter().all(Watched::gone) && socket_gone(&name) {
            println!(
                "stopped: ck instance {name:?} is down (ck pid {} and {} worker(s) exited)",
                before.pid,
                watched.len() - 1
            );
            return Ok(ExitCode::SUCCESS);
        }
        if began.elapsed() >= timeout {
            bail!(still_up(&name, &watched, timeout, &before));
        }
        std::thread::sleep(POLL);
    }
}

/// The error of `ck stop --wait` at its timeout: what is still up, and the fix.
fn still_up(
    name: &str,
    watched: &[Watched],
    timeout: Duration,
    before: &ck::control::StatusReport,
) -> String {
    let mut up: Vec<String> = watched
        .iter()
        .filter(|w| !w.gone())
        .map(|w| format!("{} (pid {})", w.what, w.pid))
        .collect();
    if up.is_empty() {
        up.push(format!(
            "its control socket {}",
            ck::os::instance::control_path(name).display()
        ));
    }
    let (state, skip) = match status_of(name) {
        Ok(report) => match &report.quiet_wait {
            Some(q) if q.waiting => (
                format!("; ck is {}", q.words()),
                ", or skip the rest of the quiet wait with `ck stop --now --wait`",
            ),
            _ => (
                format!(
                    "; ck is stopping, slots: {}",
                    report
                        .slots
                        .iter()
                        .map(|s| format!("{} {}", s.slot, s.state))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                "",
            ),
        },
        Err(_) => (String::new(), ""),
    };
    format!(
        "ck instance {name:?} is not down after {timeout:?}: still up: {}{state}. A worker \
         that outlives its stop signal is killed at --drain-timeout ({:?}); see ck's log (its \
         stderr) for what it waits on, or wait longer with --timeout{skip}",
        up.join(", "),
        Duration::from_millis(before.drain_timeout_ms)
    )
}
