//! The last error line each worker wrote on stderr, kept by the output readers until its
//! death is handled: an aborted roll quotes it (`its last error on stderr: "SyntaxError: ..."`),
//! so `ck reload` says why the new release did not start without a look at ck's log.
use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

/// The longest quote, in characters (a longer line is cut, marked with `...`).
const MAX_QUOTE: usize = 200;

/// What one worker's stderr said last.
#[derive(Debug, Default)]
struct Said {
    /// The last line that reads as an error (see [`is_error_line`]).
    error: Option<String>,
    /// The last line that is not blank.
    last: Option<String>,
    /// The pipe reached its end: nothing more will come.
    ended: bool,
}

/// Every captured worker's last stderr lines, by pid.
#[derive(Debug, Default)]
pub struct LastErrors {
    by_pid: Mutex<HashMap<u32, Said>>,
}

impl LastErrors {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Said>> {
        self.by_pid.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Worker `pid`'s stderr is read from now on.
    pub fn open(&self, pid: u32) {
        self.lock().entry(pid).or_default().ended = false;
    }

    /// Worker `pid` wrote `line` on stderr.
    pub fn record(&self, pid: u32, line: &str) {
        let line = line.trim();
        if line.is_empty() {
            return;
        }
        let mut by_pid = self.lock();
        let said = by_pid.entry(pid).or_default();
        if is_error_line(line) {
            said.error = Some(line.to_string());
        }
        said.last = Some(line.to_string());
    }

    /// Worker `pid`'s stderr reached its end.
    pub fn end(&self, pid: u32) {
        if let Some(said) = self.lock().get_mut(&pid) {
            said.ended = true;
        }
    }

    /// Worker `pid` is dead: its last error line (else its last line), quoted, and forgotten.
    /// Waits at most `patience` for its stderr to end (the exit can be seen before the reader
    /// has read the last lines the worker wrote).
    pub fn take(&self, pid: u32, patience: Duration) -> Option<String> {
        let deadline = Instant::now() + patience;
        while Instant::now() < deadline && self.lock().get(&pid).is_some_and(|s| !s.ended) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let said = self.lock().remove(&pid)?;
        said.error.or(said.last).map(|line| quote(&line))
    }
}

/// Whether `line` reads as an error: it names one (`SyntaxError: ...`, `error: ...`,
/// `panic: ...`, `Traceback`, `fatal`, `failed`, `cannot`, `denied`, `refused`, `no such`,
/// `not found`), case aside. The last such line beats later ones that do not (Node ends an
/// uncaught error with its version).
pub fn is_error_line(line: &str) -> bool {
    let lower = line.to_lowercase();
    [
        "error",
        "panic",
        "fatal",
        "exception",
        "failed",
        "cannot",
        "can't",
        "denied",
        "refused",
        "no such",
        "not found",
    ]
    .iter()
    .any(|word| lower.contains(word))
}

/// `line` cut to [`MAX_QUOTE`] characters.
fn quote(line: &str) -> String {
    match line.char_indices().nth(MAX_QUOTE) {
        Some((at, _)) => format!("{}...", &line[..at]),
        None => line.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_error_line_beats_later_lines_and_the_last_line_comes_without_one() {
        let errors = LastErrors::default();
        errors.open(7);
        for line in [
            "/srv/v3/server.js:1",
            "SyntaxError: Unexpected identifier 'is'",
            "    at wrapSafe (node:internal/modules/cjs/loader:1464:18)",
            "",
            "Node.js v20.20.2",
        ] {
            errors.record(7, line);
        }
        errors.end(7);
        assert_eq!(
            errors.take(7, Duration::ZERO).as_deref(),
            Some("SyntaxError: Unexpected identifier 'is'")
        );
        assert_eq!(errors.take(7, Duration::ZERO), None, "taken once");
        errors.open(8);
        errors.record(8, "listening on 8080");
        errors.record(8, "  ");
        assert_eq!(
            errors.take(8, Duration::ZERO).as_deref(),
            Some("listening on 8080")
        );
        errors.open(9);
        assert_eq!(errors.take(9, Duration::ZERO), None, "said nothing");
    }

    #[test]
    fn a_stream_not_ended_is_waited_for_at_most_the_patience_and_long_lines_are_cut() {
        let errors = LastErrors::default();
        errors.open(7);
        errors.record(7, &format!("error: {}", "x".repeat(500)));
        let quoted = errors.take(7, Duration::from_millis(20)).unwrap();
        assert_eq!(quoted.chars().count(), MAX_QUOTE + 3);
        assert!(quoted.starts_with("error: xxx") && quoted.ends_with("..."));
    }

    #[test]
    fn error_lines() {
        for line in [
            "Error: listen EADDRINUSE",
            "panic: boom",
            "ModuleNotFoundError: No module named 'x'",
            "cannot read config",
            "bind: permission denied",
        ] {
            assert!(is_error_line(line), "{line}");
        }
        for line in [
            "listening on 8080",
            "Node.js v20.20.2",
            "    at main (x.js:1:1)",
        ] {
            assert!(!is_error_line(line), "{line}");
        }
    }
}
