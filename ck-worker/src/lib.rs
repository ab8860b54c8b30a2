//! The worker side of ck: what a server started by `ck run` (or by systemd) needs to take part
//! in ck's protocol, without the supervisor's dependencies (no aya, hyper or ratatui).
//!
//! - [`activation`]: take the listening sockets ck hands over ([`activation::listen_fds`],
//!   systemd socket activation) and report `READY=1` / `STOPPING=1` ([`activation::Notifier`],
//!   `sd_notify`).
//! - [`close`]: the graceful keep-alive close on SIGTERM: accept what is still queued on the
//!   listeners, answer each connection's next request with `Connection: close`, close idle
//!   connections after a short grace, then exit.
//! - [`demo`]: `ck demo-worker`, the HTTP/1.1 worker ck runs when it is given no program.
//! - [`units`]: the parsers of durations and sizes used by ck's options and the demo's.
//!
//! A Rust server under ck, in outline (`examples/rust` at the workspace root is a complete one):
//!
//! ```no_run
//! use ck_worker::activation::{Notifier, listen_fds};
//!
//! fn main() -> anyhow::Result<()> {
//!     // First, before any thread starts: it takes the variables out of the environment.
//!     let (_name, fd) = listen_fds()?.into_iter().next().expect("ck passes a socket");
//!     let listener = std::net::TcpListener::from(fd);
//!     let notifier = Notifier::from_env()?;
//!     notifier.ready()?; // ck may now steer connections here
//!     // ... serve `listener`; on SIGTERM: notifier.stopping(), close its connections, exit 0.
//!     # drop(listener);
//!     Ok(())
//! }
//! ```
#![deny(unsafe_code)]
#[allow(unsafe_code)] // takes ownership of the descriptors the supervisor passed (FFI edge)
pub mod activation;
pub mod close;
pub mod demo;
pub mod quic;
pub mod units;

/// Writes one line to stderr with a single write, so that the lines of workers sharing their
/// supervisor's stderr do not interleave.
pub(crate) fn say(line: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let mut text = line.to_string();
    text.push('\n');
    let _ = std::io::stderr().write_all(text.as_bytes());
}
