//! The HTTP/3 client of the example (`ck-example-quic client`, quinn + h3) as the tests run it:
//! started against an address, its JSON lines summed into what broke and what was answered.

use std::{
    collections::BTreeSet,
    net::SocketAddr,
    path::PathBuf,
    process::{Command, Stdio},
};

use crate::ck_bin;

/// The example's binary, built beside ck (`cargo xtask build`).
pub fn quic_bin() -> PathBuf {
    ck_bin().with_file_name("ck-example-quic")
}

/// What the clients saw, summed, and the clients that broke with the workers they had used.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    /// Requests answered.
    pub ok: u64,
    /// Broken connections.
    pub broken: u64,
    /// Connections the server moved on with GOAWAY.
    pub moved: u64,
    /// Handshakes completed.
    pub handshakes: u64,
    /// Every worker (pid) that answered a request.
    pub pids: BTreeSet<u32>,
    /// Per client that broke, the workers (pids) that had answered it.
    pub broken_pids: Vec<BTreeSet<u32>>,
    /// The errors of the clients that broke.
    pub errors: Vec<String>,
}

/// Starts the client against `addr` with `args`; `finish` waits for it and sums its lines.
pub fn start_client(addr: SocketAddr, args: &[&str]) -> std::process::Child {
    Command::new(quic_bin())
        .arg("client")
        .arg(addr.to_string())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting ck-example-quic client")
}

/// Waits for the client and sums its lines.
pub fn finish(client: std::process::Child) -> Seen {
    let out = client.wait_with_output().expect("the client's output");
    assert!(out.status.success(), "the client failed: {out:?}");
    sum_lines(&String::from_utf8_lossy(&out.stdout)).expect("the client's JSON lines")
}

/// Sums the client's output: one JSON line per client.
pub fn sum_lines(stdout: &str) -> serde_json::Result<Seen> {
    let mut seen = Seen::default();
    for line in stdout.lines() {
        let row: serde_json::Value = serde_json::from_str(line)?;
        let n = |key: &str| row[key].as_u64().unwrap_or(0);
        seen.ok += n("ok");
        seen.moved += n("moved");
        seen.handshakes += n("handshakes");
        let pids: BTreeSet<u32> = row["pids"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter_map(|p| p.as_u64())
            .map(|p| p as u32)
            .collect();
        seen.pids.extend(&pids);
        if n("broken") > 0 {
            seen.broken += n("broken");
            seen.broken_pids.push(pids);
            let errors = row["errors"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default();
            seen.errors
                .extend(errors.iter().filter_map(|e| e.as_str()).map(String::from));
        }
    }
    Ok(seen)
}

/// The client's load: 32 connections, a request every 100 ms, each connection replaced every
/// 2 s, for `ms`, and `extra`.
pub fn load(addr: SocketAddr, ms: u64, extra: &[&str]) -> std::process::Child {
    let ms = ms.to_string();
    let mut args = vec![
        "--connections",
        "32",
        "--interval-ms",
        "100",
        "--lifetime-ms",
        "2000",
        "--duration-ms",
        &ms,
    ];
    args.extend_from_slice(extra);
    start_client(addr, &args)
}
