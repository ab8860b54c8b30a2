//! The BPF side of ck as seen from userspace: loading the program once per group, the maps the
//! supervisor keeps current, and their pins under `/sys/fs/bpf/ck/<name>/<group>/`.
pub mod active;
pub mod adopt;
mod bind_tags;
pub mod btf;
pub mod canary_watch;
mod cgroup_attach;
mod conn_hook;
pub mod conn_steering;
pub mod conns;
pub mod dump;
mod error;
pub mod exits;
mod flips;
mod group;
mod kernel_layout;
mod load;
pub mod maglev;
mod object;
pub mod pins;
pub mod queue_depth;
mod ring;
mod slot_cgroups;
mod stats;
mod sticky;
pub mod udp;
mod worker_cgroups;

pub use error::{BpfError, load_advice};
pub use group::{BpfGroup, GroupSpec};
pub use object::{BPF_OBJECT, OBJECT_SHA256};
pub(crate) use pins::PINNED_MAPS;
pub use stats::PinnedStats;

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
