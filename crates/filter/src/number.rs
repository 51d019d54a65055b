//! Exact decimal numbers, compared without floating point so that `header.id = 9007199254740993`
//! means exactly that. A number is `-?[0-9]+(\.[0-9]+)?`, both in filter literals and in the
//! field values compared with them; anything else in a field is "not a number".

use std::cmp::Ordering;
use std::fmt;

/// A normalized decimal: no leading zeros in `int`, no trailing zeros in `frac`, zero is not
/// negative. Held as ASCII digits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Number {
    negative: bool,
    int: String,
    frac: String,
}

/// A borrowed, normalized decimal (what a field value parses to without allocating).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decimal<'a> {
    negative: bool,
    int: &'a [u8],
    frac: &'a [u8],
}

impl Number {
    /// Parses `-?[0-9]+(\.[0-9]+)?`; `None` for anything else.
    pub fn parse(text: &str) -> Option<Number> {
        let d = Decimal::parse(text.as_bytes())?;
        // Digits only: the conversions cannot fail.
        Some(Number {
            negative: d.negative,
            int: String::from_utf8_lossy(d.int).into_owned(),
            frac: String::from_utf8_lossy(d.frac).into_owned(),
        })
    }

    pub fn as_decimal(&self) -> Decimal<'_> {
        Decimal {
            negative: self.negative,
            int: self.int.as_bytes(),
            frac: self.frac.as_bytes(),
        }
    }
}

impl<'a> Decimal<'a> {
    /// Parses `-?[0-9]+(\.[0-9]+)?` in place; `None` for anything else.
    pub fn parse(bytes: &'a [u8]) -> Option<Decimal<'a>> {
        let (negative, digits) = match bytes.split_first() {
            Some((b'-', rest)) => (true, rest),
            _ => (false, bytes),
        };
        let (int, frac) = match digits.iter().position(|&b| b == b'.') {
            Some(dot) => (&digits[..dot], &digits[dot + 1..]),
            None => (digits, &digits[digits.len()..]),
        };
        let has_dot = int.len() != digits.len();
        if int.is_empty() || (has_dot && frac.is_empty()) {
            return None;
        }
        if !int.iter().chain(frac).all(u8::is_ascii_digit) {
            return None;
        }
        let int_start = int.iter().position(|&b| b != b'0').unwrap_or(int.len());
        let frac_end = frac.iter().rposition(|&b| b != b'0').map_or(0, |i| i + 1);
        let (int, frac) = (&int[int_start..], &frac[..frac_end]);
        let zero = int.is_empty() && frac.is_empty();
        Some(Decimal {
            negative: negative && !zero,
            int,
            frac,
        })
    }

    fn cmp_magnitude(&self, other: &Decimal<'_>) -> Ordering {
        self.int
            .len()
            .cmp(&other.int.len())
            .then_with(|| self.int.cmp(other.int))
            // Both without trailing zeros: byte order is numeric order.
            .then_with(|| self.frac.cmp(other.frac))
    }
}

impl Ord for Decimal<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self.negative, other.negative) {
            (false, true) => Ordering::Greater,
            (true, false) => Ordering::Less,
            (false, false) => self.cmp_magnitude(other),
            (true, true) => other.cmp_magnitude(self),
        }
    }
}

impl PartialOrd for Decimal<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Number {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.negative {
            f.write_str("-")?;
        }
        f.write_str(if self.int.is_empty() { "0" } else { &self.int })?;
        if !self.frac.is_empty() {
            write!(f, ".{}", self.frac)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Decimal<'_> {
        Decimal::parse(s.as_bytes()).unwrap()
    }

    #[test]
    fn parses_and_normalizes() {
        assert_eq!(Number::parse("007.500").unwrap().to_string(), "7.5");
        assert_eq!(Number::parse("-0.0").unwrap().to_string(), "0");
        assert_eq!(Number::parse("-12").unwrap().to_string(), "-12");
        for bad in [
            "", "-", "1.", ".5", "1e3", "+1", " 1", "1 ", "--1", "1.2.3", "0x10",
        ] {
            assert!(Decimal::parse(bad.as_bytes()).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn compares_exactly() {
        assert!(d("9007199254740993") > d("9007199254740992"));
        assert!(d("-1") < d("0"));
        assert!(d("-2") < d("-1.5"));
        assert!(d("0.5") < d("0.51"));
        assert!(d("10") > d("9.999"));
        assert_eq!(d("3.0"), d("003"));
        assert_eq!(d("-0"), d("0"));
    }
}
