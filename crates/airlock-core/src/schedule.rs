//! When a scheduled task runs: a cron expression or one instant, in a named time zone.
//!
//! Pure time arithmetic, with every "now" passed in, so the scheduler, the approval a
//! person reads and the tests all compute the same instants. Cron expressions are parsed
//! and described in words by `croner`; time zones come from `jiff`'s bundled copy of the
//! IANA database, so a schedule fires at the same instants on every machine, across
//! daylight-saving changes (a wall-clock time that a change skips runs at the first
//! instant after the gap; one it repeats runs once).
//!
//! ```
//! use airlock_core::schedule::Schedule;
//! let s = Schedule::parse("0 8 * * *", "Europe/Berlin").unwrap();
//! // From 2026-03-27 12:00 UTC: the next 08:00 in Berlin is 07:00 UTC (CET), the one
//! // after that 06:00 UTC (CEST, after the change on the 29th).
//! let next = s.next_runs(1_774_612_800, 2);
//! assert_eq!(next, vec![1_774_681_200, 1_774_764_000]);
//! assert!(s.describe().contains("08:00"));
//! ```

use std::time::Duration;

use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;
use jiff::tz::TimeZone;
use jiff::{Timestamp, Zoned};

/// Why a schedule was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("unknown time zone {0:?}\nhelp: use an IANA name such as `Europe/Berlin`, `America/New_York` or `UTC`")]
    UnknownZone(String),
    #[error("{spec:?} is not a cron expression: {why}\nhelp: write five fields, `minute hour day-of-month month day-of-week`, for example `0 8 * * MON-FRI` (08:00 on weekdays)")]
    BadCron { spec: String, why: String },
    #[error("{spec:?} is not a time: {why}\nhelp: write an RFC 3339 instant (`2026-12-05T08:00:00Z`) or a local time in the task's time zone (`2026-12-05 08:00`)")]
    BadTime { spec: String, why: String },
    #[error(
        "{0:?} never fires\nhelp: check the day and month fields (a 31st of February never comes)"
    )]
    NeverFires(String),
}

/// A task's schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    kind: Kind,
    zone: TimeZone,
    zone_name: String,
}

#[derive(Debug, Clone)]
enum Kind {
    Cron { spec: String, cron: Box<Cron> },
    Once { at: Timestamp },
}

/// How far ahead [`Schedule::shortest_gap`] looks.
const GAP_SAMPLES: usize = 200;

impl Schedule {
    /// A cron expression (five fields) in `zone`.
    pub fn cron(spec: &str, zone: &str) -> Result<Schedule, ScheduleError> {
        let zone_tz = zone_named(zone)?;
        let spec = spec.trim();
        let cron = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build()
            .parse(spec)
            .map_err(|e| ScheduleError::BadCron {
                spec: spec.to_string(),
                why: e.to_string(),
            })?;
        let s = Schedule {
            kind: Kind::Cron {
                spec: spec.to_string(),
                cron: Box::new(cron),
            },
            zone: zone_tz,
            zone_name: zone.to_string(),
        };
        // A pattern that never matches is refused now, not found out at its first run.
        if s.next_after(0).is_none() && s.next_after(Timestamp::now().as_second()).is_none() {
            return Err(ScheduleError::NeverFires(spec.to_string()));
        }
        Ok(s)
    }

    /// One instant: RFC 3339 with an offset, or a local date and time in `zone`
    /// (`2026-12-05 08:00`, `2026-12-05T08:00:00`).
    pub fn once(spec: &str, zone: &str) -> Result<Schedule, ScheduleError> {
        let zone_tz = zone_named(zone)?;
        let spec = spec.trim();
        let at = match spec.parse::<Timestamp>() {
            Ok(t) => t,
            Err(_) => {
                let civil: jiff::civil::DateTime =
                    spec.replacen(' ', "T", 1)
                        .parse()
                        .map_err(|e: jiff::Error| ScheduleError::BadTime {
                            spec: spec.to_string(),
                            why: e.to_string(),
                        })?;
                zone_tz
                    .to_ambiguous_zoned(civil)
                    .compatible()
                    .map_err(|e| ScheduleError::BadTime {
                        spec: spec.to_string(),
                        why: e.to_string(),
                    })?
                    .timestamp()
            }
        };
        Ok(Schedule {
            kind: Kind::Once { at },
            zone: zone_tz,
            zone_name: zone.to_string(),
        })
    }

    /// A time (a spec that starts with a four-digit year) or a cron expression.
    pub fn parse(spec: &str, zone: &str) -> Result<Schedule, ScheduleError> {
        let t = spec.trim();
        let looks_like_date = t.len() >= 5
            && t.as_bytes()[..4].iter().all(u8::is_ascii_digit)
            && t.as_bytes()[4] == b'-';
        if looks_like_date {
            Schedule::once(t, zone)
        } else {
            Schedule::cron(t, zone)
        }
    }

    /// The spec as written: the cron expression, or the instant in RFC 3339.
    pub fn spec(&self) -> String {
        match &self.kind {
            Kind::Cron { spec, .. } => spec.clone(),
            Kind::Once { at } => at.to_string(),
        }
    }

    /// The time zone's name.
    pub fn zone(&self) -> &str {
        &self.zone_name
    }

    /// Whether it fires more than once.
    pub fn is_recurring(&self) -> bool {
        matches!(self.kind, Kind::Cron { .. })
    }

    /// The first instant (unix seconds) strictly after `after`, if any.
    pub fn next_after(&self, after: i64) -> Option<i64> {
        match &self.kind {
            Kind::Once { at } => (at.as_second() > after).then(|| at.as_second()),
            Kind::Cron { cron, .. } => {
                let t = Timestamp::from_second(after).ok()?;
                let start = t.to_zoned(self.zone.clone());
                cron.find_next_occurrence(&start, false)
                    .ok()
                    .map(|z: Zoned| z.timestamp().as_second())
            }
        }
    }

    /// The next `n` instants after `after`.
    pub fn next_runs(&self, after: i64, n: usize) -> Vec<i64> {
        let mut out = Vec::with_capacity(n);
        let mut t = after;
        while out.len() < n {
            match self.next_after(t) {
                Some(next) => {
                    out.push(next);
                    t = next;
                }
                None => break,
            }
        }
        out
    }

    /// The shortest time between two runs among the next few hundred after `after`:
    /// how often a recurring task can fire. `None` for a task that runs once.
    pub fn shortest_gap(&self, after: i64) -> Option<Duration> {
        let runs = self.next_runs(after, GAP_SAMPLES);
        runs.windows(2)
            .map(|w| Duration::from_secs(w[1].saturating_sub(w[0]).max(0) as u64))
            .min()
    }

    /// The schedule in words: `At 08:00, on Monday through Friday (Europe/Berlin)`, or
    /// `once, at Sat 2026-12-05 08:00 CET (+01:00)`.
    pub fn describe(&self) -> String {
        match &self.kind {
            Kind::Cron { cron, .. } => {
                format!(
                    "{} ({})",
                    cron.describe().trim_end_matches('.'),
                    self.zone_name
                )
            }
            Kind::Once { at } => format!("once, at {}", self.local(at.as_second())),
        }
    }

    /// `instant` as a date and time in the schedule's zone: `Sat 2026-12-05 08:00 CET (+01:00)`.
    pub fn local(&self, instant: i64) -> String {
        local_in(&self.zone, instant)
    }

    /// The first instant of the calendar day that holds `instant`, in the schedule's zone
    /// (a day of 23 or 25 hours across a daylight-saving change); `instant` itself when
    /// it is out of range.
    pub fn day_start(&self, instant: i64) -> i64 {
        Timestamp::from_second(instant)
            .ok()
            .and_then(|t| t.to_zoned(self.zone.clone()).start_of_day().ok())
            .map_or(instant, |d| d.timestamp().as_second())
    }
}

fn zone_named(name: &str) -> Result<TimeZone, ScheduleError> {
    if name.is_empty() || name.len() > 64 {
        return Err(ScheduleError::UnknownZone(name.chars().take(64).collect()));
    }
    jiff::tz::db()
        .get(name)
        .map_err(|_| ScheduleError::UnknownZone(name.to_string()))
}

fn local_in(zone: &TimeZone, instant: i64) -> String {
    match Timestamp::from_second(instant) {
        Ok(t) => t
            .to_zoned(zone.clone())
            .strftime("%a %Y-%m-%d %H:%M %Z (%:z)")
            .to_string(),
        Err(_) => format!("@{instant}"),
    }
}

/// How far `to` is from `from`, in words: `in 2 hours 5 minutes`, `3 days ago`, `now`.
pub fn in_words(from: i64, to: i64) -> String {
    let delta = to - from;
    let secs = delta.unsigned_abs();
    let parts: Vec<String> = if secs < 60 {
        return if secs == 0 {
            "now".into()
        } else if delta > 0 {
            format!("in {secs} s")
        } else {
            format!("{secs} s ago")
        };
    } else {
        let (d, h, m) = (secs / 86_400, (secs % 86_400) / 3600, (secs % 3600) / 60);
        let unit = |n: u64, one: &str| match n {
            0 => None,
            1 => Some(format!("1 {one}")),
            n => Some(format!("{n} {one}s")),
        };
        // Two units are enough to read: days and hours, or hours and minutes.
        let all = [unit(d, "day"), unit(h, "hour"), unit(m, "minute")];
        all.into_iter().flatten().take(2).collect()
    };
    let text = parts.join(" ");
    if delta > 0 {
        format!("in {text}")
    } else {
        format!("{text} ago")
    }
}

/// Whether `name` is a time zone this build knows.
pub fn is_known_zone(name: &str) -> bool {
    zone_named(name).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> i64 {
        text.parse::<Timestamp>().unwrap().as_second()
    }

    fn utc(instants: &[i64]) -> Vec<String> {
        instants
            .iter()
            .map(|i| Timestamp::from_second(*i).unwrap().to_string())
            .collect()
    }

    #[test]
    fn eight_every_morning_in_berlin_moves_an_hour_in_utc_across_both_changes() {
        let s = Schedule::cron("0 8 * * *", "Europe/Berlin").unwrap();
        // Spring: clocks go from 02:00 CET to 03:00 CEST on 2026-03-29.
        let spring = s.next_runs(at("2026-03-27T12:00:00Z"), 4);
        assert_eq!(
            utc(&spring),
            [
                "2026-03-28T07:00:00Z",
                "2026-03-29T06:00:00Z",
                "2026-03-30T06:00:00Z",
                "2026-03-31T06:00:00Z"
            ]
        );
        // Autumn: back from 03:00 CEST to 02:00 CET on 2026-10-25.
        let autumn = s.next_runs(at("2026-10-24T00:00:00Z"), 3);
        assert_eq!(
            utc(&autumn),
            [
                "2026-10-24T06:00:00Z",
                "2026-10-25T07:00:00Z",
                "2026-10-26T07:00:00Z"
            ]
        );
        for t in spring.iter().chain(&autumn) {
            assert!(s.local(*t).contains(" 08:00 "), "{}", s.local(*t));
        }
    }

    #[test]
    fn a_time_the_spring_change_skips_runs_once_after_the_gap_and_a_repeated_one_runs_once() {
        // 02:30 does not exist in Berlin on 2026-03-29 and exists twice on 2026-10-25.
        let s = Schedule::cron("30 2 * * *", "Europe/Berlin").unwrap();
        let spring = s.next_runs(at("2026-03-28T12:00:00Z"), 2);
        assert_eq!(spring.len(), 2);
        // The day of the change still gets exactly one run, after the gap, before the
        // next day's.
        assert!(
            spring[0] >= at("2026-03-29T01:00:00Z") && spring[0] < at("2026-03-29T02:00:00Z"),
            "{:?}",
            utc(&spring)
        );
        assert_eq!(utc(&spring[1..]), ["2026-03-30T00:30:00Z"]);
        let autumn = s.next_runs(at("2026-10-24T12:00:00Z"), 2);
        // 02:30 CEST is 00:30 UTC; the repeated 02:30 CET (01:30 UTC) does not run again.
        assert_eq!(
            utc(&autumn),
            ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]
        );
    }

    #[test]
    fn an_hourly_task_in_new_york_keeps_one_hour_between_runs_across_the_change() {
        let s = Schedule::cron("0 * * * *", "America/New_York").unwrap();
        let runs = s.next_runs(at("2026-11-01T04:30:00Z"), 4);
        for w in runs.windows(2) {
            assert_eq!(w[1] - w[0], 3600, "{:?}", utc(&runs));
        }
        assert_eq!(
            s.shortest_gap(at("2026-11-01T00:00:00Z")),
            Some(Duration::from_secs(3600))
        );
    }

    #[test]
    fn a_once_schedule_reads_rfc3339_or_a_local_time_and_fires_once() {
        let s = Schedule::parse("2026-12-05 08:00", "Europe/Paris").unwrap();
        assert!(!s.is_recurring());
        assert_eq!(s.next_after(0), Some(at("2026-12-05T07:00:00Z")));
        assert_eq!(s.next_after(at("2026-12-05T07:00:00Z")), None);
        assert!(
            s.describe()
                .starts_with("once, at Sat 2026-12-05 08:00 CET"),
            "{}",
            s.describe()
        );
        let r = Schedule::parse("2026-12-05T08:00:00Z", "UTC").unwrap();
        assert_eq!(r.spec(), "2026-12-05T08:00:00Z");
        assert_eq!(r.shortest_gap(0), None);
    }

    #[test]
    fn a_day_starts_at_local_midnight_and_the_spring_change_makes_it_23_hours() {
        let s = Schedule::parse("0 8 * * *", "Europe/Berlin").unwrap();
        // 2026-03-29 12:00 Berlin (summer time, +02:00) is on the day that began at
        // midnight +01:00, 23 hours before the next one.
        let noon = at("2026-03-29T10:00:00Z");
        assert_eq!(s.day_start(noon), at("2026-03-28T23:00:00Z"));
        let next_day = s.day_start(noon + 86_400);
        assert_eq!(next_day - s.day_start(noon), 23 * 3600);
        assert_eq!(s.day_start(s.day_start(noon)), s.day_start(noon));
    }

    #[test]
    fn bad_input_is_refused_with_what_to_write() {
        let e = Schedule::parse("0 8 * *", "UTC").unwrap_err();
        assert!(matches!(e, ScheduleError::BadCron { .. }), "{e}");
        assert!(e.to_string().contains("help: write five fields"));
        let e = Schedule::parse("0 8 * * *", "Mars/Olympus").unwrap_err();
        assert_eq!(e, ScheduleError::UnknownZone("Mars/Olympus".into()));
        let e = Schedule::parse("2026-13-05 08:00", "UTC").unwrap_err();
        assert!(matches!(e, ScheduleError::BadTime { .. }), "{e}");
        // Seconds are not a field: a six-field expression is refused.
        assert!(Schedule::parse("0 0 8 * * *", "UTC").is_err());
        assert!(matches!(
            Schedule::parse("0 0 31 2 *", "UTC").unwrap_err(),
            ScheduleError::NeverFires(_) | ScheduleError::BadCron { .. }
        ));
    }

    #[test]
    fn the_description_and_distances_are_in_words() {
        let s = Schedule::parse("0 8 * * MON-FRI", "Europe/Berlin").unwrap();
        let d = s.describe();
        assert!(
            d.contains("08:00") && d.contains("Monday") && d.ends_with("(Europe/Berlin)"),
            "{d}"
        );
        assert_eq!(in_words(0, 7_500), "in 2 hours 5 minutes");
        assert_eq!(in_words(0, 3 * 86_400 + 60), "in 3 days 1 minute");
        assert_eq!(in_words(100, 40), "1 minute ago");
        assert_eq!(in_words(5, 5), "now");
    }
}
