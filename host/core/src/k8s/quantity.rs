//! Kubernetes resource quantities ("500m", "1Gi", "1e3", "2k", "0.5"), converted the way the
//! scheduler reads them: `MilliValue()` for cpu, `Value()` for everything else, both rounded up.

use std::fmt;

/// A quantity that could not be parsed, with the text it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantityError {
    /// The text.
    pub text: String,
    /// Why it is not a quantity.
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
    let (suffix_exp10, exp2) = suffix_exponents(suffix).map_err(err)?;
    let exp10 = suffix_exp10 - fraction.len() as i32;
    Ok(Exact {
        negative,
        mantissa,
        exp10,
        exp2,
    })
}

/// A suffix's power of ten and power of two (`Ki`: 2^10, `m`: 10^-3, `e3`: 10^3).
fn suffix_exponents(suffix: &str) -> Result<(i32, u32), &'static str> {
    Ok(match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        _ if suffix.starts_with(['e', 'E']) => {
            let exponent: i32 = suffix[1..].parse().map_err(|_| "bad exponent")?;
            if !(-30..=30).contains(&exponent) {
                return Err("exponent out of range");
            }
            (exponent, 0)
        }
        _ => return Err("unknown suffix"),
    })
}

/// Why a quantity that parsed has no value the scheduler can hold.
const TOO_LARGE: &str = "too large: beyond a 64-bit integer in its canonical unit";

impl Exact {
    /// `ceil(self * 10^scale)` (Kubernetes' `ScaledValue(-scale)`), or `None` when it does not fit
    /// an i64: Kubernetes would wrap or clamp such a value, and either gives wrong placements.
    fn scaled_up(self, scale: i32) -> Option<i64> {
        let mut value = self.mantissa;
        let mut exp10 = self.exp10 + scale;
        // Multiply first so that division loses as little as possible.
        value = value.checked_mul(1u128.checked_shl(self.exp2)?)?;
        while exp10 > 0 && value != 0 {
            value = value.checked_mul(10)?;
            exp10 -= 1;
        }
        let mut remainder = false;
        while exp10 < 0 && value != 0 {
            remainder |= !value.is_multiple_of(10);
            value /= 10;
            exp10 += 1;
        }
        let magnitude = i64::try_from(value).ok()?;
        if self.negative {
            // Rounding up a negative number drops the remainder.
            Some(-magnitude)
        } else if remainder {
            magnitude.checked_add(1)
        } else {
            Some(magnitude)
        }
    }

    fn is_negative(self) -> bool {
        self.negative && self.mantissa != 0
    }
}

fn scaled(text: &str, scale: i32) -> Result<i64, QuantityError> {
    parse(text)?.scaled_up(scale).ok_or_else(|| QuantityError {
        text: text.to_string(),
        why: TOO_LARGE,
    })
}

/// The quantity in its base unit, rounded up (Kubernetes' `Quantity.Value()`).
///
/// # Errors
/// When `text` is not a Kubernetes quantity, or its value does not fit an i64.
pub fn value(text: &str) -> Result<i64, QuantityError> {
    scaled(text, 0)
}

/// The quantity in thousandths of its unit, rounded up (`Quantity.MilliValue()`): millicores for cpu.
///
/// # Errors
/// When `text` is not a Kubernetes quantity, or its milli-value does not fit an i64.
pub fn milli_value(text: &str) -> Result<i64, QuantityError> {
    scaled(text, 3)
}

/// Whether the quantity is below zero (`-500m` is, though its value rounds up to 0).
///
/// # Errors
/// When `text` is not a Kubernetes quantity.
pub fn is_negative(text: &str) -> Result<bool, QuantityError> {
    Ok(parse(text)?.is_negative())
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
    fn values_beyond_a_64_bit_integer_are_refused_not_clamped() {
        for (text, milli) in [
            ("100Ei", false),
            ("9Ei", true),
            ("1e17", true),
            ("1e19", false),
            ("18446744073709551616k", false),
            ("9223372036854775807", true),
            ("10000000000000000000", false),
        ] {
            let result = if milli {
                milli_value(text)
            } else {
                value(text)
            };
            let error = result.expect_err(text);
            assert_eq!(error.why, TOO_LARGE, "{text}");
        }
        assert_eq!(value("9223372036854775807").unwrap(), i64::MAX);
        assert_eq!(milli_value("9223372036854775807m").unwrap(), i64::MAX);
        assert_eq!(value("8Ei").unwrap_err().why, TOO_LARGE, "2^63 is one past");
        assert_eq!(value("7Ei").unwrap(), 7 << 60);
        assert_eq!(value("0e30").unwrap(), 0, "zero times anything fits");
    }

    #[test]
    fn a_negative_quantity_is_negative_even_when_its_value_rounds_to_zero() {
        assert!(is_negative("-500m").unwrap());
        assert!(is_negative("-1").unwrap());
        assert!(!is_negative("-0").unwrap());
        assert!(!is_negative("1").unwrap());
    }

    #[test]
    fn negative_quantities_round_towards_zero_when_rounding_up() {
        assert_eq!(milli_value("-1").unwrap(), -1000);
        assert_eq!(value("-500m").unwrap(), 0);
    }
}
