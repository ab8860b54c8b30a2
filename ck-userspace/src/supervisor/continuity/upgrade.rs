//! `ck upgrade` and SIGUSR2: ck re-executes itself in place (same pid), from the binary it was
//! started from or `--binary PATH`. First the candidate is asked `upgrade-check` (it must run
//! and share the handover format and map layout); then, from the event loop on the main thread
//! (the thread that forked every worker, so no worker's `PR_SET_PDEATHSIG` fires), the state
//! is handed over ([`super::handover`]) and `execve` replaces the image. If the exec fails the
//! old image carries on as if nothing happened; the new one resumes in [`super::resume`].
use std::{
    os::fd::{AsRawFd as _, BorrowedFd},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use tokio::sync::{mpsc, oneshot};

use crate::supervisor::{
    continuity::handover::{Compat, FORMAT, prepare},
    continuity::{Continuity, Parts},
    event::Event,
};
use crate::{control::Response, os::reexec};

/// How long a candidate binary has to answer `upgrade-check`.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// An upgrade under way.
pub(in crate::supervisor) struct Upgrade {
    /// The binary to exec.
    binary: PathBuf,
    /// The control client that asked (SIGUSR2 has none).
    reply: Option<oneshot::Sender<Response>>,
    /// When it was asked.
    asked: Instant,
    /// The binary passed the check: exec as soon as the loop is at a clean point.
    pub(super) checked: Option<Compat>,
}

/// The path ck was started from (`/proc/self/exe`), without the ` (deleted)` the kernel adds
/// once that file was replaced: the default binary of `ck upgrade` is the file now there.
pub(in crate::supervisor) fn own_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe"));
    match exe.to_str().and_then(|s| s.strip_suffix(" (deleted)")) {
        Some(path) => PathBuf::from(path),
        None => exe,
    }
}

/// Runs `binary upgrade-check` and reads its [`Compat`], or says what is wrong and what to do.
async fn check(binary: PathBuf) -> Result<Compat, String> {
    let shown = binary.display().to_string();
    let fix = "pass --binary with the path of a ck binary built from this project";
    let child = tokio::process::Command::new(&binary)
        .arg("upgrade-check")
        .arg("--")
        .args(std::env::args_os().skip(1))
        .env_remove(reexec::HANDOVER_ENV)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!("{shown} does not exist; {fix}"),
            std::io::ErrorKind::PermissionDenied => format!(
                "{shown} cannot be executed (permission denied): make it executable \
                 (chmod +x) or {fix}"
            ),
            _ => format!("{shown} cannot be started ({e}); {fix}"),
        })?;
    let out = tokio::time::timeout(CHECK_TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| {
            format!("{shown} did not answer `upgrade-check` within {CHECK_TIMEOUT:?}; {fix}")
        })?
        .map_err(|e| format!("running {shown} upgrade-check failed: {e}"))?;
    let said = String::from_utf8_lossy(&out.stderr);
    let said = said.lines().next().unwrap_or("").trim();
    if !out.status.success() {
        return Err(format!(
            "{shown} upgrade-check failed ({}{}): it cannot take over this instance (not ck, or \
             a ck that does not accept its command line); {fix}",
            crate::supervisor::inputs::exits::describe_exit(&Ok(out.status)),
            if said.is_empty() {
                String::new()
            } else {
                format!(": {said}")
            }
        ));
    }
    let compat: Compat = serde_json::from_slice(&out.stdout).map_err(|_| {
        format!(
            "{shown} did not answer `upgrade-check` with its handover format (a ck older than \
             `ck upgrade`, or not ck); {fix}"
        )
    })?;
    if let Some(why) = Compat::this().refuses(&compat) {
        return Err(format!(
            "{shown} (ck {}) cannot take over this instance: {why}; stop it and start it \
             again with the new binary instead (`ck stop`, then `ck run`)",
            compat.ck
        ));
    }
    Ok(compat)
}

/// Why an upgrade cannot start now, if it cannot.
pub(in crate::supervisor) fn refused(view: Parts<'_>) -> Option<String> {
    if view.stopping || view.ops.quiet.waiting() {
        return Some("ck is stopping".into());
    }
    if view.ops.core.roll.is_some() {
        return Some(
            "a rolling restart is in progress; run `ck upgrade` again once it is done \
             (`ck status` shows reloading: false)"
                .into(),
        );
    }
    if !view.cfg.no_bpf && !view.groups.bpf_loaded() {
        return Some(
            "BPF steering is still being set up (ck started a moment ago); try again".into(),
        );
    }
    None
}

impl Continuity {
    /// `ck upgrade` (with the client's `reply`) or SIGUSR2 (without): checks `binary` (ck's
    /// own by default) on a task; [`Continuity::upgrade_checked`] goes on. `refused`: why the
    /// fleet cannot be upgraded now ([`refused`]).
    pub(in crate::supervisor) fn upgrade(
        &mut self,
        refused: Option<String>,
        binary: Option<PathBuf>,
        reply: Option<oneshot::Sender<Response>>,
        events: &mpsc::UnboundedSender<Event>,
    ) {
        let refused = match (&self.upgrade, refused) {
            (Some(_), _) => Some("an upgrade is already under way".to_string()),
            (None, why) => why,
        };
        if let Some(why) = refused {
            tracing::warn!(reason = %why, "upgrade refused");
            self.last_upgrade = Some(format!("refused: {why}"));
            if let Some(reply) = reply {
                let _ = reply.send(Response::Error(format!("upgrade refused: {why}")));
            }
            return;
        }
        let binary = binary.unwrap_or_else(|| self.exe.clone());
        tracing::info!(binary = %binary.display(), "upgrade: checking the new binary");
        let events = events.clone();
        let candidate = binary.clone();
        tokio::spawn(async move {
            let result = check(candidate).await;
            let _ = events.send(Event::UpgradeChecked(result));
        });
        self.upgrade = Some(Upgrade {
            binary,
            reply,
            asked: Instant::now(),
            checked: None,
        });
    }

    /// The candidate answered: refuse (the old image carries on) or get ready to exec.
    /// `refused`: why the fleet cannot be upgraded now ([`refused`]).
    pub(in crate::supervisor) fn upgrade_checked(
        &mut self,
        refused: Option<String>,
        result: Result<Compat, String>,
    ) {
        let Some(mut upgrade) = self.upgrade.take() else {
            return;
        };
        let result = result.and_then(|compat| match refused {
            Some(why) => Err(why),
            None => Ok(compat),
        });
        match result {
            Err(why) => {
                tracing::error!(binary = %upgrade.binary.display(), reason = %why, "upgrade refused; ck carries on");
                self.last_upgrade = Some(format!("failed: {why}"));
                if let Some(reply) = upgrade.reply.take() {
                    let _ = reply.send(Response::Error(format!("upgrade failed: {why}")));
                }
            }
            Ok(compat) => {
                tracing::info!(
                    binary = %upgrade.binary.display(),
                    version = %compat.ck,
                    check_ms = upgrade.asked.elapsed().as_millis() as u64,
                    "upgrade: new binary checked; re-executing in place"
                );
                if let Some(reply) = upgrade.reply.take() {
                    let _ = reply.send(Response::Ok(format!(
                        "{} (ck {}) checked; ck (pid {}) is re-executing itself in place",
                        upgrade.binary.display(),
                        compat.ck,
                        std::process::id()
                    )));
                }
                upgrade.checked = Some(compat);
                self.upgrade = Some(upgrade);
            }
        }
    }
}

/// Hands the state over and execs the checked binary of `upgrade`. Returns only if ck could
/// not re-execute (the old image carries on, every descriptor closed on exec again), with why.
/// `started`: when the instance started.
pub(in crate::supervisor) fn reexec(
    upgrade: &Upgrade,
    view: Parts<'_>,
    started: Instant,
    lock: BorrowedFd<'_>,
    control: BorrowedFd<'_>,
    metrics: Option<BorrowedFd<'_>>,
) -> String {
    // The workers' output: what is read is written; what is not stays in the pipes.
    let paused = view
        .table
        .output
        .as_ref()
        .map(|o| o.pause(Duration::from_millis(200)));
    let error = match refused(view) {
        Some(why) => why,
        None => match exec_image(view, started, &upgrade.binary, lock, control, metrics) {
            Ok(never) => match never {},
            Err(e) => format!(
                "re-executing {} failed: {e:#}; ck carries on",
                upgrade.binary.display()
            ),
        },
    };
    drop(paused);
    error
}

fn exec_image(
    view: Parts<'_>,
    started: Instant,
    binary: &Path,
    lock: BorrowedFd<'_>,
    control: BorrowedFd<'_>,
    metrics: Option<BorrowedFd<'_>>,
) -> anyhow::Result<std::convert::Infallible> {
    use anyhow::Context as _;
    let mut prepared = prepare(view, started, Some(lock), Some(control), metrics);
    prepared.handover.upgrades += 1;
    let state = serde_json::to_vec(&prepared.handover).context("serializing the state")?;
    let memfd = reexec::state_memfd(&state).context("writing the state to a memfd")?;
    let keep = |keep: bool| {
        prepared
            .fds
            .iter()
            .try_for_each(|fd| reexec::keep_across_exec(*fd, keep))
    };
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    let workers = prepared
        .handover
        .slots
        .iter()
        .filter(|s| s.worker.is_some())
        .count();
    tracing::info!(
        binary = %binary.display(),
        workers,
        fds = prepared.fds.len(),
        state_bytes = state.len(),
        format = FORMAT,
        "upgrade: handing over and re-executing"
    );
    // What is logged so far reaches stderr before the exec.
    crate::supervisor::output::sink::flush(Duration::from_millis(200));
    let result = keep(true)
        .and_then(|()| reexec::block_handled())
        .map(|()| reexec::exec(binary, &args, memfd.as_raw_fd()));
    // Still here: nothing was replaced. Close on exec again what the workers must not get.
    let _ = reexec::unblock_handled();
    let _ = keep(false);
    match result {
        Ok(exec_error) => Err(exec_error).context("execve"),
        Err(e) => Err(e).context("keeping descriptors across the exec"),
    }
}
