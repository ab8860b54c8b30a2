//! What `least-queue` steers by. Exact: the select program reads each candidate socket's live
//! queue depth (`sk_ack_backlog` + requests in SYN_RECV) and how long its oldest connection has
//! waited (the accept queue's head request's `snt_synack`) from kernel memory, at offsets
//! resolved here from the kernel's BTF at load. Sampled: the supervisor's `TCP_INFO` samples
//! in the `slots` map, where the kernel refuses the exact read (no BTF, a field not found,
//! `bpf_probe_read_kernel` denied: no CAP_PERFMON, or lockdown) or when
//! `CK_QUEUE_DEPTH=sampled` ([`ENV`]) forces it.
use std::sync::OnceLock;

use ck_common::QueueOffsets;

/// The environment variable that forces sampled depths (`sampled`; `exact` or unset: exact
/// where the kernel allows it).
pub const ENV: &str = "CK_QUEUE_DEPTH";

/// What `least-queue` steers by, as the loaded program was set up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QueueDepth {
    /// Read by the program from each candidate socket.
    Exact,
    /// The supervisor's samples, and why.
    Sampled(String),
}

impl QueueDepth {
    /// The words `ck status` shows: `exact (BPF)` or `sampled (why)`.
    pub fn describe(&self) -> String {
        match self {
            QueueDepth::Exact => "exact (BPF)".into(),
            QueueDepth::Sampled(why) => format!("sampled ({why})"),
        }
    }
}

/// The offsets the program reads a socket's queue depth at, or why least-queue must steer by
/// samples instead. Resolved once per process (every group loads with the same answer).
pub fn offsets() -> Result<QueueOffsets, String> {
    static RESOLVED: OnceLock<Result<QueueOffsets, String>> = OnceLock::new();
    RESOLVED
        .get_or_init(|| resolve(std::env::var(ENV).ok().as_deref()))
        .clone()
}

/// [`offsets`] for a value of [`ENV`].
fn resolve(forced: Option<&str>) -> Result<QueueOffsets, String> {
    match forced.map(str::trim) {
        None | Some("" | "exact") => {}
        Some("sampled") => return Err(format!("forced by {ENV}=sampled")),
        Some(other) => {
            return Err(format!(
                "{ENV}={other} is neither `exact` nor `sampled`; unset it for exact depths"
            ));
        }
    }
    super::kernel_layout::kernel().queue.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_forces_samples_or_is_refused_with_the_fix() {
        assert_eq!(
            resolve(Some("sampled")),
            Err("forced by CK_QUEUE_DEPTH=sampled".into())
        );
        let err = resolve(Some("fast")).unwrap_err();
        assert!(
            err.contains("CK_QUEUE_DEPTH=fast") && err.contains("unset it"),
            "{err}"
        );
    }

    /// On this machine's kernel (BTF at /sys/kernel/btf/vmlinux) the offsets are found, and
    /// `exact` is the same as unset.
    #[test]
    fn the_kernels_offsets_are_found() {
        let offsets = resolve(None).expect("exact depths on this kernel");
        assert_eq!(resolve(Some("exact")), Ok(offsets));
        assert_eq!(Ok(offsets), super::super::kernel_layout::kernel().queue);
        assert_eq!(QueueDepth::Exact.describe(), "exact (BPF)");
        assert_eq!(
            QueueDepth::Sampled("no BTF".into()).describe(),
            "sampled (no BTF)"
        );
    }
}
