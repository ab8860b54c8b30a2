//! `--adopt`: programs attached to the instance's cgroup, for servers that bind the port
//! themselves. `ck_bind4`/`ck_bind6` add `SO_REUSEPORT` and `SO_REUSEADDR` to a bind to one of
//! the instance's ports (`adopt_ports`), so every worker can bind it unmodified and all join one
//! group; other binds are left alone. `ck_listen` reports every socket that starts to listen
//! (`listens` ring buffer), so that the supervisor adopts it at once.
use aya_ebpf::{
    EbpfContext as _,
    bindings::{BPF_SOCK_OPS_TCP_LISTEN_CB, SO_REUSEADDR, SO_REUSEPORT, SOL_SOCKET},
    btf_maps::{HashMap, RingBuf},
    helpers::{bpf_get_socket_cookie, bpf_ktime_get_ns, bpf_setsockopt},
    macros::{btf_map, cgroup_sock_addr, sock_ops},
    programs::{SockAddrContext, SockOpsContext},
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
