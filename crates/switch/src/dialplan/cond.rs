//! The conditions of a `goto`: a comparison of expanded values (`if="A = B"`) and a time of
//! the week (`time="mon-fri 09:00-17:30"`). Both are parsed when the configuration loads; the
//! comparison's sides are expanded when the step runs, the time is the engine's wall clock
//! in `dialplan.timezone`.

use regex::Regex;

/// `if="EXPR"`: `A = B`, `A != B`, `A =~ REGEX`, or one value, true when neither empty nor "0".
#[derive(Clone, Debug)]
pub enum Expr {
    Truthy(String),
    Equal(String, String),
    NotEqual(String, String),
    /// The regex is literal (compiled at load); only the value is expanded.
    Matches(String, Pattern),
}

/// A compiled regex, compared by its text (so steps stay comparable in tests).
#[derive(Clone, Debug)]
pub struct Pattern(pub Regex);

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

impl PartialEq for Expr {
    fn eq(&self, other: &Self) -> bool {
        use Expr::*;
        match (self, other) {
            (Truthy(a), Truthy(b)) => a == b,
            (Equal(a, b), Equal(c, d)) | (NotEqual(a, b), NotEqual(c, d)) => a == c && b == d,
            (Matches(a, p), Matches(b, q)) => a == b && p == q,
            _ => false,
        }
    }
}

impl Expr {
    /// Parses the text of `if=`; the error says why, for the step's position.
    pub fn parse(text: &str) -> Result<Expr, String> {
        let text = text.trim();
        // The operator stands between spaces, so values may hold `=` (`a=b = x` compares "a=b").
        for (op, len) in [(" =~ ", 4), (" != ", 4), (" = ", 3)] {
            let Some(at) = text.find(op) else { continue };
            let (a, b) = (
                text[..at].trim().to_owned(),
                text[at + len..].trim().to_owned(),
            );
            return Ok(match op {
                " =~ " => {
                    if b.contains("${") {
                        return Err(format!(
                            "the regex after =~ must be literal, not {b:?} — compare a variable with = instead"
                        ));
                    }
                    let re = Regex::new(&b).map_err(|e| {
                        let reason = e.to_string();
                        let reason = reason.lines().last().unwrap_or_default();
                        let reason = reason.trim_start_matches("error: ");
                        format!("invalid regex {b:?}: {reason}")
                    })?;
                    Expr::Matches(a, Pattern(re))
                }
                " != " => Expr::NotEqual(a, b),
                _ => Expr::Equal(a, b),
            });
        }
        if text.is_empty() {
            return Err(EXPR_USAGE.into());
        }
        if text.contains(char::is_whitespace) || text.contains('=') {
            return Err(format!("cannot read {text:?} — {EXPR_USAGE}"));
        }
        Ok(Expr::Truthy(text.to_owned()))
    }

    /// This expression with its values expanded by `expand`.
    pub fn expand(&self, expand: impl Fn(&str) -> String) -> Expr {
        match self {
            Expr::Truthy(a) => Expr::Truthy(expand(a)),
            Expr::Equal(a, b) => Expr::Equal(expand(a), expand(b)),
            Expr::NotEqual(a, b) => Expr::NotEqual(expand(a), expand(b)),
            Expr::Matches(a, re) => Expr::Matches(expand(a), re.clone()),
        }
    }

    /// Whether it holds (on expanded values).
    pub fn holds(&self) -> bool {
        match self {
            Expr::Truthy(a) => !a.is_empty() && a != "0",
            Expr::Equal(a, b) => a == b,
            Expr::NotEqual(a, b) => a != b,
            Expr::Matches(a, re) => re.0.is_match(a),
        }
    }
}

const EXPR_USAGE: &str =
    "expected A = B, A != B, A =~ REGEX or one value, e.g. if=\"${DIALSTATUS} = BUSY\"";

const DAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];

const TIME_USAGE: &str =
    "expected days and/or HH:MM-HH:MM, e.g. \"mon-fri 09:00-17:30\", \"sat,sun\", \"* 00:00-08:00\"";

/// `time="SPEC"`: days of the week and a span of the day, both on the local date of the
/// engine's wall clock. A span that ends before it starts runs past midnight (`22:00-06:00`),
/// each part counted on its own day.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimeSpec {
    /// Bit 0 is Monday.
    days: u8,
    /// Minutes of the day, start included, end excluded; None: the whole day.
    span: Option<(u16, u16)>,
}

impl TimeSpec {
    pub fn parse(text: &str) -> Result<TimeSpec, String> {
        let mut parts = text.split_whitespace();
        let (mut days, mut span) = (None, None);
        for part in parts.by_ref().take(2) {
            if span.is_none() && part.contains(':') {
                span = Some(parse_span(part)?);
            } else if days.is_none() && span.is_none() {
                days = Some(parse_days(part)?);
            } else {
                return Err(format!("unexpected {part:?} — {TIME_USAGE}"));
            }
        }
        if let Some(extra) = parts.next() {
            return Err(format!("unexpected {extra:?} — {TIME_USAGE}"));
        }
        if days.is_none() && span.is_none() {
            return Err(TIME_USAGE.into());
        }
        Ok(TimeSpec {
            days: days.unwrap_or(0x7f),
            span,
        })
    }

    /// Whether local time `weekday` (0 = Monday) at `minute` of the day is inside.
    pub fn holds(&self, weekday: u8, minute: u16) -> bool {
        if self.days & (1 << weekday) == 0 {
            return false;
        }
        match self.span {
            None => true,
            Some((start, end)) if start < end => (start..end).contains(&minute),
            Some((start, end)) => minute >= start || minute < end,
        }
    }

    /// Whether it holds at wall time `at` in zone `tz`.
    pub fn holds_at(&self, at: std::time::SystemTime, tz: &jiff::tz::TimeZone) -> bool {
        let Ok(ts) = jiff::Timestamp::try_from(at) else {
            return false;
        };
        let local = tz.to_datetime(ts);
        let minute = local.hour() as u16 * 60 + local.minute() as u16;
        self.holds(local.weekday().to_monday_zero_offset() as u8, minute)
    }
}

fn parse_days(text: &str) -> Result<u8, String> {
    if text == "*" {
        return Ok(0x7f);
    }
    let day = |name: &str| {
        DAYS.iter()
            .position(|d| name.eq_ignore_ascii_case(d))
            .ok_or_else(|| format!("unknown day {name:?} — expected * or {}", DAYS.join(", ")))
    };
    let mut mask = 0u8;
    for item in text.split(',') {
        let (from, to) = match item.split_once('-') {
            Some((a, b)) => (day(a)?, day(b)?),
            None => (day(item)?, day(item)?),
        };
        // A range may wrap past Sunday: fri-mon.
        let mut d = from;
        loop {
            mask |= 1 << d;
            if d == to {
                break;
            }
            d = (d + 1) % 7;
        }
    }
    Ok(mask)
}

fn parse_span(text: &str) -> Result<(u16, u16), String> {
    let bad = || format!("bad time span {text:?} — expected HH:MM-HH:MM, e.g. 09:00-17:30");
    let (a, b) = text.split_once('-').ok_or_else(bad)?;
    let minute = |t: &str, most: u16| {
        let (h, m) = t.split_once(':')?;
        let (h, m): (u16, u16) = (h.parse().ok()?, m.parse().ok()?);
        (m < 60 && h * 60 + m <= most && m.to_string().len() <= 2).then_some(h * 60 + m)
    };
    let (start, end) = (
        minute(a, 23 * 60 + 59).ok_or_else(bad)?,
        minute(b, 24 * 60).ok_or_else(bad)?,
    );
    if start == end {
        return Err(format!(
            "time span {text:?} is empty — leave the span out for the whole day"
        ));
    }
    Ok((start, end))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    #[test]
    fn comparisons_and_single_values() {
        let e = |t: &str| Expr::parse(t).unwrap();
        assert!(e("BUSY = BUSY").holds());
        assert!(!e("BUSY = NOANSWER").holds());
        assert!(e("a != b").holds());
        assert!(e("4711 =~ ^47").holds());
        assert!(!e("1234 =~ ^47").holds());
        assert!(e("x=y = x=y").holds());
        assert!(e("1").holds());
        assert!(!e("0").holds());
        // A variable that expanded to nothing: an empty side.
        assert!(Expr::Equal(String::new(), String::new()).holds());
        assert!(!Expr::Truthy(String::new()).holds());
        let ex = e("${DIALSTATUS} = NOANSWER");
        let expanded = ex.expand(|t| t.replace("${DIALSTATUS}", "NOANSWER"));
        assert!(expanded.holds());
        assert!(Expr::parse("a =~ (").unwrap_err().contains("invalid regex"));
        assert!(Expr::parse("a =~ ${X}").unwrap_err().contains("literal"));
        assert!(Expr::parse("a b").unwrap_err().contains("expected A = B"));
        assert!(Expr::parse("").is_err());
    }

    #[test]
    fn time_specs_parse_and_hold() {
        let t = |s: &str| TimeSpec::parse(s).unwrap();
        let office = t("mon-fri 09:00-17:30");
        assert!(office.holds(0, 9 * 60));
        assert!(office.holds(4, 17 * 60 + 29));
        assert!(!office.holds(4, 17 * 60 + 30));
        assert!(!office.holds(5, 12 * 60));
        let weekend = t("sat,sun");
        assert!(weekend.holds(6, 0) && weekend.holds(5, 23 * 60 + 59) && !weekend.holds(0, 600));
        let night = t("* 00:00-08:00");
        assert!(night.holds(3, 7 * 60 + 59) && !night.holds(3, 8 * 60));
        let late = t("22:00-06:00");
        assert!(late.holds(2, 23 * 60) && late.holds(2, 60) && !late.holds(2, 12 * 60));
        assert!(t("fri-mon").holds(6, 0) && t("fri-mon").holds(0, 0));
        assert!(!t("fri-mon").holds(2, 0));
        assert!(t("mon 09:00-24:00").holds(0, 23 * 60 + 59));
        for bad in [
            "",
            "mon-fry",
            "mon 9-17",
            "mon 25:00-26:00",
            "mon 09:00-09:00",
            "09:00-10:00 mon",
            "mon tue",
            "mon 09:00-10:00 x",
        ] {
            assert!(TimeSpec::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn wall_time_in_a_zone() {
        // 2026-11-23 was a Monday; 08:30 UTC is 09:30 in Berlin (CET).
        let at = UNIX_EPOCH + Duration::from_secs(1_795_422_600);
        let spec = TimeSpec::parse("mon 09:00-10:00").unwrap();
        let utc = jiff::tz::TimeZone::UTC;
        assert!(!spec.holds_at(at, &utc));
        let berlin = jiff::tz::TimeZone::get("Europe/Berlin").unwrap();
        assert!(spec.holds_at(at, &berlin));
        assert!(!spec.holds_at(SystemTime::UNIX_EPOCH, &berlin));
    }
}
