//! The client side of the control socket, used by `ck status`, `ck drain`, ...: one request,
//! one answer, and an error that says what runs when the instance named does not.
use std::{
    io::{BufRead as _, BufReader, ErrorKind, Write as _},
    os::unix::net::UnixStream,
    time::Duration,
};

use anyhow::{Context as _, bail};

use super::{Request, Response, instances::Census};
use crate::os::instance;

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
                return serde_json::from_str(&answer).map_err(|e| {
                    anyhow::anyhow!(
                        "ck instance {name:?} gave an answer this ck cannot read ({e}): it runs \
                         another version of ck; use that version's `ck` (`ck status --json` \
                         shows its version), or upgrade it with `ck upgrade`"
                    )
                });
            }
            _ if *req == Request::Status && tries < 20 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(_) => bail!(
                "ck instance {name:?} closed the control connection without answering: it may \
                 be exiting; see its log (its stderr), and `ck status` for what runs"
            ),
            Err(e) => bail!(
                "the control connection to ck instance {name:?} failed ({e}): it may be \
                 exiting or busy; see its log (its stderr), and try again"
            ),
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
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => bail!(
            "ck instance {name:?} is not running: its control socket {} is left by a ck that \
             exited without removing it; see `ck status` for the instances that run, or start \
             it again with `ck run --name {name}`",
            path.display()
        ),
        Err(_) => bail!(not_running(name)),
    }
}

/// Why instance `name` cannot be reached when it has no control socket: the instances that do
/// run (or that none does), and the fix.
fn not_running(name: &str) -> String {
    let census = Census::take();
    let fix = match census.running.as_slice() {
        [] => "start it with `ck run`, or set CK_RUN_DIR to the run directory it uses".to_string(),
        [one] => format!("did you mean --name {}?", one.name),
        _ => "give one of them with --name".to_string(),
    };
    format!(
        "no ck instance named {name:?} is running (no control socket {}); ck instances here: \
         {}; {fix}",
        instance::control_path(name).display(),
        census.list()
    )
}

/// How long an answer may take, but a roll's.
const ANSWER_LIMIT: Duration = Duration::from_secs(30);

/// Writes `req` and reads one answer line (empty if the connection closed first). A roll
/// (`ck reload`) is answered when it ends, which takes as long as its replacements boot (each
/// batch bounded by `--ready-timeout`), so it is waited for without a limit of its own; any
/// other answer within [`ANSWER_LIMIT`].
fn exchange(stream: &mut UnixStream, req: &Request) -> anyhow::Result<String> {
    let limit = (!matches!(req, Request::Reload { .. })).then_some(ANSWER_LIMIT);
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
