//! Durations on the command line: `500ms`, `5s`, `2m`, `1h`, or a bare
//! number in the option's own unit (seconds for every `--timeout`,
//! milliseconds for `--ttl` and `--delay`, as JMS counts them).

use std::time::Duration;

/// A duration whose bare number means seconds (`--timeout`).
pub fn seconds(text: &str) -> Result<Duration, String> {
    parse(text, 1000.0)
}

/// A duration whose bare number means milliseconds (`--ttl`, `--delay`).
pub fn millis(text: &str) -> Result<Duration, String> {
    parse(text, 1.0)
}

/// `text` as a duration; a bare number counts `bare_ms` milliseconds a
/// unit.
fn parse(text: &str, bare_ms: f64) -> Result<Duration, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let unit_ms = match unit.trim() {
        "" => bare_ms,
        "ms" => 1.0,
        "s" => 1000.0,
        "m" | "min" => 60_000.0,
        "h" => 3_600_000.0,
        other => {
            return Err(format!(
                "'{text}': unknown unit '{other}' (use ms, s, m or h, e.g. 500ms or 5s)"
            ))
        }
    };
    let n: f64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a duration (e.g. 500ms, 5s, 2m)"))?;
    let ms = n * unit_ms;
    if !(ms.is_finite() && ms > 0.0 && ms < 1e15) {
        return Err(format!("'{text}' is not a positive duration"));
    }
    Ok(Duration::from_secs_f64(ms / 1000.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_bare_numbers() {
        assert_eq!(seconds("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(seconds("5"), Ok(Duration::from_secs(5)));
        assert_eq!(seconds("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(seconds("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(seconds("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(seconds("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(millis("1500"), Ok(Duration::from_millis(1500)));
        assert_eq!(millis("60s"), Ok(Duration::from_secs(60)));
    }

    #[test]
    fn nonsense_is_refused_with_a_hint() {
        for bad in ["", "s", "5x", "-1", "0", "1.2.3", "nan", "1e400s"] {
            let e = seconds(bad).unwrap_err();
            assert!(e.contains(bad), "{bad}: {e}");
        }
        assert!(seconds("5x").unwrap_err().contains("ms, s, m or h"));
    }
}
