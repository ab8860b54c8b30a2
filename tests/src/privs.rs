//! Least-privilege tests' helpers: the unprivileged user they run things as (`nobody`), `ck`
//! started through `setpriv` as that user with only given capabilities, a process's ids and
//! capability sets from `/proc/PID/status`, and directories lent to that user for a test.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The unprivileged user the tests use: `nobody`, with its uid and primary gid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nobody {
    /// Its uid.
    pub uid: u32,
    /// Its primary gid.
    pub gid: u32,
}

/// `nobody` from the user database.
///
/// # Panics
/// When there is no such user.
pub fn nobody() -> Nobody {
    let user = nix::unistd::User::from_name("nobody")
        .ok()
        .flatten()
        .expect("the tests need the user `nobody` (see /etc/passwd)");
    Nobody {
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
    }
}

/// A command that runs `program ARGS...` as `nobody` (its groups from the user database) with
/// exactly `caps` (e.g. `["bpf", "perfmon"]`) as its inheritable, ambient and bounding sets, so
/// it cannot gain any other; `caps` empty: none at all.
///
/// `nobody` may not be able to reach `program` where it was built (a checkout in a private home
/// or a `mktemp -d` directory), so it runs a copy of it that [`reachable_copy`] made.
pub fn as_nobody(caps: &[&str], program: &Path) -> Command {
    let who = nobody();
    let set: String = std::iter::once("-all".to_string())
        .chain(caps.iter().map(|c| format!("+{c}")))
        .collect::<Vec<_>>()
        .join(",");
    let mut cmd = Command::new("setpriv");
    cmd.arg(format!("--reuid={}", who.uid))
        .arg(format!("--regid={}", who.gid))
        .arg("--init-groups")
        .arg(format!("--inh-caps={set}"))
        .arg(format!("--ambient-caps={set}"))
        .arg(format!("--bounding-set={set}"))
        .arg("--")
        .arg(reachable_copy(program))
        // Plain log lines, as `ck::ck_command` gives.
        .env_remove("CK_LOG")
        .env("NO_COLOR", "1");
    cmd
}

/// A copy of `program` that `nobody` can execute: in a directory of this test process's own
/// under the temporary directory (mode 0755, every directory above it searchable), made once per
/// program and removed when the test process exits.
///
/// # Panics
/// When the copy cannot be made, or the temporary directory is not searchable by others.
pub fn reachable_copy(program: &Path) -> PathBuf {
    use std::collections::BTreeMap;
    use std::os::unix::fs::PermissionsExt as _;
    use std::sync::{Mutex, OnceLock};

    static COPIES: OnceLock<Mutex<BTreeMap<PathBuf, PathBuf>>> = OnceLock::new();
    let mut copies = COPIES
        .get_or_init(|| Mutex::new(BTreeMap::new()))
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(copy) = copies.get(program) {
        return copy.clone();
    }
    let dir = lent_binaries_dir();
    let name = program.file_name().expect("a program's file name");
    // One subdirectory per program, so two programs of the same name do not collide.
    let copy = dir.join(copies.len().to_string()).join(name);
    let parent = copy.parent().expect("the copy's directory");
    fs::create_dir_all(parent).unwrap_or_else(|e| panic!("creating {}: {e}", parent.display()));
    fs::set_permissions(parent, fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", parent.display()));
    fs::copy(program, &copy)
        .unwrap_or_else(|e| panic!("copying {} to {}: {e}", program.display(), copy.display()));
    fs::set_permissions(&copy, fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", copy.display()));
    assert_reachable_by_nobody(&copy);
    copies.insert(program.to_path_buf(), copy.clone());
    copy
}

/// This test process's directory of copies for `nobody` (`$TMPDIR/ck-tests-nobody-PID`, mode
/// 0755), made on first use; an `atexit` handler removes it when the process exits.
fn lent_binaries_dir() -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    use std::sync::OnceLock;

    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("ck-tests-nobody-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|e| panic!("chmod {}: {e}", dir.display()));
        extern "C" fn remove_lent_binaries() {
            if let Some(dir) = DIR.get() {
                let _ = fs::remove_dir_all(dir);
            }
        }
        // SAFETY: registering a plain `extern "C" fn` with no arguments is what atexit takes;
        // the handler only removes a directory and touches no state torn down before it runs.
        unsafe { libc::atexit(remove_lent_binaries) };
        dir
    })
    .clone()
}

/// The first directory above `path` that others cannot search (so `nobody` cannot run
/// `path`), with its mode; `None` when every one can be searched.
pub fn unsearchable_ancestor(path: &Path) -> Option<(PathBuf, u32)> {
    use std::os::unix::fs::PermissionsExt as _;
    path.ancestors().skip(1).find_map(|dir| {
        let mode = fs::metadata(dir)
            .map(|m| m.permissions().mode())
            .unwrap_or(0);
        (mode & 0o001 == 0).then(|| (dir.to_path_buf(), mode))
    })
}

/// Panics with the fix unless `nobody` can execute `path` (every directory above it searchable).
pub fn assert_reachable_by_nobody(path: &Path) {
    if let Some((dir, mode)) = unsearchable_ancestor(path) {
        panic!(
            "{} is not searchable by others (mode {mode:o}), so `nobody` cannot run {}: set \
             TMPDIR to a directory others can search",
            dir.display(),
            path.display()
        );
    }
}

/// Ids and capability sets of a process, from `/proc/PID/status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Creds {
    /// Real, effective, saved and filesystem uid.
    pub uids: Vec<u32>,
    /// Real, effective, saved and filesystem gid.
    pub gids: Vec<u32>,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    /// `CapInh`.
    pub inheritable: u64,
    /// `CapPrm`.
    pub permitted: u64,
    /// `CapEff`.
    pub effective: u64,
    /// `CapAmb`.
    pub ambient: u64,
}

impl Creds {
    /// Whether every set is empty.
    pub fn no_capability(&self) -> bool {
        self.inheritable == 0 && self.permitted == 0 && self.effective == 0 && self.ambient == 0
    }
}

/// The credentials of `pid`, or `None` when it is gone.
pub fn creds(pid: u32) -> Option<Creds> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<&str> {
        status.lines().find_map(|l| {
            l.strip_prefix(name)
                .and_then(|rest| rest.strip_prefix(':'))
                .map(str::trim)
        })
    };
    let ids = |name: &str| -> Option<Vec<u32>> {
        field(name)?
            .split_whitespace()
            .map(|n| n.parse().ok())
            .collect()
    };
    let set = |name: &str| u64::from_str_radix(field(name)?, 16).ok();
    Some(Creds {
        uids: ids("Uid")?,
        gids: ids("Gid")?,
        groups: ids("Groups")?,
        inheritable: set("CapInh")?,
        permitted: set("CapPrm")?,
        effective: set("CapEff")?,
        ambient: set("CapAmb")?,
    })
}

/// The bit of capability number `n` in a set (`CAP_BPF` is 39, `CAP_PERFMON` 38).
pub fn cap_bit(n: u32) -> u64 {
    1u64 << n
}

/// A directory owned by `nobody` for the duration of a test (removed with its contents on drop).
#[derive(Debug)]
pub struct LentDir {
    path: PathBuf,
}

impl LentDir {
    /// Creates `path` (fresh) with mode 0755 and gives it to `nobody`.
    pub fn new(path: impl Into<PathBuf>) -> LentDir {
        let path = path.into();
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
        let who = nobody();
        std::os::unix::fs::chown(&path, Some(who.uid), Some(who.gid))
            .unwrap_or_else(|e| panic!("chown {}: {e}", path.display()));
        LentDir { path }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its path as text (for environment variables).
    pub fn text(&self) -> &str {
        self.path.to_str().expect("UTF-8 path")
    }

    /// The names in it now.
    pub fn entries(&self) -> Vec<String> {
        fs::read_dir(&self.path)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for LentDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// A port below 1024 that can be bound now, from `from` up (tests pick distinct `from`s).
///
/// # Panics
/// When none is free up to 1023.
pub fn free_low_port(from: u16) -> u16 {
    (from..1024)
        .find(|p| crate::sys::port_bindable(*p))
        .unwrap_or_else(|| panic!("no free port from {from} to 1023"))
}
