//! Datetime strings as Qdrant reads them (its `DatetimeRange` bounds and datetime payload
//! values), to nanoseconds since the Unix epoch, without a date-time crate.
//!
//! Accepted (the forms Qdrant's parsers take for the common spellings; Qdrant also takes
//! one-digit fields, years of other lengths or signs, surrounding spaces and a `UTC`
//! suffix, which are refused here, and refuses a lowercase `t` without an offset, which is
//! taken here):
//! - `YYYY-MM-DD`, midnight UTC;
//! - `YYYY-MM-DD?HH:MM`, UTC, where `?` is `T`, `t` or a space;
//! - `YYYY-MM-DD?HH:MM:SS[.fraction]`, UTC unless followed by an offset: `Z`, `z`, `+HH:MM`,
//!   `+HHMM` or `+HH` (or `-`), optionally after one space (RFC 3339 and its near kin).
//!
//! Anything else (RFC 2822, bare timestamps, `YYYYMMDD`, ordinal dates, trailing text) is
//! not a datetime.

const NANOS: i128 = 1_000_000_000;

/// The instant `s` names, in nanoseconds since 1970-01-01T00:00:00Z, or `None` when it is
/// not a datetime in an accepted form.
pub(crate) fn parse(s: &str) -> Option<i128> {
    let mut c = Cursor { s: s.as_bytes() };
    let year = c.digits(4)? as i64;
    c.byte(b'-')?;
    let month = c.digits(2)?;
    c.byte(b'-')?;
    let day = c.digits(2)?;
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let midnight = i128::from(days) * 86_400 * NANOS;
    if c.s.is_empty() {
        return Some(midnight);
    }
    if !matches!(c.next()?, b'T' | b't' | b' ') {
        return None;
    }
    let hour = c.digits(2)?;
    c.byte(b':')?;
    let minute = c.digits(2)?;
    if hour > 23 || minute > 59 {
        return None;
    }
    let mut nanos = midnight + i128::from(hour * 3600 + minute * 60) * NANOS;
    if c.s.is_empty() {
        return Some(nanos);
    }
    c.byte(b':')?;
    // 60: a leap second, as chrono allows it.
    let second = c.digits(2)?;
    if second > 60 {
        return None;
    }
    nanos += i128::from(second) * NANOS;
    if c.s.first() == Some(&b'.') {
        c.next();
        let frac = c.take_while(|b| b.is_ascii_digit());
        if frac.is_empty() {
            return None;
        }
        // Nanosecond precision; further digits are dropped.
        let mut n: i128 = 0;
        for i in 0..9 {
            n = n * 10 + frac.get(i).map_or(0, |d| i128::from(d - b'0'));
        }
        nanos += n;
    }
    if c.s.is_empty() {
        return Some(nanos);
    }
    if c.s.first() == Some(&b' ') {
        c.next();
    }
    let offset_secs = match c.next()? {
        b'Z' | b'z' => 0,
        sign @ (b'+' | b'-') => {
            let h = c.digits(2)?;
            let m = match c.s.first() {
                None => 0,
                Some(b':') => {
                    c.next();
                    c.digits(2)?
                }
                Some(_) => c.digits(2)?,
            };
            if h > 23 || m > 59 {
                return None;
            }
            let secs = i64::from(h * 3600 + m * 60);
            if sign == b'-' {
                -secs
            } else {
                secs
            }
        }
        _ => return None,
    };
    if !c.s.is_empty() {
        return None;
    }
    Some(nanos - i128::from(offset_secs) * NANOS)
}

struct Cursor<'a> {
    s: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn next(&mut self) -> Option<u8> {
        let (&b, rest) = self.s.split_first()?;
        self.s = rest;
        Some(b)
    }

    fn byte(&mut self, want: u8) -> Option<()> {
        (self.next()? == want).then_some(())
    }

    /// Exactly `n` ASCII digits, as a number.
    fn digits(&mut self, n: usize) -> Option<u32> {
        let head = self.s.get(..n)?;
        if !head.iter().all(u8::is_ascii_digit) {
            return None;
        }
        self.s = &self.s[n..];
        Some(head.iter().fold(0, |v, d| v * 10 + u32::from(d - b'0')))
    }

    fn take_while(&mut self, pred: impl Fn(&u8) -> bool) -> &'a [u8] {
        let n = self.s.iter().take_while(|b| pred(b)).count();
        let (head, rest) = self.s.split_at(n);
        self.s = rest;
        head
    }
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: i128 = NANOS;

    #[test]
    fn accepted_forms_name_the_same_instants() {
        let base = parse("2015-01-01T00:00:00Z").unwrap();
        assert_eq!(base, 1_420_070_400 * SEC);
        for s in [
            "2015-01-01",
            "2015-01-01T00:00",
            "2015-01-01 00:00",
            "2015-01-01t00:00:00z",
            "2015-01-01T00:00:00",
            "2015-01-01T00:00:00.000",
            "2015-01-01T01:00:00+01:00",
            "2015-01-01T01:00:00+0100",
            "2015-01-01T01:00:00+01",
            "2014-12-31T23:00:00-01:00",
            "2015-01-01 01:00:00 +01:00",
        ] {
            assert_eq!(parse(s), Some(base), "{s}");
        }
        assert_eq!(parse("1970-01-01"), Some(0));
        assert_eq!(parse("1969-12-31T23:59:59Z"), Some(-SEC));
        assert_eq!(parse("2000-02-29"), Some(951_782_400 * SEC));
        assert_eq!(
            parse("2015-02-01T06:00:00.000000000"),
            parse("2015-02-01T08:00:00+02:00")
        );
        assert_eq!(
            parse("2015-01-01T00:00:00.5Z").unwrap() - base,
            SEC / 2,
            "fractions count"
        );
        assert_eq!(
            parse("2015-01-01T00:00:00.1234567891Z").unwrap() - base,
            123_456_789,
            "beyond nanoseconds is dropped"
        );
        assert_eq!(parse("2016-12-31T23:59:60Z"), parse("2017-01-01"));
    }

    #[test]
    fn other_forms_are_not_datetimes() {
        for s in [
            "",
            "2015",
            "2015-01",
            "2015-1-01",
            "20150201",
            "20150201T060000.000Z",
            "2015032T060000Z",
            "1422758400000",
            "1420070400",
            "Thu, 01 Jan 2015 01:00:00 +0100",
            "2015-02-01 06:00:00 AM",
            "2015-02-30",
            "2015-02-29",
            "2015-13-01",
            "2015-00-10",
            "2015-01-01T24:00:00",
            "2015-01-01T10:60",
            "2015-01-01T10:00:61",
            "2015-01-01T10",
            "2015-01-01T",
            "2015-01-01T10:00Z",
            "2015-01-01T10:00:00.",
            "2015-01-01T10:00:00+",
            "2015-01-01T10:00:00+1",
            "2015-01-01T10:00:00+01:",
            "2015-01-01T10:00:00+24:00",
            "2015-01-01T10:00:00Z ",
            "2015-01-01T10:00:00UTC",
            "２０１５-01-01",
        ] {
            assert_eq!(parse(s), None, "{s:?}");
        }
    }
}
