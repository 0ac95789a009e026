//! Kubernetes quantities (`resource.Quantity`) as CEL sees them: exact values, compared and
//! added as kube's `quantity` library does. A value is held in nano-units, which covers every
//! suffix from `n` to `Ei`.

use std::cmp::Ordering;

/// A parsed quantity, in nano-units.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Quantity(pub i128);

const NANO: i128 = 1_000_000_000;

impl Quantity {
    /// Parses Kubernetes' quantity syntax: a signed decimal number, then a binary suffix (`Ki`
    /// .. `Ei`), a decimal one (`n`, `u`, `m`, `k`, `M` .. `E`) or an exponent (`e3`, `E-2`).
    pub fn parse(text: &str) -> Result<Quantity, String> {
        let invalid = || {
            format!("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {text:?}")
        };
        let split = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
            .unwrap_or(text.len());
        let (number, suffix) = text.split_at(split);
        let (negative, digits) = match number.as_bytes().first() {
            Some(b'-') => (true, &number[1..]),
            Some(b'+') => (false, &number[1..]),
            _ => (false, number),
        };
        let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
        if (whole.is_empty() && fraction.is_empty())
            || !whole
                .bytes()
                .chain(fraction.bytes())
                .all(|b| b.is_ascii_digit())
        {
            return Err(invalid());
        }
        // The mantissa as an integer, and the power of ten that scales it.
        let mut mantissa: i128 = 0;
        for b in whole.bytes().chain(fraction.bytes()) {
            mantissa = mantissa
                .checked_mul(10)
                .and_then(|m| m.checked_add(i128::from(b - b'0')))
                .ok_or_else(invalid)?;
        }
        let mut exponent10 = -(fraction.len() as i32);
        let mut factor2: u32 = 0;
        match suffix {
            "" => {}
            "n" => exponent10 -= 9,
            "u" => exponent10 -= 6,
            "m" => exponent10 -= 3,
            "k" => exponent10 += 3,
            "M" => exponent10 += 6,
            "G" => exponent10 += 9,
            "T" => exponent10 += 12,
            "P" => exponent10 += 15,
            "E" => exponent10 += 18,
            "Ki" => factor2 = 10,
            "Mi" => factor2 = 20,
            "Gi" => factor2 = 30,
            "Ti" => factor2 = 40,
            "Pi" => factor2 = 50,
            "Ei" => factor2 = 60,
            _ if suffix.starts_with(['e', 'E']) => {
                exponent10 += suffix[1..].parse::<i32>().map_err(|_| invalid())?;
            }
            _ => return Err(invalid()),
        }
        let mut value = mantissa.checked_shl(factor2).ok_or_else(invalid)?;
        // To nano-units; digits below a nano-unit are dropped, as kube rounds them up only when
        // printing.
        let scale = exponent10 + 9;
        if scale >= 0 {
            for _ in 0..scale {
                value = value.checked_mul(10).ok_or_else(invalid)?;
            }
        } else {
            for _ in 0..(-scale) {
                value /= 10;
            }
        }
        Ok(Quantity(if negative { -value } else { value }))
    }

    /// The value as an integer, when it is one and fits.
    pub fn as_integer(self) -> Option<i64> {
        (self.0 % NANO == 0)
            .then(|| i64::try_from(self.0 / NANO).ok())
            .flatten()
    }

    /// The value as a float.
    pub fn as_float(self) -> f64 {
        self.0 as f64 / NANO as f64
    }

    /// A quantity holding `value`.
    pub fn from_int(value: i64) -> Quantity {
        Quantity(i128::from(value) * NANO)
    }

    /// -1, 0 or 1.
    pub fn sign(self) -> i64 {
        match self.0.cmp(&0) {
            Ordering::Less => -1,
            Ordering::Equal => 0,
            Ordering::Greater => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kubernetes_quantities() {
        let q = |t: &str| Quantity::parse(t).unwrap();
        assert_eq!(q("1Gi"), Quantity::from_int(1 << 30));
        assert_eq!(q("80Gi"), q("81920Mi"));
        assert_eq!(q("1.5k"), Quantity::from_int(1500));
        assert_eq!(q("100m"), Quantity(100_000_000));
        assert_eq!(q("1e3"), q("1k"));
        assert_eq!(q("-2"), Quantity::from_int(-2));
        assert_eq!(q("500n").0, 500);
        assert!(q("40Gi") > q("40G"));
        assert_eq!(q("1Ki").as_integer(), Some(1024));
        assert_eq!(q("100m").as_integer(), None);
        for bad in ["", "Gi", "1.2.3", "1Xi", "abc", "1e"] {
            assert!(Quantity::parse(bad).is_err(), "{bad}");
        }
    }
}
