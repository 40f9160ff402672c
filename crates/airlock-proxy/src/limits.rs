//! Size caps, the per-session egress byte budget and the per-host rate limit.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Limits of one proxy (one run).
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest request body forwarded (bytes).
    pub max_request_body: u64,
    /// Largest response body passed back; longer bodies are cut here. A pass-through
    /// tunnel, whose responses the proxy cannot tell apart, passes back at most this many
    /// bytes in all and then ends.
    pub max_response_body: u64,
    /// Total request bytes (line, headers, body) the session may send out.
    pub egress_budget: u64,
    /// Requests per second per host, sustained.
    pub host_rate_per_sec: f64,
    /// Requests per host allowed in a burst.
    pub host_burst: u32,
    /// How long an *ask* waits for approval before denying.
    pub ask_timeout: Duration,
    /// Connect and response-header timeout for upstreams.
    pub upstream_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_body: 16 * 1024 * 1024,
            max_response_body: 256 * 1024 * 1024,
            egress_budget: 1024 * 1024 * 1024,
            host_rate_per_sec: 20.0,
            host_burst: 100,
            ask_timeout: Duration::from_secs(300),
            upstream_timeout: Duration::from_secs(30),
        }
    }
}

/// Bytes sent out so far in this session.
#[derive(Debug, Default)]
pub struct EgressBudget {
    used: AtomicU64,
}

impl EgressBudget {
    /// Take `bytes` from `limit`; `Err(used)` leaves the budget unchanged.
    pub fn take(&self, bytes: u64, limit: u64) -> Result<(), u64> {
        self.used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |u| {
                u.checked_add(bytes).filter(|n| *n <= limit)
            })
            .map(|_| ())
    }

    /// Add bytes already sent (tunnels count after the fact).
    pub fn add(&self, bytes: u64) {
        self.used.fetch_add(bytes, Ordering::SeqCst);
    }

    pub fn used(&self) -> u64 {
        self.used.load(Ordering::SeqCst)
    }
}

/// A token bucket per host. Hand-written: twenty lines, where a rate-limit crate would
/// bring its own clock and key types for no gain here.
#[derive(Debug, Default)]
pub struct HostRateLimiter {
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl HostRateLimiter {
    /// Whether one more request to `host` fits.
    pub fn allow(&self, host: &str, per_sec: f64, burst: u32) -> bool {
        let now = Instant::now();
        let mut b = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let (tokens, last) = b.entry(host.to_string()).or_insert((burst as f64, now));
        *tokens = (*tokens + now.duration_since(*last).as_secs_f64() * per_sec).min(burst as f64);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_and_rate() {
        let b = EgressBudget::default();
        assert!(b.take(60, 100).is_ok());
        assert_eq!(b.take(50, 100), Err(60));
        assert!(b.take(40, 100).is_ok());
        let r = HostRateLimiter::default();
        assert!(r.allow("a", 0.0, 2) && r.allow("a", 0.0, 2));
        assert!(!r.allow("a", 0.0, 2));
        assert!(r.allow("b", 0.0, 2), "buckets are per host");
    }
}
