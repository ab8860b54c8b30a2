//! `Instant`s in serialized state (the `ck upgrade` handover, the `--survive-supervisor` state
//! file): written as the `CLOCK_MONOTONIC` time they stand for, in microseconds, and read back
//! as that long before now. The clock is the system's (the one `Instant` reads on Linux), so an
//! instant means the same in the next image or in the next ck, however long after it is read.
use std::time::{Duration, Instant};

use nix::time::{ClockId, clock_gettime};
use serde::{Deserialize as _, Deserializer, Serialize as _, Serializer};

/// `CLOCK_MONOTONIC` now, in microseconds.
fn monotonic_us() -> u64 {
    clock_gettime(ClockId::CLOCK_MONOTONIC)
        .map(|t| Duration::from(t).as_micros() as u64)
        .unwrap_or(0)
}

fn at_us(at: Instant) -> u64 {
    let now = Instant::now();
    let mono = monotonic_us();
    if at <= now {
        mono.saturating_sub((now - at).as_micros() as u64)
    } else {
        mono + (at - now).as_micros() as u64
    }
}

fn back(us: u64) -> Instant {
    let now = Instant::now();
    let mono = monotonic_us();
    if us <= mono {
        now.checked_sub(Duration::from_micros(mono - us))
            .unwrap_or(now)
    } else {
        now + Duration::from_micros(us - mono)
    }
}

/// An `Instant` as monotonic microseconds.
pub fn serialize<S: Serializer>(at: &Instant, s: S) -> Result<S::Ok, S::Error> {
    at_us(*at).serialize(s)
}

/// An `Instant` from monotonic microseconds.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Instant, D::Error> {
    u64::deserialize(d).map(back)
}

/// `Option<Instant>` likewise.
pub mod option {
    use super::*;

    /// Writes the time, if any.
    pub fn serialize<S: Serializer>(at: &Option<Instant>, s: S) -> Result<S::Ok, S::Error> {
        at.map(at_us).serialize(s)
    }

    /// Reads the time, if any.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Instant>, D::Error> {
        Option::<u64>::deserialize(d).map(|a| a.map(back))
    }
}

/// A queue of `Instant`s likewise.
pub mod deque {
    use std::collections::VecDeque;

    use super::*;

    /// Writes the times, in order.
    pub fn serialize<S: Serializer>(all: &VecDeque<Instant>, s: S) -> Result<S::Ok, S::Error> {
        all.iter()
            .map(|i| at_us(*i))
            .collect::<Vec<_>>()
            .serialize(s)
    }

    /// Reads the times, in order.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<VecDeque<Instant>, D::Error> {
        Vec::<u64>::deserialize(d).map(|v| v.into_iter().map(back).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize, serde::Deserialize)]
    struct At(#[serde(with = "super")] Instant);

    fn round_trip(then: Instant) -> Instant {
        let text = serde_json::to_string(&At(then)).unwrap();
        let At(back) = serde_json::from_str(&text).unwrap();
        back
    }

    #[test]
    fn an_instant_comes_back_the_same_even_read_later() {
        for then in [
            Instant::now() - Duration::from_secs(3),
            Instant::now() + Duration::from_secs(2),
        ] {
            let text = serde_json::to_string(&At(then)).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            let At(back) = serde_json::from_str(&text).unwrap();
            let diff = back.max(then) - back.min(then);
            assert!(diff < Duration::from_millis(5), "{diff:?}");
            let again = round_trip(back);
            assert!(again.max(back) - again.min(back) < Duration::from_millis(5));
        }
    }
}
