//! Durations as the command lines take them: `250ms`, `20s`, `2m`, or a bare number of
//! seconds, from 1 ms to 24 h. One parser for every binary, so that a flag reads the same in
//! the sequencer, the full node, the benchmarks and the devnet.

use std::time::Duration;

/// Parses `250ms`, `20s`, `2m` or a number of seconds (fractions allowed), from 1 ms to 24 h.
/// The error says what is accepted (clap prints it under the flag's name).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("'{s}' is not a duration such as 250ms, 20s or 2m"))?;
    let seconds = match unit {
        "ms" => value / 1e3,
        "" | "s" => value,
        "m" => value * 60.0,
        _ => return Err(format!("'{s}': use ms, s or m")),
    };
    if !(0.001..=86_400.0).contains(&seconds) {
        return Err(format!("'{s}' must be between 1ms and 24h"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// A duration as geth prints a timeout and [`parse_duration`] reads it back: whole seconds as
/// `5s`, anything else in milliseconds (`300ms`).
pub fn format_duration(t: Duration) -> String {
    if t.subsec_millis() == 0 {
        format!("{}s", t.as_secs())
    } else {
        format!("{}ms", t.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_bounds() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration(" 2s "), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(parse_duration("0ms").is_err());
        assert!(parse_duration("25h").is_err());
        assert!(parse_duration("5 hours").is_err());
        assert!(parse_duration("ms").is_err());
    }
}
