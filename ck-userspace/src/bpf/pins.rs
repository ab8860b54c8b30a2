//! Where an instance's maps are pinned, and the clean-up of pins left by a crashed instance.
//!
//! Layout: `/sys/fs/bpf/ck/<name>/<group>/<map>`. The instance lock (see `instance`) says whether
//! pins belong to a live instance; pins found while we hold the lock are stale.
use std::{
    fs, io,
    path::{Path, PathBuf},
};

use super::error::BpfError;

/// Maps pinned for people and tools (`bpftool map dump pinned ...`); the last five are the
/// open-connection counting's (`conns::MAPS`, checked by its tests).
pub(crate) const PINNED_MAPS: [&str; 17] = [
    "sockets",
    "slots",
    "active",
    "config",
    "stats",
    "selected",
    "cursor",
    "sticky",
    "sock_gens",
    "flows",
    "pending",
    "udp_stats",
    "conn_tags",
    "conns",
    "listeners",
    "moved",
    "moved_any",
];

/// The bpffs mount point.
pub const BPFFS: &str = "/sys/fs/bpf";

/// Root of every ck pin: `$CK_PIN_DIR` (a directory on a bpffs), else `/sys/fs/bpf/ck`.
pub fn root() -> PathBuf {
    std::env::var_os("CK_PIN_DIR")
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(BPFFS).join("ck"))
}

/// A pin error for `path`; when ck may not write there (not root), it says how to let it.
pub fn error(what: &'static str, path: &Path, error: io::Error) -> BpfError {
    let advice = if error.kind() == io::ErrorKind::PermissionDenied {
        format!(
            "; ck runs as uid {uid} and may not write under {root}: create that directory for \
             ck's user as root (`install -d -o {uid} {root}`), or set CK_PIN_DIR to a directory \
             on the bpffs that ck's user owns",
            uid = nix::unistd::geteuid(),
            root = root().display()
        )
    } else {
        String::new()
    };
    BpfError::Pin {
        what,
        path: path.display().to_string(),
        error,
        advice,
    }
}

/// Directory of one instance's pins.
pub fn instance_dir(name: &str) -> PathBuf {
    root().join(name)
}

/// Directory of one group's maps.
pub fn group_dir(name: &str, group: &str) -> PathBuf {
    instance_dir(name).join(group)
}

/// Is bpffs mounted at [`BPFFS`]?
pub fn bpffs_mounted(mounts: &str) -> bool {
    mounts.lines().any(|line| {
        let mut f = line.split_whitespace();
        let (_dev, point, fstype) = (f.next(), f.next(), f.next());
        point == Some(BPFFS) && fstype == Some("bpf")
    })
}

/// Makes sure bpffs is mounted, mounting it when it is not (we are root when we load BPF).
pub fn ensure_bpffs() -> Result<(), BpfError> {
    let mounts = fs::read_to_string("/proc/mounts").unwrap_or_default();
    if bpffs_mounted(&mounts) {
        return Ok(());
    }
    nix::mount::mount(
        Some("bpf"),
        BPFFS,
        Some("bpf"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    )
    .map_err(|e| BpfError::NoBpffs(e.to_string()))?;
    tracing::info!(path = BPFFS, "mounted bpffs");
    Ok(())
}

/// Removes pins a crashed instance of the same name left behind. Returns whether any existed.
/// aya would otherwise reuse a pinned map even when its layout changed.
pub fn remove_stale(name: &str) -> Result<bool, BpfError> {
    let dir = instance_dir(name);
    if !dir.exists() {
        return Ok(false);
    }
    remove(&dir)?;
    Ok(true)
}

/// Removes an instance's pin directory (maps are freed once nothing else holds them).
pub fn remove_instance(name: &str) -> Result<(), BpfError> {
    let dir = instance_dir(name);
    if dir.exists() { remove(&dir) } else { Ok(()) }
}

fn remove(dir: &Path) -> Result<(), BpfError> {
    fs::remove_dir_all(dir).map_err(|e| error("removing pins", dir, e))
}

/// Creates a group's pin directory.
pub fn create_group_dir(dir: &Path) -> Result<(), BpfError> {
    fs::create_dir_all(dir).map_err(|e| error("creating pin directory", dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_bpffs_mount() {
        assert!(bpffs_mounted("bpf /sys/fs/bpf bpf rw,nosuid 0 0\n"));
        assert!(!bpffs_mounted("tmpfs /sys/fs/bpf tmpfs rw 0 0\n"));
        assert!(!bpffs_mounted(""));
    }

    #[test]
    fn pin_paths() {
        assert_eq!(
            group_dir("web", "tcp4-8080"),
            PathBuf::from("/sys/fs/bpf/ck/web/tcp4-8080")
        );
    }
}
