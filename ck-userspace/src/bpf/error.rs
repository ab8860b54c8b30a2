//! Why BPF steering could not be set up ([`BpfError`]), what to do about it ([`load_advice`]),
//! and the two ways every file of `bpf` words a failed step ([`load_err`], [`write_err`]).

/// What to do when loading fails: the capabilities of `needed` that ck lacks and how to grant
/// them, else the requirements (the cause is elsewhere: the kernel, the verifier); `otherwise`
/// is the way out without them (`run with --no-bpf`).
pub fn load_advice(needed: &[crate::os::capabilities::Cap], otherwise: &str) -> String {
    match crate::os::capabilities::lacking(needed) {
        Some(lacking) => format!("{lacking}; or {otherwise}"),
        None => format!(
            "ck needs {} and Linux >= 5.14, or {otherwise}",
            crate::os::capabilities::names(needed)
        ),
    }
}

/// Why BPF steering could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    /// bpffs is missing and could not be mounted.
    #[error(
        "bpffs is not mounted at /sys/fs/bpf and mounting it failed ({0}); run `mount -t bpf bpf /sys/fs/bpf` as root"
    )]
    NoBpffs(String),
    /// Loading or attaching failed (permissions, old kernel, verifier).
    #[error("{what}: {error:#}; {advice}")]
    Load {
        /// The step that failed.
        what: String,
        /// The underlying error, with its causes (part of the message, not a separate cause).
        error: anyhow::Error,
        /// What to do: the capabilities ck lacks and how to grant them, or what it needs.
        advice: String,
    },
    /// Writing a map failed while ck runs (the program is loaded; the kernel refused one
    /// update): steering may lag behind the fleet until the next update succeeds.
    #[error(
        "updating the BPF map `{map}` failed: {error:#}; steering may not reflect the fleet until \
         the next update succeeds (see `ck status`); this is a bug in ck or a kernel limit, not a \
         permission problem: please report it with the log"
    )]
    MapWrite {
        /// The map.
        map: &'static str,
        /// The kernel's error, with its causes (part of the message, not a separate cause).
        error: anyhow::Error,
    },
    /// A pin could not be created or removed.
    #[error("{what} {path}: {error}{advice}")]
    Pin {
        /// The step that failed.
        what: &'static str,
        /// The pin path.
        path: String,
        /// The underlying error.
        error: std::io::Error,
        /// What to do (`; ...`), when ck knows.
        advice: String,
    },
}

/// Words a failed load step `what` as a [`BpfError::Load`], with the capabilities ck lacks.
pub(crate) fn load_err(what: &str) -> impl FnOnce(anyhow::Error) -> BpfError + '_ {
    move |error| BpfError::Load {
        what: what.to_string(),
        error,
        advice: load_advice(
            &crate::os::capabilities::needed_for_bpf(false),
            "run with --no-bpf",
        ),
    }
}

/// Words a refused write of `map` as a [`BpfError::MapWrite`].
pub(crate) fn write_err(map: &'static str) -> impl FnOnce(aya::maps::MapError) -> BpfError {
    move |error| BpfError::MapWrite {
        map,
        error: error.into(),
    }
}
