//! `Instant`s in serialized state (the `ck upgrade` handover): written as their age in
//! microseconds and read back as that long before now. `CLOCK_MONOTONIC` runs on across
//! `execve`, so the new image's instants are the old ones give or take the time the exec took.
use std::time::{Duration, Instant};

use serde::{Deserialize as _, Deserializer, Serialize as _, Serializer};

fn age(at: Instant) -> u64 {
    at.elapsed().as_micros() as u64
}

fn back(micros: u64) -> Instant {
    let now = Instant::now();
    now.checked_sub(Duration::from_micros(micros))
        .unwrap_or(now)
}

/// An `Instant` as its age.
pub fn serialize<S: Serializer>(at: &Instant, s: S) -> Result<S::Ok, S::Error> {
    age(*at).serialize(s)
}

/// An `Instant` from its age.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Instant, D::Error> {
    u64::deserialize(d).map(back)
}

/// `Option<Instant>` as an optional age.
pub mod option {
    use super::*;

    /// Writes the age, if any.
    pub fn serialize<S: Serializer>(at: &Option<Instant>, s: S) -> Result<S::Ok, S::Error> {
        at.map(age).serialize(s)
    }

    /// Reads the age, if any.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Instant>, D::Error> {
        Option::<u64>::deserialize(d).map(|a| a.map(back))
    }
}

/// A queue of `Instant`s as their ages.
pub mod deque {
    use std::collections::VecDeque;

    use super::*;

    /// Writes the ages, in order.
    pub fn serialize<S: Serializer>(all: &VecDeque<Instant>, s: S) -> Result<S::Ok, S::Error> {
        all.iter().map(|i| age(*i)).collect::<Vec<_>>().serialize(s)
    }

    /// Reads the ages, in order.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<VecDeque<Instant>, D::Error> {
        Vec::<u64>::deserialize(d).map(|v| v.into_iter().map(back).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize, serde::Deserialize)]
    struct At(#[serde(with = "super")] Instant);

    #[test]
    fn an_instant_comes_back_about_as_old() {
        let then = Instant::now() - Duration::from_secs(3);
        let text = serde_json::to_string(&At(then)).unwrap();
        let At(back) = serde_json::from_str(&text).unwrap();
        let diff = back.max(then) - back.min(then);
        assert!(diff < Duration::from_secs(1), "{diff:?}");
    }
}
