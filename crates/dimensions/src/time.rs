//! Time values: Java-style formats (`yyyy`, `MM`, `dd`, `HH`, `mm`, `ss`, `SSS`, quoted
//! literals), ISO-8601, epoch milliseconds; and the ISO form `/ws/values` shows.

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Field(char, usize),
    Lit(String),
}

/// A compiled time format.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeFormat {
    toks: Vec<Tok>,
}

impl TimeFormat {
    pub fn compile(pattern: &str) -> Result<TimeFormat, String> {
        let mut toks = Vec::new();
        let chars: Vec<char> = pattern.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if c == '\'' {
                // quoted literal; '' is a quote
                let mut lit = String::new();
                i += 1;
                loop {
                    match chars.get(i) {
                        None => return Err(format!("format {pattern:?}: unterminated quote")),
                        Some('\'') if chars.get(i + 1) == Some(&'\'') => {
                            lit.push('\'');
                            i += 2;
                        }
                        Some('\'') => {
                            i += 1;
                            break;
                        }
                        Some(&ch) => {
                            lit.push(ch);
                            i += 1;
                        }
                    }
                }
                if lit.is_empty() {
                    lit.push('\'');
                }
                toks.push(Tok::Lit(lit));
            } else if c.is_ascii_alphabetic() {
                let mut n = 1;
                while chars.get(i + n) == Some(&c) {
                    n += 1;
                }
                if !matches!(c, 'y' | 'M' | 'd' | 'H' | 'm' | 's' | 'S') {
                    return Err(format!(
                        "format {pattern:?}: unsupported pattern letter {c:?}"
                    ));
                }
                toks.push(Tok::Field(c, n));
                i += n;
            } else {
                toks.push(Tok::Lit(c.to_string()));
                i += 1;
            }
        }
        Ok(TimeFormat { toks })
    }

    /// Parses `s` as UTC, returning epoch milliseconds.
    pub fn parse(&self, s: &str) -> Option<i64> {
        let s = s.trim();
        let b = s.as_bytes();
        let mut pos = 0;
        let (mut y, mut mo, mut d, mut h, mut mi, mut se, mut ms) =
            (1970i64, 1i64, 1i64, 0i64, 0i64, 0i64, 0i64);
        for (ti, tok) in self.toks.iter().enumerate() {
            match tok {
                Tok::Lit(l) => {
                    if !s[pos..].starts_with(l.as_str()) {
                        return None;
                    }
                    pos += l.len();
                }
                Tok::Field(c, n) => {
                    let adjacent = matches!(self.toks.get(ti + 1), Some(Tok::Field(..)));
                    let max = if adjacent { *n } else { 9 };
                    let start = pos;
                    while pos < b.len() && pos - start < max && b[pos].is_ascii_digit() {
                        pos += 1;
                    }
                    if pos == start {
                        return None;
                    }
                    let v: i64 = s[start..pos].parse().ok()?;
                    match c {
                        'y' => {
                            y = if *n == 2 && pos - start == 2 {
                                2000 + v
                            } else {
                                v
                            }
                        }
                        'M' => mo = v,
                        'd' => d = v,
                        'H' => h = v,
                        'm' => mi = v,
                        's' => se = v,
                        _ => {
                            // fraction digits as written: "5" of SSS is 5 ms
                            ms = v;
                        }
                    }
                }
            }
        }
        if pos != b.len() {
            return None;
        }
        to_epoch_ms(y, mo, d, h, mi, se, ms)
    }
}

fn to_epoch_ms(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64, ms: i64) -> Option<i64> {
    if !(1..=12).contains(&mo)
        || d < 1
        || d > days_in_month(y, mo)
        || h > 23
        || mi > 59
        || s > 60
        || ms > 999
    {
        return None;
    }
    let days = days_from_civil(y, mo, d);
    Some((((days * 24 + h) * 60 + mi) * 60 + s) * 1000 + ms)
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719468;
    let era = if z >= 0 { z } else { z - 146096 } / 146097;
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// `2012-03-01T10:00:00.000Z`
pub fn format_iso(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let rem = ms.rem_euclid(86_400_000);
    let (y, m, d) = civil_from_days(days);
    let (h, mi, s, f) = (
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000,
    );
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{f:03}Z")
}

/// ISO-8601 date or date-time with optional fraction and zone; no zone means UTC.
pub fn parse_iso(s: &str) -> Option<i64> {
    let s = s.trim();
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let part = s.get(from..from + len)?;
        if part.bytes().all(|c| c.is_ascii_digit()) {
            part.parse().ok()
        } else {
            None
        }
    };
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let (y, mo, d) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    if b.len() == 10 {
        return to_epoch_ms(y, mo, d, 0, 0, 0, 0);
    }
    if b[10] != b'T' && b[10] != b' ' {
        return None;
    }
    let h = num(11, 2)?;
    if b.get(13) != Some(&b':') {
        return None;
    }
    let mi = num(14, 2)?;
    let mut pos = 16;
    let mut se = 0;
    let mut ms = 0;
    if b.get(pos) == Some(&b':') {
        se = num(pos + 1, 2)?;
        pos += 3;
        if b.get(pos) == Some(&b'.') || b.get(pos) == Some(&b',') {
            pos += 1;
            let start = pos;
            while pos < b.len() && b[pos].is_ascii_digit() {
                pos += 1;
            }
            if pos == start {
                return None;
            }
            let frac = &s[start..pos.min(start + 3)];
            ms = frac.parse::<i64>().ok()? * 10i64.pow(3 - frac.len() as u32);
        }
    }
    let mut offset_min = 0;
    match b.get(pos) {
        None => {}
        Some(b'Z') | Some(b'z') if pos + 1 == b.len() => {}
        Some(&c) if c == b'+' || c == b'-' => {
            let sign = if c == b'-' { -1 } else { 1 };
            let oh = num(pos + 1, 2)?;
            let rest = &s[pos + 3..];
            let om = match rest.len() {
                0 => 0,
                2 => rest.parse::<i64>().ok()?,
                3 if rest.starts_with(':') => rest[1..].parse::<i64>().ok()?,
                _ => return None,
            };
            offset_min = sign * (oh * 60 + om);
        }
        _ => return None,
    }
    Some(to_epoch_ms(y, mo, d, h, mi, se, ms)? - offset_min * 60_000)
}

/// A time value from text: the format if given, then ISO-8601, then epoch ms.
pub fn parse_time(s: &str, format: Option<&TimeFormat>) -> Option<i64> {
    if let Some(f) = format {
        if let Some(v) = f.parse(s) {
            return Some(v);
        }
    }
    parse_iso(s).or_else(|| s.trim().parse::<i64>().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_forms() {
        assert_eq!(parse_iso("2012-03-01T10:00:00.000"), Some(1330596000000));
        assert_eq!(
            format_iso(parse_iso("2012-03-01").unwrap()),
            "2012-03-01T00:00:00.000Z"
        );
        assert_eq!(
            format_iso(parse_iso("2012-03-01T10:00:00+02:00").unwrap()),
            "2012-03-01T08:00:00.000Z"
        );
        assert_eq!(
            format_iso(parse_iso("2012-03-01T10:00:00.5Z").unwrap()),
            "2012-03-01T10:00:00.500Z"
        );
        assert_eq!(parse_iso("2012-13-01"), None);
        assert_eq!(format_iso(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn java_formats() {
        let f = TimeFormat::compile("yyyy").unwrap();
        assert_eq!(
            format_iso(f.parse("1999").unwrap()),
            "1999-01-01T00:00:00.000Z"
        );
        let f = TimeFormat::compile("dd/MM/yyyy HH:mm").unwrap();
        assert_eq!(
            format_iso(f.parse("01/03/2012 10:30").unwrap()),
            "2012-03-01T10:30:00.000Z"
        );
        let f = TimeFormat::compile("yyyy-MM-dd'T'HH:mm:ss").unwrap();
        assert_eq!(
            format_iso(f.parse("2012-03-01T10:30:05").unwrap()),
            "2012-03-01T10:30:05.000Z"
        );
        assert!(TimeFormat::compile("yyyy-MM'T").is_err());
        assert!(f.parse("garbage").is_none());
    }
}
