//! `strftime_now(format)`, the global transformers gives templates (Llama 3 prints today's
//! date into its system prompt with it): Python's `datetime.now().strftime(format)` with the C
//! locale. The clock read is UTC, where Python reads local time; a gateway's clock is UTC in
//! practice. As for Python's naive `datetime`, `%z` and `%Z` print nothing.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// The global: the current time in `format`.
pub(super) fn strftime_now(format: &str) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let seconds = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
    format_utc(format, seconds, now.subsec_micros())
}

/// A calendar instant, broken down.
struct Civil {
    year: i64,
    /// 1..=12
    month: u32,
    /// 1..=31
    day: u32,
    /// 1..=366
    yday: u32,
    /// 0 = Sunday
    wday: u32,
    hour: u32,
    minute: u32,
    second: u32,
}

impl Civil {
    fn from_unix(seconds: i64) -> Civil {
        let days = seconds.div_euclid(86_400);
        let of_day = seconds.rem_euclid(86_400) as u32;
        let (year, month, day) = civil_from_days(days);
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
        let before_month = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
        let yday = before_month[month as usize - 1] + day + u32::from(leap && month > 2);
        Civil {
            year,
            month,
            day,
            yday,
            wday: (days + 4).rem_euclid(7) as u32,
            hour: of_day / 3600,
            minute: of_day / 60 % 60,
            second: of_day % 60,
        }
    }
}

/// The proleptic Gregorian date `days` after 1970-01-01: counts in 400-year eras (146,097
/// days each) from 0000-03-01, so the leap day falls at the end of each counted year.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u32;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `format` for the instant `seconds` (+ `micros`) after the Unix epoch, in UTC. Unknown
/// conversions are copied as they are, as glibc does; `%-d` and the like drop the padding.
pub(super) fn format_utc(format: &str, seconds: i64, micros: u32) -> String {
    let t = Civil::from_unix(seconds);
    let mut out = String::with_capacity(format.len() + 16);
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut spec = chars.next();
        let unpadded = spec == Some('-');
        if unpadded {
            spec = chars.next();
        }
        let num = |out: &mut String, n: i64, width: usize, pad: char| {
            let text = n.to_string();
            if !unpadded {
                for _ in text.len()..width {
                    out.push(pad);
                }
            }
            out.push_str(&text);
        };
        let hour12 = match t.hour % 12 {
            0 => 12,
            h => h,
        };
        match spec {
            Some('a') => out.push_str(&DAYS[t.wday as usize][..3]),
            Some('A') => out.push_str(DAYS[t.wday as usize]),
            Some('b') | Some('h') => out.push_str(&MONTHS[t.month as usize - 1][..3]),
            Some('B') => out.push_str(MONTHS[t.month as usize - 1]),
            Some('C') => num(&mut out, t.year.div_euclid(100), 2, '0'),
            Some('d') => num(&mut out, t.day.into(), 2, '0'),
            Some('e') => num(&mut out, t.day.into(), 2, ' '),
            Some('f') => num(&mut out, micros.into(), 6, '0'),
            Some('H') => num(&mut out, t.hour.into(), 2, '0'),
            Some('I') => num(&mut out, hour12.into(), 2, '0'),
            Some('j') => num(&mut out, t.yday.into(), 3, '0'),
            Some('m') => num(&mut out, t.month.into(), 2, '0'),
            Some('M') => num(&mut out, t.minute.into(), 2, '0'),
            Some('S') => num(&mut out, t.second.into(), 2, '0'),
            Some('p') => out.push_str(if t.hour < 12 { "AM" } else { "PM" }),
            Some('u') => num(
                &mut out,
                if t.wday == 0 { 7 } else { t.wday.into() },
                1,
                '0',
            ),
            Some('w') => num(&mut out, t.wday.into(), 1, '0'),
            Some('y') => num(&mut out, t.year.rem_euclid(100), 2, '0'),
            Some('Y') => {
                let _ = write!(out, "{}", t.year);
            }
            Some('s') => {
                let _ = write!(out, "{seconds}");
            }
            Some('D') | Some('x') => out.push_str(&format_utc("%m/%d/%y", seconds, micros)),
            Some('F') => out.push_str(&format_utc("%Y-%m-%d", seconds, micros)),
            Some('T') | Some('X') => out.push_str(&format_utc("%H:%M:%S", seconds, micros)),
            Some('R') => out.push_str(&format_utc("%H:%M", seconds, micros)),
            Some('c') => out.push_str(&format_utc("%a %b %e %H:%M:%S %Y", seconds, micros)),
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('%') => out.push('%'),
            Some('z') | Some('Z') => {}
            Some(other) => {
                out.push('%');
                if unpadded {
                    out.push('-');
                }
                out.push(other);
            }
            None => {
                out.push('%');
                if unpadded {
                    out.push('-');
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_around_leap_days_and_eras() {
        for (seconds, want) in [
            (0, "1970-01-01 Thursday 001"),
            (951_782_400, "2000-02-29 Tuesday 060"),
            (1_709_251_199, "2024-02-29 Thursday 060"),
            (1_735_689_599, "2024-12-31 Tuesday 366"),
            (-86_400, "1969-12-31 Wednesday 365"),
            (4_107_542_400, "2100-03-01 Monday 060"),
        ] {
            assert_eq!(format_utc("%Y-%m-%d %A %j", seconds, 0), want, "{seconds}");
        }
    }

    /// `generate.py` wrote Python's renderings of these conversions at fixed instants.
    #[test]
    fn conversions_match_python() {
        let cases: serde_json::Value = serde_json::from_str(include_str!(
            "../../../tests/fixtures/chat_templates/rendered/strftime.json"
        ))
        .unwrap();
        let cases = cases.as_array().unwrap();
        assert!(cases.len() >= 20);
        for case in cases {
            let format = case["format"].as_str().unwrap();
            let seconds = case["unix"].as_i64().unwrap();
            let micros = case["micros"].as_u64().unwrap() as u32;
            assert_eq!(
                format_utc(format, seconds, micros),
                case["expected"].as_str().unwrap(),
                "{format} at {seconds}"
            );
        }
    }

    #[test]
    fn padding_flags_and_unknown_conversions() {
        // 2024-07-04 09:05:03 UTC, a Thursday.
        let t = 1_720_083_903;
        assert_eq!(format_utc("%d %b %Y", t, 0), "04 Jul 2024");
        assert_eq!(format_utc("%-d %B %-I:%M %p", t, 0), "4 July 9:05 AM");
        assert_eq!(format_utc("%e|%f|%z%Z|%Q|%%|%", t, 42), " 4|000042||%Q|%|%");
        assert_eq!(format_utc("%c", t, 0), "Thu Jul  4 09:05:03 2024");
    }
}
