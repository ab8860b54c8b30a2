//! What a blocked thread waits on, from `/proc`: the system call and its arguments
//! (`/proc/PID/task/TID/syscall`) and, for `poll`/`ppoll`, the `pollfd` array or, for
//! `select`/`pselect6`, the read `fd_set` it passed, read from the worker's memory
//! (`/proc/PID/mem`, the same ptrace access the syscall file needs). A call counts only if it
//! waits for input (a connection, or for a UDP socket a datagram) on one of the socket's fds, and only if the thread is still in the
//! very same call once its memory was read (else what was read may be stale).
use std::{fs, io, os::unix::fs::FileExt as _};

use super::Accepting;

/// The calls of x86_64 by number.
const X86_64: &[(u64, Accepting)] = &[
    (43, Accepting::Accept),
    (288, Accepting::Accept),
    (7, Accepting::Poll),
    (271, Accepting::Ppoll),
    (23, Accepting::Select),
    (270, Accepting::Pselect6),
    (45, Accepting::Receive),
    (47, Accepting::Receive),
    (299, Accepting::Receive),
];
/// The calls of aarch64 by number (it has no `poll` and no `select`: libc implements them with
/// `ppoll` and `pselect6`).
const AARCH64: &[(u64, Accepting)] = &[
    (202, Accepting::Accept),
    (242, Accepting::Accept),
    (73, Accepting::Ppoll),
    (72, Accepting::Pselect6),
    (207, Accepting::Receive),
    (212, Accepting::Receive),
    (243, Accepting::Receive),
];
/// The calls of the architecture ck is built for (none known elsewhere).
const CALLS: &[(u64, Accepting)] = if cfg!(target_arch = "x86_64") {
    X86_64
} else if cfg!(target_arch = "aarch64") {
    AARCH64
} else {
    &[]
};

/// `POLLIN` of `struct pollfd`'s `events`.
const POLLIN: i16 = 0x001;
/// Size of a `struct pollfd` (`int fd; short events; short revents;`).
const POLLFD_SIZE: usize = 8;
/// Largest `pollfd` array read (a server polling more fds than this is read in part).
const MAX_POLL_FDS: u64 = 16 * 1024;
/// Largest `fd_set` read, in bits.
const MAX_SELECT_FDS: u64 = 64 * 1024;

/// A thread blocked in a system call: its number and six arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Blocked {
    nr: u64,
    args: [u64; 6],
}

/// Parses `/proc/PID/task/TID/syscall`: `NR ARG0 .. ARG5 SP PC` while blocked in a call;
/// `running`, or `-1 SP PC` outside one, is `None`.
fn parse(text: &str) -> Option<Blocked> {
    let mut fields = text.split_whitespace();
    let nr = fields.next()?.parse().ok()?;
    let mut args = [0; 6];
    for arg in &mut args {
        *arg = u64::from_str_radix(fields.next()?.strip_prefix("0x")?, 16).ok()?;
    }
    Some(Blocked { nr, args })
}

/// What thread `tid` of `pid` is blocked in, if anything.
fn blocked(pid: u32, tid: &str) -> Option<Blocked> {
    parse(&fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall")).ok()?)
}

/// The call of thread `tid` of `pid` if it waits for a connection on one of `listening` (the
/// fds of `pid` that are the watched listening sockets).
pub(super) fn waiting_on(pid: u32, tid: &str, listening: &[i32]) -> Option<Accepting> {
    let now = blocked(pid, tid)?;
    let call = CALLS.iter().find(|(nr, _)| *nr == now.nr)?.1;
    let [a0, a1, ..] = now.args;
    let waits = match call {
        Accepting::Accept | Accepting::Receive => listening.iter().any(|fd| *fd as u64 == a0),
        Accepting::Poll | Accepting::Ppoll => polls(pid, a0, a1, listening),
        Accepting::Select | Accepting::Pselect6 => selects(pid, a0, a1, listening),
        // Not a system call: no table names it.
        Accepting::Epoll => false,
    };
    // The memory read belongs to this call only if the thread is still in it.
    let same =
        matches!(call, Accepting::Accept | Accepting::Receive) || blocked(pid, tid) == Some(now);
    (waits && same).then_some(call)
}

/// Whether the `nfds` `pollfd`s at `addr` in `pid` ask for input on one of `listening`.
fn polls(pid: u32, addr: u64, nfds: u64, listening: &[i32]) -> bool {
    let count = nfds.min(MAX_POLL_FDS) as usize;
    let Some(array) = read_memory(pid, addr, count * POLLFD_SIZE) else {
        return false;
    };
    pollfds_wait_for(&array, listening)
}

/// Whether a `pollfd` array asks for input (`POLLIN`) on one of `listening`.
fn pollfds_wait_for(array: &[u8], listening: &[i32]) -> bool {
    array.chunks_exact(POLLFD_SIZE).any(|p| {
        let fd = i32::from_ne_bytes([p[0], p[1], p[2], p[3]]);
        let events = i16::from_ne_bytes([p[4], p[5]]);
        events & POLLIN != 0 && listening.contains(&fd)
    })
}

/// Whether the read `fd_set` at `readfds` in `pid` (of `nfds` bits) has one of `listening`.
fn selects(pid: u32, nfds: u64, readfds: u64, listening: &[i32]) -> bool {
    let nfds = nfds.min(MAX_SELECT_FDS);
    let wanted: Vec<u64> = listening
        .iter()
        .filter_map(|fd| u64::try_from(*fd).ok())
        .filter(|fd| *fd < nfds)
        .collect();
    if readfds == 0 || wanted.is_empty() {
        return false;
    }
    let Some(set) = read_memory(pid, readfds, nfds.div_ceil(64) as usize * 8) else {
        return false;
    };
    wanted.iter().any(|fd| fd_set_has(&set, *fd))
}

/// Whether bit `fd` is set in an `fd_set` (an array of `unsigned long`, bit `fd % 64` of word
/// `fd / 64`).
fn fd_set_has(set: &[u8], fd: u64) -> bool {
    let at = (fd / 64) as usize * 8;
    set.get(at..at + 8).is_some_and(|word| {
        let word = u64::from_ne_bytes(word.try_into().expect("8 bytes"));
        word & (1 << (fd % 64)) != 0
    })
}

/// `len` bytes at `addr` of `pid`'s memory.
fn read_memory(pid: u32, addr: u64, len: usize) -> Option<Vec<u8>> {
    let mem = fs::File::open(format!("/proc/{pid}/mem")).ok()?;
    let mut buf = vec![0; len];
    mem.read_exact_at(&mut buf, addr).ok()?;
    Some(buf)
}

/// Why ck cannot see what `pid`'s threads wait in, if it cannot: an architecture whose system
/// call numbers ck does not know, or `/proc/PID/syscall` or `/proc/PID/mem` it may not read.
pub(super) fn unreadable(pid: u32) -> Option<String> {
    if CALLS.is_empty() {
        return Some(format!(
            "ck does not know the system call numbers of {}",
            std::env::consts::ARCH
        ));
    }
    let denied = |path: String, e: io::Error| {
        format!(
            "ck may not read {path} ({e}): seeing a worker wait for connections needs ptrace \
             access to it (CAP_SYS_PTRACE, or the workers' own user)"
        )
    };
    let syscall = format!("/proc/{pid}/syscall");
    match fs::read_to_string(&syscall) {
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return Some(denied(syscall, e)),
        Err(e)
            if e.kind() == io::ErrorKind::NotFound
                && fs::metadata(format!("/proc/{pid}")).is_ok() =>
        {
            return Some(format!(
                "this kernel has no {syscall} (built without CONFIG_HAVE_ARCH_TRACEHOOK)"
            ));
        }
        _ => {}
    }
    let mem = format!("/proc/{pid}/mem");
    match fs::File::open(&mem) {
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Some(denied(mem, e)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_syscall_file() {
        let pselect = "270 0xa 0x56167a376c20 0x0 0x0 0x0 0x0 0x7fe66fac9380 0x7fe67403c9ec\n";
        assert_eq!(
            parse(pselect),
            Some(Blocked {
                nr: 270,
                args: [0xa, 0x5616_7a37_6c20, 0, 0, 0, 0]
            })
        );
        assert_eq!(parse("running\n"), None);
        assert_eq!(parse("-1 0x7ffc62050728 0x7fe67403a366\n"), None);
    }

    #[test]
    fn aarch64_waits_in_ppoll_and_pselect6_only() {
        let calls: Vec<Accepting> = AARCH64.iter().map(|(_, c)| *c).collect();
        assert!(!calls.contains(&Accepting::Poll) && !calls.contains(&Accepting::Select));
        assert!(calls.contains(&Accepting::Ppoll) && calls.contains(&Accepting::Pselect6));
        assert!(!CALLS.is_empty(), "ck is built for x86_64 or aarch64 here");
    }

    #[test]
    fn finds_a_listener_in_a_pollfd_array() {
        let pollfd = |fd: i32, events: i16| {
            let mut p = fd.to_ne_bytes().to_vec();
            p.extend(events.to_ne_bytes());
            p.extend(0i16.to_ne_bytes());
            p
        };
        let array = [pollfd(4, POLLIN), pollfd(7, 0x004), pollfd(-1, POLLIN)].concat();
        assert!(pollfds_wait_for(&array, &[4]));
        assert!(
            !pollfds_wait_for(&array, &[7]),
            "POLLOUT only is no wait for connections"
        );
        assert!(!pollfds_wait_for(&array, &[5]));
    }

    #[test]
    fn finds_a_listener_in_an_fd_set() {
        let mut set = vec![0u8; 16];
        set[8..16].copy_from_slice(&(1u64 << 3).to_ne_bytes());
        assert!(fd_set_has(&set, 67));
        assert!(!fd_set_has(&set, 3));
        assert!(!fd_set_has(&set, 200), "beyond the set");
    }
}
