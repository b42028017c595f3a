//! UTC calendar dates from Unix seconds (Howard Hinnant's `civil_from_days`), shared by the
//! `lockd` CLI (explain's wall-clock times, man page dates) and `lockd-killpath`'s log
//! lines. Hand-written: three formats of one 10-line algorithm do not justify a time crate.

/// (year, month 1..=12, day 1..=31) of the day `days` after 1970-01-01 (negative: before).
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `YYYY-MM-DDTHH:MM:SS` (UTC, no zone suffix) of Unix second `t`.
pub fn utc_seconds(t: i64) -> String {
    let (y, m, d) = civil_from_days(t.div_euclid(86_400));
    let rem = t.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(11_017), (2000, 3, 1));
        assert_eq!(utc_seconds(1_795_478_400 + 3_661), "2026-11-24T01:01:01");
        assert_eq!(utc_seconds(951_782_399), "2000-02-28T23:59:59");
    }
}
