//! ck's own connections to its workers (health and readiness probes, the accept probe, `ck
//! probe`, the steering canary): from loopback and a source port of the probe range
//! `[base, base + MAX_SLOTS)`, port `base + S` asking for slot S. They are told apart from
//! clients' here, in one place, by the three programs that meet them:
//!
//! - the select programs steer a new one to the slot its port names (`probe_slot`), counted as
//!   a probe hit, never as selected;
//! - `ck_select` does not re-home one queued on a closing listener (`migrating_is_probe`): it
//!   tests the worker that listener was for, and another worker's answer would say nothing of
//!   it (the kernel resets it, towards ck, the only end that sees it);
//! - `ck_conns` and `ck_conns_ops` leave one out of the open-connection counts
//!   (`peer_is_probe`, `ops_peer_is_probe`), which are the clients' connections.
use aya_ebpf::{
    Global,
    bindings::bpf_sock,
    helpers::bpf_probe_read_kernel,
    programs::{SkReuseportContext, SockOpsContext},
};
use ck_common::{MAX_SLOTS, PeerOffsets};

use crate::source_address;

/// The first port of the instance's probe range (0: none), set when ck loads the program.
/// Read-only data, known to the verifier (`config.probe_base` holds the same, for people).
#[unsafe(no_mangle)]
pub static CK_PROBE_BASE: Global<u32> = Global::new(0);

/// Where a connection's peer lies in a `struct sock`, resolved by ck from the kernel's BTF and
/// set when it loads the program (read-only, as [`CK_PROBE_BASE`]).
#[unsafe(no_mangle)]
static CK_PEER_AT: Global<PeerOffsets> = Global::new(PeerOffsets::UNKNOWN);

const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;

/// The IPv6 loopback address, `::1`.
const LOOPBACK6: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

/// The slot a connection from `port` asks for, if `port` lies in the probe range from `base`.
#[inline(always)]
fn slot_of(port: u32, base: u32) -> Option<u32> {
    (base != 0 && port >= base && port < base + MAX_SLOTS).then(|| port - base)
}

/// Whether `addr` (IPv4 in its first 4 bytes unless `v6`) is 127.0.0.0/8 or ::1.
#[inline(always)]
fn is_loopback(addr: &[u8; 16], v6: bool) -> bool {
    match v6 {
        false => addr[0] == 127,
        true => *addr == LOOPBACK6,
    }
}

/// The slot a new connection asks for by its TCP (or UDP) source port, when it is a probe: the
/// port in the range from `base`, and the packet from a loopback address (so a remote client
/// that happens to use such a port is steered normally).
#[inline(always)]
pub fn probe_slot(ctx: &SkReuseportContext, base: u32) -> Option<u32> {
    let data = ctx.data();
    if data + 2 > ctx.data_end() {
        return None;
    }
    // SAFETY: the two bytes lie within [data, data_end), checked above (and by the verifier);
    // `data` points at the transport header, whose first field is the source port.
    let sport = u32::from(u16::from_be(unsafe {
        core::ptr::read_unaligned(data as *const u16)
    }));
    let slot = slot_of(sport, base)?;
    let (addr, v6) = source_address(ctx)?;
    is_loopback(&addr, v6).then_some(slot)
}

/// Whether `migrating`, a connection (or request) queued on a closing listener, is a probe.
#[inline(always)]
pub fn migrating_is_probe(migrating: *const bpf_sock, base: u32) -> bool {
    // SAFETY: `migrating` is the context's non-null `migrating_sk`; `dst_port`, `family`,
    // `dst_ip4` and `dst_ip6` are fields of the `bpf_sock` view the verifier lets this program
    // read (its peer: the client's port, network byte order, and address), each read with a
    // load of its own size (the verifier refuses wider ones).
    let field = |f: *const u32| unsafe { core::ptr::read_volatile(f) };
    // SAFETY: as above.
    let port = unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*migrating).dst_port)) };
    if slot_of(u32::from(u16::from_be(port)), base).is_none() {
        return false;
    }
    // SAFETY: as above (only the fields' addresses are taken here).
    let (family, ip4, ip6) = unsafe {
        (
            core::ptr::addr_of!((*migrating).family),
            core::ptr::addr_of!((*migrating).dst_ip4),
            core::ptr::addr_of!((*migrating).dst_ip6).cast::<u32>(),
        )
    };
    let mut addr = [0u8; 16];
    let v6 = match field(family) as u16 {
        AF_INET => {
            addr[..4].copy_from_slice(&field(ip4).to_ne_bytes());
            false
        }
        AF_INET6 => {
            addr[..4].copy_from_slice(&field(ip6).to_ne_bytes());
            addr[4..8].copy_from_slice(&field(ip6.wrapping_add(1)).to_ne_bytes());
            addr[8..12].copy_from_slice(&field(ip6.wrapping_add(2)).to_ne_bytes());
            addr[12..].copy_from_slice(&field(ip6.wrapping_add(3)).to_ne_bytes());
            true
        }
        _ => return false,
    };
    is_loopback(&addr, v6)
}

/// Whether `sk` (a connection, the `ck_conns` tracepoint's) comes from a probe: its peer's port
/// in the probe range, its peer's address loopback, read where [`CK_PEER_AT`] says (never, when
/// ck could not resolve it: every connection then counts).
#[inline(always)]
pub fn peer_is_probe(sk: *const u8) -> bool {
    let base = CK_PROBE_BASE.load();
    let at = CK_PEER_AT.load();
    if base == 0 || at.port == 0 {
        return false;
    }
    let Some(port) = read::<u16>(sk, at.port) else {
        return false;
    };
    if slot_of(u32::from(u16::from_be(port)), base).is_none() {
        return false;
    }
    let mut addr = [0u8; 16];
    let v6 = match read::<u16>(sk, at.family) {
        Some(AF_INET) => match read::<[u8; 4]>(sk, at.addr4) {
            Some(ip4) => {
                addr[..4].copy_from_slice(&ip4);
                false
            }
            None => return false,
        },
        Some(AF_INET6) => match read::<[u8; 16]>(sk, at.addr6) {
            Some(ip6) => {
                addr = ip6;
                true
            }
            None => return false,
        },
        _ => return false,
    };
    is_loopback(&addr, v6)
}

/// Whether the connection of a `sock_ops` call (`ck_conns_ops`) comes from a probe, by the
/// peer the context carries: `remote_port` (network byte order, as a 32-bit value),
/// `remote_ip4` / `remote_ip6` (network byte order).
#[inline(always)]
pub fn ops_peer_is_probe(ctx: &SockOpsContext) -> bool {
    let port = u32::from_be(ctx.remote_port());
    if slot_of(port, CK_PROBE_BASE.load()).is_none() {
        return false;
    }
    let mut addr = [0u8; 16];
    let v6 = match ctx.family() as u16 {
        AF_INET => {
            addr[..4].copy_from_slice(&ctx.remote_ip4().to_ne_bytes());
            false
        }
        AF_INET6 => {
            // SAFETY: `remote_ip6` is a field of the context; each word is read with a load of
            // its own size (the verifier refuses wider ones on a context).
            let ip6 = unsafe { core::ptr::addr_of!((*ctx.ops).remote_ip6).cast::<u32>() };
            // SAFETY: as above.
            let word = |i: usize| unsafe { core::ptr::read_volatile(ip6.wrapping_add(i)) };
            addr[..4].copy_from_slice(&word(0).to_ne_bytes());
            addr[4..8].copy_from_slice(&word(1).to_ne_bytes());
            addr[8..12].copy_from_slice(&word(2).to_ne_bytes());
            addr[12..].copy_from_slice(&word(3).to_ne_bytes());
            true
        }
        _ => return false,
    };
    is_loopback(&addr, v6)
}

/// A `T` copied from kernel memory at `offset` bytes into `sk` (None where it cannot be read).
#[inline(always)]
fn read<T>(sk: *const u8, offset: u32) -> Option<T> {
    // SAFETY: `bpf_probe_read_kernel` copies without faulting (an unmapped address is an error
    // return) into a value of the requested type; `sk` is only offset, never dereferenced here.
    unsafe { bpf_probe_read_kernel(sk.wrapping_add(offset as usize).cast::<T>()) }.ok()
}
