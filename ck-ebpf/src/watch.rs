//! The canary's queue watch (`--canary-max-queue-age`): while a canary is judged, every new
//! connection (a client's or one of ck's probes) first reads, for each slot the supervisor
//! listed, how long the oldest connection waiting in that slot's accept queue has waited, as
//! the kernel says (the head request's `snt_synack`, read as `least-queue` reads it), and
//! keeps the longest per CPU. The supervisor compares those with the limit. Nothing runs
//! while no canary is watched: one test of `config.flags`.
use aya_ebpf::{
    btf_maps::{Array, PerCpuArray},
    helpers::bpf_probe_read_kernel,
    macros::btf_map,
    programs::SkReuseportContext,
};
use ck_common::{Config, MAX_SLOTS, MAX_WATCHED, config_flags};

use crate::{CK_READ_KERNEL, by_load::oldest_wait_ns, sock_addr};

/// The slots watched, first to last; the first entry of `MAX_SLOTS` or more ends the list
/// (written by the supervisor).
#[btf_map(name = "watched")]
static WATCHED: Array<u32, { MAX_WATCHED as usize }> = Array::new();

/// slot -> the longest wait this CPU saw at the head of its accept queue, in nanoseconds
/// (cleared by the supervisor when the watch starts).
#[btf_map(name = "queue_ages")]
static QUEUE_AGES: PerCpuArray<u64, { MAX_SLOTS as usize }> = PerCpuArray::new();

/// Records the head wait of every watched slot's queue (nothing when a queue is empty: one
/// read). Called before the connection's own selection: finding a socket's address may
/// select it on trial.
#[inline(always)]
pub fn queues(ctx: &SkReuseportContext, config: &Config) {
    // With 0 (loaded unable to read kernel memory) the verifier drops what follows.
    if CK_READ_KERNEL.load() == 0 || config.flags & config_flags::WATCH_QUEUES == 0 {
        return;
    }
    let mut i = 0;
    while i < MAX_WATCHED {
        let Some(&slot) = WATCHED.get(i) else {
            return;
        };
        if slot >= MAX_SLOTS {
            return;
        }
        record(ctx, slot, config);
        i += 1;
    }
}

/// Keeps `slot`'s head wait in this CPU's `queue_ages` if it is the longest seen.
#[inline(always)]
fn record(ctx: &SkReuseportContext, slot: u32, config: &Config) {
    let at = &config.queue;
    let Some(sk) = sock_addr::address(ctx, slot, at.selected_sk) else {
        return;
    };
    // SAFETY: `bpf_probe_read_kernel` copies without faulting into a value of the type asked.
    let backlog = unsafe { bpf_probe_read_kernel((sk + u64::from(at.ack_backlog)) as *const u32) };
    if !matches!(backlog, Ok(n) if n > 0) {
        return;
    }
    let Some(waited) = oldest_wait_ns(sk, at) else {
        return;
    };
    if let Some(longest) = QUEUE_AGES.get_ptr_mut(slot) {
        // SAFETY: per-CPU value of this CPU; a BPF program is not preempted on its CPU.
        unsafe {
            if waited > *longest {
                *longest = waited;
            }
        }
    }
}
