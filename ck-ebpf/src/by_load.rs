//! The policies that compare load among a few candidates spread over the ready list:
//! `least-queue` (accept-queue depth, read from the kernel where it may be) and `least-conn`
//! (open connections, as the kernel counts them), each per unit of a slot's weight while one
//! is weighted ([`Load`]). Also the exact queue read the canary's watch shares
//! ([`oldest_wait_ns`]).
use aya_ebpf::{
    helpers::{bpf_ktime_get_ns, bpf_probe_read_kernel},
    programs::SkReuseportContext,
};
use ck_common::{ActiveSet, Config, QueueOffsets, config_flags};

use crate::{
    CK_READ_KERNEL, CK_SUM_CONNS, CONN_SAMPLES, SLOT_INFO, SLOT_MASK, conns, next_cursor, sock_addr,
};

/// Candidates `least-queue` compares at most: every ready slot up to this many, else this many
/// spread evenly over the set ([`spread_position`]).
const QUEUE_CHOICES: u32 = 4;
// Both policies' candidates are quarters of the set ([`spread_position`]): at most 4.
const _: () = assert!(QUEUE_CHOICES <= 4 && CONN_CHOICES <= 4);

/// Position (in `set.slots[..len]`) `least-queue` chooses among up to [`QUEUE_CHOICES`]
/// candidates: the round-robin candidate while its queue keeps up, else the first other that
/// keeps up (in [`spread_position`] order), else the shortest queue. A queue keeps up when it is
/// empty, or when its oldest connection has waited less than `config.queue_patience_us` (read
/// from the kernel: [`queue_of`]); with sampled depths, only when it is empty.
///
/// Why this shape:
/// - An empty or young round-robin candidate is not compared: in the common case (a worker
///   that keeps up) one depth read, and the round-robin spread of counts.
/// - The patience: on a busy machine a worker that is not scheduled for a few milliseconds is
///   tens of connections behind one that is, during a burst of connections opened at once
///   (`bench spread`). Compared by depth alone, the worker that happens to run takes most of
///   the burst (largest shares of 37-55 % of 150 over 3, goal 36 %; BENCHMARKS.md). Such a
///   queue is young: its oldest connection is milliseconds old. A stalled worker's is not: once
///   its oldest connection has waited the patience, it gets nothing more while another keeps up.
///   The kernel says exactly how long that connection has waited (`snt_synack`), so no timer
///   or sample is needed.
/// - Past the patience, every ready slot of a small set (the usual 2-4 workers) is compared, not
///   one random other: a stalled worker holds a connection or two while the healthy ones are
///   often non-empty for a moment (1-5 queued). Against one random other it keeps winning while
///   its queue is no longer than that one's, against all of them only while every other queue
///   is as long. Reads: 1 when the round-robin candidate keeps up, at most [`QUEUE_CHOICES`].
/// - No depth margin (leave the round-robin candidate only when longer by 2 or more, or by a
///   ratio): a margin lets a stalled worker take that many more connections each stall, and none
///   evened out the burst (BENCHMARKS.md).
/// - Depths are compared per unit of weight ([`Load`]) while some slot has one.
#[inline(always)]
pub fn least_queue(ctx: &SkReuseportContext, set: &ActiveSet, len: u32, config: &Config) -> u32 {
    let first = next_cursor(len);
    if len < 2 {
        return first;
    }
    let exact = CK_READ_KERNEL.load() != 0 && config.flags & config_flags::EXACT_QUEUE != 0;
    let head = candidate_queue(ctx, set, first, config, exact);
    if head.keeps_up {
        return first;
    }
    let weighted = config.flags & config_flags::WEIGHTED != 0;
    let slot_at = |pos: u32| set.slots[pos as usize & SLOT_MASK];
    let mut best = (first, Load::unit(head.depth));
    if weighted {
        best.1 = Load::of(head.depth, slot_at(first));
    }
    let mut k = 1;
    while k < QUEUE_CHOICES && k < len {
        let pos = spread_position(first, k, len);
        let other = candidate_queue(ctx, set, pos, config, exact);
        if other.keeps_up {
            return pos;
        }
        let better = match weighted {
            true => {
                let load = Load::of(other.depth, slot_at(pos));
                let better = load.below(&best.1);
                if better {
                    best.1 = load;
                }
                better
            }
            // Every weight is 1: the depths alone.
            false => other.depth < best.1.count,
        };
        if better {
            (best.0, best.1.count) = (pos, other.depth);
        }
        k += 1;
    }
    best.0
}

/// The queue of the slot at `pos` in `set`: read from the kernel (`exact`) or as sampled. A
/// function forced inline, not a closure: the compiler made the closure a BPF-to-BPF call.
#[inline(always)]
fn candidate_queue(
    ctx: &SkReuseportContext,
    set: &ActiveSet,
    pos: u32,
    config: &Config,
    exact: bool,
) -> Queue {
    // A mask, not a comparison: each index register must be bounded on its own for the verifier
    // (the compiler merges `a >= N || b >= N` into one test on `a | b`). Positions are < len <=
    // SLOTS for any set the supervisor writes, so the mask changes nothing there.
    let slot = set.slots[pos as usize & SLOT_MASK];
    match exact {
        true => queue_of(ctx, slot, config),
        false => Queue::sampled(slot),
    }
}

/// A candidate's accept queue as `least-queue` compares it.
struct Queue {
    /// Connections waiting: established ones not accepted yet plus requests in SYN_RECV
    /// (`u32::MAX` when it cannot be read: it never wins). Read only for a queue that does not
    /// keep up (the only kind compared by depth): 0 for an exact one with none established.
    depth: u32,
    /// Empty, or its oldest established connection has waited less than the patience.
    keeps_up: bool,
}

impl Queue {
    /// `slot`'s queue as the supervisor last sampled it (`slots` map): no age, so it keeps up
    /// only when it is empty.
    #[inline(always)]
    fn sampled(slot: u32) -> Queue {
        let depth = SLOT_INFO
            .get(slot)
            .map_or(u32::MAX, |info| info.queue_depth);
        Queue {
            depth,
            keeps_up: depth == 0,
        }
    }
}

/// The `k`th of up to 4 candidates after the round-robin one at `first` (`k` in `[0, 4)` and
/// `k < len`): `first + k` in a set of fewer than 4 (every slot), else `first` plus `k`
/// quarters of the set, wrapped into `[0, len)` by one subtraction (`k * len / 4 < len`, by a
/// shift, no divide).
#[inline(always)]
fn spread_position(first: u32, k: u32, len: u32) -> u32 {
    let offset = if len >= 4 { (k * len) >> 2 } else { k };
    let mut pos = first + offset;
    if pos >= len {
        pos -= len;
    }
    pos
}

/// Candidates `least-conn` compares: every ready slot up to this many, else this many spread
/// evenly over the set.
const CONN_CHOICES: u32 = 4;

/// Position chosen by least load among up to [`CONN_CHOICES`] candidates, for long-lived
/// connections: the round-robin candidate and the positions a quarter, a half and three
/// quarters of the set further on (with fewer than 4 ready slots, all of them), each scored by
/// its connections as the kernel counts them ([`conns::open`]: every established connection
/// its listener created, the ones still queued for `accept` included, until it closes; only
/// requests still in SYN_RECV are not counted), or, where the program cannot sum those counts
/// (no [`config_flags::KERNEL_CONNS`]), as the supervisor last sampled them (`conn_samples`).
/// Two random choices leave old workers ahead after a scale-up (both candidates old in 1 of 6
/// connections with 2 old of 4); spread choices find the emptiest of 4 workers every time.
/// Ties go to the earlier candidate (the round-robin one first); an empty candidate ends the
/// search; counts are compared per unit of weight ([`Load`]) while some slot has one. No queue
/// read: the counts hold
/// the queued connections, and a trial selection per candidate would cost more than the
/// count.
#[inline(always)]
pub fn least_conn(set: &ActiveSet, len: u32, config: &Config) -> u32 {
    let first = next_cursor(len);
    if len < 2 {
        return first;
    }
    let kernel = CK_SUM_CONNS.load() != 0 && config.flags & config_flags::KERNEL_CONNS != 0;
    let weighted = config.flags & config_flags::WEIGHTED != 0;
    let (mut best, mut best_load) = (first, Load::NONE);
    let mut k = 0;
    while k < CONN_CHOICES && k < len {
        let pos = spread_position(first, k, len);
        // A mask, as in least_queue: the index register bounded on its own for the verifier.
        let slot = set.slots[pos as usize & SLOT_MASK];
        let count = match kernel {
            true => conns::open(slot),
            false => CONN_SAMPLES.get(slot).map_or(u32::MAX, |n| *n),
        };
        if weighted {
            let load = Load::of(count, slot);
            if load.below(&best_load) {
                (best, best_load) = (pos, load);
            }
        } else if count < best_load.count {
            // Unweighted, every weight is 1: the counts alone (no multiply on this path).
            (best, best_load.count) = (pos, count);
        }
        if best_load.count == 0 {
            break;
        }
        k += 1;
    }
    best
}

/// A candidate's load as `least-conn` and `least-queue` compare it: a count per unit of the
/// slot's weight (the times the ready list lists it: `--slow-start`, a canary), compared by
/// cross-multiplying (no divide on this path). Weights are read only when some slot has one
/// (`config_flags::WEIGHTED`); otherwise every weight is 1 and the policies compare the counts
/// alone, as they did before weights (no read, no multiply).
#[derive(Clone, Copy)]
struct Load {
    count: u32,
    weight: u32,
}

impl Load {
    /// Worse than any load read.
    const NONE: Load = Load::unit(u32::MAX);

    /// `count` with a weight of 1.
    #[inline(always)]
    const fn unit(count: u32) -> Load {
        Load { count, weight: 1 }
    }

    /// `count` of `slot`, with its weight.
    #[inline(always)]
    fn of(count: u32, slot: u32) -> Load {
        let weight = SLOT_INFO.get(slot).map_or(1, |info| info.weight.max(1));
        Load { count, weight }
    }

    /// Whether this load per unit of weight is below `other`'s.
    #[inline(always)]
    fn below(&self, other: &Load) -> bool {
        u64::from(self.count) * u64::from(other.weight)
            < u64::from(other.count) * u64::from(self.weight)
    }
}

/// `slot`'s live queue, read from its socket at the address [`sock_addr`] keeps (no trial
/// selection while the address is known). With no established connection waiting
/// (`sk_ack_backlog` 0, one `bpf_probe_read_kernel`) the queue keeps up, and that is all the
/// common path reads. Otherwise the depth is those connections plus the requests still in
/// SYN_RECV (a second read), and two more reads find how long the oldest has waited (the accept
/// queue's head request and its `snt_synack`, the time of its first SYN-ACK, on the clock of
/// `bpf_ktime_get_ns`). A slot
/// whose socket is gone, or whose memory cannot be read, counts as full and not keeping up. (One
/// read of the 428 bytes from `sk_ack_backlog` to `icsk_accept_queue.qlen` into a per-CPU
/// scratch value cost 8 to 23 % more per selection in `bench bpf-cost`: its seven cache lines
/// instead of two. It also needs a constant size: the verifier refused the span's length
/// computed from the offsets as unbounded, whatever the checks before it.)
///
/// The head request is read without the queue's lock: if the worker accepts it meanwhile, the
/// request may be freed and reused, and its age read wrong for this one selection. Request
/// sockets are `SLAB_TYPESAFE_BY_RCU` and the reads never fault, so nothing worse can happen.
#[inline(always)]
fn queue_of(ctx: &SkReuseportContext, slot: u32, config: &Config) -> Queue {
    const UNREADABLE: Queue = Queue {
        depth: u32::MAX,
        keeps_up: false,
    };
    let at = &config.queue;
    let Some(sk) = sock_addr::address(ctx, slot, at.selected_sk) else {
        return UNREADABLE;
    };
    // SAFETY: `bpf_probe_read_kernel` copies from kernel memory without faulting (an
    // unmapped address is an error return) into a value of the requested type.
    let read = |addr: u64| unsafe { bpf_probe_read_kernel(addr as *const u32) };
    let Ok(backlog) = read(sk + u64::from(at.ack_backlog)) else {
        return UNREADABLE;
    };
    if backlog == 0 {
        // Nothing waits for the worker (requests in SYN_RECV wait for their client), and a
        // queue that keeps up is never compared by depth: the SYN_RECV count is not read (a
        // second helper call and cache line on the common path).
        return Queue {
            depth: 0,
            keeps_up: true,
        };
    }
    let Ok(syn_recv) = read(sk + u64::from(at.syn_recv)) else {
        return UNREADABLE;
    };
    let depth = backlog.saturating_add(syn_recv);
    // In nanoseconds, by a multiply: no divide on this path (see `select`).
    let patience_ns = u64::from(config.queue_patience_us) * 1000;
    Queue {
        depth,
        keeps_up: patience_ns != 0 && oldest_wait_ns(sk, at).is_some_and(|ns| ns < patience_ns),
    }
}

/// How long the oldest established connection in the accept queue of the listener at `sk`
/// has waited, in nanoseconds since its first SYN-ACK (which the kernel keeps in whole
/// microseconds); None when it cannot be read (the queue emptied meanwhile, or a request made
/// from a SYN cookie, which has no SYN-ACK time).
#[inline(always)]
pub(crate) fn oldest_wait_ns(sk: u64, at: &QueueOffsets) -> Option<u64> {
    // SAFETY: as in `queue_of`: copies that never fault, into values of the requested types.
    let head = unsafe { bpf_probe_read_kernel((sk + u64::from(at.accept_head)) as *const u64) }
        .ok()
        .filter(|head| *head != 0)?;
    // SAFETY: as above.
    let sent = unsafe { bpf_probe_read_kernel((head + u64::from(at.synack_sent)) as *const u64) }
        .ok()
        .filter(|sent| *sent != 0)?;
    // SAFETY: a helper without arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    // A plain multiply (a checked one is a 128-bit product, which the BPF target lacks):
    // microseconds since boot times 1000 fit in 64 bits; a garbage `sent` (the race above) only
    // gives a wrong age for one selection.
    now.checked_sub(sent.wrapping_mul(1000))
}
