//! Printing a command's answer on stdout the way Unix tools do: a reader that closes the pipe
//! early (`ck status --json | head`) ends the output quietly instead of a panic with a
//! backtrace (Rust ignores SIGPIPE, so `println!` panics on a closed pipe).

use std::io::{ErrorKind, Write as _};

use anyhow::Context as _;

/// Writes `text` to stdout and flushes it; a closed pipe (the reader has all it wanted) is not
/// an error.
pub fn print(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Ok(()),
        other => other.context("writing to stdout"),
    }
}

/// [`print`] with a newline after `text`.
pub fn print_line(text: &str) -> anyhow::Result<()> {
    print(&format!("{text}\n"))
}
