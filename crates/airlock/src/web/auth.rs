//! Logins of the web page: one-time login links and the sessions they open.
//!
//! `airlock web` asks the host (through its operator-only socket) for a link; whoever
//! holds the socket is the owner, so whoever holds a fresh link may log in once. A link's
//! token is single-use and lasts [`LINK_TTL`]. Redeeming it opens a session, named by a
//! random cookie and carrying its own CSRF token, that expires after `[web]
//! session_minutes`. Tokens and cookies are kept only as their SHA-256, so a dump of this
//! memory cannot be replayed, and a lookup by hash leaks nothing through its timing.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// How long a login link can be used.
pub const LINK_TTL: Duration = Duration::from_secs(60);
/// Links outstanding at once; asking for more drops the oldest.
const MAX_LINKS: usize = 16;
/// Logins at once; a new one past this ends the oldest.
const MAX_SESSIONS: usize = 32;

/// A logged-in web session, as a request sees it.
#[derive(Debug, Clone)]
pub struct WebLogin {
    /// A short public id for the audit log (not the cookie, not derived from it).
    pub id: String,
    /// The token every state change must carry.
    pub csrf: String,
    pub expires: Instant,
    /// The passkey whose assertion opened it (the page served remotely): revoking that
    /// passkey ends it.
    pub passkey: Option<String>,
}

impl WebLogin {
    /// Whether `token` is this session's CSRF token (compared in constant time).
    pub fn csrf_matches(&self, token: &str) -> bool {
        let (a, b) = (self.csrf.as_bytes(), token.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

/// Why a login link was refused. One answer for all, so the page does not tell a guess
/// from a used link; the audit record says which.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkRefused {
    /// Not a link this host made, or one used already.
    Unknown,
    Expired,
}

impl LinkRefused {
    pub fn as_str(self) -> &'static str {
        match self {
            LinkRefused::Unknown => "unknown or already used",
            LinkRefused::Expired => "expired",
        }
    }
}

type Key = [u8; 32];

#[derive(Default)]
struct State {
    links: HashMap<Key, Instant>,
    sessions: HashMap<Key, WebLogin>,
}

/// The page's logins.
pub struct Logins {
    state: Mutex<State>,
    session_ttl: Duration,
}

impl Logins {
    pub fn new(session_ttl: Duration) -> Logins {
        Logins {
            state: Mutex::new(State::default()),
            session_ttl,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic elsewhere while holding it leaves plain maps: still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new one-time login token.
    pub fn new_link(&self) -> anyhow::Result<String> {
        let token = random_hex()?;
        let now = Instant::now();
        let mut st = self.state();
        st.links.retain(|_, exp| *exp > now);
        while st.links.len() >= MAX_LINKS {
            let Some(oldest) = st.links.iter().min_by_key(|(_, e)| **e).map(|(k, _)| *k) else {
                break;
            };
            st.links.remove(&oldest);
        }
        st.links.insert(key(&token), now + LINK_TTL);
        Ok(token)
    }

    /// Use a login token (once, whatever the outcome): the new session's cookie value and
    /// the session.
    pub fn redeem(&self, token: &str) -> Result<anyhow::Result<(String, WebLogin)>, LinkRefused> {
        let now = Instant::now();
        let mut st = self.state();
        let Some(expires) = st.links.remove(&key(token)) else {
            return Err(LinkRefused::Unknown);
        };
        if expires <= now {
            return Err(LinkRefused::Expired);
        }
        Ok(self.open_session(&mut st, now, None))
    }

    /// Open a session without a link (the page served remotely, after the assertion of
    /// `passkey`): its cookie value and the session.
    pub fn open(&self, passkey: &str) -> anyhow::Result<(String, WebLogin)> {
        let mut st = self.state();
        self.open_session(&mut st, Instant::now(), Some(passkey.to_string()))
    }

    /// End every session that `passkey` opened; their public ids.
    pub fn end_opened_with(&self, passkey: &str) -> Vec<String> {
        let mut ended = Vec::new();
        self.state().sessions.retain(|_, s| {
            let keep = s.passkey.as_deref() != Some(passkey);
            if !keep {
                ended.push(s.id.clone());
            }
            keep
        });
        ended
    }

    fn open_session(
        &self,
        st: &mut State,
        now: Instant,
        passkey: Option<String>,
    ) -> anyhow::Result<(String, WebLogin)> {
        let cookie = random_hex()?;
        let login = WebLogin {
            id: format!("w-{}", &random_hex()?[..12]),
            csrf: random_hex()?,
            expires: now + self.session_ttl,
            passkey,
        };
        st.sessions.retain(|_, s| s.expires > now);
        while st.sessions.len() >= MAX_SESSIONS {
            let Some(oldest) = st
                .sessions
                .iter()
                .min_by_key(|(_, s)| s.expires)
                .map(|(k, _)| *k)
            else {
                break;
            };
            st.sessions.remove(&oldest);
        }
        st.sessions.insert(key(&cookie), login.clone());
        Ok((cookie, login))
    }

    /// The live session a cookie names.
    pub fn session(&self, cookie: &str) -> Option<WebLogin> {
        let now = Instant::now();
        let mut st = self.state();
        let k = key(cookie);
        match st.sessions.get(&k) {
            Some(s) if s.expires > now => Some(s.clone()),
            Some(_) => {
                st.sessions.remove(&k);
                None
            }
            None => None,
        }
    }

    /// End the session a cookie names; its public id, if it was live.
    pub fn logout(&self, cookie: &str) -> Option<String> {
        self.state().sessions.remove(&key(cookie)).map(|s| s.id)
    }

    /// How long a session lasts.
    pub fn session_ttl(&self) -> Duration {
        self.session_ttl
    }
}

fn key(token: &str) -> Key {
    Sha256::digest(token.as_bytes()).into()
}

/// 32 random bytes as hex, from the operating system's generator.
fn random_hex() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| anyhow::anyhow!("the system's random number generator failed: {e}"))?;
    Ok(hex::encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_opens_one_session_once() {
        let logins = Logins::new(Duration::from_secs(60));
        let token = logins.new_link().unwrap();
        let (cookie, login) = logins.redeem(&token).unwrap().unwrap();
        assert_eq!(logins.redeem(&token).unwrap_err(), LinkRefused::Unknown);
        let again = logins.session(&cookie).unwrap();
        assert_eq!(again.id, login.id);
        assert!(login.csrf_matches(&again.csrf));
        assert!(!login.csrf_matches("x"));
        assert!(logins.session("not-a-cookie").is_none());
        assert_eq!(logins.logout(&cookie), Some(login.id));
        assert!(logins.session(&cookie).is_none());
    }

    #[test]
    fn an_expired_session_is_gone() {
        let logins = Logins::new(Duration::from_millis(1));
        let token = logins.new_link().unwrap();
        let (cookie, _) = logins.redeem(&token).unwrap().unwrap();
        std::thread::sleep(Duration::from_millis(5));
        assert!(logins.session(&cookie).is_none());
    }
}
