//! Logins of the web page: one-time login links and the sessions they open.
//!
//! `airlock web` asks the host (through its operator-only socket) for a link; whoever
//! holds the socket is the owner, so whoever holds a fresh link may log in once. A link's
//! token is single-use and lasts [`LINK_TTL`]. Redeeming it opens a session, named by a
//! random cookie and carrying its own CSRF token, that expires after `[web]
//! session_minutes`. Tokens and cookies are kept only as their SHA-256, so a dump of this
//! memory cannot be replayed, and a lookup by hash leaks nothing through its timing.
//!
//! The logins (never a link) are also kept in the state dir, `web/logins.json` (mode
//! 0600, written atomically after every change), as the SHA-256 of the cookie, the public
//! id, the expiry and the passkey that opened it, so they survive a restart of the host;
//! expired ones are dropped when it is read. A login's CSRF token is derived from its
//! cookie ([`csrf_of`]) rather than kept, so the file holds nothing a request could use.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The logins file's name under the state dir.
pub const FILE: &str = "web/logins.json";

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
    /// Where the logins are kept across restarts; `None` keeps them in memory only.
    file: Option<PathBuf>,
}

/// A login as the file keeps it: the SHA-256 of its cookie, never the cookie.
#[derive(Serialize, Deserialize)]
struct Kept {
    cookie_sha256: String,
    id: String,
    /// Seconds since the epoch.
    expires_at: u64,
    #[serde(default)]
    passkey: Option<String>,
}

#[derive(Serialize, Deserialize, Default)]
struct KeptFile {
    logins: Vec<Kept>,
}

impl Logins {
    /// Logins kept in memory only.
    pub fn new(session_ttl: Duration) -> Logins {
        Logins {
            state: Mutex::new(State::default()),
            session_ttl,
            file: None,
        }
    }

    /// Logins kept in `state_dir` too: those still live in its file are open again. A
    /// file that cannot be read opens none (everyone logs in again), said in the log.
    pub fn kept(session_ttl: Duration, state_dir: &Path) -> Logins {
        let file = state_dir.join(FILE);
        let mut state = State::default();
        match read_kept(&file) {
            Ok(kept) => {
                let (now, now_unix) = (Instant::now(), crate::runtime::now_unix());
                for k in kept.logins {
                    let Some(left) = k.expires_at.checked_sub(now_unix).filter(|s| *s > 0) else {
                        continue;
                    };
                    let Some(key) = hex::decode(&k.cookie_sha256)
                        .ok()
                        .and_then(|b| Key::try_from(b).ok())
                    else {
                        continue;
                    };
                    state.sessions.insert(
                        key,
                        WebLogin {
                            id: k.id,
                            // Derived from the cookie at each request (`session`).
                            csrf: String::new(),
                            expires: now + Duration::from_secs(left),
                            passkey: k.passkey,
                        },
                    );
                }
            }
            Err(e) => {
                tracing::warn!(file = %file.display(), error = %e, "web: the kept logins cannot be read; every login must be made again");
            }
        }
        let logins = Logins {
            state: Mutex::new(state),
            session_ttl,
            file: Some(file),
        };
        // The expired ones are dropped from the file too.
        logins.keep(&logins.state());
        logins
    }

    /// Write the live logins to the file, if they are kept; a failure is said in the log
    /// (the logins still work until the host stops).
    fn keep(&self, st: &State) {
        let Some(file) = &self.file else {
            return;
        };
        let (now, now_unix) = (Instant::now(), crate::runtime::now_unix());
        let kept = KeptFile {
            logins: st
                .sessions
                .iter()
                .filter(|(_, s)| s.expires > now)
                .map(|(k, s)| Kept {
                    cookie_sha256: hex::encode(k),
                    id: s.id.clone(),
                    expires_at: now_unix + s.expires.duration_since(now).as_secs(),
                    passkey: s.passkey.clone(),
                })
                .collect(),
        };
        if let Err(e) = write_kept(file, &kept) {
            tracing::warn!(file = %file.display(), error = %e, "web: cannot keep the logins; they end when the host stops");
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
        let mut st = self.state();
        st.sessions.retain(|_, s| {
            let keep = s.passkey.as_deref() != Some(passkey);
            if !keep {
                ended.push(s.id.clone());
            }
            keep
        });
        self.keep(&st);
        ended
    }

    /// End every login; their public ids.
    pub fn end_all(&self) -> Vec<String> {
        let mut st = self.state();
        let ended = st.sessions.drain().map(|(_, s)| s.id).collect();
        self.keep(&st);
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
            csrf: csrf_of(&cookie),
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
        self.keep(st);
        Ok((cookie, login))
    }

    /// The live session a cookie names.
    pub fn session(&self, cookie: &str) -> Option<WebLogin> {
        let now = Instant::now();
        let mut st = self.state();
        let k = key(cookie);
        match st.sessions.get(&k) {
            Some(s) if s.expires > now => Some(WebLogin {
                csrf: csrf_of(cookie),
                ..s.clone()
            }),
            Some(_) => {
                st.sessions.remove(&k);
                self.keep(&st);
                None
            }
            None => None,
        }
    }

    /// End the session a cookie names; its public id, if it was live.
    pub fn logout(&self, cookie: &str) -> Option<String> {
        let mut st = self.state();
        let gone = st.sessions.remove(&key(cookie)).map(|s| s.id);
        if gone.is_some() {
            self.keep(&st);
        }
        gone
    }

    /// How long a session lasts.
    pub fn session_ttl(&self) -> Duration {
        self.session_ttl
    }
}

fn key(token: &str) -> Key {
    Sha256::digest(token.as_bytes()).into()
}

/// A login's CSRF token: derived from its cookie under a tag of its own, so it is not the
/// hash the logins file keeps, and the cookie cannot be worked back from it. A page of
/// another site can read neither.
fn csrf_of(cookie: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"airlock-web-csrf-v1\0");
    h.update(cookie.as_bytes());
    hex::encode(h.finalize())
}

fn read_kept(file: &Path) -> anyhow::Result<KeptFile> {
    match std::fs::read(file) {
        Ok(bytes) => Ok(serde_json::from_slice(&bytes)?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(KeptFile::default()),
        Err(e) => Err(e.into()),
    }
}

/// Write the logins file atomically, mode 0600.
fn write_kept(file: &Path, kept: &KeptFile) -> std::io::Result<()> {
    let bytes = serde_json::to_vec_pretty(kept).map_err(std::io::Error::other)?;
    if let Some(dir) = file.parent() {
        crate::home::create_private_dir(dir).map_err(std::io::Error::other)?;
    }
    airlock_proxy::write_atomic(file, &bytes, 0o600)
}

/// End every login kept in `state_dir` that `passkey` opened (for when no host holds
/// them: the passkey was revoked in its file); their public ids.
pub fn end_opened_with_in(state_dir: &Path, passkey: &str) -> anyhow::Result<Vec<String>> {
    let file = state_dir.join(FILE);
    let mut kept =
        read_kept(&file).map_err(|e| anyhow::anyhow!("cannot read {}: {e:#}", file.display()))?;
    let (ended, left): (Vec<Kept>, Vec<Kept>) = kept
        .logins
        .into_iter()
        .partition(|k| k.passkey.as_deref() == Some(passkey));
    if ended.is_empty() {
        return Ok(Vec::new());
    }
    kept.logins = left;
    write_kept(&file, &kept)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", file.display()))?;
    Ok(ended.into_iter().map(|k| k.id).collect())
}

/// End every login kept in `state_dir` (for when no host holds them); how many.
pub fn end_all_in(state_dir: &Path) -> anyhow::Result<usize> {
    let file = state_dir.join(FILE);
    let n = read_kept(&file).map(|k| k.logins.len()).unwrap_or(0);
    match std::fs::remove_file(&file) {
        Ok(()) => Ok(n),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(anyhow::anyhow!("cannot remove {}: {e}", file.display())),
    }
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
    fn kept_logins_open_again_with_their_csrf_and_never_hold_the_cookie() {
        let dir = tempfile::tempdir().unwrap();
        let ttl = Duration::from_secs(600);
        let logins = Logins::kept(ttl, dir.path());
        let (cookie, login) = logins.open("pk-1").unwrap();
        let (other, _) = logins.open("pk-2").unwrap();
        let text = std::fs::read_to_string(dir.path().join(FILE)).unwrap();
        assert!(
            !text.contains(&cookie) && !text.contains(&login.csrf),
            "{text}"
        );
        assert!(text.contains(&hex::encode(key(&cookie))), "{text}");
        assert_ne!(login.csrf, hex::encode(key(&cookie)));
        let again = Logins::kept(ttl, dir.path());
        let back = again.session(&cookie).unwrap();
        assert_eq!(back.id, login.id);
        assert!(back.csrf_matches(&login.csrf));
        assert_eq!(back.passkey.as_deref(), Some("pk-1"));
        assert_eq!(again.end_opened_with("pk-2").len(), 1);
        assert!(again.session(&other).is_none());
        again.logout(&cookie);
        let third = Logins::kept(ttl, dir.path());
        assert!(third.session(&cookie).is_none() && third.session(&other).is_none());
    }

    #[test]
    fn revoking_a_passkey_with_no_host_ends_its_kept_logins_only() {
        let dir = tempfile::tempdir().unwrap();
        let ttl = Duration::from_secs(600);
        let logins = Logins::kept(ttl, dir.path());
        let (revoked, gone) = logins.open("pk-1").unwrap();
        let (other, _) = logins.open("pk-2").unwrap();
        drop(logins);
        // The host is down: the passkey is revoked in its file, and its logins in theirs.
        assert_eq!(
            end_opened_with_in(dir.path(), "pk-1").unwrap(),
            vec![gone.id.clone()]
        );
        assert!(end_opened_with_in(dir.path(), "pk-1").unwrap().is_empty());
        let text = std::fs::read_to_string(dir.path().join(FILE)).unwrap();
        assert!(!text.contains(&gone.id), "{text}");
        let started = Logins::kept(ttl, dir.path());
        assert!(
            started.session(&revoked).is_none(),
            "the revoked passkey's login came back"
        );
        assert_eq!(
            started.session(&other).unwrap().passkey.as_deref(),
            Some("pk-2")
        );
        // No file: nothing to end.
        let empty = tempfile::tempdir().unwrap();
        assert!(end_opened_with_in(empty.path(), "pk-1").unwrap().is_empty());
    }

    #[test]
    fn an_unreadable_logins_file_opens_none() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("web")).unwrap();
        std::fs::write(dir.path().join(FILE), "not json").unwrap();
        let logins = Logins::kept(Duration::from_secs(60), dir.path());
        assert!(logins.state().sessions.is_empty());
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
