//! The `ck run` processes of this machine, as `/proc` shows them, and the pid of the process
//! serving a control socket (`SO_PEERCRED`). A command that picks "the only instance" sees
//! through them an instance that is starting and has no control socket yet, so it never
//! answers for another one; `--pid` finds an instance by its ck's pid.
use std::{
    os::unix::net::UnixStream,
    path::{Path, PathBuf},
};

/// The pids of the live `ck run` processes whose run directory (`CK_RUN_DIR`, else
/// `/run/ck`) is `run_dir`, this process aside. A process whose environment cannot be read
/// (another user's, when not root) is left out: its run directory is unknown.
pub fn ck_run_pids(run_dir: &Path) -> Vec<u32> {
    let me = std::process::id();
    let own_exe = std::fs::read_link("/proc/self/exe").ok();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me && is_ck_run(pid, own_exe.as_deref(), run_dir))
        .collect();
    pids.sort_unstable();
    pids
}

/// Whether `pid` is `ck run` (its program is this binary, or one named `ck`, and its first
/// argument `run`) with run directory `run_dir`. A child of a `ck run` is not one: until it
/// execs, a worker being spawned (or the child that creates a socket in the instance's cgroup)
/// is a copy of its ck, command line and all.
fn is_ck_run(pid: u32, own_exe: Option<&Path>, run_dir: &Path) -> bool {
    looks_like_ck_run(pid, own_exe, run_dir)
        && parent_of(pid).is_none_or(|parent| !looks_like_ck_run(parent, own_exe, run_dir))
}

/// The parent of `pid` (`PPid` in `/proc/PID/status`).
fn parent_of(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("PPid:"))
        .and_then(|p| p.trim().parse().ok())
}

/// `pid`'s program and first argument are `ck run`'s, with run directory `run_dir`.
fn looks_like_ck_run(pid: u32, own_exe: Option<&Path>, run_dir: &Path) -> bool {
    let proc = PathBuf::from(format!("/proc/{pid}"));
    let Ok(cmdline) = std::fs::read(proc.join("cmdline")) else {
        return false;
    };
    if cmdline.split(|b| *b == 0).nth(1) != Some(b"run") {
        return false;
    }
    let Ok(exe) = std::fs::read_link(proc.join("exe")) else {
        return false;
    };
    let name = exe.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    // A binary replaced on disk (`ck upgrade`) reads `ck (deleted)`.
    let is_ck = own_exe == Some(exe.as_path()) || name.trim_end_matches(" (deleted)") == "ck";
    is_ck && run_dir_of(&proc).is_some_and(|dir| dir == run_dir)
}

/// The run directory of the process at `proc` (`/proc/PID`): its `CK_RUN_DIR`, else
/// `/run/ck`; None when its environment cannot be read.
fn run_dir_of(proc: &Path) -> Option<PathBuf> {
    let environ = std::fs::read(proc.join("environ")).ok()?;
    let dir = environ
        .split(|b| *b == 0)
        .find_map(|var| var.strip_prefix(b"CK_RUN_DIR="))
        .map(|dir| PathBuf::from(String::from_utf8_lossy(dir).into_owned()));
    Some(dir.unwrap_or_else(|| PathBuf::from("/run/ck")))
}

/// The pid of the process that listens on the unix socket at `path` (the kernel's
/// `SO_PEERCRED`, taken when it listened); None when nothing listens there.
pub fn listener_pid(path: &Path) -> Option<u32> {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    let stream = UnixStream::connect(path).ok()?;
    let cred = getsockopt(&stream, PeerCredentials).ok()?;
    u32::try_from(cred.pid()).ok().filter(|pid| *pid > 0)
}

/// What `pid` runs (`/proc/PID/comm`, e.g. `node`), if it is alive.
pub fn command_of(pid: u32) -> Option<String> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(comm.trim_end().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listener_of_a_socket_is_this_process_and_a_plain_process_is_no_ck_run() {
        let dir = std::env::temp_dir().join(format!("ck-runs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        assert_eq!(listener_pid(&path), Some(std::process::id()));
        drop(listener);
        assert_eq!(listener_pid(&path), None, "nothing listens any more");
        std::fs::remove_dir_all(&dir).unwrap();
        // The test binary is not `ck run`, and a sleep is not either.
        let mut sleep = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let pid = sleep.id();
        assert!(!is_ck_run(pid, None, Path::new("/run/ck")));
        // `sleep`, or this test's thread before the exec.
        assert!(command_of(pid).is_some());
        sleep.kill().unwrap();
        sleep.wait().unwrap();
        assert_eq!(command_of(pid), None);
    }
}
