//! Human-friendly durations for command-line flags (`500ms`, `2.5s`, `1m`), parsed exactly
//! (decimal arithmetic, no floating point), for use as a clap `value_parser`.
use std::time::Duration;

/// Nanoseconds per unit, longest suffix first so `ms` is not read as `m` + `s`.
const UNITS: [(&str, u128); 6] = [
    ("ms", 1_000_000),
    ("us", 1_000),
    ("ns", 1),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Parses a duration such as `500ms`, `1s`, `2.5s`, `1m` or `1.5h`.
///
/// Accepted forms: a non-negative decimal number (`2`, `2.5`, `.5`), optionally followed by a
/// unit: `ns`, `us`, `ms`, `s`, `m` (minutes) or `h` (hours). A bare number (no unit) is in
/// seconds, wherever a duration is taken, and the error says so. Surrounding whitespace is ignored; there must be no space between number and unit.
/// Fractions finer than a nanosecond are truncated.
///
/// # Errors
/// Returns a message meant for the user (clap prints it after the flag's name) when the text
/// is empty, not a number, has an unknown unit, or does not fit in a [`Duration`].
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let text = s.trim();
    let invalid = || {
        format!(
            "invalid duration {s:?}: give a number with a unit ns, us, ms, s, m or h (e.g. \
             500ms, 2.5s, 1m); a bare number is seconds (30 = 30s)"
        )
    };
    let digits_end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits_end);
    let unit_nanos = if unit.is_empty() {
        1_000_000_000
    } else {
        UNITS
            .iter()
            .find(|(name, _)| *name == unit)
            .map(|(_, nanos)| *nanos)
            .ok_or_else(invalid)?
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return Err(invalid());
    }
    let too_long = || format!("duration {s:?} is too long: give a shorter one");
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| too_long())?
    };
    // Only the first 18 fractional digits can matter (units are at most 3.6e12 ns).
    let fraction = &fraction[..fraction.len().min(18)];
    let fraction_nanos = if fraction.is_empty() {
        0
    } else {
        let scale = 10u128.pow(u32::try_from(fraction.len()).map_err(|_| invalid())?);
        fraction.parse::<u128>().map_err(|_| invalid())? * unit_nanos / scale
    };
    let total = whole
        .checked_mul(unit_nanos)
        .and_then(|n| n.checked_add(fraction_nanos))
        .ok_or_else(too_long)?;
    let secs = u64::try_from(total / 1_000_000_000).map_err(|_| too_long())?;
    // The remainder is below 1e9, so it fits.
    let nanos = (total % 1_000_000_000) as u32;
    Ok(Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn accepts_documented_forms() {
        let cases = [
            ("500ms", Duration::from_millis(500)),
            ("1s", Duration::from_secs(1)),
            ("2.5s", Duration::from_millis(2500)),
            ("1m", Duration::from_secs(60)),
            ("1.5h", Duration::from_secs(5400)),
            ("0", Duration::ZERO),
            ("0s", Duration::ZERO),
            ("3", Duration::from_secs(3)),
            (".5s", Duration::from_millis(500)),
            ("0.3s", Duration::from_millis(300)),
            ("1.s", Duration::from_secs(1)),
            ("250us", Duration::from_micros(250)),
            ("7ns", Duration::from_nanos(7)),
            ("1.0000000019s", Duration::new(1, 1)),
            (" 10ms ", Duration::from_millis(10)),
        ];
        for (text, want) in cases {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn rejects_nonsense() {
        for text in [
            "", "s", ".", ".s", "-1s", "1 s", "1x", "1sec", "1.2.3s", "ms5", "1e3s", "1S",
        ] {
            let err = parse_duration(text).expect_err(text);
            assert!(err.contains("invalid duration"), "{text}: {err}");
            assert!(
                err.ends_with("a bare number is seconds (30 = 30s)"),
                "the fix ends the message: {err}"
            );
        }
    }

    #[test]
    fn rejects_overflow() {
        let err = parse_duration("99999999999999999999999999999999h").unwrap_err();
        assert!(err.contains("too long"), "{err}");
        let err = parse_duration("1000000000000000000000000000000000000000000s").unwrap_err();
        assert!(err.contains("too long"), "{err}");
    }
}
