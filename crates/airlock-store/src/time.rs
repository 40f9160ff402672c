//! Points in time as the store records them: milliseconds since the Unix epoch, UTC.
//!
//! Every operation that depends on time takes `now` explicitly, so expiry, rate limits and
//! the budget day are decided by the caller's one clock and can be tested without sleeping.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Milliseconds per UTC day; the per-day budget resets at 00:00 UTC.
const MS_PER_DAY: i64 = 86_400_000;

/// Milliseconds since the Unix epoch (UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(i64);

impl Timestamp {
    /// The current wall-clock time.
    pub fn now() -> Timestamp {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        Timestamp(i64::try_from(ms).unwrap_or(i64::MAX))
    }

    /// A timestamp from Unix milliseconds.
    pub const fn from_unix_ms(ms: i64) -> Timestamp {
        Timestamp(ms)
    }

    /// Unix milliseconds.
    pub const fn as_unix_ms(self) -> i64 {
        self.0
    }

    /// Unix seconds (rounded down), as `airlock_core::gate::Approval::expires_at` uses.
    pub fn as_unix_secs(self) -> u64 {
        u64::try_from(self.0.div_euclid(1000)).unwrap_or(0)
    }

    /// `self + d`, saturating at the far future.
    pub fn plus(self, d: Duration) -> Timestamp {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Timestamp(self.0.saturating_add(ms))
    }

    /// `self - d`, saturating at the far past.
    pub fn minus(self, d: Duration) -> Timestamp {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Timestamp(self.0.saturating_sub(ms))
    }

    /// The UTC day this instant falls in, counted from 1970-01-01 (day 0). Keys the
    /// per-day budget.
    pub fn utc_day(self) -> i64 {
        self.0.div_euclid(MS_PER_DAY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_change_at_utc_midnight() {
        let midnight = Timestamp::from_unix_ms(20_000 * MS_PER_DAY);
        assert_eq!(midnight.utc_day(), 20_000);
        assert_eq!(midnight.minus(Duration::from_millis(1)).utc_day(), 19_999);
        assert_eq!(Timestamp::from_unix_ms(-1).utc_day(), -1);
    }

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(
            Timestamp::from_unix_ms(i64::MAX - 1).plus(Duration::from_secs(10)),
            Timestamp::from_unix_ms(i64::MAX)
        );
    }
}
