//! A worker killed with SIGKILL fails only the requests on connections it had accepted: the
//! worker's cgroup is frozen (cgroup v2 `cgroup.freeze`), the kernel says which connections
//! its processes hold and how many wait in its listener's accept queue (`sock_diag`), then the
//! whole cgroup is killed. The load client records the client port of every failed request:
//! each must be one of those accepted connections, so every connection queued at the freeze
//! (they move to live workers) and every one sent after it was served.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ck::os::sock_diag;

use crate::churn::Background;
use crate::ck::Ck;
use crate::load::LoadReport;
use crate::sys::{cgroup_of, pid_alive, poll_until};

/// How long a frozen worker's listener gets to queue connections of the load before its
/// connections are read (the read waits for the first one, at most this long).
const QUEUE_WAIT: Duration = Duration::from_secs(1);

/// What a worker held when it was frozen, just before its SIGKILL.
#[derive(Clone, Debug)]
pub struct Frozen {
    /// The slot.
    pub slot: u32,
    /// The worker's pid.
    pub pid: u32,
    /// The client ports of the connections its processes had accepted.
    pub accepted: BTreeSet<u16>,
    /// The connections waiting in its listener's accept queue.
    pub queued: u32,
    /// When it was frozen, on the load's clock.
    pub at: Duration,
}

/// Writes `value` to the cgroup file `name` of `cgroup`.
fn write(cgroup: &Path, name: &str, value: &str) {
    std::fs::write(cgroup.join(name), value)
        .unwrap_or_else(|e| panic!("writing {value} to {}/{name}: {e}", cgroup.display()));
}

/// Whether `cgroup`'s `cgroup.events` says it is frozen.
fn frozen(cgroup: &Path) -> bool {
    std::fs::read_to_string(cgroup.join("cgroup.events"))
        .is_ok_and(|events| events.lines().any(|l| l == "frozen 1"))
}

/// The processes of `cgroup` and of the cgroups under it.
fn processes(cgroup: &Path) -> Vec<u32> {
    let mut pids: Vec<u32> = std::fs::read_to_string(cgroup.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.parse().ok())
        .collect();
    for entry in std::fs::read_dir(cgroup).into_iter().flatten().flatten() {
        if entry.path().is_dir() {
            pids.extend(processes(&entry.path()));
        }
    }
    pids
}

/// The cgroup of worker `pid`: its own, under the instance's.
fn worker_cgroup(ck: &Ck, pid: u32) -> PathBuf {
    let cgroup = cgroup_of(&pid.to_string()).expect("cgroup2 is mounted");
    let instance = format!("ck-{}", ck.name());
    assert!(
        cgroup
            .parent()
            .is_some_and(|p| p.file_name().is_some_and(|n| n == instance.as_str())),
        "worker {pid} is not in a cgroup of its own under {instance}: {}",
        cgroup.display()
    );
    cgroup
}

/// Freezes the cgroup of slot `slot`'s worker (serving on `port` under `load`), waits until
/// its listener queues a connection of the load (at most [`QUEUE_WAIT`]), reads what it holds
/// from the kernel, then kills the whole cgroup (`cgroup.kill`, SIGKILL to every process) and
/// thaws it once the worker is gone.
pub fn freeze_and_kill(ck: &Ck, port: u16, slot: u32, load: &Background) -> Frozen {
    let pid = ck.status().expect("ck status").worker_pid(slot);
    let cgroup = worker_cgroup(ck, pid);
    write(&cgroup, "cgroup.freeze", "1");
    let at = load.now();
    assert!(
        poll_until(Duration::from_secs(5), Duration::from_millis(1), || {
            frozen(&cgroup)
        }),
        "the cgroup of worker {pid} did not freeze: {}",
        cgroup.display()
    );
    let inodes: BTreeSet<u64> = processes(&cgroup)
        .into_iter()
        .flat_map(sock_diag::socket_inodes)
        .collect();
    // Its listener on the port, in either family (Go's `:PORT` listens on `[::]`).
    let listener = || {
        [false, true]
            .into_iter()
            .flat_map(|ipv6| sock_diag::listeners(port, ipv6).expect("sock_diag: listeners"))
            .find(|l| inodes.contains(&l.inode))
    };
    assert!(
        listener().is_some(),
        "worker {pid} holds no listener on port {port}"
    );
    poll_until(QUEUE_WAIT, Duration::from_millis(5), || {
        listener().is_some_and(|l| l.queued > 0)
    });
    let queued = listener().map_or(0, |l| l.queued);
    let accepted = sock_diag::established(&[port])
        .expect("sock_diag: connections")
        .into_iter()
        .filter(|c| inodes.contains(&c.inode))
        .map(|c| c.peer.port())
        .collect();
    write(&cgroup, "cgroup.kill", "1");
    assert!(
        poll_until(Duration::from_secs(5), Duration::from_millis(5), || {
            !pid_alive(pid)
        }),
        "worker {pid} survived SIGKILL"
    );
    // ck removes the empty cgroup; until then, it is thawed like any other.
    let _ = std::fs::write(cgroup.join("cgroup.freeze"), "0");
    Frozen {
        slot,
        pid,
        accepted,
        queued,
        at,
    }
}

/// The failed requests of `report` that a kill described by `frozen` does not allow: any
/// before the freeze, and any on a connection the worker had not accepted (refused ones have
/// none). Each as `(time on the load's clock, client port)`.
pub fn unexplained_failures(report: &LoadReport, frozen: &Frozen) -> Vec<(Duration, Option<u16>)> {
    report
        .failed_on
        .iter()
        .filter(|(at, port)| *at < frozen.at || !port.is_some_and(|p| frozen.accepted.contains(&p)))
        .copied()
        .collect()
}

/// Asserts that the load's failures are only requests on connections the killed worker had
/// accepted at the freeze: at most as many as it held, none refused or timed out; every
/// connection queued on its listener or sent after the freeze was served.
pub fn assert_only_accepted_failed(label: &str, report: &LoadReport, frozen: &Frozen) {
    let unexplained = unexplained_failures(report, frozen);
    assert_eq!(
        report.failed_on.len() as u64,
        report.failed(),
        "{label}: the load lost track of failures"
    );
    assert!(
        unexplained.is_empty(),
        "{label}: {} request(s) failed that the killed worker (slot {}, pid {}) had not \
         accepted when frozen ({} accepted, {} queued): {unexplained:?}\n{}",
        unexplained.len(),
        frozen.slot,
        frozen.pid,
        frozen.accepted.len(),
        frozen.queued,
        report.summary()
    );
    assert!(report.failed() <= frozen.accepted.len() as u64);
    eprintln!(
        "{label}: the killed worker had accepted {} connection(s) and had {} queued when \
         frozen; {} request(s) failed, each on one it had accepted",
        frozen.accepted.len(),
        frozen.queued,
        report.failed()
    );
}
