//! The yardsticks the benches measure ck's programs against; ck never loads them.
//!
//! - `ck_udp_minimal`, for `cargo xtask bench udp-cost` and `bpf-cost` (it picks a UDP socket
//!   or a TCP listener alike): the least any select program does. The kernel's hash of the
//!   packet's addresses and ports, modulo the socket count, picks a socket of the same
//!   `sockets` array. No counters, no tables, no modes.
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
    macros::{cgroup_sock, sk_reuseport, sock_ops},
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
