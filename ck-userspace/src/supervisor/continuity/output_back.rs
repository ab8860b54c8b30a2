//! Workers' output pipes across a change of ck: after `ck upgrade` the read ends come inherited
//! (named in the handover); after a ck that died (`--survive-supervisor`) they are copied from
//! the worker's own copies with `pidfd_getfd` and checked to be the very pipes recorded. Either
//! way the output readers start again on them, and what the worker wrote meanwhile (the pipe
//! held it) arrives.
use std::{
    os::fd::{AsFd as _, OwnedFd},
    sync::{Arc, atomic::AtomicU64},
};

use anyhow::Context as _;

use crate::supervisor::{continuity::handover::OutputHandover, output, output::OutputEnds};

/// Where the read ends come from.
pub(in crate::supervisor) enum EndsFrom<'a> {
    /// Inherited across the exec of `ck upgrade`.
    Exec,
    /// Copied from the worker behind this pidfd (a ck that died).
    Worker(&'a OwnedFd),
}

/// Reads again the output of worker `source` (stream aside), whose pipes `saved` names,
/// counting dropped lines in the slot's `dropped`: ck's read ends, or none (logged) when
/// they cannot be had. `hub`: the output readers, if ck captures output.
pub(in crate::supervisor) fn output_back(
    hub: Option<&output::Hub>,
    source: output::Source,
    dropped: &Arc<AtomicU64>,
    saved: Option<&OutputHandover>,
    from: EndsFrom<'_>,
) -> Option<OutputEnds> {
    let (index, pid) = (source.slot, source.pid);
    let saved = saved?;
    let ends = match ends_back(saved, &from) {
        Ok(ends) => ends,
        Err(e) => {
            tracing::warn!(slot = index, pid, "its output is not read any more: {e:#}");
            return None;
        }
    };
    let Some(hub) = hub else {
        tracing::warn!(
            slot = index,
            pid,
            "its output is not read: this ck runs with --worker-output inherit"
        );
        return Some(ends);
    };
    if let Err(e) = hub.read(&ends, source, dropped) {
        tracing::warn!(slot = index, pid, "its output is not read any more: {e}");
    }
    Some(ends)
}

fn ends_back(saved: &OutputHandover, from: &EndsFrom<'_>) -> anyhow::Result<OutputEnds> {
    let mut ends = Vec::new();
    for i in 0..2 {
        let end = match from {
            EndsFrom::Exec => crate::os::reexec::inherited(saved.fds[i])?,
            EndsFrom::Worker(pidfd) => {
                let n = saved
                    .in_worker
                    .context("the worker holds no copy of its pipes")?[i];
                let end = crate::os::pidfd::get_fd(pidfd, n)
                    .with_context(|| format!("pidfd_getfd of its fd {n}"))?;
                crate::os::pipe::check_read_end(end.as_fd(), saved.inodes[i])?;
                end
            }
        };
        ends.push(end);
    }
    let [stdout, stderr]: [OwnedFd; 2] = ends.try_into().expect("two ends");
    Ok(OutputEnds {
        ends: [stdout, stderr],
        inodes: saved.inodes,
        in_worker: saved.in_worker,
    })
}
