//! Where and how ck logs: `tracing` to stderr, as text or as one JSON object per line
//! (`--log-format`). Workers' captured lines (`--worker-output capture`) are records of the
//! same stream (target `worker`, written by the supervisor's output writer).
use ck::settings::run_config::LogFormat;

/// Sets up `tracing` for `ck run`: level from `CK_LOG` (default info), to stderr through
/// the log queue (`supervisor::output::sink`; [`flush`] before exiting). Text is
/// coloured on a terminal unless `NO_COLOR` is set; JSON lines carry `timestamp`, `level`,
/// `message`, the event's fields (`slot`, `pid`, `reason`, ...) and `target`, all at the top
/// level.
pub fn init(format: LogFormat) {
    // Records go through a bounded queue to stderr (never blocking the caller); without its
    // thread, straight to stderr.
    let sink = ck::supervisor::output::sink::start().unwrap_or_else(|e| {
        eprintln!("ck: warning: logging directly to stderr ({e})");
        ck::supervisor::output::sink::LogSink::direct()
    });
    let filter = tracing_subscriber::EnvFilter::try_from_env("CK_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(sink);
    match format {
        LogFormat::Text => {
            use std::io::IsTerminal as _;
            let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
            builder.with_ansi(colour).init();
        }
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .init(),
    }
}

/// Writes what the log queue still holds (up to a second) before ck exits.
pub fn flush() {
    ck::supervisor::output::sink::flush(std::time::Duration::from_secs(1));
}
