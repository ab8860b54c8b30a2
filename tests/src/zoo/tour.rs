//! The tour every serving zoo server takes under ck ([`Tour::run`]): `ck run -w 2`, `ck status
//! --wait`, then under a load that never retries three rolls (`ck reload`), a scale up and down,
//! a drain and undrain, `ck upgrade`; then, under a load of its own, a SIGKILL of one worker;
//! what the loads and ck saw comes back ([`Seen`]) for the row's test to judge, and
//! [`stop_clean`] ends it with `ck stop --wait` and checks nothing is left. While it runs, ck's
//! resident memory and the time `ck status` takes can be watched ([`Tour::watch_ck`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::churn::{Background, SETTLE, print_report};
use crate::ck::{Ck, StartOptions, Status, ck_command, said};
use crate::load::{LoadReport, Mode};
use crate::sys::{self, kill_hard, pid_alive, poll_until};
use crate::{READY_TIMEOUT, instance_name, probe_base_for};

/// Rolls in a tour.
pub const ROLLS: usize = 3;
/// Workers a tour runs unless told ([`Tour::workers`]).
pub const WORKERS: usize = 2;

/// How one server takes the tour.
#[derive(Debug, Clone)]
pub struct Tour {
    /// The row's name, in the instance's name and the output.
    label: &'static str,
    /// The server's command line.
    app: Vec<String>,
    /// `ck run`'s options beside `--name`, `--port`, `--probe-port-base` and `-w`.
    args: Vec<String>,
    /// Workers (`-w`).
    workers: usize,
    /// Requests a second of the loads.
    rate: f64,
    /// Limit of one request of the loads.
    timeout: Duration,
    /// Limit of one control command (`ck reload` waits for the replacements to boot).
    ctl_timeout: Duration,
    /// Watch ck's memory and `ck status`'s time meanwhile.
    watch: bool,
}

/// What a tour saw.
#[derive(Debug)]
pub struct Seen {
    /// The load during the rolls, the scale up and down, the drain and undrain and the upgrade.
    pub ops: LoadReport,
    /// Each `ck reload`: whether it exited 0, how long it took, what it said.
    pub reloads: Vec<(bool, Duration, String)>,
    /// Connections the workers ck retired still held when they got their stop signal (from
    /// ck's `worker stopping` lines: `N connection(s) stay open`).
    pub held_at_stops: u64,
    /// The load during the SIGKILL.
    pub kill: LoadReport,
    /// What the killed worker held: its open connections just before, and those the program
    /// sent it until its death was seen.
    pub kill_held: u64,
    /// The status once the killed worker's replacement was ready.
    pub after: Status,
    /// Watched ([`Tour::watch_ck`]): the largest resident memory of ck, in KiB.
    pub ck_rss_kib: Option<u64>,
    /// Watched: the slowest and the median `ck status` (the command, start to exit).
    pub status_time: Option<(Duration, Duration)>,
}

impl Seen {
    /// Restarts of every slot, as ck counts them.
    pub fn restarts(&self) -> u64 {
        self.after.slots.iter().map(|s| u64::from(s.restarts)).sum()
    }
}

impl Tour {
    /// The tour of `app` (a command line), labelled `label`: 2 workers, 150 requests a second,
    /// each limited to 5 s.
    pub fn new(label: &'static str, app: Vec<String>) -> Tour {
        Tour {
            label,
            app,
            args: Vec::new(),
            workers: WORKERS,
            rate: 150.0,
            timeout: crate::load::DEFAULT_TIMEOUT,
            ctl_timeout: Duration::from_secs(60),
            watch: false,
        }
    }

    /// Adds `ck run` options.
    pub fn args(mut self, args: &[&str]) -> Tour {
        self.args.extend(args.iter().map(|a| a.to_string()));
        self
    }

    /// Runs `workers` workers.
    pub fn workers(mut self, workers: usize) -> Tour {
        self.workers = workers;
        self
    }

    /// Sends `rate` requests a second.
    pub fn rate(mut self, rate: f64) -> Tour {
        self.rate = rate;
        self
    }

    /// Limits each request to `timeout`.
    pub fn timeout(mut self, timeout: Duration) -> Tour {
        self.timeout = timeout;
        self
    }

    /// Gives each control command up to `limit`.
    pub fn ctl_timeout(mut self, limit: Duration) -> Tour {
        self.ctl_timeout = limit;
        self
    }

    /// Watches ck's resident memory and the time `ck status` takes during the tour.
    pub fn watch_ck(mut self) -> Tour {
        self.watch = true;
        self
    }

    /// Starts `ck run -w 2 ARGS -- APP` on a free port, without waiting.
    pub fn launch(&self) -> (Ck, u16) {
        let port = sys::free_port();
        let workers = self.workers.to_string();
        let base = probe_base_for(port).to_string();
        let mut args: Vec<&str> = vec!["--probe-port-base", &base, "-w", &workers];
        args.extend(self.args.iter().map(String::as_str));
        args.push("--");
        args.extend(self.app.iter().map(String::as_str));
        let ck = StartOptions::new()
            .port(port)
            .args(&args)
            .ctl_timeout(self.ctl_timeout)
            .start(&instance_name(&format!("zoo-{}", self.label), port))
            .expect("start ck");
        (ck, port)
    }

    /// Starts it and waits with `ck status --wait` (within `within`), which must exit 0.
    pub fn start(&self, within: Duration) -> (Ck, u16) {
        let (ck, port) = self.launch();
        let limit = format!("{}s", within.as_secs());
        let out = ck
            .ctl(&["status", "--wait", "--timeout", &limit])
            .expect("ck status --wait");
        assert!(
            out.status.success(),
            "{}: `ck status --wait` failed: {}\n--- ck log ---\n{}",
            self.label,
            said(&out),
            ck.log()
        );
        (ck, port)
    }

    /// Starts it ([`Tour::start`], within [`READY_TIMEOUT`]) and takes it through every
    /// operation; returns the instance, its port and what was seen.
    pub fn run(&self) -> (Ck, u16, Seen) {
        let (mut ck, port) = self.start(READY_TIMEOUT);
        let watcher = self.watch.then(|| Watcher::start(&ck));
        let stops_before = ck.log_lines("worker stopping").len();
        let (ops, reloads) = self.operations(&mut ck, port);
        let stops = ck.log_lines("worker stopping");
        let held_at_stops = stops[stops_before..].iter().map(|l| open_at_stop(l)).sum();
        let (kill, kill_held, after) = self.kill_one(&mut ck, port);
        let (ck_rss_kib, status_time) = match watcher.map(Watcher::finish) {
            Some((rss, time)) => (Some(rss), time),
            None => (None, None),
        };
        let seen = Seen {
            ops,
            reloads,
            held_at_stops,
            kill,
            kill_held,
            after,
            ck_rss_kib,
            status_time,
        };
        eprintln!(
            "{}: rolls {:?}, connections held at stop signals {}, killed worker held {}, \
             restarts {}, ck's largest RSS {:?} KiB, `ck status` slowest and median {:?}",
            self.label,
            seen.reloads
                .iter()
                .map(|(ok, took, _)| (*ok, *took))
                .collect::<Vec<_>>(),
            seen.held_at_stops,
            seen.kill_held,
            seen.restarts(),
            seen.ck_rss_kib,
            seen.status_time
        );
        (ck, port, seen)
    }

    /// A load that never retries on `127.0.0.1:port`, at the tour's rate and timeout.
    pub fn load(&self, port: u16) -> Background {
        let mut spec = Background::spec(port, Mode::NewConnection, false, self.rate);
        spec.timeout = self.timeout;
        // Stopped when its step is done; a minute's boot makes a roll longer than a minute.
        spec.duration = Some(Duration::from_secs(300));
        Background::start_spec(spec)
    }

    /// Under a load: [`ROLLS`] rolls, `ck scale 3` and back to 2, a drain and undrain of one
    /// slot, `ck upgrade`.
    fn operations(&self, ck: &mut Ck, port: u16) -> (LoadReport, Vec<(bool, Duration, String)>) {
        let load = self.load(port);
        std::thread::sleep(SETTLE);
        let mut reloads = Vec::new();
        for _ in 0..ROLLS {
            let began = Instant::now();
            let out = ck.ctl(&["reload"]).expect("ck reload");
            assert!(
                out.status.success(),
                "{}: roll {} failed: {}\n--- ck log ---\n{}",
                self.label,
                reloads.len() + 1,
                said(&out),
                ck.log()
            );
            reloads.push((out.status.success(), began.elapsed(), said(&out)));
            ck.wait_ready(self.workers, READY_TIMEOUT)
                .expect("ready after the roll");
            std::thread::sleep(SETTLE / 2);
        }
        let (n, more) = (self.workers, (self.workers + 1).to_string());
        ck.ctl_ok(&["scale", &more]).expect("ck scale up");
        ck.wait_ready(n + 1, READY_TIMEOUT).expect("one more ready");
        std::thread::sleep(SETTLE / 2);
        ck.ctl_ok(&["scale", &n.to_string()])
            .expect("ck scale down");
        ck.wait_status("scaled down", READY_TIMEOUT, |s| {
            s.slots.len() == n && s.ready_count() == n
        })
        .expect("scaled down");
        let slot = ck.status().expect("ck status").slots[0].slot;
        let text = slot.to_string();
        ck.ctl_ok(&["drain", &text]).expect("ck drain");
        ck.wait_status("the slot drained", READY_TIMEOUT, |s| {
            s.slot(slot).drained && !s.active.contains(&slot)
        })
        .expect("drained");
        std::thread::sleep(SETTLE / 2);
        ck.ctl_ok(&["undrain", &text]).expect("ck undrain");
        ck.wait_status("the slot back", READY_TIMEOUT, |s| s.active.contains(&slot))
            .expect("undrained");
        ck.ctl_ok(&["upgrade"]).expect("ck upgrade");
        ck.wait_status("upgraded and steering", READY_TIMEOUT, |s| {
            s.upgrades == 1 && s.bpf && s.ready_count() == self.workers
        })
        .expect("upgraded");
        std::thread::sleep(SETTLE);
        let report = load.finish();
        print_report(&format!("{} operations", self.label), &report);
        (report, reloads)
    }

    /// Under a load of its own, SIGKILLs one ready worker (its process group) and waits for its
    /// replacement: the load's report, what the worker held, the status after.
    fn kill_one(&self, ck: &mut Ck, port: u16) -> (LoadReport, u64, Status) {
        let load = self.load(port);
        std::thread::sleep(SETTLE);
        let before = ck.status().expect("ck status");
        let victim = before.ready().next().expect("a ready worker").slot;
        let pid = before.worker_pid(victim);
        let held = before.connections()[&victim];
        kill_hard(pid);
        assert!(
            poll_until(Duration::from_secs(5), Duration::from_millis(5), || {
                !pid_alive(pid)
            }),
            "{}: worker {pid} survived SIGKILL",
            self.label
        );
        let seen = ck
            .wait_status("the kill seen", READY_TIMEOUT, |s| {
                s.slot(victim).pid != Some(pid)
            })
            .expect("the kill seen");
        let sent = seen.slot(victim).selected - before.slot(victim).selected;
        let after = ck
            .wait_status("the killed worker replaced", READY_TIMEOUT, |s| {
                s.ready_count() == self.workers && s.slot(victim).pid.is_some_and(|p| p != pid)
            })
            .expect("replaced");
        std::thread::sleep(SETTLE);
        let report = load.finish();
        print_report(&format!("{} kill", self.label), &report);
        (report, held + sent, after)
    }
}

/// `N` of a `worker stopping` line whose reason is `N connection(s) stay open`, else 0.
fn open_at_stop(line: &str) -> u64 {
    line.split_once(" connection(s) stay open")
        .and_then(|(before, _)| before.rsplit(['=', '"', ' ']).next()?.parse().ok())
        .unwrap_or(0)
}

/// Watches ck on a thread: its resident memory and the time `ck status` takes, 10 times a
/// second.
struct Watcher {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<(u64, Vec<Duration>)>,
}

impl Watcher {
    fn start(ck: &Ck) -> Watcher {
        let (pid, name) = (ck.pid(), ck.name().to_string());
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let (mut rss, mut times) = (0, Vec::new());
            while !stopped.load(Ordering::Relaxed) {
                rss = rss.max(sys::rss_kib(pid).unwrap_or(0));
                let began = Instant::now();
                let out = ck_command()
                    .args(["status", "--name", &name, "--json"])
                    .output();
                if out.is_ok_and(|o| o.status.success()) {
                    times.push(began.elapsed());
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            (rss, times)
        });
        Watcher { stop, thread }
    }

    /// Ends the watch: the largest RSS in KiB, the slowest and the median status time.
    fn finish(self) -> (u64, Option<(Duration, Duration)>) {
        self.stop.store(true, Ordering::Relaxed);
        let (rss, mut times) = self.thread.join().expect("the watcher panicked");
        times.sort();
        let time = times
            .last()
            .map(|slowest| (*slowest, times[times.len() / 2]));
        (rss, time)
    }
}

/// `ck stop --wait`: ck exits 0 and nothing of the instance is left: no process, cgroup, pin,
/// control socket, lock file or socket on the port.
pub fn stop_clean(ck: Ck, port: u16, label: &str) {
    crate::server_checks::stops_clean_with(ck, port, label, &["stop", "--wait"], 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connections_left_open_are_read_from_the_stop_line() {
        let line = "2026-01-01T00:00:00Z INFO worker stopping slot=2 pid=9 reason=3 \
                    connection(s) stay open (keep-alive, streams): the stop signal is their cue \
                    to close signal=SIGTERM";
        assert_eq!(open_at_stop(line), 3);
        let quoted = r#"INFO worker stopping slot=2 reason="12 connection(s) stay open (x)""#;
        assert_eq!(open_at_stop(quoted), 12);
        assert_eq!(
            open_at_stop("INFO worker stopping reason=its connections are done"),
            0
        );
    }
}
