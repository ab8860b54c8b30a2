//! `ck_udp_minimal`: the yardstick that `cargo xtask bench udp-cost` and `bpf-cost` measure
//! ck's select programs against (it picks a UDP socket or a TCP listener alike); ck never
//! loads it. It does the least any select program does: the kernel's hash of the packet's
//! addresses and ports, modulo the socket count, picks a socket of the same `sockets` array.
//! No counters, no tables, no modes.
use aya_ebpf::{
    Global,
    bindings::sk_action::{SK_DROP, SK_PASS},
    macros::sk_reuseport,
    programs::SkReuseportContext,
};

use crate::SOCKETS;

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
