//! Bounds of the numeric flags of `bench` and `replay`, checked when the command line is read:
//! a count past what the machine can hold (a `--pods` of 2^64-1, a `--samples` of a billion) is
//! refused naming the flag and its range, before anything is allocated.

/// The most nodes `bench` builds: 200,000 take about 2 GB (50,000 measured 515 MB).
pub const MAX_BENCH_NODES: usize = 200_000;
/// The most pods one `bench` run schedules.
pub const MAX_BENCH_PODS: usize = 1_000_000;
/// The most node updates `bench` pushes through the event pipeline.
pub const MAX_BENCH_EVENTS: usize = 10_000_000;
/// The most runs of each runtime `bench --rounds` makes.
pub const MAX_BENCH_ROUNDS: usize = 100;
/// The most points of `replay`'s time series (each holds a row per GPU model).
pub const MAX_REPLAY_SAMPLES: usize = 100_000;
/// `replay --speed` bounds: slower than one trace second a week, or faster than a wall second
/// holding a thousand years of trace, is no pace but a typo.
pub const REPLAY_SPEED: std::ops::RangeInclusive<f64> = 1e-6..=3e10;

/// `text` as a count in `min..=max`.
fn count(text: &str, min: usize, max: usize) -> Result<usize, String> {
    let value: usize = text
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a whole number in {min}..={max}"))?;
    if (min..=max).contains(&value) {
        Ok(value)
    } else {
        Err(format!("{value} is not in {min}..={max}"))
    }
}

/// `bench --nodes` (each of the list).
pub fn bench_nodes(text: &str) -> Result<usize, String> {
    count(text, 1, MAX_BENCH_NODES)
}

/// `bench --pods`.
pub fn bench_pods(text: &str) -> Result<usize, String> {
    count(text, 1, MAX_BENCH_PODS)
}

/// `bench --events`.
pub fn bench_events(text: &str) -> Result<usize, String> {
    count(text, 0, MAX_BENCH_EVENTS)
}

/// `bench --rounds`.
pub fn bench_rounds(text: &str) -> Result<usize, String> {
    count(text, 1, MAX_BENCH_ROUNDS)
}

/// `replay --samples`.
pub fn replay_samples(text: &str) -> Result<usize, String> {
    count(text, 1, MAX_REPLAY_SAMPLES)
}

/// `replay --speed`.
pub fn replay_speed(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a number of trace seconds per wall second"))?;
    if REPLAY_SPEED.contains(&value) {
        Ok(value)
    } else {
        Err(format!(
            "--speed must be a positive number of trace seconds per wall second in {:e}..={:e}, not {}",
            REPLAY_SPEED.start(),
            REPLAY_SPEED.end(),
            text.trim()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_past_their_bounds_are_refused_with_the_range() {
        assert_eq!(bench_nodes("5000"), Ok(5000));
        assert!(bench_nodes("0").unwrap_err().contains("1..=200000"));
        assert!(bench_nodes("10000000").is_err());
        assert!(bench_pods("18446744073709551615").is_err());
        assert!(bench_pods("-1").unwrap_err().contains("not a whole number"));
        assert_eq!(bench_events("0"), Ok(0));
        assert!(replay_samples("1000000000").is_err());
        assert_eq!(replay_samples("200"), Ok(200));
        assert!(bench_rounds("0").is_err());
    }

    #[test]
    fn a_speed_must_be_a_pace_not_a_typo() {
        assert_eq!(replay_speed("3600"), Ok(3600.0));
        for bad in ["1e-300", "0", "-1", "inf", "NaN", "1e300", "fast"] {
            assert!(replay_speed(bad).is_err(), "{bad}");
        }
    }
}
