//! Timestamp formatting from caller-supplied unix milliseconds.
//!
//! `created_at` values are UTC `YYYY-MM-DDTHH:MM:SS.sssZ` (exactly three
//! fractional digits, literal `Z`), matching SQLite's
//! `strftime('%Y-%m-%dT%H:%M:%fZ','now')`. The calendar is the proleptic
//! Gregorian one.

const MS_PER_DAY: u64 = 86_400_000;

/// Civil date (year, month 1..=12, day 1..=31) of the given day count since
/// 1970-01-01.
///
/// Works in 400-year Gregorian cycles (146 097 days) anchored at 0000-03-01
/// so that the leap day is the last day of each computed "year".
pub fn civil_from_days(days_since_epoch: u64) -> (u64, u32, u32) {
    // 0000-03-01 is 719 468 days before 1970-01-01.
    let z = days_since_epoch + 719_468;
    let cycle = z / 146_097;
    let day_of_cycle = z % 146_097; // 0..=146096
                                    // Year within the cycle: subtract leap days accumulated before this day
                                    // (one every 4 years, minus one per century, plus the 400th).
    let year_of_cycle = (day_of_cycle - day_of_cycle / 1_460 + day_of_cycle / 36_524
        - day_of_cycle / 146_096)
        / 365; // 0..=399
    let day_of_year =
        day_of_cycle - (365 * year_of_cycle + year_of_cycle / 4 - year_of_cycle / 100); // 0..=365
                                                                                        // Months counted from March: lengths 31,30,31,30,31,31,30,31,30,31,31,29/28.
    let month_index = (5 * day_of_year + 2) / 153; // 0..=11
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    } as u32;
    let year = cycle * 400 + year_of_cycle + u64::from(month <= 2);
    (year, month, day)
}

struct Parts {
    year: u64,
    month: u32,
    day: u32,
    hour: u64,
    minute: u64,
    second: u64,
    millis: u64,
}

fn split(unix_ms: u64) -> Parts {
    let days = unix_ms / MS_PER_DAY;
    let rem = unix_ms % MS_PER_DAY;
    let (year, month, day) = civil_from_days(days);
    Parts {
        year,
        month,
        day,
        hour: rem / 3_600_000,
        minute: rem / 60_000 % 60,
        second: rem / 1_000 % 60,
        millis: rem % 1_000,
    }
}

/// `YYYY-MM-DDTHH:MM:SS.sssZ` (UTC) for `unix_ms` milliseconds since the
/// epoch. Years past 9999 print with more digits.
pub fn format_created_at(unix_ms: u64) -> String {
    let p = split(unix_ms);
    if p.year > 9999 {
        return format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
            p.year, p.month, p.day, p.hour, p.minute, p.second, p.millis
        );
    }
    // Every event carries one: digits are written directly rather than
    // through `format!`'s padding machinery (several times cheaper).
    fn digits(out: &mut String, v: u64, width: u32) {
        for i in (0..width).rev() {
            let d = (v / 10u64.pow(i)) % 10;
            out.push(char::from(b'0' + d as u8));
        }
    }
    let mut out = String::with_capacity(24);
    digits(&mut out, p.year, 4);
    out.push('-');
    digits(&mut out, u64::from(p.month), 2);
    out.push('-');
    digits(&mut out, u64::from(p.day), 2);
    out.push('T');
    digits(&mut out, p.hour, 2);
    out.push(':');
    digits(&mut out, p.minute, 2);
    out.push(':');
    digits(&mut out, p.second, 2);
    out.push('.');
    digits(&mut out, p.millis, 3);
    out.push('Z');
    out
}

/// `YYYY-MM-DD HH:MM:SS` (UTC), SQLite's `datetime('now')` shape.
pub fn format_sqlite_datetime(unix_ms: u64) -> String {
    let p = split(unix_ms);
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
        p.year, p.month, p.day, p.hour, p.minute, p.second
    )
}

/// Days since 1970-01-01 of a civil date (the inverse of
/// [`civil_from_days`]); `None` before the epoch or for an impossible date.
pub fn days_from_civil(year: u64, month: u32, day: u32) -> Option<u64> {
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    // Shift to a March-based year so the leap day ends the year.
    let (y, m) = match month {
        1 | 2 => (year.checked_sub(1)?, u64::from(month) + 9),
        _ => (year, u64::from(month) - 3),
    };
    let era = y / 400;
    let yoe = y % 400;
    let doy = (153 * m + 2) / 5 + u64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe).checked_sub(719_468)
}

fn days_in_month(year: u64, month: u32) -> u32 {
    let leap = (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400);
    match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// The unix milliseconds of a `created_at` text, when it has the exact
/// shape and names a real instant at or after the epoch: then
/// `format_created_at(parse_created_at(s)?) == s`.
pub fn parse_created_at(s: &str) -> Option<u64> {
    if !is_created_at(s) {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<u64>().ok();
    let days = days_from_civil(num(0..4)?, num(5..7)? as u32, num(8..10)? as u32)?;
    let (h, mi, sec, ms) = (num(11..13)?, num(14..16)?, num(17..19)?, num(20..23)?);
    if h > 23 || mi > 59 || sec > 59 {
        return None;
    }
    Some(days * MS_PER_DAY + ((h * 60 + mi) * 60 + sec) * 1_000 + ms)
}

/// Whether `s` has the exact `created_at` shape
/// `^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$` (C-234).
pub fn is_created_at(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 24
        && b.iter().enumerate().all(|(i, &c)| match i {
            4 | 7 => c == b'-',
            10 => c == b'T',
            13 | 16 => c == b':',
            19 => c == b'.',
            23 => c == b'Z',
            _ => c.is_ascii_digit(),
        })
}
