//! `--user USER[:GROUP]`: the user the workers run as. ck opens the listening sockets (so a
//! worker serves port 80 with no capability), then each worker's child process, before exec,
//! takes the user's groups, group and uid (in that order: `setgroups` and `setgid` need the
//! privilege that `setuid` gives up) and clears every capability it could have kept.
//!
//! Names are resolved in ck before the fork (NSS lookups allocate); the child only makes
//! system calls ([`switch_in_child`]).
use std::{io, os::unix::fs::MetadataExt as _, path::Path};

use nix::unistd::{Gid, Group, Uid, User};

use crate::os::capabilities::{self, Cap};

/// The user (and groups) workers run as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerUser {
    /// `--user` as given (`nobody`, `www-data:www-data`, `1000`).
    pub spec: String,
    /// The user id.
    pub uid: Uid,
    /// The primary group.
    pub gid: Gid,
    /// Supplementary groups: the user's groups (`initgroups`), or only GROUP when one is given.
    pub groups: Vec<Gid>,
}

/// A `--user` value that names nobody.
#[derive(Debug, thiserror::Error)]
pub enum UserError {
    /// No such user.
    #[error(
        "no user {0:?} on this system (see `getent passwd`): give an existing user name or uid, \
         e.g. --user nobody, or create the user (`useradd --system {0}`)"
    )]
    UnknownUser(String),
    /// No such group.
    #[error(
        "no group {0:?} on this system (see `getent group`): give an existing group name or gid, \
         e.g. --user nobody:nogroup, or leave GROUP out to use the user's own"
    )]
    UnknownGroup(String),
    /// A numeric uid without a passwd entry and without a group.
    #[error("uid {0} has no passwd entry, so it has no group: give one, e.g. --user {0}:{0}")]
    NoGroup(u32),
    /// Empty user or group.
    #[error("expected USER or USER:GROUP (names or numeric ids), e.g. nobody or www-data:www-data")]
    Malformed,
    /// The user database could not be read.
    #[error("reading the user database: {0}")]
    Lookup(nix::Error),
}

/// Parses and resolves `USER[:GROUP]` (names or numeric ids); the clap parser of `--user`.
pub fn parse_user(spec: &str) -> Result<WorkerUser, UserError> {
    let (user, group) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    if user.is_empty() || group.is_some_and(|g| g.is_empty() || g.contains(':')) {
        return Err(UserError::Malformed);
    }
    let (uid, entry) = match user.parse::<u32>() {
        Ok(uid) => {
            let uid = Uid::from_raw(uid);
            (uid, User::from_uid(uid).map_err(UserError::Lookup)?)
        }
        Err(_) => {
            let entry = User::from_name(user)
                .map_err(UserError::Lookup)?
                .ok_or_else(|| UserError::UnknownUser(user.to_string()))?;
            (entry.uid, Some(entry))
        }
    };
    let (gid, groups) = match group {
        Some(group) => {
            let gid = resolve_group(group)?;
            (gid, vec![gid])
        }
        None => {
            let entry = entry.ok_or(UserError::NoGroup(uid.as_raw()))?;
            let name =
                std::ffi::CString::new(entry.name.as_str()).map_err(|_| UserError::Malformed)?;
            let groups = nix::unistd::getgrouplist(&name, entry.gid).map_err(UserError::Lookup)?;
            (entry.gid, groups)
        }
    };
    Ok(WorkerUser {
        spec: spec.to_string(),
        uid,
        gid,
        groups,
    })
}

fn resolve_group(group: &str) -> Result<Gid, UserError> {
    if let Ok(gid) = group.parse::<u32>() {
        return Ok(Gid::from_raw(gid));
    }
    Group::from_name(group)
        .map_err(UserError::Lookup)?
        .map(|g| g.gid)
        .ok_or_else(|| UserError::UnknownGroup(group.to_string()))
}

impl WorkerUser {
    /// Whether ck itself already runs as this user and these groups (nothing to switch, only
    /// capabilities to clear).
    pub fn is_ck_itself(&self) -> bool {
        let mut mine = nix::unistd::getgroups().unwrap_or_default();
        let mut theirs = self.groups.clone();
        mine.sort_unstable_by_key(|g| g.as_raw());
        theirs.sort_unstable_by_key(|g| g.as_raw());
        mine.dedup();
        theirs.dedup();
        Uid::current() == self.uid
            && Uid::effective() == self.uid
            && Gid::current() == self.gid
            && Gid::effective() == self.gid
            && (mine == theirs || (theirs.len() == 1 && theirs[0] == self.gid && mine.is_empty()))
    }

    /// What ck needs to start and supervise workers as this user: to switch (`CAP_SETUID`,
    /// `CAP_SETGID`), to signal them (`CAP_KILL`, once they are another uid), and with `--adopt`
    /// to copy their sockets (`CAP_SYS_PTRACE`).
    pub fn needed(&self, adopt: bool) -> Vec<Cap> {
        if self.is_ck_itself() {
            return Vec::new();
        }
        let mut caps = vec![capabilities::SETUID, capabilities::SETGID];
        if self.uid != Uid::effective() {
            caps.push(capabilities::KILL);
            if adopt {
                caps.push(capabilities::SYS_PTRACE);
            }
        }
        caps
    }

    /// Refuses, with the missing capabilities and how to grant them, when ck cannot start and
    /// supervise workers as this user.
    pub fn check(&self, adopt: bool) -> Result<(), String> {
        let absent = capabilities::missing(&self.needed(adopt));
        if absent.is_empty() {
            return Ok(());
        }
        Err(format!(
            "--user {}: ck runs as uid {} without {}, so it cannot run and stop workers as uid {} \
             ({}); {}, or drop --user",
            self.spec,
            Uid::effective(),
            capabilities::names(&absent),
            self.uid,
            absent
                .iter()
                .map(|c| why(*c))
                .collect::<Vec<_>>()
                .join(", "),
            capabilities::how_to_grant(&absent)
        ))
    }
}

impl WorkerUser {
    /// Refuses, with the path at fault and the fix, when this user cannot execute `program`
    /// (every directory above it searchable, the file executable, by mode bits), or, when
    /// given, `trampoline`: ck's own binary, which the worker runs first through
    /// `/proc/self/exe` (a link the kernel follows without searching its directories).
    pub fn check_can_run(&self, program: &Path, trampoline: Option<&Path>) -> Result<(), String> {
        let mut steps: Vec<(&Path, &str)> = program
            .ancestors()
            .skip(1)
            .filter(|d| !d.as_os_str().is_empty())
            .map(|d| (d, "searchable"))
            .collect();
        steps.reverse();
        steps.push((program, "executable"));
        if let Some(ck) = trampoline {
            steps.push((ck, "executable"));
        }
        for (path, what) in steps {
            let Ok(meta) = std::fs::metadata(path) else {
                continue;
            };
            if !self.may_execute(&meta) {
                return Err(format!(
                    "--user {}: {} (mode {:o}, owner uid {} gid {}) is not {what} by uid {}, so \
                     the workers could not start {}: put it where that user can reach it, or \
                     let the user in (chmod o+x, or a group it has)",
                    self.spec,
                    path.display(),
                    meta.mode() & 0o7777,
                    meta.uid(),
                    meta.gid(),
                    self.uid,
                    program.display()
                ));
            }
        }
        Ok(())
    }

    /// Whether the mode bits of `meta` let this user (with no capability) execute or search it.
    fn may_execute(&self, meta: &std::fs::Metadata) -> bool {
        let mode = meta.mode();
        let bits = if meta.uid() == self.uid.as_raw() {
            mode >> 6
        } else if meta.gid() == self.gid.as_raw()
            || self.groups.iter().any(|g| g.as_raw() == meta.gid())
        {
            mode >> 3
        } else {
            mode
        };
        bits & 0o1 != 0
    }
}

fn why(cap: Cap) -> &'static str {
    match cap.bit {
        b if b == capabilities::SETUID.bit => "CAP_SETUID to set the uid",
        b if b == capabilities::SETGID.bit => "CAP_SETGID to set the groups",
        b if b == capabilities::KILL.bit => "CAP_KILL to signal another user's processes",
        b if b == capabilities::SYS_PTRACE.bit => {
            "CAP_SYS_PTRACE to copy another user's sockets with pidfd_getfd"
        }
        _ => cap.name,
    }
}

/// In the forked child before exec: takes `user`'s groups, group and uid, then clears every
/// capability (ambient, inheritable, permitted, effective), so the program starts with none even
/// when ck's user is the same and ck holds ambient capabilities. Async-signal-safe: system
/// calls only, nothing allocated.
pub fn switch_in_child(user: &WorkerUser, switch_ids: bool) -> io::Result<()> {
    if switch_ids {
        // Raw system calls, for the calling thread alone: the child of a clone has one thread,
        // and the C library's wrappers would apply them to the threads it remembers from the
        // parent (signalling them and waiting, under a lock another thread may have held).
        let groups = user.groups.as_ptr().cast::<libc::gid_t>();
        // SAFETY: `Gid` is a transparent `gid_t`, so `groups` points at `len` of them, which
        // setgroups reads; setgid and setuid take integers.
        let failed = unsafe {
            libc::syscall(libc::SYS_setgroups, user.groups.len(), groups) < 0
                || libc::syscall(libc::SYS_setgid, user.gid.as_raw()) < 0
                || libc::syscall(libc::SYS_setuid, user.uid.as_raw()) < 0
        };
        if failed {
            return Err(io::Error::last_os_error());
        }
    }
    clear_capabilities()
}

/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct`.
#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Clears the ambient set, then the effective, permitted and inheritable sets of the calling
/// thread (an unprivileged process can always lower its sets).
fn clear_capabilities() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    let cleared = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    if cleared < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capset reads one header and two data structs, laid out as the kernel's
    // (`#[repr(C)]`), both alive for the call.
    let set = unsafe {
        libc::syscall(
            libc::SYS_capset,
            &mut header as *mut CapHeader,
            data.as_ptr(),
        )
    };
    if set < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_users_groups_and_ids() {
        let root = parse_user("root").unwrap();
        assert_eq!((root.uid.as_raw(), root.gid.as_raw()), (0, 0));
        assert!(root.groups.contains(&Gid::from_raw(0)));
        let numeric = parse_user("0:0").unwrap();
        assert_eq!(numeric.groups, vec![Gid::from_raw(0)]);
        let nobody = parse_user("nobody").unwrap();
        assert_ne!(nobody.uid.as_raw(), 0);
    }

    #[test]
    fn names_what_is_wrong() {
        let unknown = parse_user("no-such-user-ck").unwrap_err().to_string();
        assert!(unknown.contains("no user \"no-such-user-ck\""), "{unknown}");
        let group = parse_user("root:no-such-group-ck").unwrap_err().to_string();
        assert!(group.contains("no group \"no-such-group-ck\""), "{group}");
        assert!(matches!(parse_user(""), Err(UserError::Malformed)));
        assert!(matches!(parse_user("root:"), Err(UserError::Malformed)));
        assert!(matches!(parse_user(":root"), Err(UserError::Malformed)));
        assert!(matches!(
            parse_user("4000000"),
            Err(UserError::NoGroup(4000000))
        ));
    }

    #[test]
    fn a_program_behind_a_private_directory_is_named() {
        let dir = std::env::temp_dir().join(format!("ck-privileges-{}", std::process::id()));
        let private = dir.join("private");
        std::fs::create_dir_all(&private).unwrap();
        let program = private.join("app");
        std::fs::write(&program, "#!/bin/sh\n").unwrap();
        let set_mode = |p: &Path, mode| {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap()
        };
        set_mode(&dir, 0o755);
        set_mode(&program, 0o755);
        let nobody = WorkerUser {
            spec: "nobody".into(),
            uid: Uid::from_raw(65534),
            gid: Gid::from_raw(65534),
            groups: vec![Gid::from_raw(65534)],
        };
        set_mode(&private, 0o700);
        let err = nobody.check_can_run(&program, None).unwrap_err();
        assert!(
            err.contains(&format!("{} (mode 700", private.display())),
            "{err}"
        );
        assert!(err.contains("is not searchable by uid 65534"), "{err}");
        set_mode(&private, 0o755);
        assert_eq!(nobody.check_can_run(&program, None), Ok(()));
        set_mode(&program, 0o750);
        let err = nobody.check_can_run(&program, None).unwrap_err();
        assert!(err.contains("is not executable by uid 65534"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn another_user_needs_setuid_setgid_and_kill() {
        let other = WorkerUser {
            spec: "x".into(),
            uid: Uid::from_raw(Uid::effective().as_raw() + 12345),
            gid: Gid::from_raw(12345),
            groups: vec![Gid::from_raw(12345)],
        };
        let needed = other.needed(false);
        assert_eq!(
            needed,
            vec![
                capabilities::SETUID,
                capabilities::SETGID,
                capabilities::KILL
            ]
        );
        assert!(other.needed(true).contains(&capabilities::SYS_PTRACE));
    }
}
