//! The demo worker's UDP side: every datagram on a UDP socket it was handed is answered, to its
//! sender, with `slot=<slot> pid=<pid>\n` (who served it, as `GET /` says over TCP). On shutdown
//! it keeps answering until its sockets have been quiet for [`UDP_LINGER`], as a QUIC server
//! finishes its connections before it exits: ck keeps steering a flow's datagrams to the worker
//! that has it while that worker's socket is open.
use std::{sync::Arc, time::Duration};

use anyhow::Context as _;
use tokio::{net::UdpSocket, task::JoinSet, time::timeout};

use super::server::Identity;
use crate::close::Close;

/// After shutdown, a socket is closed once no datagram came for this long.
pub const UDP_LINGER: Duration = Duration::from_millis(300);
/// The largest datagram read (the rest of a longer one is cut off).
const MAX_DATAGRAM: usize = 64 * 1024;

/// Answers datagrams on `sockets` until shutdown is requested on `close` and each socket has
/// been quiet for [`UDP_LINGER`]. Returns at once without sockets.
///
/// # Errors
/// When a socket fails in a way that retrying cannot fix.
pub async fn serve_udp(
    sockets: Vec<UdpSocket>,
    identity: Identity,
    close: Close,
) -> anyhow::Result<()> {
    let reply: Arc<[u8]> = identity.body().into_bytes().into();
    let mut tasks = JoinSet::new();
    for socket in sockets {
        let (reply, close) = (reply.clone(), close.clone());
        tasks.spawn(answer(socket, reply, close));
    }
    while let Some(result) = tasks.join_next().await {
        result.context("a UDP task panicked")??;
    }
    Ok(())
}

/// Answers every datagram on `socket` with `reply`, until shutdown and [`UDP_LINGER`] of quiet.
async fn answer(socket: UdpSocket, reply: Arc<[u8]>, mut close: Close) -> anyhow::Result<()> {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        let received = if close.is_requested() {
            match timeout(UDP_LINGER, socket.recv_from(&mut buf)).await {
                Ok(received) => received,
                Err(_) => return Ok(()),
            }
        } else {
            tokio::select! {
                received = socket.recv_from(&mut buf) => received,
                () = close.requested() => continue,
            }
        };
        let (_, from) = received.context("receiving a datagram")?;
        // A client gone (ICMP unreachable from an earlier reply) is no reason to stop.
        let _ = socket.send_to(&reply, from).await;
    }
}
