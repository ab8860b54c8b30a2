//! System helpers for the tests: free ports, process liveness (zombies count as dead), finding
//! the processes of one ck instance, CPU pinning, temporary directories and bounded polling.

use std::collections::BTreeSet;
use std::fs;
use std::io::Read;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// A TCP port that was free a moment ago (binding `0.0.0.0:port` succeeded and was dropped).
///
/// It is picked below the kernel's ephemeral range when there is room there: a port handed out
/// by `bind(0)` comes from the same pool as the source ports of outgoing connections, so a
/// parallel test's client could take it as its source port before ck binds it (or right after
/// ck releases it, while a test checks that the port is free again).
///
/// Tests run in processes of their own, several at once (nextest): each running test has a
/// slot number of its own (`NEXTEST_TEST_GLOBAL_SLOT`), and a port is only picked from the
/// slot's share of the range, the ports whose last two digits are the slot modulo
/// [`PORT_SHARES`]: two tests running at once never pick the same port, nor ports of the same
/// last two digits, which decide the probe port base ([`crate::probe_base_for`]).
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ephemeral_low = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32768);
    const LOW: u32 = 20_000;
    if ephemeral_low > LOW + 1000 {
        let span = ephemeral_low - LOW;
        // Start somewhere that differs between runs, then walk with a stride that is coprime
        // with most spans so that parallel tests of one process never pick the same port.
        static SEED: OnceLock<u32> = OnceLock::new();
        let seed = *SEED.get_or_init(|| {
            std::process::id().wrapping_mul(7919)
                ^ std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.subsec_nanos())
                    .unwrap_or(0)
        });
        let share = test_slot() % PORT_SHARES;
        for _ in 0..span {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let port = LOW + seed.wrapping_add(n.wrapping_mul(101)) % span;
            let port = u16::try_from(port).expect("below the ephemeral range");
            if u32::from(port % 100) % PORT_SHARES != share {
                continue;
            }
            if port_bindable(port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return port;
            }
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("binding 127.0.0.1:0 to find a free port")
        .port()
}

/// Into how many shares [`free_port`] splits its range: as many tests can run at once without
/// ever picking the same port (more than the CPUs of the machines the suite runs on).
pub const PORT_SHARES: u32 = 4;

/// This test's slot among the tests running at once (`NEXTEST_TEST_GLOBAL_SLOT`; 0 outside
/// nextest, where the tests of one process share [`free_port`]'s counter instead).
fn test_slot() -> u32 {
    std::env::var("NEXTEST_TEST_GLOBAL_SLOT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Whether `0.0.0.0:port` can be bound right now by a plain listener (no `SO_REUSEPORT`).
pub fn port_bindable(port: u16) -> bool {
    TcpListener::bind(("0.0.0.0", port)).is_ok()
}

/// Whether `pid` names a live process. A zombie (state `Z`/`X`) is dead: it runs no code and
/// holds no socket, it only waits for its parent (or init) to reap it.
pub fn pid_alive(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    if kill(Pid::from_raw(raw), None).is_err() {
        return false;
    }
    match proc_stat(pid) {
        Some(stat) => !matches!(stat.state, 'Z' | 'X'),
        // Gone between the two looks.
        None => false,
    }
}

/// The few fields of `/proc/<pid>/stat` the tests need.
#[derive(Debug, Clone, Copy)]
pub struct ProcStat {
    /// Process state letter (`R`, `S`, `T`, `Z`, ...).
    pub state: char,
    /// Parent pid.
    pub ppid: u32,
    /// Process group id.
    pub pgid: u32,
}

/// Reads `/proc/<pid>/stat`; `None` when the process is gone.
pub fn proc_stat(pid: u32) -> Option<ProcStat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces: parse after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgid = fields.next()?.parse().ok()?;
    Some(ProcStat { state, ppid, pgid })
}

/// Every pid currently listed in `/proc`.
fn all_pids() -> Vec<u32> {
    fs::read_dir("/proc")
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Live processes whose parent is `ppid`.
pub fn children_of(ppid: u32) -> Vec<u32> {
    all_pids()
        .into_iter()
        .filter(|pid| {
            proc_stat(*pid).is_some_and(|s| s.ppid == ppid && !matches!(s.state, 'Z' | 'X'))
        })
        .collect()
}

/// Live processes started by ck instance `name`: their environment holds the
/// `NOTIFY_SOCKET=@ck/<name>/...` that ck gives each worker. Still true after ck itself died.
pub fn instance_processes(name: &str) -> Vec<u32> {
    let needle = format!("NOTIFY_SOCKET=@ck/{name}/");
    all_pids()
        .into_iter()
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                env.split(|b| *b == 0)
                    .any(|var| var.starts_with(needle.as_bytes()))
            })
        })
        .filter(|pid| pid_alive(*pid))
        .collect()
}

/// The resident memory of process `pid` in KiB (`VmRSS` of `/proc/PID/status`), while it lives.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// SIGKILLs `pid` and, when it leads its own process group (ck starts every worker in its own
/// group), that whole group. Errors (already gone) are ignored.
pub fn kill_hard(pid: u32) {
    let Ok(raw) = i32::try_from(pid) else { return };
    if proc_stat(pid).is_some_and(|s| s.pgid == pid) {
        let _ = kill(Pid::from_raw(-raw), Signal::SIGKILL);
    }
    let _ = kill(Pid::from_raw(raw), Signal::SIGKILL);
}

/// Sends `signal` to `pid`, panicking when that fails.
pub fn signal(pid: u32, signal: Signal) {
    let raw = i32::try_from(pid).expect("pid fits in i32");
    kill(Pid::from_raw(raw), signal).unwrap_or_else(|e| panic!("kill({pid}, {signal}): {e}"));
}

/// Polls `check` every `interval` until it returns `true` (then `true`) or `timeout` passes
/// (then `false`). `check` runs at least once.
pub fn poll_until(timeout: Duration, interval: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(interval);
    }
}

/// Waits until every pid in `pids` is dead; returns those still alive after `timeout`.
pub fn wait_all_dead(pids: &BTreeSet<u32>, timeout: Duration) -> Vec<u32> {
    let mut alive: Vec<u32> = Vec::new();
    poll_until(timeout, Duration::from_millis(20), || {
        alive = pids.iter().copied().filter(|p| pid_alive(*p)).collect();
        alive.is_empty()
    });
    alive
}

/// The CPUs this thread may run on, in order.
pub fn allowed_cpus() -> Vec<usize> {
    let set = sched_getaffinity(Pid::from_raw(0)).expect("sched_getaffinity");
    (0..CpuSet::count())
        .filter(|cpu| set.is_set(*cpu).unwrap_or(false))
        .collect()
}

/// The first CPU this thread may run on.
pub fn first_allowed_cpu() -> usize {
    *allowed_cpus()
        .first()
        .expect("this thread may run on some CPU")
}

/// Runs `work` on a new thread pinned to one CPU and returns its result. ck's round-robin
/// cursor is per CPU, and a loopback SYN is processed on the CPU of the thread that sends it, so
/// connections opened from one pinned thread walk one cursor: the spread is exact.
pub fn on_one_cpu<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    on_cpu(first_allowed_cpu(), work)
}

/// Runs `work` on a new thread pinned to `cpu` and returns its result (a loopback connection
/// opened there is also established there: the kernel's per-CPU counts of it are that CPU's).
pub fn on_cpu<T: Send + 'static>(cpu: usize, work: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        let mut set = CpuSet::new();
        set.set(cpu).expect("CPU index in range");
        sched_setaffinity(Pid::from_raw(0), &set).expect("pinning the client thread to one CPU");
        work()
    })
    .join()
    .expect("the pinned client thread panicked")
}

/// Runs `cmd` (stdout and stderr captured) and waits at most `timeout` for it; on timeout the
/// process is killed and `None` returned.
///
/// # Panics
/// When `cmd` cannot be started.
pub fn output_within(cmd: &mut Command, timeout: Duration) -> Option<Output> {
    try_output_within(cmd, timeout).unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"))
}

/// [`output_within`], with the error when `cmd` cannot be started (for callers that report
/// errors rather than panic, such as the benchmarks).
pub fn try_output_within(cmd: &mut Command, timeout: Duration) -> std::io::Result<Option<Output>> {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    Ok(wait_output(child, timeout))
}

/// Waits at most `timeout` for `child` and collects its output (its pipes are read on
/// threads so a chatty child cannot block); kills it and returns `None` on timeout.
pub fn wait_output(mut child: Child, timeout: Duration) -> Option<Output> {
    let out = read_on_thread(child.stdout.take());
    let err = read_on_thread(child.stderr.take());
    let mut status = None;
    // A fine interval: `ck status` answers in a few milliseconds, and the benchmarks time
    // their polls of it.
    poll_until(timeout, Duration::from_micros(500), || {
        status = child.try_wait().ok().flatten();
        status.is_some()
    });
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        return None;
    };
    Some(Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    })
}

/// Reads `pipe` to its end on a new thread.
fn read_on_thread<R: Read + Send + 'static>(pipe: Option<R>) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut buf);
        }
        buf
    })
}

/// A directory under the system temp dir, removed (with its contents) on drop.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates a fresh directory whose name starts with `prefix`.
    ///
    /// # Panics
    /// When it cannot be created.
    pub fn new(prefix: &str) -> TempDir {
        TempDir::try_new(prefix).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`TempDir::new`], or the error (naming the directory) when it cannot be created.
    pub fn try_new(prefix: &str) -> std::io::Result<TempDir> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("ck-tests-{prefix}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).map_err(|e| {
            std::io::Error::new(e.kind(), format!("creating {}: {e}", path.display()))
        })?;
        Ok(TempDir { path })
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `contents` to `file` inside the directory, with mode 0755 when `executable`
    /// (else 0644), and returns the file's path.
    pub fn write(&self, file: &str, contents: &str, executable: bool) -> PathBuf {
        let path = self.path.join(file);
        fs::write(&path, contents).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        let mode = if executable { 0o755 } else { 0o644 };
        fs::set_permissions(&path, fs::Permissions::from_mode(mode))
            .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// The cgroup directory `ck run --name NAME` started from this process creates for its workers
/// (`<cgroup2 mount><our cgroup>/ck-NAME`), if cgroup2 is mounted.
pub fn cgroup_dir(name: &str) -> Option<std::path::PathBuf> {
    Some(cgroup_of("self")?.join(format!("ck-{name}")))
}

/// The cgroup2 directory of process `pid` (a number, or `self`), if cgroup2 is mounted.
pub fn cgroup_of(pid: &str) -> Option<std::path::PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = info.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        (after.split_whitespace().next()? == "cgroup2").then(|| before.split_whitespace().nth(4))?
    })?;
    let own = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let own = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))?
        .trim_start_matches('/')
        .to_string();
    Some(std::path::Path::new(mount).join(own))
}

/// Kills everything in cgroup `dir` and removes it and its children (test clean-up).
pub fn remove_cgroup(dir: &std::path::Path) {
    let _ = std::fs::write(dir.join("cgroup.kill"), "1");
    poll_until(Duration::from_secs(2), Duration::from_millis(5), || {
        std::fs::read_to_string(dir.join("cgroup.events"))
            .map_or(true, |e| e.contains("populated 0"))
    });
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten().filter(|e| e.path().is_dir()) {
            remove_cgroup(&entry.path());
        }
    }
    let _ = std::fs::remove_dir(dir);
}
