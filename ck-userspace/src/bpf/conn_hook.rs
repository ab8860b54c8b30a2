//! Where the kernel runs the connection counter (see `conns`): a `sock_ops` program on the
//! slots' cgroups or the instance's, or the `tp_btf/inet_sock_set_state` tracepoint where ck
//! has none.
//!
//! With a cgroup, ck creates every listening socket inside it, each slot's in a cgroup of its
//! own (`os::fork::socket_in`: a socket's cgroup is its creator's), and attaches
//! `ck_conns_ops` to each slot's (`slot_cgroups`), which names the slot: no tag on the
//! sockets. With `--adopt` the workers bind their own sockets in their own cgroups, and the
//! program is attached to each worker's (`worker_cgroups`), which names the worker's slot and
//! the group's port: no tag either. An instance an earlier image began with tags keeps them
//! (the program on the instance's cgroup, each listener tagged). Either way the kernel
//! runs it for the fleet's connections only, and for their state changes only once the program
//! asked for them on a counted connection. The host's other traffic, and other ck instances',
//! never run it. Without a cgroup (a host without cgroup2), `ck_conns` runs on every TCP state
//! change of the host and returns at once for a socket that is not the fleet's:
//! `CK_CONN_COUNT=host` asks for that hook anywhere (to compare them, `bench conn-count`).
//!
//! The link is pinned beside the maps, each hook under its own name, so counting goes on while
//! ck execs a new image (`ck upgrade`) or is dead (`--survive-supervisor`). A new image keeps
//! the hook its predecessor pinned (sockets it created outside the cgroup would not be seen by
//! the other), attaches its own program, then replaces the pin: both run for a moment, which a
//! connection's `counted` flag makes harmless.
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use aya::{
    Btf, Ebpf,
    programs::{BtfTracePoint, CgroupAttachMode, SockOps, links::FdLink},
};

/// The environment variable that chooses how connections are counted: `scan` (the sock_diag
/// scan, e.g. to test the fallback) or `host` (the host-wide tracepoint even with a cgroup).
pub const FORCE_ENV: &str = "CK_CONN_COUNT";

/// The tracepoint `ck_conns` attaches to.
const TRACEPOINT: &str = "inet_sock_set_state";

/// Where each hook's link is pinned, in the group's pin directory.
const HOST_PIN: &str = "conns_link";
const CGROUP_PIN: &str = "conns_ops_link";
/// Where the program attached to the workers' cgroups is pinned (see `worker_cgroups`).
pub(super) const WORKERS_PIN: &str = "conns_ops_workers";
/// The pins of the slots' links start so (`conns_ops_s<slot>`: see `slot_cgroups`).
pub(super) const SLOT_PIN_PREFIX: &str = "conns_ops_s";

/// Whether an image pinned a slot's link in `pin_dir`.
fn any_slot_pinned(pin_dir: &Path) -> bool {
    std::fs::read_dir(pin_dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(SLOT_PIN_PREFIX))
    })
}

/// Where the counter runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConnHook {
    /// `ck_conns_ops` on each slot's cgroup under `sockets` (the instance's `sockets` cgroup),
    /// named after the group: ck's own sockets, untagged.
    Slots {
        /// The instance's `sockets` cgroup.
        sockets: PathBuf,
        /// The group's name (`tcp4-8080`).
        group: String,
    },
    /// `ck_conns_ops` on each worker's cgroup (`--adopt`): the sockets the workers make there,
    /// untagged.
    Workers,
    /// `ck_conns_ops` on this cgroup (the instance's): the fleet's sockets only, tagged (an
    /// instance an earlier image began so).
    Cgroup(PathBuf),
    /// `ck_conns` on `tp_btf/inet_sock_set_state`: every TCP state change of the host.
    Host,
}

impl ConnHook {
    /// The hook for group `group`, whose pins are in `pin_dir`: after an upgrade or a take-back
    /// (`resume`), the one the earlier image pinned; else, if the instance has a cgroup (`scope`)
    /// and `CK_CONN_COUNT=host` does not ask otherwise, its slots' cgroups where ck makes the
    /// sockets (`own_sockets`), or its workers' (`--adopt`). Fails for `CK_CONN_COUNT=scan`.
    pub fn choose(
        pin_dir: &Path,
        resume: bool,
        scope: Option<&Path>,
        own_sockets: bool,
        group: &str,
    ) -> anyhow::Result<ConnHook> {
        let forced = std::env::var(FORCE_ENV).unwrap_or_default();
        match forced.trim() {
            "scan" => anyhow::bail!("{FORCE_ENV}=scan asks for the sock_diag scan"),
            "" | "host" => {}
            other => anyhow::bail!(
                "{FORCE_ENV}={other} is neither `scan` nor `host`; unset it for the kernel's \
                 counts on the instance's cgroup"
            ),
        }
        let slots = |dir: &Path| ConnHook::Slots {
            sockets: crate::os::cgroup::sockets_dir(dir),
            group: group.to_string(),
        };
        let lost = "the earlier image counted in its cgroup, which this one has not found";
        if resume && pin_dir.join(HOST_PIN).exists() {
            return Ok(ConnHook::Host);
        }
        if resume && pin_dir.join(CGROUP_PIN).exists() {
            return scope
                .map(|dir| ConnHook::Cgroup(dir.to_path_buf()))
                .context(lost);
        }
        if resume && any_slot_pinned(pin_dir) {
            return scope.map(slots).context(lost);
        }
        if resume && pin_dir.join(WORKERS_PIN).exists() {
            return scope.map(|_| ConnHook::Workers).context(lost);
        }
        let cgroup = scope.map(|dir| match own_sockets {
            true => slots(dir),
            false if test_seam::tags_on_instance() => ConnHook::Cgroup(dir.to_path_buf()),
            false => ConnHook::Workers,
        });
        Ok(match (cgroup, forced.trim()) {
            (Some(hook), "") => hook,
            (None, "") => {
                // Said once per ck, not once per group.
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| {
                    tracing::info!(
                        "open connections are counted on a host-wide tracepoint (ck has no \
                         cgroup2 cgroup to create its sockets in): every TCP state change on \
                         this host runs it"
                    )
                });
                ConnHook::Host
            }
            _ => ConnHook::Host,
        })
    }

    /// The hook whose link is pinned in `pin_dir` (None: no counter runs for that group), read
    /// from the pins the kernel holds, for `ck status`.
    pub fn pinned(pin_dir: &Path) -> Option<&'static str> {
        if pin_dir.join(CGROUP_PIN).exists()
            || any_slot_pinned(pin_dir)
            || pin_dir.join(WORKERS_PIN).exists()
        {
            Some("cgroup")
        } else if pin_dir.join(HOST_PIN).exists() {
            Some("host")
        } else {
            None
        }
    }

    /// Loads and attaches this hook's program from `ebpf` and pins its link in `pin_dir`,
    /// replacing an earlier image's (`resume`). The error says why the kernel refused. (The
    /// slots' and workers' cgroups are attached to one by one: `slot_cgroups`,
    /// `worker_cgroups`.)
    pub fn attach(&self, ebpf: &mut Ebpf, pin_dir: &Path, resume: bool) -> anyhow::Result<()> {
        let (link, pin) = match self {
            ConnHook::Host => (attach_host(ebpf)?, HOST_PIN),
            ConnHook::Cgroup(dir) => (attach_cgroup(ebpf, dir)?, CGROUP_PIN),
            ConnHook::Slots { .. } | ConnHook::Workers => return Ok(()),
        };
        pin_replacing(link, &pin_dir.join(pin), resume)
    }
}

/// Pins `link` at `path`, first removing an earlier image's pin there (`replace`): that image's
/// program stays attached through its pin until then, and ours runs already, so no state
/// change goes uncounted.
pub(super) fn pin_replacing(link: FdLink, path: &Path, replace: bool) -> anyhow::Result<()> {
    if replace {
        remove_pin(path)?;
    }
    link.pin(path)
        .with_context(|| format!("pinning the link at {}", path.display()))?;
    Ok(())
}

/// Removes an earlier image's pin at `path`, if there is one.
pub(super) fn remove_pin(path: &Path) -> anyhow::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing {}", path.display()))
        }
        _ => Ok(()),
    }
}

/// `ck_conns` on the tracepoint.
fn attach_host(ebpf: &mut Ebpf) -> anyhow::Result<FdLink> {
    let btf = Btf::from_sys_fs().context("reading the kernel's BTF (/sys/kernel/btf/vmlinux)")?;
    let program: &mut BtfTracePoint = ebpf
        .program_mut("ck_conns")
        .context("program ck_conns missing from the object")?
        .try_into()
        .context("ck_conns is not a tp_btf program")?;
    program
        .load(TRACEPOINT, &btf)
        .with_context(|| format!("the kernel refused the tp_btf/{TRACEPOINT} program"))?;
    let id = program
        .attach()
        .with_context(|| format!("attaching to tp_btf/{TRACEPOINT}"))?;
    Ok(program.take_link(id).context("taking the link")?.into())
}

/// `ck_conns_ops` loaded and attached to the cgroup `dir` (see [`attach_sock_ops`]).
fn attach_cgroup(ebpf: &mut Ebpf, dir: &Path) -> anyhow::Result<FdLink> {
    let program = sock_ops_program(ebpf)?;
    program
        .load()
        .context("the kernel refused the sock_ops program")?;
    attach_sock_ops(program, dir)
}

/// `ck_conns_ops` in `ebpf`.
pub(super) fn sock_ops_program(ebpf: &mut Ebpf) -> anyhow::Result<&mut SockOps> {
    ebpf.program_mut("ck_conns_ops")
        .context("program ck_conns_ops missing from the object")?
        .try_into()
        .context("ck_conns_ops is not a sock_ops program")
}

/// `program`, loaded, attached to the cgroup `dir` through a bpf link (which the kernel runs
/// beside other programs there, an earlier image's included; a link takes no attach flags).
pub(super) fn attach_sock_ops(program: &mut SockOps, dir: &Path) -> anyhow::Result<FdLink> {
    let cgroup = std::fs::File::open(dir)
        .with_context(|| format!("opening the cgroup {}", dir.display()))?;
    let id = program
        .attach(&cgroup, CgroupAttachMode::Single)
        .with_context(|| format!("attaching sock_ops to {}", dir.display()))?;
    program
        .take_link(id)
        .context("taking the link")?
        .try_into()
        .context("the kernel gave no bpf link for the cgroup (kernel >= 5.7 needed)")
}

/// The tests' way to the instance's cgroup with tags, which ck chooses only for an instance an
/// earlier image began so (its pin).
pub(super) mod test_seam {
    #[cfg(test)]
    thread_local! {
        static TAGS_ON_INSTANCE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// Whether this thread's test asked for tags on the instance's cgroup (never outside tests).
    pub(super) fn tags_on_instance() -> bool {
        #[cfg(test)]
        return TAGS_ON_INSTANCE.get();
        #[cfg(not(test))]
        false
    }

    /// Asks for tags on the instance's cgroup (`--adopt` counted as an earlier image did) in
    /// this thread's groups loaded from now on.
    #[cfg(test)]
    pub(crate) fn ask_tags_on_instance(yes: bool) {
        TAGS_ON_INSTANCE.set(yes);
    }
}
