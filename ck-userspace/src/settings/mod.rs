//! What ck is asked to do: `ck run`'s configuration ([`run_config::RunConfig`]) and its checks,
//! the `--config` file, what changed between two configurations, the crash policy and health
//! settings, and the default worker count. (The parsers of durations and sizes are
//! [`ck_worker::units`], shared with the demo worker.)
pub mod config_diff;
pub mod config_file;
pub mod health;
pub mod restart_policy;
pub mod run_config;
pub mod worker_count;
