//! The `512M` / `2G` / `65536` memory-size parser used by CLI flags (binary units: K = 1024).

/// Parses a size in bytes: a number with an optional `K`, `M`, `G` or `T` suffix (binary
/// units, case-insensitive, optional trailing `B` or `iB`).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let text = s.trim();
    let upper = text.to_ascii_uppercase();
    let body = upper
        .strip_suffix("IB")
        .or_else(|| upper.strip_suffix('B'))
        .unwrap_or(&upper);
    let (digits, shift) = match body.chars().last() {
        Some('K') => (&body[..body.len() - 1], 10),
        Some('M') => (&body[..body.len() - 1], 20),
        Some('G') => (&body[..body.len() - 1], 30),
        Some('T') => (&body[..body.len() - 1], 40),
        _ => (body, 0),
    };
    let value: u64 = digits.trim().parse().map_err(|_| {
        format!(
            "{s:?} is not a size: give a number of bytes with an optional K, M, G or T \
                 (binary units), e.g. 512M, 2G or 1048576"
        )
    })?;
    if value == 0 {
        return Err(format!(
            "a size of 0 ({s:?}) leaves no memory: give more than 0, e.g. 512M"
        ));
    }
    value
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{s:?} is too large: give at most 16777215T"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sizes() {
        assert_eq!(parse_size("65536"), Ok(65536));
        assert_eq!(parse_size("512k"), Ok(512 << 10));
        assert_eq!(parse_size("256M"), Ok(256 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("1gb"), Ok(1 << 30));
        for bad in ["", "M", "12X", "-1", "0", "99999999999T"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
    }
}
