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

/// ngtcp2's example client (`gtlsclient`, Debian's `ngtcp2-client`) as `n` clients against
/// `addr` at once, each moving to a new local port 300 ms after its handshake without
/// validating the path first (`--nat-rebinding`), and sending its one request 800 ms after the
/// handshake: only the new port carries it. `during` runs while they wait. Returns each
/// client's answer (`slot=S pid=P`), or None when it got none (the client exits 0 either way,
/// so its saved download is what counts).
pub fn ngtcp2_rebinding(addr: SocketAddr, n: usize, during: impl FnOnce()) -> Vec<Option<String>> {
    let dir = crate::sys::TempDir::new("ngtcp2-client");
    let clients: Vec<_> = (0..n)
        .map(|i| {
            let got = dir.path().join(i.to_string());
            std::fs::create_dir_all(&got).expect("a download directory");
            Command::new("gtlsclient")
                .args(["--quiet", "--exit-on-all-streams-close", "--nat-rebinding"])
                .args([
                    "--change-local-addr=300ms",
                    "--delay-stream=800ms",
                    "--timeout=3s",
                ])
                .arg(format!("--download={}", got.display()))
                .args([&addr.ip().to_string(), &addr.port().to_string()])
                .arg("https://localhost/")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("starting gtlsclient (cargo xtask installs ngtcp2-client)")
        })
        .collect();
    during();
    clients
        .into_iter()
        .enumerate()
        .map(|(i, mut client)| {
            client.wait().expect("gtlsclient");
            let body = dir.path().join(i.to_string()).join("index.html");
            std::fs::read_to_string(body)
                .ok()
                .filter(|b| b.contains("pid="))
        })
        .collect()
}
