//! Open connections per slot, counted by the kernel (`ck_conns`, `tp_btf/inet_sock_set_state`,
//! see the program's `conns.rs`): each listening socket of a slot is tagged with its slot in the
//! `conn_tags` socket storage (copied by the kernel into every connection it creates), its cookie
//! written to `listeners` (so a migration moves the count off the closing listener's slot), and
//! the per-CPU `conns` counters are summed here.
//!
//! The program is attached through a bpf link pinned beside the maps (`conns_link`), so counting
//! goes on while ck execs a new image (`ck upgrade`) or is dead (`--survive-supervisor`); the
//! new image attaches its own program, then replaces the pin (both running for a moment is
//! harmless: a connection's `counted` flag makes a second count a no-op). A slot's count is
//! never zeroed: a slot index used again starts from the connections still open that its
//! listeners created (held by an earlier worker's children, say), which is what it holds.
//!
//! Where the kernel refuses the program (no BTF, an old kernel) or `CK_CONN_COUNT=scan` asks for
//! it, counts come from the sock_diag scan instead (`metrics::connections`).
use std::{collections::HashMap as StdHashMap, path::Path};

use anyhow::Context as _;
use aya::{
    Btf, Ebpf,
    maps::{HashMap, MapData, PerCpuArray, SkStorage},
    programs::{BtfTracePoint, links::FdLink},
};
use ck_common::{ConnTag, MAX_SLOTS};
use socket2::Socket;

/// The environment variable that forces the sock_diag scan (`CK_CONN_COUNT=scan`), e.g. to test
/// the fallback.
pub const FORCE_ENV: &str = "CK_CONN_COUNT";

/// The maps the program counts in, pinned with the others.
pub(crate) const MAPS: [&str; 4] = ["conn_tags", "conns", "listeners", "moved"];

/// Where the program's link is pinned, in the group's pin directory.
const LINK_PIN: &str = "conns_link";

/// The tracepoint `ck_conns` attaches to.
const TRACEPOINT: &str = "inet_sock_set_state";

/// One group's kernel counting of open connections.
pub struct ConnCounter {
    tags: SkStorage<MapData, ConnTag>,
    counts: PerCpuArray<MapData, i64>,
    listeners: HashMap<MapData, u64, u32>,
    /// The cookie of each slot's tagged listener, to drop it from `listeners` when the slot gets
    /// another socket.
    cookies: StdHashMap<u32, u64>,
}

impl ConnCounter {
    /// Loads and attaches `ck_conns` from `ebpf` (already loaded, maps pinned in `pin_dir`) and
    /// takes its maps. `resume`: a pinned link of an earlier image is replaced by this one.
    /// The error says why the kernel refused (the caller falls back to the scan).
    pub fn start(ebpf: &mut Ebpf, pin_dir: &Path, resume: bool) -> anyhow::Result<ConnCounter> {
        if std::env::var(FORCE_ENV).is_ok_and(|v| v == "scan") {
            anyhow::bail!("{FORCE_ENV}=scan asks for the sock_diag scan");
        }
        let btf =
            Btf::from_sys_fs().context("reading the kernel's BTF (/sys/kernel/btf/vmlinux)")?;
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
        let link: FdLink = program.take_link(id).context("taking the link")?.into();
        let path = pin_dir.join(LINK_PIN);
        if resume {
            // The earlier image's program stays attached through its pin until now; ours runs
            // already, so no state change goes uncounted.
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(e).with_context(|| format!("removing {}", path.display()));
                }
                _ => {}
            }
        }
        link.pin(&path)
            .with_context(|| format!("pinning the link at {}", path.display()))?;
        Ok(ConnCounter {
            tags: super::group::take(ebpf, "conn_tags")?,
            counts: super::group::take(ebpf, "conns")?,
            listeners: super::group::take(ebpf, "listeners")?,
            cookies: StdHashMap::new(),
        })
    }

    /// Tags `socket` (a listening socket of `slot`): its connections count for `slot`.
    pub fn tag(&mut self, slot: u32, socket: &Socket) -> anyhow::Result<()> {
        let tag = ConnTag { slot, flags: 0 };
        self.tags
            .insert(socket, tag, 0)
            .context("writing the conn_tags socket storage")?;
        let cookie = crate::os::sock_diag::cookie(socket).context("reading SO_COOKIE")?;
        if let Some(old) = self
            .cookies
            .insert(slot, cookie)
            .filter(|old| *old != cookie)
        {
            let _ = self.listeners.remove(&old);
        }
        self.listeners
            .insert(cookie, slot, 0)
            .context("writing the listeners map")
    }

    /// Open connections of `slot`, summed over CPUs.
    pub fn count(&self, slot: u32) -> i64 {
        if slot >= MAX_SLOTS {
            return 0;
        }
        self.counts
            .get(&slot, 0)
            .map(|values| values.iter().sum())
            .unwrap_or(0)
    }
}
