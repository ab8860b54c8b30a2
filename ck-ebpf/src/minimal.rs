//! The yardsticks the benches measure ck's programs against; ck never loads them.
//!
//! - `ck_udp_minimal`, for `cargo xtask bench udp-cost` and `bpf-cost` (it picks a UDP socket
//!   or a TCP listener alike): the least any select program does. The kernel's hash of the
//!   packet's addresses and ports, modulo the socket count, picks a socket of the same
//!   `sockets` array. No counters, no tables, no modes.
//! - `ck_udp_minimal_recall`, for `bench udp-cost`: the least a program that remembers each
//!   flow's socket does. One 8-byte entry per hash position in a 16 KiB array (kmalloc'd, as
//!   ck's `flow_cache` is): an entry holding the flow's hash names its socket; otherwise the
//!   flow takes `hash % n` and the entry is written. No counters, no generations, no probes:
//!   beside `ck_udp_minimal` it is the cost of one read of memory that belongs to the flow.
//! - `ck_minimal_count`, for `bench conn-count`: the least a `sock_ops` program that counts
//!   open connections does. It asks for every passive connection's state changes and keeps one
//!   per-CPU count (+1 when established, -1 at `CLOSE`): no tags, no slots, no probes, no
//!   resets. The kernel runs it as often as it runs ck's counter, so beside a minimal select
//!   program it is the floor of any count kept by `sock_ops`.
//! - `ck_minimal_open` and `ck_minimal_release`, for the same bench: the same count taken
//!   another way, +1 as a connection is established (`sock_ops`, asking for no state change)
//!   and -1 when its last descriptor is closed (`cgroup/sock_release`, which runs once per
//!   socket). Fewer runs per connection, but what it counts differs (see `bench conn-count`).
use aya_ebpf::{
    Global,
    bindings::{
        BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB, BPF_SOCK_OPS_STATE_CB, BPF_SOCK_OPS_STATE_CB_FLAG,
        BPF_TCP_CLOSE, BPF_TCP_LISTEN,
        sk_action::{SK_DROP, SK_PASS},
    },
    btf_maps::Array,
    macros::{btf_map, cgroup_sock, sk_reuseport, sock_ops},
    programs::{SkReuseportContext, SockContext, SockOpsContext},
};

use crate::{SOCKETS, conns};

/// How many sockets the bench put in `sockets` (slots 0..n), set when it loads the program.
#[unsafe(no_mangle)]
static CK_MINIMAL_SOCKETS: Global<u32> = Global::new(1);

#[sk_reuseport]
pub fn ck_udp_minimal(ctx: SkReuseportContext) -> u32 {
    let sockets = CK_MINIMAL_SOCKETS.load();
    if sockets == 0 {
        return SK_DROP;
    }
    match SOCKETS.select_reuseport(&ctx, ctx.hash() % sockets) {
        Ok(()) => SK_PASS,
        Err(_) => SK_DROP,
    }
}

/// Entries of `minimal_flows`: a power of two, 8 bytes each, under the kernel's 32 KiB limit
/// for a kmalloc'd map.
const RECALL_ENTRIES: u32 = 2048;

/// `ck_udp_minimal_recall`'s memory: at a flow's hash position, `hash << 32 | slot + 1`.
/// ck shrinks it to one entry (it never runs the yardsticks).
#[btf_map(name = "minimal_flows")]
static MINIMAL_FLOWS: Array<u64, { RECALL_ENTRIES as usize }> = Array::new();

#[sk_reuseport]
pub fn ck_udp_minimal_recall(ctx: SkReuseportContext) -> u32 {
    let sockets = CK_MINIMAL_SOCKETS.load();
    let hash = ctx.hash();
    let Some(entry) = MINIMAL_FLOWS.get_ptr_mut(hash & (RECALL_ENTRIES - 1)) else {
        return SK_DROP;
    };
    // SAFETY: an 8-byte value of the map, valid for this run, read and written as one word.
    let word = unsafe { core::ptr::read_volatile(entry) };
    let slot = if (word >> 32) as u32 == hash && word as u32 != 0 {
        word as u32 - 1
    } else {
        if sockets == 0 {
            return SK_DROP;
        }
        let slot = hash % sockets;
        // SAFETY: as above.
        unsafe { core::ptr::write_volatile(entry, u64::from(hash) << 32 | u64::from(slot + 1)) };
        slot
    };
    match SOCKETS.select_reuseport(&ctx, slot) {
        Ok(()) => SK_PASS,
        Err(_) => SK_DROP,
    }
}

#[sock_ops]
pub fn ck_minimal_count(ctx: SockOpsContext) -> u32 {
    let op = ctx.op();
    if op == BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB {
        let _ = ctx.set_cb_flags((ctx.cb_flags() | BPF_SOCK_OPS_STATE_CB_FLAG) as i32);
        conns::add(0, 1);
    } else if op == BPF_SOCK_OPS_STATE_CB && ctx.arg(1) == BPF_TCP_CLOSE {
        // args[1]: the new state.
        conns::add(0, -1);
    }
    1
}

#[sock_ops]
pub fn ck_minimal_open(ctx: SockOpsContext) -> u32 {
    if ctx.op() == BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB {
        conns::add(0, 1);
    }
    1
}

#[cgroup_sock(sock_release)]
pub fn ck_minimal_release(ctx: SockContext) -> i32 {
    // SAFETY: the context pointer is the kernel's `bpf_sock` for this call; `state` is a field
    // the verifier lets this program read.
    let state = unsafe { (*ctx.sock).state };
    // A listener's release is not a connection's.
    if state != BPF_TCP_LISTEN {
        conns::add(0, -1);
    }
    1
}
