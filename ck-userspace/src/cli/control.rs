//! The commands that talk to a running instance over its control socket: one request and its
//! answer (`ck drain`, `ck reload`, ...), `ck probe` and `ck upgrade`. (`ck status --wait` and
//! `ck stop` are [`super::wait_ready`] and [`super::stop`].)
use std::{process::ExitCode, time::Duration};

use anyhow::bail;
use ck::{
    control::{
        Request, Response, client,
        instances::{self, Which},
    },
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

/// `ck probe`: probes `slot` of the instance `which` names through its own socket.
pub fn probe_slot(
    which: &Which,
    slot: u32,
    kind: Option<ProbeKind>,
    timeout: Duration,
) -> anyhow::Result<ExitCode> {
    use anyhow::Context as _;
    let name = instances::resolve(which)?;
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
    let from = ck::os::probe::source_of(to, report.probe_port_base, slot).context(
        "the probe's source port (--probe-port-base + slot) is above 65535: start the \
             instance with a lower --probe-port-base",
    )?;
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

/// Sends `req` to the instance `which` names and prints its answer.
pub fn simple(which: &Which, req: Request) -> anyhow::Result<ExitCode> {
    let name = instances::resolve(which)?;
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
    which: &Which,
    binary: Option<std::path::PathBuf>,
    timeout: Duration,
) -> anyhow::Result<ExitCode> {
    use anyhow::Context as _;
    let name = instances::resolve(which)?;
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
