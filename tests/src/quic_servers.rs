//! QUIC servers of other stacks than quinn, for UDP groups in `flow` mode (they choose random
//! connection IDs), shared by `tests/tests/quic_stacks.rs` and `cargo xtask bench quic`:
//!
//! - ngtcp2's example HTTP/3 server, `gtlsserver` (Debian's `ngtcp2-server`, GnuTLS; `cargo
//!   xtask test` installs it), unmodified under `--adopt`. It binds `127.0.0.1:$PORT` itself
//!   with `SO_REUSEADDR` only (ck's bind hook adds `SO_REUSEPORT`; without ck a second one
//!   cannot bind the port), serves `index.html` for `GET /`, with the Debian snakeoil
//!   certificate (made when `ssl-cert`, which it needs, is installed), and dies on SIGTERM.
//! - `examples/python/h3_server.py` on aioquic (installed into `target/py-servers`), on ck's
//!   socket: it answers `slot=S pid=P` and, on SIGTERM, exits once its connections are closed.

use std::path::{Path, PathBuf};

/// The key and certificate `ssl-cert` makes.
const KEY: &str = "/etc/ssl/private/ssl-cert-snakeoil.key";
const CERT: &str = "/etc/ssl/certs/ssl-cert-snakeoil.pem";

/// How ck stops the workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM: the server dies at once, and with it the connections it held.
    Term,
    /// SIGWINCH, which it ignores: it keeps its connections until ck's `--udp-linger` finds its
    /// slot quiet (its clients done), then ck kills it.
    IgnoredUntilQuiet,
}

/// ck's options after the address (`--adopt`, `flow` mode, the stop signal) and the command of
/// an ngtcp2 server serving `htdocs`, where it writes the `index.html` it answers with.
pub fn ngtcp2(htdocs: &Path, stop: Stop) -> std::io::Result<Vec<String>> {
    std::fs::create_dir_all(htdocs)?;
    std::fs::write(htdocs.join("index.html"), "ngtcp2\n")?;
    let signal = match stop {
        Stop::Term => "TERM",
        Stop::IgnoredUntilQuiet => "WINCH",
    };
    let script = format!(
        "exec gtlsserver --quiet -d '{}' 127.0.0.1 \"$PORT\" {KEY} {CERT}",
        htdocs.display()
    );
    Ok([
        "--adopt",
        "--udp-mode",
        "flow",
        "--stop-signal",
        signal,
        "--",
        "sh",
        "-c",
    ]
    .into_iter()
    .map(String::from)
    .chain([script])
    .collect())
}

/// ck's options after the address (`flow` mode) and the command of the aioquic example server.
pub fn aioquic() -> Vec<String> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/python/h3_server.py");
    let python = crate::pyservers::server("python");
    vec![
        "--udp-mode".into(),
        "flow".into(),
        "--".into(),
        python.display().to_string(),
        script.display().to_string(),
    ]
}
