//! `produce --deliver-at` and `--delay`: when delayed records become visible (and `consume
//! --from-time`, which takes times the same way). A deliver-at time is RFC 3339
//! (`2026-12-01T18:30:00Z`, `2026-12-01T19:30:00.250+01:00`) or ms since the Unix epoch; a
//! delay is a whole number with a unit: `1500ms`, `30s`, `2m`, `1h`, `7d`.

/// Parses `--deliver-at`: ms since the epoch, or an RFC 3339 date-time with its offset.
pub fn parse_deliver_at(text: &str) -> Result<i64, String> {
    parse_time("--deliver-at", text)
}

/// Parses `consume --from-time`, like `--deliver-at`.
pub fn parse_from_time(text: &str) -> Result<i64, String> {
    parse_time("--from-time", text)
}

/// A time given to `flag`: ms since the epoch, or an RFC 3339 date-time with its offset.
fn parse_time(flag: &str, text: &str) -> Result<i64, String> {
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse().map_err(|e| format!("{flag} {text}: {e}"));
    }
    rfc3339_ms(text).ok_or_else(|| {
        format!(
            "{flag} {text}: expected ms since the Unix epoch or an RFC 3339 time such as 2026-12-01T18:30:00Z"
        )
    })
}

/// Parses `--delay`: a whole number followed by `ms`, `s`, `m`, `h` or `d`; returns ms.
pub fn parse_delay(text: &str) -> Result<i64, String> {
    let text = text.trim();
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    let scale = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => 0,
    };
    let number: Option<i64> = number.parse().ok();
    match number
        .and_then(|n| n.checked_mul(scale))
        .filter(|_| scale > 0)
    {
        Some(ms) => Ok(ms),
        None => Err(format!(
            "--delay {text}: expected a whole number and a unit: 1500ms, 30s, 2m, 1h or 7d"
        )),
    }
}

/// Days from 1970-01-01 to the given civil date (proleptic Gregorian).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Days in `month` (1–12) of `year` (proleptic Gregorian).
fn days_in_month(year: i64, month: i64) -> i64 {
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

fn number(text: &str, range: std::ops::RangeInclusive<i64>) -> Option<i64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok().filter(|n| range.contains(n))
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` as ms since the epoch.
pub(crate) fn rfc3339_ms(text: &str) -> Option<i64> {
    let (date, time) = text.split_once(['T', 't', ' '])?;
    let mut d = date.split('-');
    let (year, month, day) = (d.next()?, d.next()?, d.next()?);
    if d.next().is_some() || year.len() != 4 {
        return None;
    }
    let (year, month) = (number(year, 0..=9999)?, number(month, 1..=12)?);
    // A day the month does not have (2026-02-31) is refused, not carried into the next.
    let day = number(day, 1..=days_in_month(year, month))?;
    let zone_at = time.find(['Z', 'z', '+', '-'])?;
    let (clock, zone) = time.split_at(zone_at);
    let offset_ms = match zone {
        "Z" | "z" => 0,
        _ => {
            let sign = if zone.starts_with('-') { -1 } else { 1 };
            let (h, m) = zone.get(1..)?.split_once(':')?;
            sign * (number(h, 0..=23)? * 60 + number(m, 0..=59)?) * 60_000
        }
    };
    let (hms, fraction) = clock.split_once('.').unwrap_or((clock, ""));
    let mut t = hms.split(':');
    let (h, m, s) = (t.next()?, t.next()?, t.next()?);
    if t.next().is_some() {
        return None;
    }
    let (h, m, s) = (number(h, 0..=23)?, number(m, 0..=59)?, number(s, 0..=60)?);
    let millis = match fraction {
        "" => 0,
        f if f.bytes().all(|b| b.is_ascii_digit()) => {
            let padded = format!("{f:0<3}");
            padded.get(..3)?.parse::<i64>().ok()?
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    Some(((days * 24 + h) * 60 + m) * 60_000 + s * 1000 + millis - offset_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_time_takes_the_forms_deliver_at_takes_and_names_its_flag() {
        assert_eq!(parse_from_time("1764613800000"), Ok(1_764_613_800_000));
        assert_eq!(
            parse_from_time("2025-12-01T18:30:00Z"),
            parse_deliver_at("2025-12-01T18:30:00Z")
        );
        assert!(parse_from_time("yesterday")
            .unwrap_err()
            .starts_with("--from-time"));
    }

    #[test]
    fn deliver_at_takes_epoch_ms_and_rfc3339_with_offsets_and_fractions() {
        assert_eq!(parse_deliver_at("1764613800000"), Ok(1_764_613_800_000));
        assert_eq!(parse_deliver_at("1970-01-01T00:00:00Z"), Ok(0));
        assert_eq!(
            parse_deliver_at("2025-12-01T18:30:00Z"),
            Ok(1_764_613_800_000)
        );
        assert_eq!(
            parse_deliver_at("2025-12-01T19:30:00.25+01:00"),
            Ok(1_764_613_800_250)
        );
        assert_eq!(
            parse_deliver_at("2025-12-01T17:30:00-01:00"),
            Ok(1_764_613_800_000)
        );
        assert_eq!(
            parse_deliver_at("2000-02-29T00:00:00Z"),
            Ok(951_782_400_000)
        );
        assert_eq!(
            parse_deliver_at("2026-12-31T00:00:00Z"),
            Ok(1_798_675_200_000)
        );
        for bad in [
            "",
            "tomorrow",
            "2025-13-01T00:00:00Z",
            "2026-02-31T00:00:00Z",
            "2026-02-29T00:00:00Z",
            "1900-02-29T00:00:00Z",
            "2026-04-31T00:00:00Z",
            "2025-12-01T18:30Z",
            "2025-12-01T18:30:00",
        ] {
            assert!(parse_deliver_at(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn delays_take_a_unit() {
        assert_eq!(parse_delay("1500ms"), Ok(1500));
        assert_eq!(parse_delay("30s"), Ok(30_000));
        assert_eq!(parse_delay("2m"), Ok(120_000));
        assert_eq!(parse_delay("1h"), Ok(3_600_000));
        assert_eq!(parse_delay("7d"), Ok(604_800_000));
        for bad in ["", "30", "s", "1.5s", "-3s", "99999999999999999999d"] {
            assert!(parse_delay(bad).is_err(), "{bad}");
        }
    }
}
