//! The `--adopt` hooks on the instance's cgroup: `cgroup/bind4` and `cgroup/bind6` programs that
//! add `SO_REUSEPORT` to binds to the instance's ports, a `sock_ops` program that reports
//! every socket that starts to listen, and with UDP groups `cgroup/post_bind4` and
//! `cgroup/post_bind6` programs that report every UDP socket bound to one of the ports. Attached through bpf links, which ck pins beside the
//! instance's maps once they are loaded ([`AdoptHooks::pin`]): the hooks stay attached across
//! `ck upgrade` and while a dead ck is away (`--survive-supervisor`), and leave with the pins.
use std::{fs::File, path::Path};

use anyhow::Context as _;
use aya::{
    Ebpf,
    maps::{HashMap, MapData, RingBuf},
    programs::{
        CgroupAttachMode, CgroupSock, CgroupSockAddr, SockOps, links::FdLink, links::PinnedLink,
    },
};
use ck_common::{ListenEvent, MAX_ADOPT_PORTS};

use super::error::{BpfError, load_advice};

/// The loaded and attached hooks.
pub struct AdoptHooks {
    /// Keeps the programs alive.
    _ebpf: Ebpf,
    /// Their links, by program name, until pinned.
    links: Vec<(&'static str, FdLink)>,
    /// The pinned links (dropping them closes ck's fds; the pins keep the hooks attached).
    pinned: Vec<PinnedLink>,
}

fn load_err(what: &'static str) -> impl FnOnce(anyhow::Error) -> BpfError {
    move |error| BpfError::Load {
        what: what.to_string(),
        error,
        advice: load_advice(
            &crate::os::capabilities::needed_for_bpf(true),
            "drop --adopt (workers then get their sockets from ck)",
        ),
    }
}

/// Finds program `$name` (of type `$kind`) in `$ebpf`, loads it and attaches it to `$cgroup`;
/// evaluates to its link when the kernel made one that can be pinned (`bpf_link_create`, Linux
/// 5.7+; else the attachment stays ck's), or returns the error naming `$what`. A macro: each
/// program type has its own link type, which no trait of aya's turns into an `FdLink`.
macro_rules! attach_hook {
    ($ebpf:expr, $cgroup:expr, $name:expr, $kind:ty, $what:literal) => {{
        let name: &'static str = $name;
        let program: &mut $kind = $ebpf
            .program_mut(name)
            .with_context(|| format!("program {name} missing"))
            .and_then(|p| p.try_into().context("not the program type expected"))
            .map_err(load_err(concat!("finding ", $what)))?;
        program
            .load()
            .context(concat!("the kernel refused ", $what))
            .map_err(load_err(concat!("loading ", $what)))?;
        let id = program
            .attach(&$cgroup, CgroupAttachMode::Single)
            .context("attaching to the instance's cgroup")
            .map_err(load_err(concat!("attaching ", $what)))?;
        program
            .take_link(id)
            .ok()
            .and_then(|l| FdLink::try_from(l).ok())
            .map(|link| (name, link))
    }};
}

impl AdoptHooks {
    /// Loads the hooks for `ports` (`udp`: some of them are UDP groups' ports), attaches them
    /// to the cgroup `dir`, and returns them with the ring buffer of listen (and UDP bind)
    /// events.
    pub fn attach(
        dir: &Path,
        ports: &[u16],
        udp: bool,
    ) -> Result<(AdoptHooks, RingBuf<MapData>), BpfError> {
        if ports.len() > MAX_ADOPT_PORTS as usize {
            return Err(load_err("configuring --adopt")(anyhow::anyhow!(
                "at most {MAX_ADOPT_PORTS} ports can be adopted"
            )));
        }
        let mut ebpf =
            super::object::load_object().map_err(load_err("loading the --adopt hooks"))?;
        {
            let mut map: HashMap<_, u16, u8> = ebpf
                .map_mut("adopt_ports")
                .context("map adopt_ports missing")
                .and_then(|m| HashMap::try_from(m).context("adopt_ports is not a hash map"))
                .map_err(load_err("finding the --adopt ports map"))?;
            for port in ports {
                map.insert(port, 1, 0).map_err(|e| BpfError::MapWrite {
                    map: "adopt_ports",
                    error: e.into(),
                })?;
            }
        }
        let cgroup = File::open(dir)
            .with_context(|| format!("opening {}", dir.display()))
            .map_err(load_err("opening the instance's cgroup"))?;
        let mut links = Vec::new();
        for name in ["ck_bind4", "ck_bind6"] {
            links.extend(attach_hook!(
                ebpf,
                cgroup,
                name,
                CgroupSockAddr,
                "the bind hooks"
            ));
        }
        links.extend(attach_hook!(
            ebpf,
            cgroup,
            "ck_listen",
            SockOps,
            "the listen hook"
        ));
        if udp {
            for name in ["ck_bound4", "ck_bound6"] {
                links.extend(attach_hook!(
                    ebpf,
                    cgroup,
                    name,
                    CgroupSock,
                    "the UDP bind hooks"
                ));
            }
        }
        let ring = ebpf
            .take_map("listens")
            .context("map listens missing")
            .and_then(|m| RingBuf::try_from(m).context("listens is not a ring buffer"))
            .map_err(load_err("taking the listen events"))?;
        Ok((
            AdoptHooks {
                _ebpf: ebpf,
                links,
                pinned: Vec::new(),
            },
            ring,
        ))
    }

    /// Pins the hooks' links in `dir` (the instance's pin directory, once the program's load
    /// has removed stale pins), in place of those an earlier image of ck pinned there: theirs
    /// are unpinned only now, so some hook is attached at every moment. Cgroup links attach
    /// side by side (the kernel's multi mode), so both ran meanwhile.
    pub fn pin(&mut self, dir: &Path) -> Result<(), BpfError> {
        super::pins::create_group_dir(dir)?;
        for (name, link) in self.links.drain(..) {
            let path = dir.join(name);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(super::pins::error("replacing a pinned hook", &path, e)),
            }
            let pinned = link.pin(&path).map_err(|e| {
                super::pins::error("pinning a hook", &path, std::io::Error::other(e))
            })?;
            self.pinned.push(pinned);
        }
        Ok(())
    }
}

/// Reads `ring` on the runtime and hands every listen event to `send`, until it returns false.
pub fn forward_listens(
    ring: RingBuf<MapData>,
    send: impl Fn(ListenEvent) -> bool + Send + 'static,
) -> anyhow::Result<()> {
    super::ring::forward_records(ring, send)
}
