//! Open connections per worker by a scan, the fallback where the kernel does not count them
//! (`bpf::conns`: no BTF, an old kernel, `--no-bpf`, `CK_CONN_COUNT=scan`) for
//! `ck_worker_connections` and `ck status`: the established TCP sockets accepted on the groups'
//! ports (sock_diag), matched by inode to the sockets the processes of each worker's tree hold
//! (`/proc/PID/fd`).
//!
//! Matching is by inode, not by the socket's cgroup: a socket-activated worker accepts on a
//! listener ck created, so its accepted sockets carry ck's cgroup id, not the worker's.
use std::collections::{BTreeMap, HashSet};

use crate::os::sock_diag;

/// Established connections on `ports` held by each worker (`(slot, pids of its tree)`), by
/// slot, ck's own probes (from the probe range at `probe_base`) left out. A connection shared
/// by several processes of one tree counts once. Slow with many connections (a readlink per
/// fd): call it off the event loop.
pub fn per_worker(
    ports: &[u16],
    probe_base: u16,
    workers: &[(u32, Vec<u32>)],
) -> BTreeMap<u32, u64> {
    let established = match sock_diag::established_inodes(ports, probe_base) {
        Ok(inodes) => inodes,
        Err(e) => {
            tracing::debug!("sock_diag dump of established connections: {e}");
            return BTreeMap::new();
        }
    };
    workers
        .iter()
        .map(|(slot, pids)| (*slot, held(&established, pids)))
        .collect()
}

/// How many of `established` the processes `pids` hold between them.
fn held(established: &HashSet<u64>, pids: &[u32]) -> u64 {
    let mut mine = HashSet::new();
    for pid in pids {
        mine.extend(
            sock_diag::socket_inodes(*pid)
                .into_iter()
                .filter(|inode| established.contains(inode)),
        );
    }
    mine.len() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    /// Connections accepted on the port and held by this process are counted once each;
    /// the client ends (their local port is another) are not.
    #[test]
    fn counts_accepted_connections_held_by_the_processes() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let clients: Vec<TcpStream> = (0..3)
            .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
            .collect();
        let accepted: Vec<TcpStream> = (0..3).map(|_| listener.accept().unwrap().0).collect();
        let me = std::process::id();
        let counts = per_worker(&[port], 0, &[(0, vec![me, me]), (1, vec![])]);
        assert_eq!(counts.get(&0), Some(&3), "{counts:?}");
        assert_eq!(counts.get(&1), Some(&0), "{counts:?}");
        drop(accepted);
        drop(clients);
    }
}
