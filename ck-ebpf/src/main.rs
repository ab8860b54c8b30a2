//! ck's `SK_REUSEPORT` program: for every new connection (and every request migrating off a
//! closing listener) pick one socket of the group from the maps the supervisor keeps current.
//!
//! The program is deliberately small: everything policy-heavy (who is ready, who is a fallback)
//! is computed by the supervisor and written to `active`; here we only index into it.
#![no_std]
#![no_main]

use aya_ebpf::{
    bindings::sk_action::{SK_DROP, SK_PASS},
    btf_maps::{Array, PerCpuArray, ReusePortSockArray},
    macros::{btf_map, sk_reuseport},
    programs::SkReuseportContext,
};
use aya_log_ebpf::warn;
use ck_common::{
    ActiveSet, Config, MAX_SELECT_TRIES, MAX_SLOTS, STATS_NO_SLOT, SlotInfo, SlotStats, policy,
};

const SLOTS: usize = MAX_SLOTS as usize;

/// slot -> listening socket (written by the supervisor with the socket's fd).
#[btf_map(name = "sockets")]
static SOCKETS: ReusePortSockArray<SLOTS> = ReusePortSockArray::new();

/// slot -> state, pid, generation, ...: read by people (`bpftool`), not by this program.
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
    // Keep the `slots` map referenced so it is part of the object even though we never read it.
    let _ = &SLOT_INFO;
    let Some(config) = CONFIG.get(0) else {
        return SK_DROP;
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
        count_drop();
        warn!(ctx, "ck: no live slot; connection dropped");
        return SK_DROP;
    }
    // `len` is deliberately not clamped to MAX_SLOTS here: the compiler would then prove
    // `pos < SLOTS` and drop the bounds check below, which the verifier needs to see.
    let start = match config.policy {
        policy::ROUND_ROBIN => next_cursor(),
        _ => ctx.hash(),
    };
    let migrating = ctx.migrating_sk().is_some();
    let tries = if len < MAX_SELECT_TRIES {
        len
    } else {
        MAX_SELECT_TRIES
    };
    let first = start % len;
    let mut i = 0;
    while i < tries {
        let pos = ((first + i) % len) as usize;
        if pos >= SLOTS {
            break;
        }
        let slot = set.slots[pos];
        if slot < MAX_SLOTS {
            if SOCKETS.select_reuseport(ctx, slot).is_ok() {
                count_selected(slot, fallback, migrating);
                if fallback {
                    warn!(ctx, "ck: no ready slot; fell back to live slot {}", slot);
                }
                return SK_PASS;
            }
            count_error(slot);
        }
        i += 1;
    }
    count_drop();
    warn!(ctx, "ck: every candidate socket failed; connection dropped");
    SK_DROP
}

#[inline(always)]
fn next_cursor() -> u32 {
    match CURSOR.get_ptr_mut(0) {
        Some(cursor) => {
            // SAFETY: per-CPU value of this CPU; a BPF program is not preempted on its CPU.
            unsafe {
                let value = *cursor;
                *cursor = value.wrapping_add(1);
                value
            }
        }
        None => 0,
    }
}

#[inline(always)]
fn count_selected(slot: u32, fallback: bool, migrating: bool) {
    if let Some(stats) = STATS.get_ptr_mut(slot) {
        // SAFETY: per-CPU value of this CPU, valid for the program's run.
        unsafe {
            (*stats).selected += 1;
            if fallback {
                (*stats).fallbacks += 1;
            }
            if migrating {
                (*stats).migrated += 1;
            }
        }
    }
}

#[inline(always)]
fn count_error(slot: u32) {
    if let Some(stats) = STATS.get_ptr_mut(slot) {
        // SAFETY: per-CPU value of this CPU, valid for the program's run.
        unsafe { (*stats).errors += 1 }
    }
}

#[inline(always)]
fn count_drop() {
    count_error(STATS_NO_SLOT);
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
