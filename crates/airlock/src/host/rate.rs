//! Requests per principal: a token bucket each, refilled continuously. A principal may
//! burst up to a minute's allowance, then gets one request per (60 / limit) seconds; past
//! that, requests are refused at once with the limit's name (HTTP 429), never queued, so
//! nothing hangs on it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

pub struct RateLimits {
    per_minute: u32,
    buckets: Mutex<HashMap<String, Bucket>>,
}

struct Bucket {
    tokens: f64,
    last: Instant,
}

impl RateLimits {
    pub fn new(per_minute: u32) -> RateLimits {
        RateLimits {
            per_minute,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    pub fn per_minute(&self) -> u32 {
        self.per_minute
    }

    /// Take one request's token for `principal`; `false` when it has none left.
    pub fn take(&self, principal: &str) -> bool {
        self.take_at(principal, Instant::now())
    }

    fn take_at(&self, principal: &str, now: Instant) -> bool {
        let cap = f64::from(self.per_minute);
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let b = buckets.entry(principal.to_string()).or_insert(Bucket {
            tokens: cap,
            last: now,
        });
        let refill = now.saturating_duration_since(b.last).as_secs_f64() * cap / 60.0;
        b.tokens = (b.tokens + refill).min(cap);
        b.last = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// The refusal's text.
    pub fn refusal(&self, principal: &str) -> (String, &'static str) {
        (
            format!(
                "too many requests from {principal}: more than {} a minute (host.requests_per_minute = {})",
                self.per_minute, self.per_minute
            ),
            "wait a moment and try again, or raise the limit in [host] of airlock.toml",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_burst_of_a_minutes_allowance_then_one_per_interval_each_principal_apart() {
        let r = RateLimits::new(6);
        let t0 = Instant::now();
        for _ in 0..6 {
            assert!(r.take_at("owner", t0));
        }
        assert!(!r.take_at("owner", t0), "the burst is spent");
        assert!(r.take_at("member:bob", t0), "another principal has its own");
        assert!(!r.take_at("owner", t0 + Duration::from_secs(5)));
        assert!(
            r.take_at("owner", t0 + Duration::from_secs(10)),
            "one per 10 s"
        );
        assert!(!r.take_at("owner", t0 + Duration::from_secs(11)));
    }
}
