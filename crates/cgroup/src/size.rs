//! Sizes as people write them on a command line (`512MiB`, `8G`, `1073741824`).

/// A size that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid size {input:?}: {reason}; expected a whole number of bytes, optionally with a \
     binary unit: 512MiB, 512M, 8GiB, 8G, 1073741824"
)]
pub struct SizeError {
    /// What was given.
    pub input: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

const KIB: u64 = 1024;
const MIB: u64 = KIB * 1024;
const GIB: u64 = MIB * 1024;
const TIB: u64 = GIB * 1024;

/// Reads a size in bytes.
///
/// Units are binary whatever their spelling, as in cgroup files and systemd's `MemoryMax=`:
/// `K`, `KB` and `KiB` are all 1024 bytes, `M`/`MB`/`MiB` 2^20, `G`/`GB`/`GiB` 2^30,
/// `T`/`TB`/`TiB` 2^40; a bare number or `B` is bytes. Case does not matter and a space may
/// separate the number from its unit. Fractions are refused (`1536MiB`, not `1.5GiB`) so that
/// this and `scripts/with-memory-limit.sh` accept exactly the same sizes.
pub fn parse_size(input: &str) -> Result<u64, SizeError> {
    let err = |reason| SizeError {
        input: input.to_string(),
        reason,
    };
    let s = input.trim();
    if s.is_empty() {
        return Err(err("it is empty"));
    }
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (number, unit) = s.split_at(digits_end);
    if number.is_empty() {
        return Err(err("it does not start with a number"));
    }
    let number: u64 = number
        .parse()
        .map_err(|_| err("the number does not fit in 64 bits"))?;
    let multiplier = match unit.trim_start().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => KIB,
        "m" | "mb" | "mib" => MIB,
        "g" | "gb" | "gib" => GIB,
        "t" | "tb" | "tib" => TIB,
        u if u.starts_with('.') || u.starts_with(',') => {
            return Err(err(
                "fractions are not accepted (write 1536MiB, not 1.5GiB)",
            ))
        }
        _ => return Err(err("unknown unit (use K, M, G or T, with or without iB)")),
    };
    number
        .checked_mul(multiplier)
        .ok_or_else(|| err("it does not fit in 64 bits"))
}

/// Writes a byte count for people: the largest binary unit that divides it exactly
/// (`8 GiB`, `1536 MiB`), else bytes.
pub fn format_size(bytes: u64) -> String {
    for (unit, name) in [(TIB, "TiB"), (GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")] {
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{} {name}", bytes / unit);
        }
    }
    format!("{bytes} bytes")
}

/// Writes a byte count for people, rounded: `1.5 GiB`, `63.2 MiB`, `512 bytes`.
pub fn format_size_approx(bytes: u64) -> String {
    for (unit, name) in [(TIB, "TiB"), (GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")] {
        if bytes >= unit {
            return format!("{:.1} {name}", bytes as f64 / unit as f64);
        }
    }
    format!("{bytes} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_binary() {
        assert_eq!(parse_size("512MiB"), Ok(512 * MIB));
        assert_eq!(parse_size("512M"), Ok(512 * MIB));
        assert_eq!(parse_size("512mb"), Ok(512 * MIB));
        assert_eq!(parse_size("8GiB"), Ok(8 * GIB));
        assert_eq!(parse_size("8G"), Ok(8 * GIB));
        assert_eq!(parse_size("8 g"), Ok(8 * GIB));
        assert_eq!(parse_size("1073741824"), Ok(GIB));
        assert_eq!(parse_size("4096B"), Ok(4096));
        assert_eq!(parse_size("64k"), Ok(64 * KIB));
        assert_eq!(parse_size("2TiB"), Ok(2 * TIB));
        assert_eq!(parse_size(" 1G "), Ok(GIB));
    }

    #[test]
    fn bad_sizes_say_why() {
        for (input, reason) in [
            ("", "empty"),
            ("G", "does not start with a number"),
            ("-1G", "does not start with a number"),
            ("1.5G", "fractions"),
            ("8X", "unknown unit"),
            ("8GiBs", "unknown unit"),
            ("99999999999999999999", "64 bits"),
            ("17179869184T", "64 bits"),
        ] {
            let e = parse_size(input).unwrap_err();
            assert!(e.reason.contains(reason), "{input:?}: {e}");
            assert!(e.to_string().contains("512MiB"), "{e}");
        }
    }

    #[test]
    fn formats_in_the_largest_exact_unit() {
        assert_eq!(format_size(8 * GIB), "8 GiB");
        assert_eq!(format_size(1536 * MIB), "1536 MiB");
        assert_eq!(format_size(4097), "4097 bytes");
        assert_eq!(format_size(0), "0 bytes");
        assert_eq!(format_size_approx(3 * GIB / 2), "1.5 GiB");
        assert_eq!(format_size_approx(100), "100 bytes");
    }
}
