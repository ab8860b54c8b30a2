//! Where ck's programs read kernel memory, found in the running kernel's BTF once per process:
//! a connection's peer and its pending error in `struct sock` (the connection counter), a
//! listener's accept queue (`least-queue`, the canary's queue watch) and a task's wait status
//! (the exit watch). Each is checked for the size the program reads.
//!
//! One parse for all of them: reading and parsing `/sys/kernel/btf/vmlinux` takes 3 to 9 ms
//! and some 14 MB of passing memory (more while the memory is cold, at start-up), and each
//! reader used to parse it on its own, twice on the way to a fresh fleet's first connection.
//! The offsets stay; the parse is dropped. [`resolve_beside`] overlaps the parse with other work
//! (aya's own parse of the same file when it makes a loader).
use std::sync::OnceLock;

use ck_common::{PeerOffsets, QueueOffsets, exits::ExitOffsets};

use super::btf::{Btf, BtfError};

/// The offsets each reader needs, or the words saying why they could not be found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelLayout {
    /// A connection's peer in `struct sock` (probes told apart from clients).
    pub peer: Result<PeerOffsets, String>,
    /// `sk_err` in `struct sock` (resets a connection's own side sent): Ok(0) where the
    /// counter's context does not start with its socket.
    pub sk_err: Result<u32, String>,
    /// A listener's accept queue (exact queue depths and ages).
    pub queue: Result<QueueOffsets, String>,
    /// A task's wait status (the exit watch).
    pub exits: Result<ExitOffsets, String>,
}

/// The running kernel's layout, once resolved.
static RESOLVED: OnceLock<KernelLayout> = OnceLock::new();

/// The running kernel's layout, resolved at the first call (later calls, from any thread, wait
/// for it or read it). The connection counter's two offsets that were not found are said once,
/// here, with what their absence means (least-queue's and the exit watch's readers say theirs
/// where ck reports them).
pub fn kernel() -> &'static KernelLayout {
    RESOLVED.get_or_init(|| {
        let layout = match Btf::kernel() {
            Ok(btf) => KernelLayout::in_btf(&btf),
            Err(e) => KernelLayout::unreadable(&e),
        };
        if let Err(why) = &layout.peer {
            tracing::debug!("probe connections counted as open: {why}");
        }
        if let Err(why) = &layout.sk_err {
            tracing::debug!("resets sent are not counted: {why}");
        }
        layout
    })
}

/// `work()`'s result, with [`kernel`] resolved on another thread meanwhile (no thread when it is
/// already): the start-up's two parses of the kernel's BTF, ck's and aya's, run side by side.
/// Where no thread can be made (a process limit reached), one after the other.
pub fn resolve_beside<T>(work: impl FnOnce() -> T) -> T {
    if RESOLVED.get().is_some() {
        return work();
    }
    std::thread::scope(|scope| {
        let beside = std::thread::Builder::new()
            .name("ck-btf".into())
            .spawn_scoped(scope, kernel);
        let result = work();
        match beside {
            Ok(layout) => {
                if let Err(panic) = layout.join() {
                    std::panic::resume_unwind(panic);
                }
            }
            Err(_) => {
                kernel();
            }
        }
        result
    })
}

impl KernelLayout {
    /// Every reader's offsets in `btf`.
    pub fn in_btf(btf: &Btf) -> KernelLayout {
        KernelLayout {
            peer: peer_in(btf).map_err(|e| e.to_string()),
            sk_err: sk_err_in(btf).map_err(|e| e.to_string()),
            queue: queue_in(btf)
                .map_err(|e| format!("{e}; ck needs a kernel with BTF (Linux >= 5.14)")),
            exits: exits_in(btf)
                .map_err(|e| format!("finding the exit status in the kernel's BTF: {e}")),
        }
    }

    /// What every reader says when the kernel's BTF cannot be read.
    fn unreadable(error: &BtfError) -> KernelLayout {
        let why = error.to_string();
        KernelLayout {
            peer: Err(why.clone()),
            sk_err: Err(why.clone()),
            queue: Err(why.clone()),
            exits: Err(format!("reading the kernel's BTF: {why}")),
        }
    }
}

/// A connection's peer in `struct sock`.
pub fn peer_in(btf: &Btf) -> Result<PeerOffsets, BtfError> {
    let at = |member: &str, size: u32| {
        btf.sized_field("sock", &["__sk_common", member], size)
            .map(|f| f.offset)
    };
    Ok(PeerOffsets {
        port: at("skc_dport", 2)?,
        family: at("skc_family", 2)?,
        addr4: at("skc_daddr", 4)?,
        addr6: at("skc_v6_daddr", 16)?,
    })
}

/// `sk_err` in `struct sock`; 0 where `ck_conns_ops` could not reach it: it reads the socket's
/// address as the first field of the kernel's context, and anywhere else would read garbage.
fn sk_err_in(btf: &Btf) -> Result<u32, BtfError> {
    let sk = btf.field("bpf_sock_ops_kern", &["sk"])?;
    let err = btf.sized_field("sock", &["sk_err"], 4)?;
    Ok(if sk.offset == 0 { err.offset } else { 0 })
}

/// Where the select program reads a listener's accept queue.
pub fn queue_in(btf: &Btf) -> Result<QueueOffsets, BtfError> {
    let sized = |within: &str, path: &[&str], size: u32| btf.sized_field(within, path, size);
    let selected = sized("sk_reuseport_kern", &["selected_sk"], 8)?;
    let backlog = sized("sock", &["sk_ack_backlog"], 4)?;
    // The program reads both fields from the same address (a `struct sock *`), which is also
    // the start of the `inet_connection_sock` a TCP listener is.
    let sock = btf.field("inet_connection_sock", &["icsk_inet", "sk"])?;
    if sock.offset != 0 {
        return Err(BtfError::Unexpected {
            field: "inet_connection_sock.icsk_inet.sk".into(),
            found: format!("at byte {}", sock.offset),
            expected: "at its start".into(),
        });
    }
    let syn_recv = sized("inet_connection_sock", &["icsk_accept_queue", "qlen"], 4)?;
    let head = sized(
        "inet_connection_sock",
        &["icsk_accept_queue", "rskq_accept_head"],
        8,
    )?;
    let synack_sent = sized("tcp_request_sock", &["snt_synack"], 8)?;
    Ok(QueueOffsets {
        selected_sk: selected.offset,
        ack_backlog: backlog.offset,
        syn_recv: syn_recv.offset,
        accept_head: head.offset,
        synack_sent: synack_sent.offset,
    })
}

/// The fields the exit watch reads a task's wait status from.
pub fn exits_in(btf: &Btf) -> Result<ExitOffsets, BtfError> {
    // The sizes the program reads: pointers, then 4-byte integers.
    let at = |within: &str, name: &str, size: u32| {
        btf.sized_field(within, &[name], size).map(|f| f.offset)
    };
    Ok(ExitOffsets {
        signal: at("task_struct", "signal", 8)?,
        signal_flags: at("signal_struct", "flags", 4)?,
        group_exit_code: at("signal_struct", "group_exit_code", 4)?,
        group_leader: at("task_struct", "group_leader", 8)?,
        exit_code: at("task_struct", "exit_code", 4)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On this machine's kernel every reader's offsets are found, from one parse, and they are
    /// what the fields themselves say.
    #[test]
    fn every_readers_offsets_are_found_in_the_kernels_btf() {
        let btf = Btf::kernel().unwrap();
        let layout = kernel();
        assert_eq!(*layout, KernelLayout::in_btf(&btf));
        let peer = layout.peer.clone().unwrap();
        // `sock_common` at the start of `struct sock`, its peer's port after the addresses
        // and the hash.
        assert_eq!(
            (peer.addr4, peer.port, peer.family),
            (0, 12, 16),
            "{peer:?}"
        );
        assert!(peer.addr6 > peer.family, "{peer:?}");
        assert_eq!(
            layout.sk_err,
            Ok(btf.field("sock", &["sk_err"]).unwrap().offset)
        );
        let queue = layout.queue.clone().unwrap();
        assert_eq!(
            queue.ack_backlog,
            btf.field("sock", &["sk_ack_backlog"]).unwrap().offset
        );
        assert!(queue.syn_recv > queue.ack_backlog);
        assert_eq!(
            queue.accept_head,
            btf.field(
                "inet_connection_sock",
                &["icsk_accept_queue", "rskq_accept_head"]
            )
            .unwrap()
            .offset
        );
        assert!(queue.synack_sent > 0);
        let exits = layout.exits.clone().unwrap();
        assert_eq!(
            exits.exit_code,
            btf.field("task_struct", &["exit_code"]).unwrap().offset
        );
        assert_ne!(exits.signal, exits.group_leader);
    }

    /// Without the kernel's BTF each reader says so, and the exit watch's words say what it was
    /// reading.
    #[test]
    fn an_unreadable_btf_is_every_readers_reason() {
        let missing = Btf::read(std::path::Path::new("/nonexistent/vmlinux")).unwrap_err();
        let layout = KernelLayout::unreadable(&missing);
        for why in [&layout.peer.clone().err(), &layout.queue.clone().err()] {
            assert!(
                why.as_deref()
                    .is_some_and(|w| w.contains("CONFIG_DEBUG_INFO_BTF"))
            );
        }
        assert!(layout.sk_err.is_err());
        assert!(
            layout
                .exits
                .as_ref()
                .is_err_and(|w| w.starts_with("reading the kernel's BTF: "))
        );
    }

    /// The work and the layout both done, the work's result returned.
    #[test]
    fn the_layout_resolves_beside_other_work() {
        assert_eq!(resolve_beside(|| 7), 7);
        assert!(kernel().peer.is_ok());
    }
}
