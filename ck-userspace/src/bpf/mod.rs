//! The BPF side of ck as seen from userspace: loading the program once per group, the maps the
//! supervisor keeps current, and their pins under `/sys/fs/bpf/ck/<name>/<group>/`.
pub mod active;
pub mod adopt;
mod bind_tags;
pub mod btf;
mod conn_hook;
pub mod conn_steering;
pub mod conns;
pub mod dump;
pub mod exits;
mod flips;
mod group;
mod load;
pub mod maglev;
pub mod pins;
pub mod queue_depth;
mod stats;
mod sticky;
pub mod udp;

pub use group::BpfGroup;
pub(crate) use group::PINNED_MAPS;
pub use stats::PinnedStats;

/// The compiled `ck-ebpf` object, embedded at build time by `build.rs`.
#[cfg(feature = "bpf-program")]
pub static BPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/ck"));
/// Empty: the library was built without the `bpf-program` feature (as xtask and the test
/// harness use it).
#[cfg(not(feature = "bpf-program"))]
pub static BPF_OBJECT: &[u8] = &[];

/// The first 12 hex digits of the SHA-256 of [`BPF_OBJECT`] (computed by `build.rs`; `sha256sum`
/// of the object file starts with them), `none` without the `bpf-program` feature.
pub const OBJECT_SHA256: &str = env!("CK_BPF_SHA256");

/// [`BPF_OBJECT`], or why this build has none.
fn object() -> anyhow::Result<&'static [u8]> {
    anyhow::ensure!(
        !BPF_OBJECT.is_empty(),
        "this ck was built without its BPF program (ck-userspace's `bpf-program` feature is \
         off): build it with its default features (`cargo xtask build`), or run with --no-bpf"
    );
    Ok(BPF_OBJECT)
}

/// The object loaded for one of the programs beside `ck_select` (the `--adopt` hooks, the exit
/// watch): maps created, no program loaded yet, aya-log's level off, no BTF relocation.
pub(crate) fn load_object() -> anyhow::Result<aya::Ebpf> {
    let off: u8 = 0;
    aya::EbpfLoader::new()
        .btf(None)
        .override_global(aya_log::LEVEL, &off, true)
        .load(object()?)
        .map_err(|e| anyhow::anyhow!("loading the BPF object: {e}"))
}

/// Reads the ring buffer `ring` on the runtime and hands every record, a `T` the program wrote,
/// to `send`, until it returns false (a record shorter than a `T` is skipped).
pub(crate) fn forward_records<T: aya::Pod + Send + 'static>(
    ring: aya::maps::RingBuf<aya::maps::MapData>,
    send: impl Fn(T) -> bool + Send + 'static,
) -> anyhow::Result<()> {
    read_when_ready(ring, move |ring| {
        while let Some(record) = ring.next() {
            if record.len() < std::mem::size_of::<T>() {
                continue;
            }
            // SAFETY: the record holds at least one `T` (checked above), a plain-data type
            // (`Pod`), read without alignment assumptions.
            let value = unsafe { std::ptr::read_unaligned(record.as_ptr().cast::<T>()) };
            if !send(value) {
                return false;
            }
        }
        true
    })
}

/// Watches `source` (a ring buffer, aya-log's logger) on the runtime and calls `drain` each
/// time it is readable, until `drain` returns false.
pub(crate) fn read_when_ready<T>(
    source: T,
    mut drain: impl FnMut(&mut T) -> bool + Send + 'static,
) -> anyhow::Result<()>
where
    T: std::os::fd::AsRawFd + Send + 'static,
{
    // SAFETY: `source` owns its fd for its whole life and `as_raw_fd` always returns that fd;
    // the AsyncFd owns `source`, so the fd outlives the registration.
    let mut fd = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(source, tokio::io::Interest::READABLE)
    }
    .map_err(|e| anyhow::anyhow!("watching a BPF buffer: {e}"))?;
    tokio::spawn(async move {
        loop {
            let Ok(mut guard) = fd.readable_mut().await else {
                return;
            };
            if !drain(guard.get_inner_mut()) {
                return;
            }
            guard.clear_ready();
        }
    });
    Ok(())
}

/// Whether this kernel can run the program as `sk_reuseport/migrate` (Linux >= 5.14), so that a
/// closing listener's queue is re-homed instead of reset.
pub fn kernel_migrates() -> bool {
    nix::sys::utsname::uname()
        .ok()
        .and_then(|u| parse_kernel_version(&u.release().to_string_lossy()))
        .is_some_and(|v| v >= (5, 14))
}

fn parse_kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_kernel_versions() {
        assert_eq!(
            super::parse_kernel_version("6.18.44-fc-v669"),
            Some((6, 18))
        );
        assert_eq!(super::parse_kernel_version("5.4.0"), Some((5, 4)));
        assert_eq!(super::parse_kernel_version("x"), None);
    }
}

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
