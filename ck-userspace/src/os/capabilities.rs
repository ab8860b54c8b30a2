//! ck's own capabilities, as the kernel shows them (`CapEff` of `/proc/self/status`): which of
//! those a task needs are missing, and how to grant them, for errors that say what to do.
//!
//! The set was found by running ck as a non-root user with only candidate capabilities and
//! removing each (`docs/src/least-privilege.md` has the evidence): socket activation needs
//! `CAP_BPF` (maps) and `CAP_PERFMON` (the verifier refuses the program's pointer arithmetic
//! without it);
//! `--adopt` adds `CAP_NET_ADMIN` (cgroup socket programs); `--user` of another user adds
//! `CAP_SETUID`, `CAP_SETGID` and `CAP_KILL`.

/// A capability ck may need, with its number in the kernel's sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cap {
    /// The kernel's name (`CAP_BPF`).
    pub name: &'static str,
    /// Its bit.
    pub bit: u32,
}

impl Cap {
    /// The name without `CAP_` (`BPF`), as Kubernetes and Docker spell it.
    pub fn short(self) -> &'static str {
        self.name.trim_start_matches("CAP_")
    }
}

/// Signals to processes of another user (the workers under `--user`).
pub const KILL: Cap = Cap {
    name: "CAP_KILL",
    bit: 5,
};
/// `setgid`, `setgroups` (starting workers as `--user`).
pub const SETGID: Cap = Cap {
    name: "CAP_SETGID",
    bit: 6,
};
/// `setuid` (starting workers as `--user`).
pub const SETUID: Cap = Cap {
    name: "CAP_SETUID",
    bit: 7,
};
/// Binding a port below 1024.
pub const NET_BIND_SERVICE: Cap = Cap {
    name: "CAP_NET_BIND_SERVICE",
    bit: 10,
};
/// Loading cgroup socket programs (`--adopt`'s bind and `sock_ops` hooks).
pub const NET_ADMIN: Cap = Cap {
    name: "CAP_NET_ADMIN",
    bit: 12,
};
/// `pidfd_getfd` and `/proc/PID/fd` of processes of another user.
pub const SYS_PTRACE: Cap = Cap {
    name: "CAP_SYS_PTRACE",
    bit: 19,
};
/// The verifier's privileged mode (no Spectre v1 pointer-arithmetic restrictions).
pub const PERFMON: Cap = Cap {
    name: "CAP_PERFMON",
    bit: 38,
};
/// Creating maps and loading programs.
pub const BPF: Cap = Cap {
    name: "CAP_BPF",
    bit: 39,
};

/// What ck needs to load its BPF programs: always [`BPF`] and [`PERFMON`], and [`NET_ADMIN`]
/// with `--adopt`.
pub fn needed_for_bpf(adopt: bool) -> Vec<Cap> {
    let mut caps = vec![BPF, PERFMON];
    if adopt {
        caps.push(NET_ADMIN);
    }
    caps
}

/// ck's effective capability set, or `None` when `/proc/self/status` cannot be read.
pub fn effective() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_set(&status, "CapEff")
}

/// The set named `field` (`CapEff`, `CapPrm`, ...) of a `/proc/PID/status` text.
pub fn parse_set(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key == field)
            .then(|| u64::from_str_radix(value.trim(), 16).ok())
            .flatten()
    })
}

/// Those of `caps` missing from ck's effective set (none when the set cannot be read).
pub fn missing(caps: &[Cap]) -> Vec<Cap> {
    match effective() {
        Some(set) => missing_from(set, caps),
        None => Vec::new(),
    }
}

/// Those of `caps` missing from `set`.
pub fn missing_from(set: u64, caps: &[Cap]) -> Vec<Cap> {
    caps.iter()
        .copied()
        .filter(|c| set & (1u64 << c.bit) == 0)
        .collect()
}

/// `CAP_BPF and CAP_PERFMON`.
pub fn names(caps: &[Cap]) -> String {
    let names: Vec<&str> = caps.iter().map(|c| c.name).collect();
    match names.split_last() {
        None => String::new(),
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

/// How to grant `caps` to ck: file capabilities, systemd, Kubernetes.
pub fn how_to_grant(caps: &[Cap]) -> String {
    let lower: Vec<String> = caps.iter().map(|c| c.name.to_lowercase()).collect();
    let upper: Vec<&str> = caps.iter().map(|c| c.name).collect();
    let short: Vec<&str> = caps.iter().map(|c| c.short()).collect();
    let it = if caps.len() == 1 { "it" } else { "them" };
    // Root with a cut-down set (a bounding set, a container) is granted them the same ways.
    let who = if nix::unistd::geteuid().is_root() {
        format!("grant {it}")
    } else {
        format!("run ck as root, or grant {it}")
    };
    format!(
        "{who}: `setcap {}+ep /path/to/ck`, systemd `AmbientCapabilities={}` (or \
         `CapabilityBoundingSet=`), Kubernetes `securityContext.capabilities.add: [{}]`",
        lower.join(","),
        upper.join(" "),
        short.join(", ")
    )
}

/// An explanation for an error that `caps` may be missing from: "ck lacks CAP_X: how to grant
/// it", or `None` when ck has them all (the cause is elsewhere).
pub fn lacking(caps: &[Cap]) -> Option<String> {
    let absent = missing(caps);
    (!absent.is_empty()).then(|| {
        format!(
            "ck lacks {} (it runs as uid {}): {}",
            names(&absent),
            nix::unistd::geteuid(),
            how_to_grant(&absent)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_set_from_proc_status() {
        let status = "Name:\tck\nCapInh:\t0000000000000000\nCapEff:\t000000c000000000\n";
        let set = parse_set(status, "CapEff").unwrap();
        assert_eq!(missing_from(set, &[BPF, PERFMON]), vec![]);
        assert_eq!(missing_from(set, &[BPF, NET_ADMIN]), vec![NET_ADMIN]);
        assert_eq!(parse_set(status, "CapInh"), Some(0));
        assert_eq!(parse_set(status, "CapAmb"), None);
    }

    #[test]
    fn names_and_grants_read_as_english() {
        assert_eq!(names(&[BPF]), "CAP_BPF");
        assert_eq!(
            names(&[BPF, PERFMON, NET_ADMIN]),
            "CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN"
        );
        let grant = how_to_grant(&[BPF, PERFMON]);
        assert!(grant.contains("setcap cap_bpf,cap_perfmon+ep"), "{grant}");
        assert!(
            grant.contains("AmbientCapabilities=CAP_BPF CAP_PERFMON"),
            "{grant}"
        );
        assert!(grant.contains("add: [BPF, PERFMON]"), "{grant}");
    }

    #[test]
    fn this_process_can_read_its_set() {
        assert!(effective().is_some());
    }
}
