//! What a page leaves behind: processes of its shell's session or with its `CK_RUN_DIR` still
//! running after its shell exited (killed, and the page fails), BPF pins left in its
//! `CK_PIN_DIR`, and the cgroups of its instances.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::time::Duration;

use crate::sys::{self, kill_hard, pid_alive, poll_until};

/// How long processes get to finish exiting after the page's shell did (a `ck stop --wait`
/// returns once the fleet is down; ck itself is leaving then).
const GRACE: Duration = Duration::from_secs(5);

/// Live processes of session `sid`, or whose environment holds `marker` (`CK_RUN_DIR=...`:
/// what the page started keeps it even in a session of its own).
fn leftovers(sid: u32, marker: &str) -> BTreeSet<u32> {
    let me = std::process::id();
    let Ok(entries) = fs::read_dir("/proc") else {
        return BTreeSet::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| session_of(*pid) == Some(sid) || has_env(*pid, marker))
        .filter(|pid| pid_alive(*pid))
        .collect()
}

/// The session id of `pid` (field 6 of `/proc/PID/stat`).
fn session_of(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(3)?.parse().ok()
}

/// Whether `pid`'s environment holds the variable `var` (`NAME=value`).
fn has_env(pid: u32, var: &str) -> bool {
    fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == var.as_bytes()))
}

/// `pid` and its command line, for a message.
fn describe(pid: u32) -> String {
    let cmdline = fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| {
            raw.split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    format!("`{cmdline}` (pid {pid})")
}

/// Waits a little for the page's processes (session `sid`, or environment `marker`) to exit,
/// then kills those left. Returns their descriptions (empty when none was left).
pub fn end_processes(sid: u32, marker: &str) -> Vec<String> {
    let mut left = BTreeSet::new();
    poll_until(GRACE, Duration::from_millis(50), || {
        left = leftovers(sid, marker);
        left.is_empty()
    });
    let described: Vec<String> = left.iter().map(|pid| describe(*pid)).collect();
    // Kill until none is left: a dying ck may still spawn or a worker may fork.
    for _ in 0..10 {
        if left.is_empty() {
            break;
        }
        for pid in &left {
            kill_hard(*pid);
        }
        sys::wait_all_dead(&left, Duration::from_secs(2));
        left = leftovers(sid, marker);
    }
    described
}

/// The entries of `pin_dir` (pins or instance directories left), then `pin_dir` removed.
pub fn remove_pins(pin_dir: &Path) -> Vec<String> {
    let left: Vec<String> = fs::read_dir(pin_dir)
        .map(|entries| {
            entries
                .filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
                .collect()
        })
        .unwrap_or_default();
    let _ = fs::remove_dir_all(pin_dir);
    left
}

/// Removes the cgroups of the instances that had a file in `run_dir` (control socket, lock,
/// state file): `ck-NAME` under this process's cgroup, as ck made them.
pub fn remove_cgroups(run_dir: &Path) {
    let Ok(entries) = fs::read_dir(run_dir) else {
        return;
    };
    let names: BTreeSet<String> = entries
        .filter_map(|e| {
            let path = e.ok()?.path();
            Some(path.file_stem()?.to_str()?.to_string())
        })
        .collect();
    for name in names {
        if let Some(dir) = sys::cgroup_dir(&name).filter(|d| d.exists()) {
            sys::remove_cgroup(&dir);
        }
    }
}
