//! The statistics of rounds: the median of a figure over the rounds with its lowest and
//! highest round ([`Stat`]), and the ratio (or difference) of two figures taken round by round
//! ([`ratios`], [`differences`]):
//! the two sides of a ratio are measured in the same round, minutes apart at most, so a machine
//! whose speed drifts over the bench moves both.

use std::time::Duration;

/// A figure over rounds: the median, the lowest and the highest, and how many rounds had it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stat {
    /// The median (the mean of the middle two for an even count).
    pub median: f64,
    /// The lowest round.
    pub min: f64,
    /// The highest round.
    pub max: f64,
    /// How many values it is drawn from.
    pub n: usize,
}

impl Stat {
    /// The statistics of the finite values among `values`; `None` when there is none.
    pub fn of(values: &[f64]) -> Option<Stat> {
        let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        if finite.is_empty() {
            return None;
        }
        Some(Stat {
            median: median(&finite),
            min: finite.iter().copied().fold(f64::INFINITY, f64::min),
            max: finite.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            n: finite.len(),
        })
    }

    /// Whether the median is within `low..=high`.
    pub fn median_within(&self, low: f64, high: f64) -> bool {
        (low..=high).contains(&self.median)
    }
}

/// The ratio `over / under` of each round that has both figures (and a non-zero `under`).
pub fn ratios(over: &[Option<f64>], under: &[Option<f64>]) -> Vec<f64> {
    over.iter()
        .zip(under)
        .filter_map(|(a, b)| match (a, b) {
            (Some(a), Some(b)) if *b != 0.0 => Some(a / b),
            _ => None,
        })
        .collect()
}

/// The difference `over - under` of each round that has both figures.
pub fn differences(over: &[Option<f64>], under: &[Option<f64>]) -> Vec<f64> {
    over.iter()
        .zip(under)
        .filter_map(|(a, b)| Some((*a)? - (*b)?))
        .collect()
}

/// The median of `values` (the mean of the middle two for an even count; 0 when empty).
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The median of `values`.
pub fn median_duration(values: &[Duration]) -> Duration {
    let secs: Vec<f64> = values.iter().map(Duration::as_secs_f64).collect();
    Duration::from_secs_f64(median(&secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
        assert_eq!(
            median_duration(&[Duration::from_millis(3), Duration::from_millis(1)]),
            Duration::from_millis(2)
        );
    }

    #[test]
    fn a_stat_has_the_median_and_the_range_of_the_finite_values() {
        let s = Stat::of(&[5.0, f64::NAN, 1.0, 9.0, 2.0]).unwrap();
        assert_eq!(
            s,
            Stat {
                median: 3.5,
                min: 1.0,
                max: 9.0,
                n: 4
            }
        );
        assert!(s.median_within(3.0, 4.0) && !s.median_within(0.97, 1.03));
        assert_eq!(Stat::of(&[]), None);
        assert_eq!(Stat::of(&[f64::INFINITY]), None);
    }

    #[test]
    fn ratios_pair_the_rounds_and_skip_what_a_round_lacks() {
        let over = [Some(10.0), Some(9.0), None, Some(4.0)];
        let under = [Some(5.0), Some(0.0), Some(1.0), Some(4.0)];
        assert_eq!(ratios(&over, &under), [2.0, 1.0]);
        // The median of per-round ratios is not the ratio of medians.
        let (a, b) = (
            [Some(1.0), Some(2.0), Some(9.0)],
            [Some(2.0), Some(1.0), Some(3.0)],
        );
        assert_eq!(median(&ratios(&a, &b)), 2.0);
    }

    #[test]
    fn differences_pair_the_rounds_and_skip_what_a_round_lacks() {
        let over = [Some(300.0), None, Some(250.0), Some(90.0)];
        let under = [Some(140.0), Some(1.0), None, Some(100.0)];
        assert_eq!(differences(&over, &under), [160.0, -10.0]);
    }
}
