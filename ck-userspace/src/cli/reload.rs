//! `ck reload`'s options: a canary for this one reload (`--canary P`, `--canary-for`,
//! `--canary-by`, and its limits `--canary-max-resets`, `--canary-max-drops`,
//! `--canary-max-queue-age`), as the supervisor's `Request::Reload` carries it.
use ck::settings::choices::{CanaryAsk, CanaryBy, CanaryLimits, parse_percent};
use ck_worker::units::duration::parse_duration;

/// `ck reload`'s canary options.
#[derive(clap::Args, Debug)]
pub struct CanaryArgs {
    /// Start this reload as a canary: ceil(workers x P / 100) new workers get P % of new
    /// connections (1-99) beside the current ones for --canary-for, then the roll goes on, or
    /// they are withdrawn (a canary worker exited, turned unhealthy or drained) and the reload
    /// fails. Without it: as `ck run --canary` says.
    #[arg(long, value_name = "P", value_parser = parse_percent)]
    canary: Option<u8>,
    /// With --canary: how long it is judged.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "60s", requires = "canary")]
    canary_for: std::time::Duration,
    /// With --canary: its share chosen by client address (a client stays on one side) or by
    /// connection (behind a load balancer).
    #[arg(long, value_enum, value_name = "BY", default_value_t = CanaryBy::Client, requires = "canary")]
    canary_by: CanaryBy,
    /// With --canary: withdraw it past N resets sent by its connections (as `ck run
    /// --canary-max-resets` says).
    #[arg(long, value_name = "N", requires = "canary")]
    canary_max_resets: Option<u64>,
    /// With --canary: withdraw it past N connections dropped by its sockets.
    #[arg(long, value_name = "N", requires = "canary")]
    canary_max_drops: Option<u64>,
    /// With --canary: withdraw it once a connection waits longer in its accept queue.
    ///
    /// Needs ck run's --canary-max-queue-age (any value), which loads the program with the
    /// reads of kernel memory this takes.
    #[arg(long, value_name = "DUR", value_parser = parse_duration, requires = "canary")]
    canary_max_queue_age: Option<std::time::Duration>,
}

impl CanaryArgs {
    /// The canary asked for, if any.
    pub fn ask(&self) -> Option<CanaryAsk> {
        self.canary.map(|percent| CanaryAsk {
            percent,
            for_ms: self.canary_for.as_millis() as u64,
            by: self.canary_by,
            limits: CanaryLimits {
                max_resets: self.canary_max_resets,
                max_drops: self.canary_max_drops,
                max_queue_age_ms: self.canary_max_queue_age.map(|d| d.as_millis() as u64),
            },
        })
    }
}
