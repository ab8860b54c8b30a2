//! ck: a supervisor for multi-process network servers on Linux in which the kernel dispatches
//! connections (`SO_REUSEPORT`) and an eBPF program chooses the worker for each one.
//!
//! See `ARCHITECTURE.md` at the repository root for the map of these modules.
pub mod activation;
pub mod bpf;
pub mod capabilities;
pub mod cgroup;
pub mod config;
pub mod config_diff;
pub mod config_file;
pub mod control;
pub mod demo;
pub mod duration;
pub mod fd_limit;
pub mod health_config;
pub mod instance;
pub mod instant_age;
pub mod metrics;
pub mod notify;
pub mod orphan_guard;
pub mod pidfd;
pub mod privileges;
pub mod probe;
pub mod readiness;
pub mod reexec;
pub mod restart_policy;
pub mod size;
pub mod sizing;
pub mod sock_diag;
pub mod sockets;
pub mod spawn;
pub mod supervisor;
