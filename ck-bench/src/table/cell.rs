//! One value of a result table ([`Cell`]: its text and the number behind it) and the units
//! values are shown in ([`Unit`]), also as a median with the range of the rounds behind it
//! (`63.6 ms (58.1-70.2)`).

use std::time::Duration;

use ck_tests::load::LoadReport;
use serde::{Deserialize, Serialize};

use crate::rounds::stats::Stat;

/// One measured value: its text and, when it is a number, the number (for ratios and goals).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    /// What the table shows.
    pub text: String,
    /// The number behind it, in the unit of its goal (over rounds: the median).
    pub num: Option<f64>,
}

/// How a value is shown.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Unit {
    /// Milliseconds: two decimals under 10, one above (`4.35 ms`, `63.6 ms`).
    Ms,
    /// Nanoseconds, one decimal.
    Ns,
    /// A count.
    Count,
    /// A ratio, two decimals.
    Ratio,
    /// A percentage with this many decimals.
    Percent(usize),
    /// A rate per second of what the text names (`req/s`), no decimals.
    Rate(&'static str),
    /// MiB, two decimals.
    Mib,
}

impl Unit {
    /// `v` as a number in this unit, without the unit's name (`63.6`).
    pub fn number(self, v: f64) -> String {
        match self {
            Unit::Ms if v < 10.0 => format!("{v:.2}"),
            Unit::Ms | Unit::Ns => format!("{v:.1}"),
            Unit::Count | Unit::Rate(_) => format!("{v:.0}"),
            Unit::Ratio | Unit::Mib => format!("{v:.2}"),
            Unit::Percent(decimals) => format!("{v:.decimals$}"),
        }
    }

    /// `v` with the unit's name (`63.6 ms`, `0.98`, `29458 req/s`).
    pub fn text(self, v: f64) -> String {
        let n = self.number(v);
        match self {
            Unit::Ms => format!("{n} ms"),
            Unit::Ns => format!("{n} ns"),
            Unit::Count | Unit::Ratio => n,
            Unit::Percent(_) => format!("{n} %"),
            Unit::Rate(what) => format!("{n} {what}"),
            Unit::Mib => format!("{n} MiB"),
        }
    }

    /// A cell of one value.
    pub fn cell(self, v: f64) -> Cell {
        Cell {
            text: self.text(v),
            num: Some(v),
        }
    }

    /// A cell of the median of rounds, with their range when they differ:
    /// `63.6 ms (58.1-70.2)`; `-` without a value.
    pub fn stat(self, stat: Option<Stat>) -> Cell {
        let Some(s) = stat else {
            return Cell::text("-");
        };
        let median = self.text(s.median);
        let (low, high) = (self.number(s.min), self.number(s.max));
        let text = if s.n > 1 && low != high {
            format!("{median} ({low}-{high})")
        } else {
            median
        };
        Cell {
            text,
            num: Some(s.median),
        }
    }
}

impl Cell {
    /// A duration, shown and compared in milliseconds.
    pub fn ms(d: Duration) -> Cell {
        Unit::Ms.cell(d.as_secs_f64() * 1000.0)
    }

    /// A duration that may be missing (`what` says why, e.g. `> 3 s`).
    pub fn ms_or(d: Option<Duration>, what: &str) -> Cell {
        d.map_or_else(|| Cell::text(what), Cell::ms)
    }

    /// A count.
    pub fn count(n: u64) -> Cell {
        Unit::Count.cell(n as f64)
    }

    /// A ratio, two decimals.
    pub fn ratio(r: f64) -> Cell {
        Unit::Ratio.cell(r)
    }

    /// A rate per second, `unit` naming what is counted (`req/s`).
    pub fn rate(r: f64, unit: &str) -> Cell {
        Cell {
            text: format!("{r:.0} {unit}"),
            num: Some(r),
        }
    }

    /// A size in bytes, shown and compared in MiB.
    pub fn mib(bytes: u64) -> Cell {
        Unit::Mib.cell(bytes as f64 / (1024.0 * 1024.0))
    }

    /// The failed requests of `report`: the total, then refused/reset/timeout/other.
    pub fn failures(report: &LoadReport) -> Cell {
        Cell {
            text: format!(
                "{} ({}/{}/{}/{})",
                report.failed(),
                report.refused,
                report.reset,
                report.timeout,
                report.other
            ),
            num: Some(report.failed() as f64),
        }
    }

    /// Text without a number.
    pub fn text(text: &str) -> Cell {
        Cell {
            text: text.to_string(),
            num: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_show_their_decimals_and_names() {
        assert_eq!(Unit::Ms.text(4.349), "4.35 ms");
        assert_eq!(Unit::Ms.text(63.62), "63.6 ms");
        assert_eq!(Unit::Rate("req/s").text(29458.4), "29458 req/s");
        assert_eq!(Unit::Percent(3).text(0.1123), "0.112 %");
        assert_eq!(Unit::Ratio.text(0.976), "0.98");
        assert_eq!(Cell::ms(Duration::from_millis(600)).num, Some(600.0));
    }

    #[test]
    fn a_median_shows_the_range_of_its_rounds() {
        let s = Stat::of(&[58.1, 70.2, 63.6]).unwrap();
        let cell = Unit::Ms.stat(Some(s));
        assert_eq!(cell.text, "63.6 ms (58.1-70.2)");
        assert_eq!(cell.num, Some(63.6));
        let one = Stat::of(&[2.0]).unwrap();
        assert_eq!(Unit::Count.stat(Some(one)).text, "2");
        let same = Stat::of(&[0.0, 0.0, 0.0]).unwrap();
        assert_eq!(Unit::Count.stat(Some(same)).text, "0");
        assert_eq!(Unit::Ms.stat(None).text, "-");
    }
}
