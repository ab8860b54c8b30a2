//! The client side of the control socket, used by `ck status`, `ck drain`, ... .
use std::{
    io::{BufRead as _, BufReader, ErrorKind, Write as _},
    os::unix::net::UnixStream,
    time::Duration,
};

use anyhow::{Context as _, bail};

use super::{Request, Response};
use crate::os::instance;

/// Picks the instance: `--name` when given, else the only one running.
pub fn resolve_name(name: Option<String>) -> anyhow::Result<String> {
    if let Some(name) = name {
        return Ok(name);
    }
    let dir = instance::run_dir();
    let mut names = running_names();
    match names.len() {
        1 => Ok(names.remove(0)),
        0 => bail!(
            "no ck instance is running (no control socket in {}); start one with `ck run`",
            dir.display()
        ),
        _ => bail!(
            "several ck instances are running ({}); choose one with --name",
            names.join(", ")
        ),
    }
}

/// The names of the instances with a control socket in the run directory, sorted (none when
/// the directory does not exist).
pub fn running_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(instance::run_dir())
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter_map(|e| {
                    let file = e.file_name().to_string_lossy().to_string();
                    file.strip_suffix(".sock").map(str::to_string)
                })
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Sends one request to instance `name` and returns its response. A status request that the
/// instance dropped unanswered (ck re-executing itself: `ck upgrade`; clients already queued on
/// the control socket are answered by the new image) is asked again.
pub fn request(name: &str, req: &Request) -> anyhow::Result<Response> {
    let mut tries = 0;
    loop {
        let mut stream = connect(name)?;
        let answer = exchange(&mut stream, req);
        match answer {
            Ok(answer) if !answer.is_empty() => {
                return serde_json::from_str(&answer)
                    .context("malformed answer on the control socket");
            }
            _ if *req == Request::Status && tries < 20 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(_) => {
                bail!("ck instance {name:?} closed the control connection without answering")
            }
            Err(e) => return Err(e),
        }
    }
}

/// Connects to instance `name`'s control socket; a refusal by the socket's mode is named as such.
fn connect(name: &str) -> anyhow::Result<UnixStream> {
    let path = instance::control_path(name);
    match UnixStream::connect(&path) {
        Ok(stream) => Ok(stream),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            use std::os::unix::fs::MetadataExt as _;
            let owner = std::fs::metadata(&path)
                .map_or("ck's user".to_string(), |m| format!("uid {}", m.uid()));
            bail!(
                "permission denied connecting to {}: the control socket is mode 0600, owned by \
                 {owner}, which ck runs as; run this command as root or as that user",
                path.display()
            )
        }
        Err(e) => Err(e).with_context(|| {
            format!(
                "no ck instance named {name:?} is running (cannot connect to {}); check `--name`",
                path.display()
            )
        }),
    }
}

/// How long an answer may take, but a roll's.
const ANSWER_LIMIT: Duration = Duration::from_secs(30);

/// Writes `req` and reads one answer line (empty if the connection closed first). A roll
/// (`ck reload`) is answered when it ends, which takes as long as its replacements boot (each
/// batch bounded by `--ready-timeout`), so it is waited for without a limit of its own; any
/// other answer within [`ANSWER_LIMIT`].
fn exchange(stream: &mut UnixStream, req: &Request) -> anyhow::Result<String> {
    let limit = (*req != Request::Reload).then_some(ANSWER_LIMIT);
    stream.set_read_timeout(limit)?;
    let mut line = serde_json::to_string(req)?;
    line.push('\n');
    stream.write_all(line.as_bytes())?;
    let mut reader = BufReader::new(stream);
    let mut answer = String::new();
    match reader.read_line(&mut answer) {
        Ok(_) => Ok(answer),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => bail!(
            "ck did not answer within {ANSWER_LIMIT:?}; is its event loop stuck? Its log (its \
             stderr) says what it was doing"
        ),
        Err(e) => Err(e).context("reading the answer from the control socket"),
    }
}
