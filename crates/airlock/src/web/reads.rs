//! Pages read a minute (`[web] reads_per_minute`): a token bucket per login, and per
//! address for a browser not logged in, refilled continuously. Past it a request gets 429
//! with `Retry-After`, at once (never queued). The kill switch, the logout and a login
//! link's redemption are never counted ([`UNLIMITED`]), so a browser that spent its
//! allowance can still stop everything and leave, and a hostile page cannot keep the owner
//! from logging in. Decisions and new runs count, besides, against `[host]
//! requests_per_minute` as the command line's do.
//!
//! Written here rather than with a rate-limiting crate: it is the host's own bucket
//! (`host/rate.rs`) with a bound on how many keys it keeps, since the addresses of
//! browsers not logged in are chosen by whoever connects.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

/// The paths never counted: stopping and leaving must work whatever was read before; and
/// a login link's redemption, because on loopback every browser not logged in shares one
/// address, and any web page the owner visits can make its browser spend that address's
/// allowance (the link's token is 32 random bytes, single-use, and its refusals are
/// recorded at most `[host] requests_per_minute` a minute).
pub const UNLIMITED: [&str; 3] = ["/kill", "/logout", "/login"];

/// Keys kept at most; past it the full buckets (those that would allow a whole burst)
/// are dropped, which forgets nothing that limits anyone, and if that is not enough the
/// addresses' buckets.
const MAX_KEYS: usize = 4096;

/// Who a request counts against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Reader {
    Login(String),
    /// Before a login: the address (an IPv6 one by its /64, which one machine usually has
    /// whole).
    Address(IpAddr),
}

impl Reader {
    pub fn address(ip: IpAddr) -> Reader {
        Reader::Address(address_key(ip))
    }
}

/// What an address counts as, here and in the connection limits
/// ([`super::connections`]): an IPv6 address by its /64, which one machine usually has
/// whole, and an IPv4-mapped one as its IPv4 address.
pub fn address_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

pub struct Reads {
    per_minute: u32,
    buckets: Mutex<HashMap<Reader, (f64, Instant)>>,
}

impl Reads {
    pub fn new(per_minute: u32) -> Reads {
        Reads {
            per_minute,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    pub fn per_minute(&self) -> u32 {
        self.per_minute
    }

    /// Take one read for `who`: `Err(seconds to wait)` when it has none left.
    pub fn take(&self, who: Reader) -> Result<(), u64> {
        self.take_at(who, Instant::now())
    }

    fn take_at(&self, who: Reader, now: Instant) -> Result<(), u64> {
        let cap = f64::from(self.per_minute);
        let per_sec = cap / 60.0;
        let refill = |(tokens, last): (f64, Instant)| {
            (tokens + now.saturating_duration_since(last).as_secs_f64() * per_sec).min(cap)
        };
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() >= MAX_KEYS && !buckets.contains_key(&who) {
            buckets.retain(|_, b| refill(*b) < cap);
            if buckets.len() >= MAX_KEYS {
                // Thousands of addresses spending at once: they start again (a login's
                // bucket is kept; logins are few and made one at a time).
                buckets.retain(|k, _| matches!(k, Reader::Login(_)));
            }
        }
        let b = buckets.entry(who).or_insert((cap, now));
        let tokens = refill(*b);
        if tokens >= 1.0 {
            *b = (tokens - 1.0, now);
            Ok(())
        } else {
            *b = (tokens, now);
            Err(((1.0 - tokens) / per_sec).ceil().max(1.0) as u64)
        }
    }
}

/// The address a request came from, for [`Reader::Address`] (put in each request's
/// extensions as `ConnectInfo<Peer>` by [`super::connections`]).
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub IpAddr);

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_burst_then_one_per_interval_each_reader_apart_with_the_wait() {
        let r = Reads::new(6);
        let t0 = Instant::now();
        let me = || Reader::Login("l-1".into());
        for _ in 0..6 {
            assert_eq!(r.take_at(me(), t0), Ok(()));
        }
        assert_eq!(
            r.take_at(me(), t0),
            Err(10),
            "the burst is spent: one per 10 s"
        );
        let ip = Reader::address("127.0.0.1".parse().unwrap());
        assert_eq!(r.take_at(ip, t0), Ok(()), "an address has its own");
        assert_eq!(r.take_at(me(), t0 + Duration::from_secs(4)), Err(6));
        assert_eq!(r.take_at(me(), t0 + Duration::from_secs(10)), Ok(()));
    }

    #[test]
    fn an_ipv6_address_counts_by_its_64_and_a_mapped_v4_as_v4() {
        let a = Reader::address("2001:db8:1:2::1".parse().unwrap());
        let b = Reader::address("2001:db8:1:2:ffff::9".parse().unwrap());
        assert_eq!(a, b);
        let c = Reader::address("::ffff:10.0.0.1".parse().unwrap());
        assert_eq!(c, Reader::Address("10.0.0.1".parse().unwrap()));
    }

    #[test]
    fn the_keys_kept_are_bounded_without_forgetting_a_spent_bucket() {
        let r = Reads::new(1);
        let t0 = Instant::now();
        assert_eq!(r.take_at(Reader::Login("spent".into()), t0), Ok(()));
        for i in 0..(MAX_KEYS as u32 + 10) {
            let ip = IpAddr::V4(std::net::Ipv4Addr::from(i));
            let _ = r.take_at(Reader::Address(ip), t0);
        }
        assert!(r.buckets.lock().unwrap().len() <= MAX_KEYS + 1);
        assert!(r.take_at(Reader::Login("spent".into()), t0).is_err());
    }
}
