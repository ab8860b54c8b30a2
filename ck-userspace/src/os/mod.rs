//! The operating system's edges: every system call, `/proc` and cgroup file, netlink dump and
//! `unsafe` block of the supervisor lives here (the BPF loader in [`crate::bpf`] is the only other
//! place allowed `unsafe`). Each module wraps one kernel facility behind a safe API.
pub mod capabilities;
pub mod cgroup;
pub mod ck_runs;
pub mod clock;
pub mod fd_limit;
pub mod fork;
pub mod instance;
pub mod memory;
pub mod notify;
pub mod pidfd;
pub mod pipe;
pub mod priority;
pub mod privileges;
pub mod probe;
pub mod readiness;
pub mod reexec;
pub mod sock_diag;
pub mod sockets;
pub mod spawn;
