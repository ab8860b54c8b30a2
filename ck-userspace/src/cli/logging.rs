//! Where and how ck logs: `tracing` to stderr, as text or as one JSON object per line
//! (`--log-format`). Workers write to the same stderr, unchanged.
use ck::settings::run_config::LogFormat;

/// Sets up `tracing` for `ck run`: level from `CK_LOG` (default info), to stderr. Text is
/// coloured on a terminal unless `NO_COLOR` is set; JSON lines carry `timestamp`, `level`,
/// `message`, the event's fields (`slot`, `pid`, `reason`, ...) and `target`, all at the top
/// level.
pub fn init(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("CK_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
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
