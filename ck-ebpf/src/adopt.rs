//! `--adopt`: programs attached to the instance's cgroup, for servers that bind the port
//! themselves. `ck_bind4`/`ck_bind6` add `SO_REUSEPORT` and `SO_REUSEADDR` to a bind to one of
//! the instance's ports (`adopt_ports`), so every worker can bind it unmodified and all join one
//! group; other binds are left alone. `ck_listen` reports every socket that starts to listen
//! (`listens` ring buffer), so that the supervisor adopts it at once. UDP sockets never listen:
//! `ck_bound4`/`ck_bound6` report a UDP socket once it is bound to one of the instance's ports
//! (ready to take datagrams), in the same ring.
use aya_ebpf::{
    EbpfContext as _,
    bindings::{BPF_SOCK_OPS_TCP_LISTEN_CB, SO_REUSEADDR, SO_REUSEPORT, SOL_SOCKET},
    btf_maps::{HashMap, RingBuf},
    helpers::{bpf_get_socket_cookie, bpf_ktime_get_ns, bpf_setsockopt},
    macros::{btf_map, cgroup_sock, cgroup_sock_addr, sock_ops},
    programs::{SockAddrContext, SockContext, SockOpsContext},
};
use ck_common::{ListenEvent, MAX_ADOPT_PORTS};

/// The instance's ports (host byte order) -> 1.
#[btf_map(name = "adopt_ports")]
static ADOPT_PORTS: HashMap<u16, u8, { MAX_ADOPT_PORTS as usize }> = HashMap::new();

/// Sockets that started listening in the instance's cgroup.
#[btf_map(name = "listens")]
static LISTENS: RingBuf<ListenEvent, 65536> = RingBuf::new();

/// Allows the bind; adds `SO_REUSEPORT` and `SO_REUSEADDR` when it is to an instance port.
#[inline(always)]
fn bind(ctx: &SockAddrContext) -> i32 {
    // SAFETY: the context pointer is the kernel's `bpf_sock_addr` for this call; `user_port`
    // holds the port in network byte order in its low 16 bits.
    let port = u16::from_be(unsafe { (*ctx.sock_addr).user_port } as u16);
    // SAFETY: a lookup whose value is only tested for presence.
    if unsafe { ADOPT_PORTS.get(&port) }.is_some() {
        for option in [SO_REUSEPORT, SO_REUSEADDR] {
            let mut one: i32 = 1;
            // SAFETY: the helper reads 4 bytes from `one`, which lives on this stack frame.
            // A failure leaves the bind as the app asked; the kernel then refuses a second one
            // with EADDRINUSE, which the supervisor reports.
            unsafe {
                bpf_setsockopt(
                    ctx.as_ptr(),
                    SOL_SOCKET as i32,
                    option as i32,
                    (&mut one as *mut i32).cast(),
                    4,
                );
            }
        }
    }
    1
}

#[cgroup_sock_addr(bind4)]
pub fn ck_bind4(ctx: SockAddrContext) -> i32 {
    bind(&ctx)
}

#[cgroup_sock_addr(bind6)]
pub fn ck_bind6(ctx: SockAddrContext) -> i32 {
    bind(&ctx)
}

#[sock_ops]
pub fn ck_listen(ctx: SockOpsContext) -> u32 {
    if ctx.op() == BPF_SOCK_OPS_TCP_LISTEN_CB {
        let event = ListenEvent {
            // SAFETY: the context is a `bpf_sock_ops`, which the cookie helper accepts.
            cookie: unsafe { bpf_get_socket_cookie(ctx.as_ptr()) },
            // SAFETY: helper without arguments.
            ktime_ns: unsafe { bpf_ktime_get_ns() },
            port: ctx.local_port(),
            family: ctx.family(),
        };
        // A full ring buffer loses the event; the supervisor's periodic scan adopts it then.
        let _ = LISTENS.output(&event, 0);
    }
    1
}

/// `IPPROTO_UDP`.
const IPPROTO_UDP: u32 = 17;

/// Reports a UDP socket just bound to one of the instance's ports.
#[inline(always)]
fn bound(ctx: &SockContext) -> i32 {
    // SAFETY: the context pointer is the kernel's `bpf_sock` for this call; after a bind its
    // `protocol`, `family` and `src_port` (host byte order) are readable.
    let (protocol, family, port) = unsafe {
        let sock = &*ctx.sock;
        (sock.protocol, sock.family, sock.src_port)
    };
    // SAFETY: a lookup whose value is only tested for presence.
    if protocol == IPPROTO_UDP && unsafe { ADOPT_PORTS.get(&(port as u16)) }.is_some() {
        let event = ListenEvent {
            // SAFETY: the context is a `bpf_sock`, which the cookie helper accepts.
            cookie: unsafe { bpf_get_socket_cookie(ctx.as_ptr()) },
            // SAFETY: helper without arguments.
            ktime_ns: unsafe { bpf_ktime_get_ns() },
            port,
            family,
        };
        // As for a listen: a lost event is found by the supervisor's periodic scan.
        let _ = LISTENS.output(&event, 0);
    }
    1
}

#[cgroup_sock(post_bind4)]
pub fn ck_bound4(ctx: SockContext) -> i32 {
    bound(&ctx)
}

#[cgroup_sock(post_bind6)]
pub fn ck_bound6(ctx: SockContext) -> i32 {
    bound(&ctx)
}
