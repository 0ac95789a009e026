//! Kubernetes resource quantities ("500m", "1Gi", "1e3", "2k", "0.5"), converted the way the
//! scheduler reads them: `MilliValue()` for cpu, `Value()` for everything else, both rounded up.

use std::fmt;

/// A quantity that could not be parsed, with the text it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantityError {
    pub text: String,
    pub why: &'static str,
}

impl fmt::Display for QuantityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid quantity {:?}: {}", self.text, self.why)
    }
}

impl std::error::Error for QuantityError {}

/// An exact quantity: `mantissa * 10^exp10 * 2^exp2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Exact {
    negative: bool,
    mantissa: u128,
    exp10: i32,
    exp2: u32,
}

fn parse(text: &str) -> Result<Exact, QuantityError> {
    let err = |why| QuantityError {
        text: text.to_string(),
        why,
    };
    let s = text.trim();
    if s.is_empty() {
        return Err(err("empty"));
    }
    let (negative, s) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let number_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return Err(err("no number"));
    }
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let mut mantissa: u128 = 0;
    for digit in whole.bytes().chain(fraction.bytes()) {
        mantissa = mantissa
            .checked_mul(10)
            .and_then(|m| m.checked_add(u128::from(digit - b'0')))
            .ok_or_else(|| err("too many digits"))?;
    }
    let mut exp10 = -(fraction.len() as i32);
    let mut exp2 = 0;
    match suffix {
        "" => {}
        "n" => exp10 -= 9,
        "u" => exp10 -= 6,
        "m" => exp10 -= 3,
        "k" => exp10 += 3,
        "M" => exp10 += 6,
        "G" => exp10 += 9,
        "T" => exp10 += 12,
        "P" => exp10 += 15,
        "E" => exp10 += 18,
        "Ki" => exp2 = 10,
        "Mi" => exp2 = 20,
        "Gi" => exp2 = 30,
        "Ti" => exp2 = 40,
        "Pi" => exp2 = 50,
        "Ei" => exp2 = 60,
        _ if suffix.starts_with(['e', 'E']) => {
            let exponent: i32 = suffix[1..].parse().map_err(|_| err("bad exponent"))?;
            if !(-30..=30).contains(&exponent) {
                return Err(err("exponent out of range"));
            }
            exp10 += exponent;
        }
        _ => return Err(err("unknown suffix")),
    }
    Ok(Exact {
        negative,
        mantissa,
        exp10,
        exp2,
    })
}

impl Exact {
    /// `ceil(self * 10^scale)`, saturated to i64 (Kubernetes' `ScaledValue(-scale)`).
    fn scaled_up(self, scale: i32) -> i64 {
        let mut value = self.mantissa;
        let mut exp10 = self.exp10 + scale;
        // Multiply first so that division loses as little as possible.
        for _ in 0..self.exp2 {
            value = value.saturating_mul(2);
        }
        while exp10 > 0 {
            value = value.saturating_mul(10);
            exp10 -= 1;
        }
        let mut remainder = false;
        while exp10 < 0 {
            remainder |= !value.is_multiple_of(10);
            value /= 10;
            exp10 += 1;
        }
        let magnitude = i64::try_from(value).unwrap_or(i64::MAX);
        if self.negative {
            // Rounding up a negative number drops the remainder.
            -magnitude
        } else if remainder {
            magnitude.saturating_add(1)
        } else {
            magnitude
        }
    }
}

/// The quantity in its base unit, rounded up (Kubernetes' `Quantity.Value()`).
///
/// # Errors
/// When `text` is not a Kubernetes quantity.
pub fn value(text: &str) -> Result<i64, QuantityError> {
    Ok(parse(text)?.scaled_up(0))
}

/// The quantity in thousandths of its unit, rounded up (`Quantity.MilliValue()`): millicores for cpu.
///
/// # Errors
/// When `text` is not a Kubernetes quantity.
pub fn milli_value(text: &str) -> Result<i64, QuantityError> {
    Ok(parse(text)?.scaled_up(3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_notation_kubernetes_accepts() {
        let cases: &[(&str, i64, i64)] = &[
            ("1", 1, 1000),
            ("500m", 1, 500),
            ("0.5", 1, 500),
            ("2", 2, 2000),
            ("100m", 1, 100),
            ("1Ki", 1024, 1_024_000),
            ("128Mi", 134_217_728, 134_217_728_000),
            ("1Gi", 1_073_741_824, 1_073_741_824_000),
            ("1G", 1_000_000_000, 1_000_000_000_000),
            ("2k", 2000, 2_000_000),
            ("1e3", 1000, 1_000_000),
            ("1E3", 1000, 1_000_000),
            ("1.5Gi", 1_610_612_736, 1_610_612_736_000),
            ("0", 0, 0),
            ("+3", 3, 3000),
            ("250u", 1, 1),
            ("1n", 1, 1),
            ("1500n", 1, 1),
            ("2.5e-3", 1, 3),
            ("12Ti", 13_194_139_533_312, 13_194_139_533_312_000),
        ];
        for (text, expected_value, expected_milli) in cases {
            assert_eq!(value(text).unwrap(), *expected_value, "value of {text}");
            assert_eq!(
                milli_value(text).unwrap(),
                *expected_milli,
                "milli value of {text}"
            );
        }
    }

    #[test]
    fn rejects_what_kubernetes_rejects() {
        for text in ["", "abc", "1.2.3", "5x", "Mi", "1ee3", "."] {
            assert!(value(text).is_err(), "{text:?} should be rejected");
        }
    }

    #[test]
    fn negative_quantities_round_towards_zero_when_rounding_up() {
        assert_eq!(milli_value("-1").unwrap(), -1000);
        assert_eq!(value("-500m").unwrap(), 0);
    }
}
