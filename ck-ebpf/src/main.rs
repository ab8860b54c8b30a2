//! ck's `SK_REUSEPORT` program: for every new connection (and every request migrating off a
//! closing listener) pick one socket of the group from the maps the supervisor keeps current.
//!
//! The program is deliberately small: everything policy-heavy (who is ready, who is a fallback)
//! is computed by the supervisor and written to `active`; here we only index into it.
#![no_std]
#![no_main]

mod adopt;
mod conns;

use aya_ebpf::{
    EbpfContext as _,
    bindings::{
        bpf_hdr_start_off::BPF_HDR_START_NET,
        sk_action::{SK_DROP, SK_PASS},
    },
    btf_maps::{Array, PerCpuArray, ReusePortSockArray},
    helpers::bpf_skb_load_bytes_relative,
    macros::{btf_map, sk_reuseport},
    programs::SkReuseportContext,
};
use aya_log_ebpf::warn;
use ck_common::{
    ActiveSet, Config, MAX_SELECT_TRIES, MAX_SLOTS, STATS_NO_SLOT, SlotInfo, SlotStats, policy,
};

const SLOTS: usize = MAX_SLOTS as usize;
const SLOT_MASK: usize = SLOTS - 1;
const _: () = assert!(SLOTS.is_power_of_two());

/// slot -> listening socket (written by the supervisor with the socket's fd).
#[btf_map(name = "sockets")]
static SOCKETS: ReusePortSockArray<SLOTS> = ReusePortSockArray::new();

/// slot -> state, pid, generation, queue depth, ...: read by people (`bpftool`) and, for the
/// queue depth, by the `least-queue` policy.
#[btf_map(name = "slots")]
static SLOT_INFO: Array<SlotInfo, SLOTS> = Array::new();

/// The active set, double-buffered: `config.live_half` says which half is live.
#[btf_map(name = "active")]
static ACTIVE: Array<ActiveSet, 2> = Array::new();

/// Policy, live half, probe port base.
#[btf_map(name = "config")]
static CONFIG: Array<Config, 1> = Array::new();

/// Per-slot counters; index `STATS_NO_SLOT` counts connections no slot could take.
#[btf_map(name = "stats")]
static STATS: PerCpuArray<SlotStats, { SLOTS + 1 }> = PerCpuArray::new();

/// Per-CPU round-robin cursor.
#[btf_map(name = "cursor")]
static CURSOR: PerCpuArray<u32, 1> = PerCpuArray::new();

#[sk_reuseport(migrate)]
pub fn ck_select(ctx: SkReuseportContext) -> u32 {
    select(&ctx)
}

#[inline(always)]
fn select(ctx: &SkReuseportContext) -> u32 {
    let Some(config) = CONFIG.get(0) else {
        return SK_DROP;
    };
    let migrating = ctx.migrating_sk().is_some();
    if config.probe_base != 0 && !migrating {
        if let Some(slot) = probe_slot(ctx, config.probe_base) {
            // A probe tests one worker through its own socket: never answer it from another.
            if SOCKETS.select_reuseport(ctx, slot).is_ok() {
                count(slot, |s| s.probe_hits += 1);
                return SK_PASS;
            }
            count(slot, |s| s.errors += 1);
            return SK_DROP;
        }
    }
    let Some(set) = ACTIVE.get(config.live_half & 1) else {
        return SK_DROP;
    };
    let mut len = set.ready_len;
    let fallback = len == 0;
    if fallback {
        len = set.live_len;
    }
    if len == 0 {
        count(STATS_NO_SLOT, |s| s.errors += 1);
        warn!(ctx, "ck: no live slot; connection dropped");
        return SK_DROP;
    }
    // `len` is deliberately not clamped to MAX_SLOTS here: the compiler would then prove
    // `pos < SLOTS` and drop the bounds checks below, which the verifier needs to see.
    // No division on this path (a `%` is a 64-bit divide, tens of cycles on x86): positions
    // come from a cursor kept below `len`, a multiply-shift of the hash, and one subtraction.
    let first = match config.policy {
        policy::ROUND_ROBIN => next_cursor(len),
        policy::LEAST_QUEUE => least_queue(ctx, set, len),
        _ => scale(ctx.hash(), len),
    };
    let tries = if len < MAX_SELECT_TRIES {
        len
    } else {
        MAX_SELECT_TRIES
    };
    let mut i = 0;
    while i < tries {
        // first < len and i < len: one subtraction wraps it.
        let mut pos = first + i;
        if pos >= len {
            pos -= len;
        }
        let pos = pos as usize;
        if pos >= SLOTS {
            break;
        }
        let slot = set.slots[pos];
        if slot < MAX_SLOTS {
            if SOCKETS.select_reuseport(ctx, slot).is_ok() {
                count(slot, |s| {
                    s.selected += 1;
                    if fallback {
                        s.fallbacks += 1;
                    }
                    if migrating {
                        s.migrated += 1;
                    }
                });
                if fallback {
                    warn!(ctx, "ck: no ready slot; fell back to live slot {}", slot);
                }
                if let Some(child) = ctx.migrating_sk() {
                    conns::migrated(ctx, child.sock.cast(), slot);
                }
                return SK_PASS;
            }
            count(slot, |s| s.errors += 1);
        }
        i += 1;
    }
    count(STATS_NO_SLOT, |s| s.errors += 1);
    warn!(ctx, "ck: every candidate socket failed; connection dropped");
    SK_DROP
}

/// Position (in `set.slots[..len]`) chosen by power of two choices on queue depth: the
/// round-robin candidate, unless a second candidate picked by the connection's hash (as good as
/// random across connections, and free: no helper call) has a shorter queue.
#[inline(always)]
fn least_queue(ctx: &SkReuseportContext, set: &ActiveSet, len: u32) -> u32 {
    let first = next_cursor(len);
    if len < 2 {
        return first;
    }
    // first + 1 + [0, len - 1) < 2 * len: one subtraction wraps it, never onto `first`.
    let mut second = first + 1 + scale(ctx.hash(), len - 1);
    if second >= len {
        second -= len;
    }
    // Masks, not comparisons: each index register must be bounded on its own for the verifier
    // (the compiler merges `a >= N || b >= N` into one test on `a | b`). Both are < len <= SLOTS
    // for any set the supervisor writes, so the masks change nothing there.
    let (a, b) = (first as usize & SLOT_MASK, second as usize & SLOT_MASK);
    if queue_depth(set.slots[b]) < queue_depth(set.slots[a]) {
        second
    } else {
        first
    }
}

/// `value` scaled onto `[0, n)` by a multiply and a shift (Lemire's "fast range"): uniform for a
/// uniform 32-bit value, and no divide.
#[inline(always)]
fn scale(value: u32, n: u32) -> u32 {
    ((u64::from(value) * u64::from(n)) >> 32) as u32
}

#[inline(always)]
fn queue_depth(slot: u32) -> u32 {
    SLOT_INFO
        .get(slot)
        .map_or(u32::MAX, |info| info.queue_depth)
}

/// The slot a probe connection asks for: its TCP source port minus `base`, when that port lies
/// in `[base, base + MAX_SLOTS)` and the connection comes from a loopback address (so a remote
/// client that happens to use such a port is steered normally).
#[inline(always)]
fn probe_slot(ctx: &SkReuseportContext, base: u32) -> Option<u32> {
    let data = ctx.data();
    if data + 2 > ctx.data_end() {
        return None;
    }
    // SAFETY: the two bytes lie within [data, data_end), checked above (and by the verifier);
    // `data` points at the TCP header, whose first field is the source port.
    let sport = u32::from(u16::from_be(unsafe {
        core::ptr::read_unaligned(data as *const u16)
    }));
    if sport < base || sport >= base + MAX_SLOTS {
        return None;
    }
    if !from_loopback(ctx) {
        return None;
    }
    Some(sport - base)
}

/// Whether the packet's source address is 127.0.0.0/8 or ::1.
#[inline(always)]
fn from_loopback(ctx: &SkReuseportContext) -> bool {
    let mut first = [0u8; 1];
    if load_net(ctx, 0, &mut first) != 0 {
        return false;
    }
    match first[0] >> 4 {
        4 => {
            let mut saddr = [0u8; 4];
            load_net(ctx, 12, &mut saddr) == 0 && saddr[0] == 127
        }
        6 => {
            let mut saddr = [0u8; 16];
            let loopback: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
            load_net(ctx, 8, &mut saddr) == 0 && saddr == loopback
        }
        _ => false,
    }
}

/// Copies bytes from the network header at `offset` into `buf`.
#[inline(always)]
fn load_net<const N: usize>(ctx: &SkReuseportContext, offset: u32, buf: &mut [u8; N]) -> i64 {
    // SAFETY: the helper writes at most N bytes into `buf`, which is N bytes long.
    unsafe {
        bpf_skb_load_bytes_relative(
            ctx.as_ptr(),
            offset,
            buf.as_mut_ptr().cast(),
            N as u32,
            BPF_HDR_START_NET,
        )
    }
}

/// This CPU's round-robin position in `[0, len)`, advanced by one. The cursor is kept below
/// `len` (reset to 0 when the set shrank under it) instead of taken modulo `len`.
#[inline(always)]
fn next_cursor(len: u32) -> u32 {
    match CURSOR.get_ptr_mut(0) {
        Some(cursor) => {
            // SAFETY: per-CPU value of this CPU; a BPF program is not preempted on its CPU.
            unsafe {
                let mut value = *cursor;
                if value >= len {
                    value = 0;
                }
                *cursor = value + 1;
                value
            }
        }
        None => 0,
    }
}

/// Updates this CPU's counters of `slot`.
#[inline(always)]
fn count(slot: u32, update: impl FnOnce(&mut SlotStats)) {
    if let Some(stats) = STATS.get_ptr_mut(slot) {
        // SAFETY: per-CPU value of this CPU, valid for the program's run; a BPF program is not
        // preempted on its CPU, so nothing else writes it meanwhile.
        update(unsafe { &mut *stats });
    }
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
