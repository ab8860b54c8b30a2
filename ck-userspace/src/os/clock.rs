//! `CLOCK_MONOTONIC`, the clock of `Instant` on Linux and of the BPF programs'
//! `bpf_ktime_get_ns`: times the programs write into maps, read as `Instant`s.
use std::time::{Duration, Instant};

use nix::time::{ClockId, clock_gettime};

/// `CLOCK_MONOTONIC` now, in nanoseconds (0 if it cannot be read).
pub fn monotonic_ns() -> u64 {
    clock_gettime(ClockId::CLOCK_MONOTONIC)
        .map(|t| Duration::from(t).as_nanos() as u64)
        .unwrap_or(0)
}

/// The `Instant` a `CLOCK_MONOTONIC` time `ns` stands for, given the clock's reading `now_ns`
/// taken at `now`.
pub fn instant_of(ns: u64, now_ns: u64, now: Instant) -> Instant {
    match ns.checked_sub(now_ns) {
        Some(ahead) => now + Duration::from_nanos(ahead),
        None => now
            .checked_sub(Duration::from_nanos(now_ns - ns))
            .unwrap_or(now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_time_reads_as_the_instant_it_stands_for() {
        let now = Instant::now();
        let now_ns = monotonic_ns();
        assert!(now_ns > 0);
        let ms = Duration::from_millis(250);
        let ns = ms.as_nanos() as u64;
        assert_eq!(instant_of(now_ns - ns, now_ns, now), now - ms);
        assert_eq!(instant_of(now_ns + ns, now_ns, now), now + ms);
        assert_eq!(instant_of(now_ns, now_ns, now), now);
    }
}
