//! Where and how ck logs: `tracing` to stderr.
/// Sets up `tracing` for `ck run`: level from `CK_LOG` (default info), to stderr, coloured
/// on a terminal unless `NO_COLOR` is set.
pub fn init() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("CK_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal as _;
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(std::io::stderr)
        .init();
}
