//! Waiting for an RCU grace period: until every BPF program run that began before the call has
//! ended (the kernel runs `sk_reuseport` programs inside RCU read-side sections).
//!
//! `membarrier(MEMBARRIER_CMD_GLOBAL)` is the one system call that waits for one
//! (`synchronize_rcu()`; about 10-20 ms measured here). nix has no wrapper for it, so this is
//! the raw call.
use std::time::Duration;

/// `MEMBARRIER_CMD_GLOBAL` of `linux/membarrier.h` (not exported by every libc release).
const MEMBARRIER_CMD_GLOBAL: libc::c_int = 1;

/// How long to sleep instead where `membarrier` refuses (a `nohz_full` kernel): a program run
/// lasts microseconds, and the kernel reports an RCU reader that holds on for seconds as a stall.
const FALLBACK: Duration = Duration::from_millis(100);

/// Returns once every BPF program run in progress at the call has ended.
pub fn wait_for_program_runs() {
    // SAFETY: membarrier takes two integer arguments and touches no memory of ours.
    let done = unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            MEMBARRIER_CMD_GLOBAL,
            0 as libc::c_uint,
        )
    };
    if done != 0 {
        tracing::debug!(
            error = %std::io::Error::last_os_error(),
            "membarrier refused: sleeping past any program run instead"
        );
        std::thread::sleep(FALLBACK);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_grace_period_ends() {
        let started = std::time::Instant::now();
        super::wait_for_program_runs();
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }
}
