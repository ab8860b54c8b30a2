//! ck's `SK_REUSEPORT` program: for every new connection (and every request migrating off a
//! closing listener) pick one socket of the group from the maps the supervisor keeps current.
//!
//! The program is deliberately small: everything policy-heavy (who is ready, who is a fallback,
//! the `sticky` policy's Maglev table) is computed by the supervisor and written to `active`
//! and `sticky`; here we only index into them.
#![no_std]
#![no_main]

mod adopt;
mod by_load;
mod conns;
mod exits;
mod flow_cache;
mod minimal;
mod probe;
mod quic;
mod sock_addr;
mod udp;
mod watch;

use aya_ebpf::{
    EbpfContext as _, Global,
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
    ActiveSet, Config, MAX_SELECT_TRIES, MAX_SLOTS, STATS_NO_SLOT, SlotEvents, SlotInfo, policy,
    sticky::{self, StickyTable},
};

const SLOTS: usize = MAX_SLOTS as usize;
pub(crate) const SLOT_MASK: usize = SLOTS - 1;
const _: () = assert!(SLOTS.is_power_of_two());

/// slot -> listening socket (written by the supervisor with the socket's fd).
#[btf_map(name = "sockets")]
static SOCKETS: ReusePortSockArray<SLOTS> = ReusePortSockArray::new();

/// slot -> state, pid, generation, queue depth, ...: read by people (`bpftool`) and, for the
/// sampled queue depth, by the `least-queue` policy when it cannot read the exact one.
#[btf_map(name = "slots")]
pub(crate) static SLOT_INFO: Array<SlotInfo, SLOTS> = Array::new();

/// The active set, double-buffered: `config.live_half` says which half is live.
#[btf_map(name = "active")]
static ACTIVE: Array<ActiveSet, 2> = Array::new();

/// Policy, live half, probe port base.
#[btf_map(name = "config")]
static CONFIG: Array<Config, 1> = Array::new();

/// Per-slot counters of the rarer events; index `STATS_NO_SLOT` counts connections no slot
/// could take.
#[btf_map(name = "stats")]
static STATS: PerCpuArray<SlotEvents, { SLOTS + 1 }> = PerCpuArray::new();

/// slot -> new connections (and migrated requests) sent to it: the one counter every
/// connection writes, 8 bytes a slot, so 8 slots' counts share a cache line (a slot's `stats`
/// entry is 32 bytes: a round-robin over 64 slots would touch a cold line at every selection).
#[btf_map(name = "selected")]
static SELECTED: PerCpuArray<u64, SLOTS> = PerCpuArray::new();

/// Per-CPU round-robin cursor.
#[btf_map(name = "cursor")]
static CURSOR: PerCpuArray<u32, 1> = PerCpuArray::new();

/// The `sticky` policy's Maglev table (client position -> slot), double-buffered like
/// `active` and flipped with it by the same `config.live_half`.
#[btf_map(name = "sticky")]
static STICKY: Array<StickyTable, 2> = Array::new();

/// 1 when the supervisor loads the program to read queue depths from kernel memory
/// (`bpf_probe_read_kernel`: CAP_PERFMON, no lockdown). Read-only data, known to the verifier:
/// with 0 it drops those reads as dead code, so the same program loads where the kernel
/// refuses them (and `least-queue` steers by the sampled depths).
#[unsafe(no_mangle)]
pub(crate) static CK_READ_KERNEL: Global<u8> = Global::new(0);

/// slot -> open connections as the supervisor last sampled them: what `least-conn` compares
/// when the program cannot sum the kernel's own counts (no [`config_flags::KERNEL_CONNS`]).
#[btf_map(name = "conn_samples")]
pub(crate) static CONN_SAMPLES: Array<u32, SLOTS> = Array::new();

/// 1 when the supervisor loads the program for `least-conn`, which sums the per-CPU open-connection
/// counts with `bpf_map_lookup_percpu_elem` (Linux >= 5.19). Read-only data: with 0 the verifier
/// drops that helper call, so the program loads on older kernels (and `least-conn` compares the
/// supervisor's samples, `conn_samples`).
#[unsafe(no_mangle)]
pub(crate) static CK_SUM_CONNS: Global<u8> = Global::new(0);

/// The policy ck loaded the program for (`ck run --policy`), set at load. Read-only data, known
/// to the verifier: it drops the other policies' code from the program the kernel runs, which
/// keeps that one policy and `sticky`'s (a canary by client steers by the consistent table
/// whatever the policy: `config.policy` then says `sticky`). `policy::ANY`: every policy's
/// code, `config.policy` alone deciding.
#[unsafe(no_mangle)]
static CK_POLICY: Global<u32> = Global::new(policy::ANY);

#[sk_reuseport(migrate)]
pub fn ck_select(ctx: SkReuseportContext) -> u32 {
    select(&ctx)
}

#[inline(always)]
fn select(ctx: &SkReuseportContext) -> u32 {
    let Some(config) = CONFIG.get(0) else {
        return SK_DROP;
    };
    let migrating = ctx.migrating_sk();
    // A canary's queues watched: their ages read before this connection's socket is chosen
    // (reading may select a socket on trial; the choice below replaces it).
    if migrating.is_none() {
        watch::queues(ctx, config);
    }
    if let Some(queued) = &migrating {
        // A probe tests one worker through its own socket: never answer it from another.
        if probe::migrating_is_probe(queued.sock.cast(), config.probe_base) {
            return SK_DROP;
        }
    } else if let Some(slot) = probe::probe_slot(ctx, config.probe_base) {
        if SOCKETS.select_reuseport(ctx, slot).is_ok() {
            count(slot, |s| s.probe_hits += 1);
            return SK_PASS;
        }
        count(slot, |s| s.errors += 1);
        return SK_DROP;
    }
    let migrating = migrating.is_some();
    let policy = match CK_POLICY.load() {
        policy::ANY => config.policy,
        _ if config.policy == policy::STICKY => policy::STICKY,
        loaded => loaded,
    };
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
    // sticky: one lookup of the client's address. Its slot's socket failing (closing), a
    // migrating request (which may carry no packet to read an address from: documented) and
    // the fallback (the table holds ready slots only) go to the hash policy below.
    if policy == policy::STICKY && !fallback && !migrating {
        if let Some(slot) = sticky_slot(ctx, config.live_half) {
            if try_select(ctx, slot, false, false) {
                return SK_PASS;
            }
        }
    }
    // `len` is deliberately not clamped to MAX_SLOTS here: the compiler would then prove
    // `pos < SLOTS` and drop the bounds checks below, which the verifier needs to see.
    // No division on this path (a `%` is a 64-bit divide, tens of cycles on x86): positions
    // come from a cursor kept below `len`, a multiply-shift of the hash, and one subtraction.
    let first = match policy {
        policy::ROUND_ROBIN => next_cursor(len),
        policy::LEAST_QUEUE => by_load::least_queue(ctx, set, len, config),
        policy::LEAST_CONN => by_load::least_conn(set, len, config),
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
        if slot < MAX_SLOTS && try_select(ctx, slot, fallback, migrating) {
            return SK_PASS;
        }
        i += 1;
    }
    count(STATS_NO_SLOT, |s| s.errors += 1);
    warn!(ctx, "ck: every candidate socket failed; connection dropped");
    SK_DROP
}

/// Selects `slot`'s socket and counts the outcome in its counters.
#[inline(always)]
fn try_select(ctx: &SkReuseportContext, slot: u32, fallback: bool, migrating: bool) -> bool {
    if SOCKETS.select_reuseport(ctx, slot).is_err() {
        count(slot, |s| s.errors += 1);
        return false;
    }
    if let Some(selected) = SELECTED.get_ptr_mut(slot) {
        // SAFETY: per-CPU value of this CPU; a BPF program is not preempted on its CPU.
        unsafe { *selected += 1 };
    }
    if fallback || migrating {
        count(slot, |s| {
            if fallback {
                s.fallbacks += 1;
            }
            if migrating {
                s.migrated += 1;
            }
        });
    }
    if fallback {
        warn!(ctx, "ck: no ready slot; fell back to live slot {}", slot);
    }
    // A re-homed established connection takes its open-connection count to the new slot.
    if migrating {
        if let Some(child) = ctx.migrating_sk() {
            conns::migrated(ctx, child.sock.cast(), slot);
        }
    }
    true
}

/// The slot the `sticky` table (half `half`) gives the client's source address, if the
/// packet's address reads and the table names a slot there.
#[inline(always)]
fn sticky_slot(ctx: &SkReuseportContext, half: u32) -> Option<u32> {
    let (addr, v6) = source_address(ctx)?;
    let table = STICKY.get(half & 1)?;
    let pos = sticky::position(&addr, v6) as usize;
    // Always true (a multiply-shift onto the table): kept so the verifier sees the bound.
    if pos >= sticky::TABLE_SIZE {
        return None;
    }
    let slot = u32::from(table.slots[pos]);
    // `NO_SLOT` (a table of an empty set) fails this too.
    (slot < MAX_SLOTS).then_some(slot)
}

/// `value` scaled onto `[0, n)` by a multiply and a shift (Lemire's "fast range"): uniform for a
/// uniform 32-bit value, and no divide.
#[inline(always)]
fn scale(value: u32, n: u32) -> u32 {
    ((u64::from(value) * u64::from(n)) >> 32) as u32
}

/// The packet's source address from its IP header, and whether it is IPv6: an IPv4 address
/// fills the first 4 bytes (zeros after it). The family comes from the context's
/// `eth_protocol` (the packet's `skb->protocol`, network byte order), so one helper call
/// reads the address.
#[inline(always)]
fn source_address(ctx: &SkReuseportContext) -> Option<([u8; 16], bool)> {
    // ETH_P_IP and ETH_P_IPV6 (linux/if_ether.h), as `eth_protocol` holds them.
    const IPV4: u32 = 0x0800u16.to_be() as u32;
    const IPV6: u32 = 0x86ddu16.to_be() as u32;
    let mut addr = [0u8; 16];
    match ctx.eth_protocol() {
        IPV4 => {
            let mut saddr = [0u8; 4];
            if load_net(ctx, 12, &mut saddr) != 0 {
                return None;
            }
            addr[..4].copy_from_slice(&saddr);
            Some((addr, false))
        }
        IPV6 => (load_net(ctx, 8, &mut addr) == 0).then_some((addr, true)),
        _ => None,
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
pub(crate) fn next_cursor(len: u32) -> u32 {
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

/// Updates this CPU's `stats` counters of `slot`.
#[inline(always)]
fn count(slot: u32, update: impl FnOnce(&mut SlotEvents)) {
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
