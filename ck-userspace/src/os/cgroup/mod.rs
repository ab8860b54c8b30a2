//! One cgroup v2 directory per instance (`<ck's own cgroup>/ck-<name>`) and one per worker under
//! it (`w<id>`): a worker and everything it forks live in its cgroup, so `cgroup.kill` stops the
//! whole tree (no grandchild outlives its worker) and the cgroup's files give the worker's CPU
//! time and memory. The listening sockets ck creates are born under `sockets` in it, each
//! slot's in a cgroup of its own ([`InstanceCgroup::socket`], [`slot_place`]), so that a cgroup
//! program there (the connection counter) runs for the fleet's connections and nothing else,
//! and knows their slot from their cgroup. The cgroup2 mount is found in `/proc/self/mountinfo` (`/sys/fs/cgroup` on
//! pure-v2 hosts, `/sys/fs/cgroup/unified` beside v1 controllers).
use std::{
    ffi::CString,
    fs, io,
    os::fd::{AsFd as _, OwnedFd},
    os::unix::ffi::OsStrExt as _,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

/// Why worker cgroups cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// No cgroup2 mount.
    #[error(
        "no cgroup2 file system is mounted (none in /proc/self/mountinfo): mount one \
         (`mount -t cgroup2 none /sys/fs/cgroup/unified`), or run without --adopt"
    )]
    NotMounted,
    /// Creating, writing or removing a cgroup file failed.
    #[error("{what} {}: {error}; ck needs root (or a delegated cgroup subtree) for worker cgroups", path.display())]
    Io {
        /// The step.
        what: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error (part of the message, not a separate cause).
        error: io::Error,
    },
}

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> CgroupError + 'a {
    move |error| CgroupError::Io {
        what,
        path: path.to_path_buf(),
        error,
    }
}

/// The cgroup2 mount point, from `/proc/self/mountinfo`.
pub fn mount_point() -> Option<PathBuf> {
    let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
    parse_mount_point(&info)
}

fn parse_mount_point(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        if after.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        before.split_whitespace().nth(4).map(PathBuf::from)
    })
}

/// This process's cgroup2 path (`0::/path` in `/proc/self/cgroup`).
fn own_cgroup() -> String {
    fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("0::").map(str::to_string))
        })
        .unwrap_or_else(|| "/".into())
}

/// CPU time and memory of a worker's cgroup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// `cpu.stat` `usage_usec`: CPU time of every process that ever ran in it.
    pub cpu_usec: u64,
    /// `memory.current`, or (without the memory controller) the resident memory of its
    /// processes summed from `/proc`.
    pub memory_bytes: u64,
}

/// The instance's cgroup.
#[derive(Debug)]
pub struct InstanceCgroup {
    dir: PathBuf,
    memory: bool,
    /// `sockets`, where ck creates its listening sockets (None: where that cannot be done,
    /// they are created in ck's own cgroup).
    sockets: Option<OwnedFd>,
}

/// The cgroup, under the instance's, whose children hold ck's listening sockets.
const SOCKETS: &str = "sockets";

/// The `sockets` cgroup of the instance cgroup `dir`.
pub fn sockets_dir(dir: &Path) -> PathBuf {
    dir.join(SOCKETS)
}

/// The name of the cgroup, under `sockets`, of the sockets of `group` (`tcp4-8080`) in `slot`.
pub fn slot_place(group: &str, slot: u32) -> String {
    format!("{group}-s{slot}")
}

impl InstanceCgroup {
    /// Creates `ck-<name>` under ck's own cgroup, removing a stale one (and killing what runs
    /// in it) left by an instance of the same name that did not stop cleanly. The caller holds
    /// the instance lock. With `want_memory`, enables the memory controller for the workers
    /// where the host has it.
    pub fn create(name: &str, want_memory: bool) -> Result<InstanceCgroup, CgroupError> {
        let mount = mount_point().ok_or(CgroupError::NotMounted)?;
        let parent = mount.join(own_cgroup().trim_start_matches('/'));
        let dir = parent.join(format!("ck-{name}"));
        if dir.exists() {
            tracing::warn!(dir = %dir.display(), "removing a stale worker cgroup left by an earlier instance");
            remove_tree(&dir);
        }
        fs::create_dir(&dir).map_err(io_err("creating the cgroup", &dir))?;
        let memory = want_memory && enable_memory(&parent, &dir);
        let sockets = sockets_cgroup(&dir);
        Ok(InstanceCgroup {
            dir,
            memory,
            sockets,
        })
    }

    /// The cgroup an earlier image of ck created (`ck upgrade`), taken over as it is (its
    /// `sockets` cgroup if it has one: an image before it created sockets in its own).
    pub fn resume(dir: PathBuf, memory: bool) -> InstanceCgroup {
        let sockets = fs::File::open(dir.join(SOCKETS)).ok().map(OwnedFd::from);
        InstanceCgroup {
            dir,
            memory,
            sockets,
        }
    }

    /// Whether ck's sockets are created in the instance's cgroup ([`InstanceCgroup::socket`]).
    pub fn holds_sockets(&self) -> bool {
        self.sockets.is_some()
    }

    /// A new socket (`socket(2)`'s arguments), created in the cgroup `place` (see
    /// [`slot_place`]) under the instance's `sockets` cgroup, made if need be, or in ck's own
    /// where the kernel cannot do that.
    pub fn socket(
        &self,
        place: &str,
        domain: socket2::Domain,
        kind: socket2::Type,
        protocol: Option<socket2::Protocol>,
    ) -> io::Result<socket2::Socket> {
        if self.sockets.is_none() {
            return socket2::Socket::new(domain, kind, protocol);
        }
        let dir = sockets_dir(&self.dir).join(place);
        let named = |e: io::Error| {
            let why = format!("the sockets' cgroup {}: {e}", dir.display());
            io::Error::new(e.kind(), why)
        };
        match fs::create_dir(&dir) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(named(e)),
            _ => {}
        }
        let cgroup = fs::File::open(&dir).map_err(named)?;
        let fd = crate::os::fork::socket_in(
            cgroup.as_fd(),
            domain.into(),
            kind.into(),
            protocol.map_or(0, Into::into),
        )?;
        Ok(socket2::Socket::from(fd))
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether workers' cgroups have the memory controller (`memory.max`, `memory.current`).
    pub fn memory_controller(&self) -> bool {
        self.memory
    }

    /// Creates the cgroup of worker `id`, with `memory.max` when given and available.
    pub fn worker(&self, id: u64, memory_max: Option<u64>) -> Result<WorkerCgroup, CgroupError> {
        let dir = self.dir.join(format!("w{id}"));
        fs::create_dir(&dir).map_err(io_err("creating the cgroup", &dir))?;
        if let (Some(max), true) = (memory_max, self.memory) {
            let file = dir.join("memory.max");
            fs::write(&file, max.to_string()).map_err(io_err("writing", &file))?;
        }
        let procs = CString::new(dir.join("cgroup.procs").as_os_str().as_bytes())
            .map_err(|e| io_err("naming", &dir)(io::Error::other(e)))?;
        Ok(WorkerCgroup {
            dir,
            procs,
            memory: self.memory,
        })
    }

    /// Kills whatever is left in it and removes it with every worker cgroup.
    pub fn remove(&self) {
        remove_tree(&self.dir);
    }
}

impl Drop for InstanceCgroup {
    /// Nothing is left behind, whatever path ck leaves by.
    fn drop(&mut self) {
        if self.dir.exists() {
            self.remove();
        }
    }
}

/// Opens (creating it if needed) the `sockets` cgroup under `dir`, once a socket was created
/// in it: None (with the reason logged) where that fails, e.g. a kernel without
/// `CLONE_INTO_CGROUP`.
fn sockets_cgroup(dir: &Path) -> Option<OwnedFd> {
    let sockets = dir.join(SOCKETS);
    let opened = (|| {
        match fs::create_dir(&sockets) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        let fd = OwnedFd::from(fs::File::open(&sockets)?);
        crate::os::fork::socket_in(fd.as_fd(), libc::AF_INET, libc::SOCK_STREAM, 0)?;
        Ok(fd)
    })();
    opened
        .inspect_err(|e| {
            tracing::info!(
                dir = %sockets.display(),
                "listening sockets are created in ck's own cgroup: {e}"
            )
        })
        .ok()
}

/// Turns on the memory controller for the children of `dir` (and so in `parent` for `dir`)
/// where the host's cgroup2 has it; false when it does not (v1 holds it, or `parent` has
/// processes of its own).
fn enable_memory(parent: &Path, dir: &Path) -> bool {
    let has = |d: &Path| {
        fs::read_to_string(d.join("cgroup.controllers"))
            .is_ok_and(|c| c.split_whitespace().any(|w| w == "memory"))
    };
    if !has(parent) {
        return false;
    }
    let _ = fs::write(parent.join("cgroup.subtree_control"), "+memory");
    has(dir) && fs::write(dir.join("cgroup.subtree_control"), "+memory").is_ok()
}

/// Kills every process under `dir` (`cgroup.kill` is recursive), waits a moment for them to
/// go, and removes the directories bottom-up.
fn remove_tree(dir: &Path) {
    let _ = fs::write(dir.join("cgroup.kill"), "1");
    wait_unpopulated(dir, Duration::from_secs(2));
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&entry.path());
            }
        }
    }
    let _ = fs::remove_dir(dir);
}

/// Whether no process is left in `dir` or below (`cgroup.events` `populated 0`).
fn unpopulated(dir: &Path) -> bool {
    fs::read_to_string(dir.join("cgroup.events"))
        .map_or(true, |e| e.lines().any(|l| l == "populated 0"))
}

fn wait_unpopulated(dir: &Path, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while !unpopulated(dir) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    true
}

/// A worker's cgroup.
#[derive(Debug)]
pub struct WorkerCgroup {
    dir: PathBuf,
    procs: CString,
    memory: bool,
}

impl WorkerCgroup {
    /// A worker's cgroup an earlier image of ck created (`ck upgrade`), taken over as it is.
    pub fn resume(dir: PathBuf, memory: bool) -> io::Result<WorkerCgroup> {
        let procs = CString::new(dir.join("cgroup.procs").as_os_str().as_bytes())
            .map_err(io::Error::other)?;
        Ok(WorkerCgroup { dir, procs, memory })
    }

    /// Whether it has the memory controller.
    pub fn memory_controller(&self) -> bool {
        self.memory
    }

    /// `.../cgroup.procs`, for the child to move itself in before it execs.
    pub fn procs_file(&self) -> &CString {
        &self.procs
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// SIGKILLs every process in it (the worker and all it forked).
    pub fn kill(&self) -> io::Result<()> {
        fs::write(self.dir.join("cgroup.kill"), "1")
    }

    /// The processes in it.
    pub fn pids(&self) -> Vec<u32> {
        pids_in(&self.dir)
    }

    /// Its cgroup2 id (the inode of its directory): the id sock_diag gives the sockets its
    /// processes create.
    pub fn id(&self) -> io::Result<u64> {
        use std::os::unix::fs::MetadataExt as _;
        Ok(fs::metadata(&self.dir)?.ino())
    }

    /// Its CPU time and memory now.
    pub fn usage(&self) -> Usage {
        let cpu_usec = fs::read_to_string(self.dir.join("cpu.stat"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("usage_usec ")?.trim().parse().ok())
            })
            .unwrap_or(0);
        let memory_bytes = if self.memory {
            fs::read_to_string(self.dir.join("memory.current"))
                .ok()
                .and_then(|m| m.trim().parse().ok())
                .unwrap_or(0)
        } else {
            self.pids().into_iter().map(resident_bytes).sum()
        };
        Usage {
            cpu_usec,
            memory_bytes,
        }
    }

    /// Kills what is left in it and removes it (waiting a moment for the processes to go).
    pub fn remove(&self) {
        remove_tree(&self.dir);
    }

    /// Removes it if no process is left in it (without waiting); true when it is gone.
    pub fn try_remove(&self) -> bool {
        unpopulated(&self.dir) && (fs::remove_dir(&self.dir).is_ok() || !self.dir.exists())
    }
}

/// The processes in the cgroup at `dir` (its `cgroup.procs`; none if it cannot be read).
pub fn pids_in(dir: &Path) -> Vec<u32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .map(|text| text.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// A process's resident memory (`/proc/PID/statm`, second field, in pages).
fn resident_bytes(pid: u32) -> u64 {
    // SAFETY: sysconf has no preconditions.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    fs::read_to_string(format!("/proc/{pid}/statm"))
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * page)
}

#[cfg(test)]
mod tests;
