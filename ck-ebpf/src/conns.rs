//! Open connections per slot, counted by the kernel, in per-CPU signed counters (`conns`, summed
//! by the reader: a connection may open on one CPU and close on another). A connection adds one
//! to its slot as it is established and takes one off on `-> CLOSE`. ck's own probe connections
//! never count (`probe::peer_is_probe`): the counts are the clients'.
//!
//! How a connection's slot is known:
//! - **Slot cgroups** (ck's own listening sockets, on a host with cgroup2): each slot's socket is
//!   created in a cgroup of its own, and a connection is born in its listener's cgroup.
//!   `ck_conns_ops` is attached to each slot's cgroup, with that slot in the cgroup's storage
//!   (`slot_cgroups`): one lookup, and nothing is written on the socket. The connection's
//!   `BPF_SOCK_OPS_STATE_CB_FLAG`, set only on a counted one, is its "counted" mark.
//! - **Worker cgroups** (`--adopt`): a worker binds its own socket in its own cgroup, to which
//!   the supervisor attached `ck_conns_ops` before the worker started, with the worker's slot,
//!   the group's port and its family in the storage: the same, for that port's connections only.
//! - **Tags** (the host-wide hook, and an instance begun by an earlier image with tags): the
//!   supervisor writes a [`ConnTag`] `{slot}` on each listening socket (`conn_tags`,
//!   a `BPF_F_CLONE` socket storage, so the kernel copies it into every connection that listener
//!   creates, and frees that copy when it closes: about as much as all the programs' runs
//!   together). The tag's `CONN_COUNTED` flag keeps a connection from counting twice.
//!
//! Two programs see those state changes; ck attaches one of them:
//! - `ck_conns_ops` (`sock_ops`, on the slots', the workers' or the instance's cgroups): the
//!   kernel runs it only for sockets of those cgroups, and for their state changes only once it
//!   asked for them on a counted connection. Nothing else on the host pays for it.
//! - `ck_conns` (`tp_btf/inet_sock_set_state`), where ck has no cgroup: it runs for every TCP
//!   state change on the host, and returns at once for an untagged socket.
//!
//! Migration: an established connection waiting in a closing listener's accept queue keeps its
//! listener's slot (tag or cgroup). When `ck_select` re-homes it ([`migrated`]), the count moves
//! from the closing listener's slot (`listeners`: socket cookie -> slot, written by the
//! supervisor) to the chosen slot at once, and `moved` remembers it by the connection's cookie,
//! so that its close takes one off the slot it moved to. A request still in `SYN_RECV` needs
//! nothing: its connection is created from the listener it was re-homed to.
//!
//! `--adopt` in an instance begun with tags: a worker's own socket is tagged when it binds the
//! group's port ([`tag_bind`], from the worker's cgroup: `bind_slots`), before it listens, so
//! the connections it takes before the supervisor adopts it count too.
use core::ffi::c_void;

use aya_ebpf::{
    EbpfContext as _, Global,
    bindings::{
        BPF_F_CLONE, BPF_F_NO_PREALLOC, BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB, BPF_SOCK_OPS_STATE_CB,
        BPF_SOCK_OPS_STATE_CB_FLAG, BPF_TCP_CLOSE, BPF_TCP_CLOSE_WAIT, BPF_TCP_ESTABLISHED,
        BPF_TCP_NEW_SYN_RECV, BPF_TCP_SYN_RECV,
        bpf_map_type::{BPF_MAP_TYPE_CGROUP_STORAGE, BPF_MAP_TYPE_SK_STORAGE},
    },
    btf_maps::{Array, HashMap, LruHashMap, PerCpuArray},
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_local_storage, bpf_get_smp_processor_id,
        bpf_get_socket_cookie, bpf_map_lookup_percpu_elem, bpf_probe_read_kernel,
        bpf_sk_storage_get,
    },
    macros::{btf_map, btf_tracepoint, cgroup_sock_addr, sock_ops},
    programs::{BtfTracePointContext, SkReuseportContext, SockAddrContext, SockOpsContext},
};
use ck_common::{
    BindGroup, CONN_COUNTED, ConnTag, MAX_MOVED_CONNS, MAX_SLOTS, MovedConn, SlotCgroup,
};

const SLOTS: usize = MAX_SLOTS as usize;

/// A socket storage map defined by hand: aya-ebpf's `SkStorage` has no `BPF_F_CLONE` (and takes
/// only a `SockAddrContext`). The field layout is the BTF map definition the loader reads.
#[repr(C)]
pub struct CloneSkStorage<T> {
    r#type: *const [i32; BPF_MAP_TYPE_SK_STORAGE as usize],
    key: *const i32,
    value: *const T,
    max_entries: *const [i32; 0],
    map_flags: *const [i32; (BPF_F_NO_PREALLOC | BPF_F_CLONE) as usize],
}

// SAFETY: the fields are placeholders the loader reads from BTF; nothing dereferences them.
unsafe impl<T> Sync for CloneSkStorage<T> {}

impl<T> CloneSkStorage<T> {
    /// The placeholder definition.
    pub const fn new() -> Self {
        CloneSkStorage {
            r#type: core::ptr::null(),
            key: core::ptr::null(),
            value: core::ptr::null(),
            max_entries: core::ptr::null(),
            map_flags: core::ptr::null(),
        }
    }

    /// The value stored on socket `sk`, if any (never created here).
    #[inline(always)]
    fn get(&self, sk: *mut c_void) -> Option<&mut T> {
        let map = core::ptr::from_ref(self).cast_mut().cast();
        // SAFETY: `sk` is the kernel's socket pointer of the tracepoint; the helper returns null
        // or a pointer to this socket's value, valid for the program's run.
        unsafe {
            bpf_sk_storage_get(map, sk, core::ptr::null_mut(), 0)
                .cast::<T>()
                .as_mut()
        }
    }
}

/// Listening socket (and, cloned, each of its connections) -> the slot it counts for.
#[btf_map(name = "conn_tags")]
static CONN_TAGS: CloneSkStorage<ConnTag> = CloneSkStorage::new();

/// A cgroup storage map defined by hand (aya-ebpf has none): one value per cgroup the program is
/// attached to, keyed by the cgroup's id alone (a `u64` key: shared by every attach type).
#[repr(C)]
pub struct CgroupStorage<T> {
    r#type: *const [i32; BPF_MAP_TYPE_CGROUP_STORAGE as usize],
    key: *const u64,
    value: *const T,
    max_entries: *const [i32; 0],
}

// SAFETY: the fields are placeholders the loader reads from BTF; nothing dereferences them.
unsafe impl<T> Sync for CgroupStorage<T> {}

impl<T> CgroupStorage<T> {
    /// The placeholder definition.
    pub const fn new() -> Self {
        CgroupStorage {
            r#type: core::ptr::null(),
            key: core::ptr::null(),
            value: core::ptr::null(),
            max_entries: core::ptr::null(),
        }
    }

    /// The value of the cgroup whose attachment runs the program (never null for a program
    /// that uses the map: the kernel allocates it when the program is attached).
    #[inline(always)]
    fn get(&self) -> Option<&T> {
        let map = core::ptr::from_ref(self).cast_mut().cast();
        // SAFETY: the helper returns this attachment's storage, valid for the program's run.
        unsafe { bpf_get_local_storage(map, 0).cast::<T>().as_ref() }
    }
}

/// A slot's cgroup (where its listening sockets are created) -> that slot, written by the
/// supervisor as it attaches `ck_conns_ops` there (0 elsewhere: the instance's cgroup).
#[btf_map(name = "slot_cgroups")]
static SLOT_CGROUPS: CgroupStorage<SlotCgroup> = CgroupStorage::new();

/// The slot of the cgroup whose attachment of `ck_conns_ops` runs now, if it is a slot's (or a
/// worker's) and the connection of `ctx` is to the port (and family) it names, if it names one.
#[inline(always)]
fn cgroup_slot(ctx: &SockOpsContext) -> Option<u32> {
    let value = SLOT_CGROUPS.get()?;
    let slot = value.slot_plus_one.checked_sub(1)?;
    // A worker's cgroup (`--adopt`) may hold listeners of other ports, and of other groups,
    // whose programs are attached there too: each counts its own port's connections only.
    if value.port != 0
        && (ctx.local_port() != u32::from(value.port)
            || (value.family != 0 && ctx.family() != u32::from(value.family)))
    {
        return None;
    }
    (slot < MAX_SLOTS).then_some(slot)
}

/// `--adopt`: a worker's cgroup id -> its slot (written by the supervisor before it starts).
#[btf_map(name = "bind_slots")]
static BIND_SLOTS: HashMap<u64, u32, { 2 * SLOTS }> = HashMap::new();

/// `--adopt`: the group's port and family, whose binds [`tag_bind`] tags.
#[btf_map(name = "bind_group")]
static BIND_GROUP: Array<BindGroup, 1> = Array::new();

/// Open connections per slot, per CPU (signed: the sum over CPUs is the count).
#[btf_map(name = "conns")]
static CONNS: PerCpuArray<i64, SLOTS> = PerCpuArray::new();

/// Resets sent per slot, per CPU: connections of the slot that its own side aborted (see
/// [`sent_reset`]).
#[btf_map(name = "resets")]
static RESETS: PerCpuArray<u64, SLOTS> = PerCpuArray::new();

/// Where `sk_err` lies in a `struct sock`, resolved by ck from the kernel's BTF and set when it
/// loads the program (read-only; 0: not resolved, and no reset is counted).
#[unsafe(no_mangle)]
static CK_SK_ERR_AT: Global<u32> = Global::new(0);

/// Socket cookie of a slot's listening socket -> its slot (written by the supervisor).
#[btf_map(name = "listeners")]
static LISTENERS: HashMap<u64, u32, { 2 * SLOTS }> = HashMap::new();

/// Cookie of an established connection re-homed off a closing listener -> where its count went.
#[btf_map(name = "moved")]
static MOVED: LruHashMap<u64, MovedConn, { MAX_MOVED_CONNS as usize }> = LruHashMap::new();

/// 1 once `ck_select` has re-homed an established connection in this group (never cleared): until
/// then no closing socket needs a `moved` lookup (whose cookie helper allocates a cookie for
/// every socket that has none: a global atomic, most of this program's cost on each close).
#[btf_map(name = "moved_any")]
static MOVED_ANY: Array<u32, 1> = Array::new();

#[cgroup_sock_addr(bind4)]
pub fn ck_tag_bind4(ctx: SockAddrContext) -> i32 {
    tag_bind(&ctx);
    1
}

#[cgroup_sock_addr(bind6)]
pub fn ck_tag_bind6(ctx: SockAddrContext) -> i32 {
    tag_bind(&ctx);
    1
}

/// A process of a worker's cgroup binds a socket to the group's port: the socket is tagged
/// with the worker's slot now, before it can listen. (A bind that then fails leaves a tag on
/// a socket that never listens here: harmless.) Other binds are left alone.
#[inline(always)]
fn tag_bind(ctx: &SockAddrContext) {
    let Some(group) = BIND_GROUP.get(0) else {
        return;
    };
    // SAFETY: the context pointer is the kernel's `bpf_sock_addr` for this call; `user_port`
    // holds the port in network byte order in its low 16 bits.
    let (port, family) = unsafe {
        let addr = &*ctx.sock_addr;
        (u16::from_be(addr.user_port as u16), addr.user_family)
    };
    // Family 0: the instance has one group on the port, whatever family a worker binds (Go's
    // `:PORT` is an IPv6 dual-stack socket in a group that listens on 0.0.0.0).
    if port == 0 || port != group.port || (group.family != 0 && family != u32::from(group.family)) {
        return;
    }
    // SAFETY: helper without arguments (the current task's cgroup v2 id).
    let cgroup = unsafe { bpf_get_current_cgroup_id() };
    // SAFETY: a lookup copied out at once.
    let Some(slot) = (unsafe { BIND_SLOTS.get(&cgroup) }).copied() else {
        return;
    };
    let mut tag = ConnTag { slot, flags: 0 };
    let map = core::ptr::from_ref(&CONN_TAGS).cast_mut().cast();
    // SAFETY: `sk` is the context's socket (the verifier's PTR_TO_SOCKET); the helper copies
    // `tag` into the socket's new storage (or finds the one there) and returns null or it.
    unsafe {
        let sk = (*ctx.sock_addr).__bindgen_anon_1.sk;
        bpf_sk_storage_get(
            map,
            sk.cast(),
            core::ptr::from_mut(&mut tag).cast(),
            aya_ebpf::bindings::BPF_SK_STORAGE_GET_F_CREATE as u64,
        );
    }
}

#[btf_tracepoint(function = "inet_sock_set_state")]
pub fn ck_conns(ctx: BtfTracePointContext) -> i32 {
    // inet_sock_set_state(const struct sock *sk, const int oldstate, const int newstate)
    let sk: *mut c_void = ctx.arg(0);
    let old: i32 = ctx.arg(1);
    let new: i32 = ctx.arg(2);
    if old == BPF_TCP_SYN_RECV as i32 && new == BPF_TCP_ESTABLISHED as i32 {
        if let Some(tag) = CONN_TAGS.get(sk) {
            opened(tag, || crate::probe::peer_is_probe(sk.cast()));
        }
    } else if new == BPF_TCP_CLOSE as i32 {
        // SAFETY: `sk` is the tracepoint's socket; the helper only reads (or sets) its cookie.
        let slot = closed(CONN_TAGS.get(sk), || unsafe { bpf_get_socket_cookie(sk) });
        count_reset(slot, old as u32, || Some(sk));
    }
    0
}

/// Each connection runs it 8 times, whatever it does: 3 calls the kernel makes for every
/// connection of a cgroup with a `sock_ops` program (`TIMEOUT_INIT`, `RWND_INIT`, `NEEDS_ECN`,
/// returned from at the first test), `PASSIVE_ESTABLISHED`, then each state change once it
/// asked for them (`ESTABLISHED` and two on the way to `CLOSE`, returned from at once; `CLOSE`).
/// So the work is in two runs: the connection counts at `PASSIVE_ESTABLISHED` (its slot read
/// once gives both whether to ask and which slot), and leaves the count at `CLOSE`. The socket's
/// address for the reset check is read only for a close that can be an abort.
#[sock_ops]
pub fn ck_conns_ops(ctx: SockOpsContext) -> u32 {
    let op = ctx.op();
    if op == BPF_SOCK_OPS_STATE_CB {
        // args[0] the old state, args[1] the new one: only CLOSE is of use here.
        if ctx.arg(1) != BPF_TCP_CLOSE {
            return 1;
        }
    } else if op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB {
        return 1;
    }
    // SAFETY: `sk` is a field of the `bpf_sock_ops` view; the verifier makes it a socket
    // pointer or null (a request socket), checked here.
    let sk: *mut c_void = unsafe { (*ctx.ops).__bindgen_anon_2.sk }.cast();
    if sk.is_null() {
        return 1;
    }
    let tag = CONN_TAGS.get(sk);
    let flags = ctx.cb_flags();
    if op == BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB {
        // The connection is still in SYN_RECV and moves to ESTABLISHED right after: it counts
        // now, and asks for its state changes to see its CLOSE.
        if let Some(tag) = tag {
            let _ = ctx.set_cb_flags((flags | BPF_SOCK_OPS_STATE_CB_FLAG) as i32);
            opened(tag, || crate::probe::ops_peer_is_probe(&ctx));
        } else if let Some(slot) = cgroup_slot(&ctx) {
            // Untagged, in a slot's cgroup: the flag is the "counted" mark. Set already, another
            // run counted it (two images' programs, both attached for a moment of `ck upgrade`).
            if flags & BPF_SOCK_OPS_STATE_CB_FLAG == 0
                && !crate::probe::ops_peer_is_probe(&ctx)
                && ctx
                    .set_cb_flags((flags | BPF_SOCK_OPS_STATE_CB_FLAG) as i32)
                    .is_ok()
            {
                add(slot, 1);
            }
        }
        return 1;
    }
    // SAFETY: the context is a `bpf_sock_ops`, which the cookie helper accepts.
    let cookie = || unsafe { bpf_get_socket_cookie(ctx.as_ptr()) };
    let slot = match tag {
        Some(tag) => closed(Some(tag), cookie),
        None => {
            // Counted (it asked for this state change) in a slot's cgroup: the mark is cleared,
            // so that another run for the same change does not count it off twice.
            let Some(slot) = cgroup_slot(&ctx) else {
                return 1;
            };
            if flags & BPF_SOCK_OPS_STATE_CB_FLAG == 0 {
                return 1;
            }
            let _ = ctx.set_cb_flags((flags & !BPF_SOCK_OPS_STATE_CB_FLAG) as i32);
            left(true, slot, cookie)
        }
    };
    // The verifier refuses arithmetic on the context's socket pointer: the socket's address is
    // read as a number from the kernel's context (`bpf_sock_ops_kern`, whose first field is the
    // socket, as ck checks in the kernel's BTF before it sets `CK_SK_ERR_AT`).
    count_reset(slot, ctx.arg(0), || {
        // SAFETY: a copy that never faults, into a value of the type asked.
        let addr = unsafe { bpf_probe_read_kernel(ctx.as_ptr().cast::<u64>()) };
        addr.ok().map(|addr| addr as *mut c_void)
    });
    1
}

/// A connection of a tagged listener (`tag`, its copy of the listener's) is established: it
/// counts for the tag's slot, unless it is one of ck's probes (`is_probe`: counted apart, as
/// probe hits: a probe is not a client).
#[inline(always)]
fn opened(tag: &mut ConnTag, is_probe: impl FnOnce() -> bool) {
    if tag.flags & CONN_COUNTED == 0 && !is_probe() {
        tag.flags |= CONN_COUNTED;
        add(tag.slot, 1);
    }
}

/// A socket with tag `tag` (or none) closed: see [`left`]. The tag's mark is cleared, so that
/// the connection leaves the count once.
#[inline(always)]
fn closed(tag: Option<&mut ConnTag>, cookie: impl FnOnce() -> u64) -> Option<u32> {
    let mut counted = false;
    let mut slot = MAX_SLOTS;
    if let Some(tag) = tag {
        counted = tag.flags & CONN_COUNTED != 0;
        tag.flags &= !CONN_COUNTED;
        slot = tag.slot;
    }
    left(counted, slot, cookie)
}

/// A socket closed: a counted connection (`counted`, of `slot`) leaves its slot's count (the
/// slot it was re-homed to, if it was); a connection re-homed without being counted (created
/// before its listener was tagged) gives back what [`migrated`] moved. `cookie` reads the
/// socket's cookie (each program type has its own way). Returns the slot a client's connection
/// counted for.
#[inline(always)]
fn left(counted: bool, slot: u32, cookie: impl FnOnce() -> u64) -> Option<u32> {
    if MOVED_ANY.get(0).is_none_or(|any| *any == 0) {
        if counted {
            add(slot, -1);
        }
        return counted.then_some(slot);
    }
    // Looked up for untagged sockets too (see above).
    let cookie = cookie();
    // SAFETY: the value is copied out before the entry is removed.
    if let Some(moved) = unsafe { MOVED.get(cookie) }.copied() {
        let _ = MOVED.remove(cookie);
        if !counted {
            add(moved.from, 1);
        }
        add(moved.to, -1);
        return Some(moved.to);
    } else if counted {
        add(slot, -1);
    }
    counted.then_some(slot)
}

/// A client's connection of `slot` closed from state `old`: counted in `resets` when its own
/// side aborted it ([`sent_reset`]). `sk` gives the socket's address, asked only for a close
/// that can be an abort.
#[inline(always)]
fn count_reset(slot: Option<u32>, old: u32, sk: impl FnOnce() -> Option<*mut c_void>) {
    let Some(slot) = slot else {
        return;
    };
    let at = CK_SK_ERR_AT.load();
    if at == 0 || (old != BPF_TCP_ESTABLISHED && old != BPF_TCP_CLOSE_WAIT) {
        return;
    }
    let Some(sk) = sk() else {
        return;
    };
    if sent_reset(at, sk) {
        if let Some(count) = RESETS.get_ptr_mut(slot) {
            // SAFETY: per-CPU value of this CPU; a BPF program is not preempted on its CPU.
            unsafe { *count += 1 };
        }
    }
}

/// Whether a connection that closed straight from ESTABLISHED or CLOSE_WAIT was aborted by its
/// own side, which then sends a reset: a worker that closed it with data unread or `SO_LINGER`
/// 0, or exited (the kernel closes its sockets so). An orderly close never goes straight to
/// CLOSE from those states (it passes FIN_WAIT or LAST_ACK: [`count_reset`] asks only for
/// those two), and a reset received on the way sets `sk_err` (ECONNRESET, EPIPE) before the socket
/// closes, where an abort leaves it 0. One read of `sk_err`, `at` bytes into `sk`.
#[inline(always)]
fn sent_reset(at: u32, sk: *mut c_void) -> bool {
    // SAFETY: `bpf_probe_read_kernel` copies without faulting into a value of the type asked;
    // `sk` is only offset, never dereferenced here.
    let err =
        unsafe { bpf_probe_read_kernel(sk.cast::<u8>().wrapping_add(at as usize).cast::<i32>()) };
    err == Ok(0)
}

/// `ck_select` re-homed `migrating` (a request or connection of a closing listener) to `slot`:
/// an established connection's count moves there now.
#[inline(always)]
pub fn migrated(ctx: &SkReuseportContext, migrating: *mut c_void, slot: u32) {
    // SAFETY: `migrating` is the context's non-null `migrating_sk`; `state` is a field of the
    // `bpf_sock` view the verifier lets this program read.
    let state = unsafe { (*migrating.cast::<aya_ebpf::bindings::bpf_sock>()).state };
    // A request still in SYN_RECV is not a connection yet: the listener it now waits on creates
    // (and tags) it. TCP_SYN_RECV here is a Fast Open child, which keeps the old tag: its count
    // stays with (`ck_conns_ops`: is already on, `ck_conns`: comes later to) that slot. A
    // connection its client reset while it waited (CLOSE) has left the count already, and
    // closes no more: moving it would leave one too many on the new slot for good.
    if state == BPF_TCP_NEW_SYN_RECV || state == BPF_TCP_SYN_RECV || state == BPF_TCP_CLOSE {
        return;
    }
    // SAFETY: the context's `sk` is the closing listener, a socket the helper accepts.
    let listener = unsafe { bpf_get_socket_cookie(ctx.sk().sock.cast()) };
    // SAFETY: a lookup copied out at once.
    let Some(from) = (unsafe { LISTENERS.get(listener) }).copied() else {
        return;
    };
    // Set before the record is written, so that a close that can find the record looks for it.
    if let Some(any) = MOVED_ANY.get_ptr_mut(0) {
        // SAFETY: the map's only value, valid for the program's run; every writer writes 1.
        unsafe { *any = 1 };
    }
    // SAFETY: the connection being re-homed, a socket the helper accepts.
    let cookie = unsafe { bpf_get_socket_cookie(migrating) };
    // Moved before (its second closing listener): it still comes from where it was created.
    // SAFETY: a lookup copied out at once.
    let origin = match unsafe { MOVED.get(cookie) } {
        Some(moved) => moved.from,
        None => from,
    };
    if MOVED
        .insert(
            cookie,
            MovedConn {
                from: origin,
                to: slot,
            },
            0,
        )
        .is_ok()
    {
        add(from, -1);
        add(slot, 1);
    }
}

/// Most CPUs whose counts [`open`] sums: a bound the verifier can see. On a machine with more
/// CPUs, the counts of CPUs 64 and above are not read (least-conn then compares the part of each
/// slot's connections that opened and closed on the first 64 CPUs).
const MAX_SUMMED_CPUS: u32 = 64;

/// The kernel's possible CPUs, set by the supervisor at load (read-only data, a constant for the
/// verifier): [`open`] asks for the other CPUs' counts up to it and no further (0, not set: until
/// the lookup returns null).
#[unsafe(no_mangle)]
static CK_CPUS: Global<u32> = Global::new(0);

/// Open connections of `slot`: its per-CPU counts summed over the possible CPUs, at most
/// [`MAX_SUMMED_CPUS`] of them. This CPU's count is the plain per-CPU lookup (which the verifier
/// inlines: no helper call); each other CPU's is one `bpf_map_lookup_percpu_elem`. A sum below
/// zero (a close seen before its open on a CPU not read) counts as 0.
#[inline(always)]
pub fn open(slot: u32) -> u32 {
    let Some(own) = CONNS.get(slot) else {
        return 0;
    };
    let mut total: i64 = *own;
    // SAFETY: no arguments; the verifier inlines it on x86-64 and arm64.
    let this_cpu = unsafe { bpf_get_smp_processor_id() };
    let cpus = match CK_CPUS.load() {
        0 => MAX_SUMMED_CPUS,
        n => n,
    };
    let map = core::ptr::from_ref(&CONNS).cast_mut().cast();
    let key = core::ptr::from_ref(&slot).cast();
    let mut cpu = 0;
    while cpu < MAX_SUMMED_CPUS && cpu < cpus {
        if cpu != this_cpu {
            // SAFETY: `CONNS` is a per-CPU array and `key` a u32 index into it; the helper
            // returns null (past the last CPU) or that CPU's i64 value.
            let value = unsafe { bpf_map_lookup_percpu_elem(map, key, cpu) }.cast::<i64>();
            if value.is_null() {
                break;
            }
            // SAFETY: non-null: the CPU's value, valid for the program's run.
            total += unsafe { *value };
        }
        cpu += 1;
    }
    total.clamp(0, i64::from(u32::MAX >> 1)) as u32
}

/// Adds `delta` to this CPU's count of `slot` (also the minimal counter's one count, in the
/// bench's own copy of the map).
#[inline(always)]
pub(crate) fn add(slot: u32, delta: i64) {
    if let Some(count) = CONNS.get_ptr_mut(slot) {
        // SAFETY: per-CPU value of this CPU; a BPF program is not preempted on its CPU.
        unsafe { *count += delta };
    }
}
