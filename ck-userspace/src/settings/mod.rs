//! What ck is asked to do: `ck run`'s options ([`run_args::RunArgs`], its clap definition) and
//! their defaults ([`defaults`]), the configuration they make ([`run_config::RunConfig`]) and its
//! checks, the `--config` file and its layering under the command line ([`layers`]), what
//! changed between two configurations, the crash policy and health settings, the stop signal, the
//! default worker count, and how ck tells a command line it refuses ([`usage`]). (The parsers of
//! durations and sizes are [`ck_worker::units`], shared with the demo worker.)
pub mod backoff;
pub mod choices;
pub mod config_diff;
pub mod config_file;
pub mod defaults;
pub mod health;
pub mod layers;
pub mod restart_policy;
pub mod run_args;
pub mod run_config;
pub mod stop_signal;
pub mod usage;
pub mod worker_count;
