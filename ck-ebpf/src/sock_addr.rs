//! The kernel address of each slot's listening socket, for `least-queue`'s exact depth reads.
//!
//! Finding a socket's address costs a trial `bpf_sk_select_reuseport` (the kernel then holds
//! the socket in its context's `selected_sk`) and a `bpf_probe_read_kernel` of that field: about
//! as much as reading the two depth fields themselves. The address of a slot's socket changes
//! only when the supervisor writes the slot's `sockets` entry, so the program keeps the address
//! it found (`sock_addrs`) beside the generation it found it under; the supervisor bumps the
//! slot's generation (`sock_gens`) right after each write of that entry (`BpfGroup::insert`,
//! `remove`). A cached address is used while the generations match: no helper call.
//!
//! Races: the supervisor writes the socket first and bumps the generation second, so an address
//! found under the new generation is the new socket's (the program reads the generation before
//! the trial selection). An address found under the old generation is stored with it and
//! refreshed at the next read. Between the socket's write and the bump, or while two CPUs store
//! an entry at once, an old address can be read for one depth: `bpf_probe_read_kernel` never
//! faults, and TCP sockets are `SLAB_TYPESAFE_BY_RCU`, so that reads a wrong depth of one
//! selection, never anything worse.
use aya_ebpf::programs::SkReuseportContext;
use aya_ebpf::{
    EbpfContext as _, btf_maps::Array, helpers::bpf_probe_read_kernel, macros::btf_map,
};
use ck_common::MAX_SLOTS;

const SLOTS: usize = MAX_SLOTS as usize;

/// slot -> generation of its `sockets` entry (written by the supervisor, after the socket).
#[btf_map(name = "sock_gens")]
pub(crate) static SOCK_GENS: Array<u32, SLOTS> = Array::new();

/// slot -> the socket address the program last found and the generation it found it under
/// (written by the program only).
#[btf_map(name = "sock_addrs")]
static SOCK_ADDRS: Array<SockAddr, SLOTS> = Array::new();

/// A slot's socket as the program last found it (`sock_addrs`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SockAddr {
    /// The socket's kernel address (0: none found yet).
    addr: u64,
    /// The slot's `sock_gens` generation when it was found.
    generation: u32,
    /// Padding, zero.
    reserved: u32,
}

/// The kernel address of `slot`'s socket: the cached one while the slot's generation is the
/// one it was found under, else found by a trial selection (read from the context's
/// `selected_sk`, at byte `selected_sk` of the kernel's `struct sk_reuseport_kern`) and cached.
/// None when the slot has no socket (the trial selection fails) or the context cannot be read.
#[inline(always)]
pub fn address(ctx: &SkReuseportContext, slot: u32, selected_sk: u32) -> Option<u64> {
    let generation = *SOCK_GENS.get(slot)?;
    let cached = SOCK_ADDRS.get_ptr_mut(slot)?;
    // SAFETY: a value of the map, valid for the program's run; a torn read (another CPU storing
    // the entry) is one of the races above.
    let known = unsafe { *cached };
    if known.generation == generation && known.addr != 0 {
        return Some(known.addr);
    }
    if crate::SOCKETS.select_reuseport(ctx, slot).is_err() {
        return None;
    }
    // The context really is the kernel's `struct sk_reuseport_kern`; only its public prefix
    // (`sk_reuseport_md`) may be loaded directly, so `selected_sk` is read as kernel memory.
    // The socket is then a plain number for the verifier (a `PTR_TO_SOCKET` would refuse the
    // arithmetic the depth reads need). Handing the helper an address made from the context is
    // a pointer leak to the verifier unless ck has CAP_PERFMON.
    let kern = ctx.as_ptr() as u64;
    // SAFETY: `bpf_probe_read_kernel` copies from kernel memory without faulting (an unmapped
    // address is an error return) into a value of the requested type.
    let addr = unsafe { bpf_probe_read_kernel((kern + u64::from(selected_sk)) as *const u64) }
        .ok()
        .filter(|addr| *addr != 0)?;
    // SAFETY: as for the read above; the program is this map's only writer.
    unsafe {
        *cached = SockAddr {
            addr,
            generation,
            reserved: 0,
        }
    };
    Some(addr)
}
