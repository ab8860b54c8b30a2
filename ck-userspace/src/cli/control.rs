//! The commands that talk to a running instance over its control socket.
use std::{process::ExitCode, time::Duration};

use anyhow::bail;
use ck::{
    control::{Request, Response, client},
    settings::health::ProbeKind,
};

/// The status report of instance `name`.
pub fn status_of(name: &str) -> anyhow::Result<Box<ck::control::StatusReport>> {
    match client::request(name, &Request::Status)? {
        Response::Status(report) => Ok(report),
        Response::Error(msg) => bail!("{msg}"),
        Response::Ok(_) => bail!("unexpected answer to a status request"),
    }
}

/// `ck probe`: probes `slot` of instance `name` (or the only one) through its own socket.
pub fn probe_slot(
    name: Option<String>,
    slot: u32,
    kind: Option<ProbeKind>,
    timeout: Duration,
) -> anyhow::Result<ExitCode> {
    use anyhow::Context as _;
    let name = client::resolve_name(name)?;
    let report = status_of(&name)?;
    let Some(worker) = report.slots.iter().find(|s| s.slot == slot) else {
        let known: Vec<u32> = report.slots.iter().map(|s| s.slot).collect();
        bail!("no slot {slot}; slots in use: {known:?} (see `ck status`)");
    };
    if !report.bpf {
        bail!("probe steering needs BPF, which is off (--no-bpf): a probe could reach any worker");
    }
    let kind = match kind {
        Some(kind) => kind,
        None => report
            .probe
            .as_deref()
            .unwrap_or("http:/")
            .parse()
            .map_err(|e: String| anyhow::anyhow!(e))?,
    };
    let bound: std::net::SocketAddr = report.listen[0].parse().context("listen address")?;
    let to = ck::os::probe::target_of(bound);
    let from = ck::os::probe::source_of(to, report.probe_port_base, slot)
        .context("probe source port out of range")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let pid = worker.pid.map_or("-".to_string(), |p| p.to_string());
    match runtime.block_on(ck::os::probe::probe(to, from, &kind, timeout)) {
        Ok(answer) => {
            let status = answer
                .status
                .map_or("connected".into(), |s| format!("HTTP {s}"));
            println!(
                "slot {slot} (pid {pid}, {}): {kind} {status} {}",
                worker.state,
                answer.body.trim_end()
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(why) => bail!(
            "slot {slot} (pid {pid}, {}): {kind} failed: {why}",
            worker.state
        ),
    }
}

/// Sends `req` to instance `name` (or the only one) and prints its answer.
pub fn simple(name: Option<String>, req: Request) -> anyhow::Result<ExitCode> {
    let name = client::resolve_name(name)?;
    answer(client::request(&name, &req)?)
}

/// Prints an `Ok` answer; an error answer becomes the command's error.
pub fn answer(response: Response) -> anyhow::Result<ExitCode> {
    match response {
        Response::Ok(msg) => {
            println!("{msg}");
            Ok(ExitCode::SUCCESS)
        }
        Response::Error(msg) => bail!("{msg}"),
        Response::Status(_) => bail!("unexpected status answer"),
    }
}

/// `ck upgrade`: asks for the upgrade (refused at once if the new binary cannot take over),
/// then waits until the new image reports one more upgrade done and its steering checked.
pub fn upgrade(
    name: Option<String>,
    binary: Option<std::path::PathBuf>,
    timeout: Duration,
) -> anyhow::Result<ExitCode> {
    use anyhow::Context as _;
    let name = client::resolve_name(name)?;
    // ck's working directory is not this command's.
    let binary = binary
        .map(|b| std::path::absolute(&b).with_context(|| format!("resolving {}", b.display())))
        .transpose()?;
    let before = status_of(&name)?;
    let asked = std::time::Instant::now();
    match client::request(&name, &Request::Upgrade { binary })? {
        Response::Ok(msg) => println!("{msg}"),
        Response::Error(msg) => bail!("{msg}"),
        Response::Status(_) => bail!("unexpected status answer"),
    }
    loop {
        if let Ok(now) = status_of(&name) {
            if now.upgrades > before.upgrades && (now.bpf || now.no_bpf) {
                let workers = now.slots.iter().filter(|s| s.pid.is_some()).count();
                println!(
                    "upgraded: ck {} -> {} (pid {}), {workers} worker(s) kept, {} ms",
                    before.version,
                    now.version,
                    now.pid,
                    asked.elapsed().as_millis()
                );
                return Ok(ExitCode::SUCCESS);
            }
            if now.upgrades == before.upgrades
                && now.last_upgrade != before.last_upgrade
                && let Some(why) = now.last_upgrade.as_deref()
            {
                bail!("upgrade {why}");
            }
        }
        if asked.elapsed() > timeout {
            bail!(
                "ck did not report the upgrade done within {timeout:?}; see its log and `ck status`"
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// How often the waits of `ck status --wait` and `ck stop --wait` look again.
const POLL: Duration = Duration::from_millis(50);

/// Whether slot `s` is where a settled fleet has it: a ready worker, a hot spare standing by,
/// or a slot `ck drain` holds out (its worker up and ready for when it is put back).
fn settled(s: &ck::control::SlotReport) -> bool {
    match s.state.as_str() {
        "ready" => true,
        "standby" => s.spare,
        "draining" => s.drained,
        _ => false,
    }
}

/// What keeps `report`'s fleet from being ready, one item per slot (`slot 2 starting (pid
/// 812)`), plus the workers not started yet; empty when every slot is settled and the instance
/// runs its target worker count.
pub fn unready(report: &ck::control::StatusReport) -> Vec<String> {
    let slots = || report.slots.iter().filter(|s| s.member_of.is_none());
    let mut why: Vec<String> = slots()
        .filter(|s| !settled(s))
        .map(|s| {
            let pid = s
                .pid
                .map_or("no worker".to_string(), |p| format!("pid {p}"));
            let exit = s
                .last_exit
                .as_ref()
                .map_or(String::new(), |e| format!(", last exit: {e}"));
            format!("slot {} {} ({pid}{exit})", s.slot, s.state)
        })
        .collect();
    let running = slots().filter(|s| !s.spare && settled(s)).count() as u32;
    let coming = slots().filter(|s| !s.spare && !settled(s)).count() as u32;
    let missing = report.workers.saturating_sub(running + coming);
    if missing > 0 {
        why.push(format!(
            "{missing} of {} worker(s) not started yet",
            report.workers
        ));
    }
    why
}

/// `ck status --wait`: the status of instance `name` (or of the only one) once it answers and
/// every slot is ready, asking again every 50 ms (no instance may be running yet: its run
/// directory may not even exist); an error naming what is not ready after `timeout`.
pub fn wait_ready(
    name: Option<String>,
    timeout: Duration,
) -> anyhow::Result<Box<ck::control::StatusReport>> {
    let began = std::time::Instant::now();
    let mut last: anyhow::Result<Box<ck::control::StatusReport>> =
        Err(anyhow::anyhow!("no answer yet"));
    loop {
        let target = match &name {
            Some(name) => Some(name.clone()),
            None => match client::running_names().as_slice() {
                [] => None,
                [one] => Some(one.clone()),
                several => bail!(
                    "several ck instances are running ({}); choose one with --name",
                    several.join(", ")
                ),
            },
        };
        if let Some(target) = target {
            last = status_of(&target);
            if let Ok(report) = &last {
                if report.stopping {
                    bail!(
                        "ck instance {:?} is stopping: its slots will not become ready; start \
                         it again with `ck run`",
                        report.name
                    );
                }
                if unready(report).is_empty() {
                    return last;
                }
            }
        }
        if began.elapsed() >= timeout {
            bail!(not_ready(name.as_deref(), &last, timeout));
        }
        std::thread::sleep(POLL);
    }
}

/// The error of `ck status --wait` at its timeout: the slots not ready and their states, or
/// why no instance answered, and the fix.
fn not_ready(
    name: Option<&str>,
    last: &anyhow::Result<Box<ck::control::StatusReport>>,
    timeout: Duration,
) -> String {
    let dir = ck::os::instance::run_dir();
    match last {
        Ok(report) => format!(
            "ck instance {:?} is not ready after {timeout:?}: {}; look at the workers' output \
             in ck's log (its stderr) for why they do not start or do not listen, or wait \
             longer with --timeout",
            report.name,
            unready(report).join(", ")
        ),
        Err(e) if name.is_some() || !client::running_names().is_empty() => format!(
            "the ck instance did not answer within {timeout:?} (last try: {e:#}); is `ck run` \
             running, with the same --name and CK_RUN_DIR? Look at its log (its stderr), or \
             wait longer with --timeout"
        ),
        Err(_) => format!(
            "no ck instance started within {timeout:?} (no control socket in {}); is `ck run` \
             running, with the same CK_RUN_DIR? Look at its log (its stderr), or wait longer \
             with --timeout",
            dir.display()
        ),
    }
}

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

/// `ck stop [--now] [--wait [--timeout DUR]]`: asks instance `name` (or the only one) to stop;
/// with `wait`, returns once its ck process and every worker have exited and its control socket
/// is gone, or fails after `timeout` (default: the rest of its quiet wait, if one began, plus
/// its `--drain-timeout`, plus 10 s) naming what is still up.
pub fn stop(
    name: Option<String>,
    now: bool,
    wait: bool,
    timeout: Option<Duration>,
) -> anyhow::Result<ExitCode> {
    let request = if now { Request::StopNow } else { Request::Stop };
    if !wait {
        return simple(name, request);
    }
    let name = client::resolve_name(name)?;
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

#[cfg(test)]
mod tests {
    use super::unready;
    use serde_json::{Value, json};

    /// A slot: `(slot, state)`, with `extra` fields over the defaults.
    fn slot(index: u32, state: &str, extra: Value) -> Value {
        let mut s = json!({
            "slot": index, "pid": 100 + index, "state": state, "drained": false, "uptime_ms": 1,
            "restarts": 0, "generation": 1, "selected": 0, "fallbacks": 0, "migrated": 0,
            "breaker": "closed", "queue_depth": 0, "probe_hits": 0, "spare": false,
        });
        s.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        s
    }

    /// A report of `workers` target workers with `slots`.
    fn report(workers: u32, slots: Vec<Value>) -> ck::control::StatusReport {
        serde_json::from_value(json!({
            "name": "web", "pid": 7, "bpf": true, "steering": [], "policy": "round-robin",
            "groups": ["tcp4-8080"], "listen": ["0.0.0.0:8080"], "probe_port_base": 19800,
            "uptime_ms": 1, "active": [], "fallback": [], "degraded": [], "foreign": [],
            "min_workers": 1, "adopt": false, "dropped": 0, "stopping": false,
            "reloading": false, "migration": true, "workers": workers, "slots": slots,
        }))
        .expect("a valid report")
    }

    #[test]
    fn a_fleet_is_ready_when_every_slot_is_and_all_workers_run() {
        let none = json!({});
        let all = report(
            2,
            vec![slot(0, "ready", none.clone()), slot(1, "ready", none)],
        );
        assert!(unready(&all).is_empty());
        assert_eq!(
            unready(&report(2, vec![])),
            ["2 of 2 worker(s) not started yet"]
        );
    }

    #[test]
    fn starting_and_crashed_slots_are_named_with_their_state() {
        let r = report(
            3,
            vec![
                slot(0, "ready", json!({})),
                slot(1, "starting", json!({})),
                slot(2, "restarting", json!({"pid": null, "last_exit": "exit 1"})),
            ],
        );
        assert_eq!(
            unready(&r),
            [
                "slot 1 starting (pid 101)",
                "slot 2 restarting (no worker, last exit: exit 1)"
            ]
        );
    }

    #[test]
    fn drained_slots_and_standing_spares_count_as_settled_a_leaving_one_does_not() {
        let settled = report(
            2,
            vec![
                slot(0, "ready", json!({})),
                slot(1, "draining", json!({"drained": true})),
                slot(2, "standby", json!({"spare": true})),
            ],
        );
        assert!(unready(&settled).is_empty());
        let rolling = report(
            2,
            vec![
                slot(0, "ready", json!({})),
                slot(1, "draining", json!({})),
                slot(2, "ready", json!({})),
            ],
        );
        assert_eq!(unready(&rolling), ["slot 1 draining (pid 101)"]);
    }
}
