//! A Rust worker for ck on the `ck_worker::activation` module: it takes the socket ck hands over
//! (`listen_fds`), says `READY=1` (`Notifier`), answers `slot=S pid=P`, and on SIGTERM says
//! `STOPPING=1`, stops accepting and exits (each answer closes its connection, so there is no
//! idle keep-alive connection to race with; what is still queued on the socket stays with ck,
//! which hands it to another worker when this one exits).
//!
//! Build: `cargo build -p ck-worker --example activation`
//! Run:   `ck run --port 8080 -- target/debug/examples/activation`
use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ck_worker::activation::{Notifier, listen_fds};

fn main() -> anyhow::Result<()> {
    // First thing: it takes the activation variables out of the environment.
    let (name, fd) = listen_fds()?
        .into_iter()
        .next()
        .ok_or_else(|| anyhow::anyhow!("ck passed no socket"))?;
    let listener = TcpListener::from(fd);
    // accept() wakes up now and then to see whether SIGTERM came (SO_RCVTIMEO applies to it).
    socket2::SockRef::from(&listener).set_read_timeout(Some(Duration::from_millis(200)))?;
    let notifier = Notifier::from_env()?;
    let stopping = Arc::new(AtomicBool::new(false));
    on_sigterm(&stopping)?;
    eprintln!("rust worker pid={} serving {name}", std::process::id());
    notifier.ready()?;
    let body = format!(
        "slot={} pid={}\n",
        std::env::var("CK_SLOT").unwrap_or_default(),
        std::process::id()
    );
    while !stopping.load(Ordering::Relaxed) {
        if let Ok((stream, _)) = listener.accept() {
            let _ = answer(stream, &body);
        }
    }
    notifier.stopping()?;
    Ok(())
}

/// Reads one request head and answers it, closing the connection.
fn answer(mut stream: TcpStream, body: &str) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let response = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes())
}

/// Sets `stopping` when SIGTERM arrives (a thread of its own waits for it).
fn on_sigterm(stopping: &Arc<AtomicBool>) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut term = runtime.block_on(async {
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    })?;
    let stopping = stopping.clone();
    std::thread::spawn(move || {
        runtime.block_on(term.recv());
        stopping.store(true, Ordering::Relaxed);
    });
    Ok(())
}
