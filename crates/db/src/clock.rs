//! UTC calendar time from the system clock's seconds, for names and reports (snapshot
//! names, telemetry timestamps) without a date-time crate.

/// A UTC date and time of day.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UtcTime {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
}

impl UtcTime {
    /// The time `secs` seconds after 1970-01-01T00:00:00Z (the civil date from days since
    /// the epoch: Howard Hinnant's algorithm).
    pub fn from_unix(secs: u64) -> Self {
        let days = (secs / 86_400) as i64;
        let rem = (secs % 86_400) as u32;
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        Self {
            year: yoe + era * 400 + i64::from(month <= 2),
            month,
            day,
            hour: rem / 3600,
            minute: rem % 3600 / 60,
            second: rem % 60,
        }
    }

    /// `YYYY-MM-DDTHH:MM:SS`.
    pub fn iso(&self) -> String {
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_across_leap_days_and_years() {
        assert_eq!(UtcTime::from_unix(0).iso(), "1970-01-01T00:00:00");
        assert_eq!(UtcTime::from_unix(951_782_400).iso(), "2000-02-29T00:00:00");
        assert_eq!(
            UtcTime::from_unix(1_795_737_599).iso(),
            "2026-11-26T23:59:59"
        );
    }
}
