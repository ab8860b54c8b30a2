//! The exit watch in the supervisor: loads `ck_exits` (`tp_btf/sched_process_exit`), keeps the
//! watched pids (`exit_watch`) and forwards the `exits` ring buffer. One per ck process, beside
//! the groups' programs; not pinned: a ck that takes a fleet over (`ck upgrade`, a restarted ck
//! under `--survive-supervisor`) loads its own and watches the workers it took.
use anyhow::Context as _;
use aya::{
    Ebpf,
    maps::{Array, HashMap, MapData, RingBuf},
    programs::BtfTracePoint,
};
use ck_common::exits::{ExitEvent, ExitOffsets};

/// The kernel's tracepoint.
const TRACEPOINT: &str = "sched_process_exit";

/// The environment variable that leaves exits to the pidfds alone (`pidfd`), as a kernel without
/// the tracepoint's `group_dead` does: for tests and benchmarks of that path.
pub const FORCE_ENV: &str = "CK_EXIT_WATCH";

/// The loaded and attached program and its watch list.
pub struct ExitWatch {
    /// Keeps the program attached.
    _ebpf: Ebpf,
    watched: HashMap<MapData, u32, u32>,
}

impl std::fmt::Debug for ExitWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ExitWatch")
    }
}

impl ExitWatch {
    /// Loads and attaches the program, and returns it with its ring buffer of exits. The error
    /// says why the kernel refused (ck then learns of exits from the pidfds alone).
    pub fn attach() -> anyhow::Result<(ExitWatch, RingBuf<MapData>)> {
        match std::env::var(FORCE_ENV).as_deref() {
            Ok("pidfd") => anyhow::bail!("{FORCE_ENV}=pidfd asks for the pidfds alone"),
            Ok("" | "tracepoint") | Err(_) => {}
            Ok(other) => anyhow::bail!(
                "{FORCE_ENV}={other} is neither `tracepoint` nor `pidfd`; unset it for the exit \
                 watch"
            ),
        }
        let offsets = super::kernel_layout::kernel()
            .exits
            .clone()
            .map_err(anyhow::Error::msg)?;
        let mut ebpf = super::object::load_object()?;
        {
            let mut at: Array<_, ExitOffsets> = Array::try_from(
                ebpf.map_mut("exit_offsets")
                    .context("map exit_offsets missing")?,
            )?;
            at.set(0, offsets, 0).context("writing exit_offsets")?;
        }
        let btf = aya::Btf::from_sys_fs().context("reading /sys/kernel/btf/vmlinux")?;
        let program: &mut BtfTracePoint = ebpf
            .program_mut("ck_exits")
            .context("program ck_exits missing from the object")?
            .try_into()
            .context("ck_exits is not a tp_btf program")?;
        program.load(TRACEPOINT, &btf).with_context(|| {
            format!(
                "the kernel refused tp_btf/{TRACEPOINT} (its tracepoint has no group_dead \
                 argument before the kernel moved it ahead of the memory teardown)"
            )
        })?;
        program
            .attach()
            .with_context(|| format!("attaching to tp_btf/{TRACEPOINT}"))?;
        let watched = HashMap::try_from(ebpf.take_map("exit_watch").context("no exit_watch")?)?;
        let ring = RingBuf::try_from(ebpf.take_map("exits").context("no exits")?)?;
        Ok((
            ExitWatch {
                _ebpf: ebpf,
                watched,
            },
            ring,
        ))
    }

    /// Watches `pid` (slot `slot`'s worker).
    pub fn watch(&mut self, pid: u32, slot: u32) {
        if let Err(e) = self.watched.insert(pid, slot, 0) {
            tracing::warn!(slot, pid, "watching the worker's exit: {e}");
        }
    }

    /// Stops watching `pid` (it exited, or is no longer ck's).
    pub fn unwatch(&mut self, pid: u32) {
        let _ = self.watched.remove(&pid);
    }

    /// The pids watched, as the kernel's map holds them.
    pub fn watched(&self) -> Vec<u32> {
        self.watched.keys().filter_map(Result::ok).collect()
    }
}

/// Reads `ring` on the runtime and hands every exit to `send`, until it returns false.
pub fn forward_exits(
    ring: RingBuf<MapData>,
    send: impl Fn(ExitEvent) -> bool + Send + 'static,
) -> anyhow::Result<()> {
    super::ring::forward_records(ring, send)
}
