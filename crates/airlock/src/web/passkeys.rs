//! Passkeys (WebAuthn, by `webauthn-rs`) for the page served remotely: the owner's enrolled
//! passkeys, kept crash-safely in the state dir, and the ceremonies under way.
//!
//! - **Enrolment** starts from a one-time link of `airlock web --enroll` (single use, a
//!   minute), which only the owner can ask for through the host's socket.
//! - **A login** is an assertion of an enrolled passkey. Anyone may start one, so its
//!   ceremonies are kept apart from the others, in a smaller map of their own: a flood of
//!   them drops only older login ceremonies, never an enrolment or an approval under way
//!   (which only the owner can start).
//! - **An approval** is an assertion whose challenge is the SHA-256 of a fresh nonce, the
//!   request's id, the hash of the payload drawn on the page, and the decision with its
//!   grant's scope and duration ([`approval_challenge`]). The server keeps the nonce; on
//!   return it derives the challenge again from what the form names and checks the
//!   assertion against that, so an assertion made for one payload, or for "this once",
//!   cannot approve another payload, or grant more.
//!
//! `webauthn-rs` draws its own random challenges and has no call to give one; the
//! approval's challenge is put into its ceremony state through the state's serialised form
//! (its `danger-allow-state-serialisation` feature, meant for keeping that state outside
//! the process), the one place the crate lets it be set ([`with_challenge`]).

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use webauthn_rs::prelude::{
    Base64UrlSafeData, CreationChallengeResponse, Passkey, PasskeyAuthentication,
    PasskeyRegistration, PublicKeyCredential, RegisterPublicKeyCredential,
    RequestChallengeResponse, Url, Uuid,
};
use webauthn_rs::{Webauthn, WebauthnBuilder};

/// How long an enrolment link can be used.
pub const ENROL_LINK_TTL: Duration = Duration::from_secs(60);
/// How long a ceremony (the browser asking the authenticator) may take.
const CEREMONY_TTL: Duration = Duration::from_secs(300);
/// Enrolment or approval ceremonies, or enrolment links, outstanding at once; more drops
/// the oldest. Only the owner can start them (an enrolment link, a login).
const MAX_PENDING: usize = 32;
/// Login ceremonies outstanding at once, which anyone can start; more drops the oldest
/// login ceremony, and nothing else.
const MAX_LOGINS_PENDING: usize = 16;
/// Passkeys the owner may enrol.
const MAX_PASSKEYS: usize = 16;

/// The file's name under the state dir.
pub const FILE: &str = "web/passkeys.json";

/// What an approval's assertion was asked for: who asks, what it decides, and how.
#[derive(Debug, Clone)]
pub struct ApprovalAsked {
    pub login_id: String,
    pub request_id: String,
    pub payload_hash: String,
    /// The form's decision (`approve`, `rollback`, `revoke`).
    pub decision: String,
    /// The grant's scope and duration the form names (empty: none, "this once").
    pub scope: String,
    pub duration: String,
}

/// A ceremony only the owner can start.
enum Ceremony {
    Enrol(Box<PasskeyRegistration>),
    Approval {
        asked: ApprovalAsked,
        nonce: [u8; 32],
        state: Box<PasskeyAuthentication>,
    },
}

#[derive(Default)]
struct Pending {
    enrol_links: HashMap<[u8; 32], Instant>,
    /// Enrolments and approvals: started by the owner only (a link, a login).
    ceremonies: HashMap<[u8; 32], (Instant, Ceremony)>,
    /// Logins: started by anyone, so bounded apart ([`MAX_LOGINS_PENDING`]).
    logins: HashMap<[u8; 32], (Instant, Box<PasskeyAuthentication>)>,
}

/// The passkeys file: the owner's WebAuthn user handle and their passkeys.
#[derive(Serialize, Deserialize)]
struct Stored {
    user: Uuid,
    passkeys: Vec<Enrolled>,
}

#[derive(Serialize, Deserialize, Clone)]
struct Enrolled {
    /// Seconds since the epoch.
    enrolled_at: u64,
    /// The owner's name for it, given at enrolment (or `passkey N`).
    #[serde(default)]
    label: String,
    /// Seconds since the epoch of its last accepted assertion.
    #[serde(default)]
    last_used: Option<u64>,
    passkey: Passkey,
}

impl Enrolled {
    fn info(&self) -> PasskeyInfo {
        PasskeyInfo {
            id: passkey_id(self.passkey.cred_id()),
            label: self.label.clone(),
            enrolled_at: self.enrolled_at,
            last_used: self.last_used,
        }
    }
}

/// An enrolled passkey as the owner lists it (nothing of the key itself).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PasskeyInfo {
    /// `pk-` and 12 hex digits of the SHA-256 of its credential id: short, stable, and
    /// the same wherever it is listed.
    pub id: String,
    pub label: String,
    /// Seconds since the epoch.
    pub enrolled_at: u64,
    pub last_used: Option<u64>,
}

/// What a revocation did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Revoked {
    pub passkey: PasskeyInfo,
    /// Passkeys still enrolled; with none, the page serves only enrolment again.
    pub remaining: usize,
    /// The logins that passkey had opened, ended with it.
    #[serde(default)]
    pub logins_ended: Vec<String>,
}

/// A passkey's id from its credential id.
fn passkey_id(cred_id: &[u8]) -> String {
    format!("pk-{}", &hex::encode(Sha256::digest(cred_id))[..12])
}

/// The longest label kept, in characters.
const MAX_LABEL_CHARS: usize = 64;

/// The owner's passkeys and the ceremonies under way.
pub struct Passkeys {
    webauthn: Webauthn,
    file: PathBuf,
    stored: Mutex<Stored>,
    pending: Mutex<Pending>,
}

/// Why a ceremony failed, said to the browser (the host's log has the detail).
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("this enrolment link is unknown, used already or expired: run `airlock web --enroll` for a new one")]
    Link,
    #[error("this passkey request is unknown, used already or expired: try again")]
    Ceremony,
    #[error("no passkey is enrolled yet: run `airlock web --enroll` on the host's machine")]
    NoneEnrolled,
    #[error("{MAX_PASSKEYS} passkeys are enrolled already, the most this host keeps")]
    Full,
    #[error("the passkey assertion was made for another payload, request or decision (its grant's scope and duration) than this form names, so it approves nothing; reload the page and decide again")]
    OtherPayload,
    #[error("the passkey's answer is not valid: {0}")]
    Invalid(String),
    #[error("this passkey is not enrolled (it was revoked)")]
    Revoked,
    #[error("{0:#}")]
    Failed(anyhow::Error),
}

impl Passkeys {
    /// The passkeys of `state_dir` for the page at `name` and `origin`.
    pub fn open(state_dir: &Path, name: &str, origin: &str) -> anyhow::Result<Passkeys> {
        let origin = Url::parse(origin)?;
        let webauthn = WebauthnBuilder::new(name, &origin)
            .and_then(|b| b.rp_name("Airlock").timeout(Duration::from_secs(120)).build())
            .map_err(|e| {
                anyhow::anyhow!(
                    "web.public_name = {name} cannot be a passkey's relying party: {e}\nhelp: give the DNS name the page is reached by"
                )
            })?;
        let file = state_dir.join(FILE);
        let stored = read_stored(&file)?;
        Ok(Passkeys {
            webauthn,
            file,
            stored: Mutex::new(stored),
            pending: Mutex::new(Pending::default()),
        })
    }

    fn stored(&self) -> std::sync::MutexGuard<'_, Stored> {
        self.stored.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many passkeys are enrolled.
    pub fn enrolled(&self) -> usize {
        self.stored().passkeys.len()
    }

    /// Whether passkey `id` (as [`PasskeyInfo::id`]) is enrolled now.
    pub fn is_enrolled(&self, id: &str) -> bool {
        self.stored()
            .passkeys
            .iter()
            .any(|e| passkey_id(e.passkey.cred_id()) == id)
    }

    /// The enrolled passkeys, in the order they were enrolled.
    pub fn list(&self) -> Vec<PasskeyInfo> {
        self.stored().passkeys.iter().map(Enrolled::info).collect()
    }

    /// Revoke passkey `id`: gone from the file before this returns, and no assertion of it
    /// is accepted from then on, even for a ceremony started before.
    pub fn revoke(&self, id: &str) -> anyhow::Result<Revoked> {
        let mut s = self.stored();
        let revoked = revoke_in(&mut s, id)?;
        if let Err(e) = write_stored(&self.file, &s) {
            // Not kept on disk: keep it in memory as well, so both agree.
            s.passkeys = read_stored(&self.file)?.passkeys;
            return Err(e);
        }
        Ok(revoked)
    }

    /// A new one-time enrolment token.
    pub fn new_enrol_link(&self) -> anyhow::Result<String> {
        let token = hex::encode(random()?);
        let now = Instant::now();
        let mut p = self.pending();
        p.enrol_links.retain(|_, exp| *exp > now);
        drop_oldest(&mut p.enrol_links, MAX_PENDING, |e| *e);
        p.enrol_links.insert(key(&token), now + ENROL_LINK_TTL);
        Ok(token)
    }

    /// Use an enrolment token (once, whatever follows) and start the enrolment: the
    /// ceremony's token and what the browser passes to `navigator.credentials.create`.
    pub fn start_enrolment(
        &self,
        token: &str,
    ) -> Result<(String, CreationChallengeResponse), Refused> {
        {
            let mut p = self.pending();
            match p.enrol_links.remove(&key(token)) {
                Some(exp) if exp > Instant::now() => {}
                _ => return Err(Refused::Link),
            }
        }
        let (user, exclude) = {
            let s = self.stored();
            if s.passkeys.len() >= MAX_PASSKEYS {
                return Err(Refused::Full);
            }
            let ids = s
                .passkeys
                .iter()
                .map(|e| e.passkey.cred_id().clone())
                .collect::<Vec<_>>();
            (s.user, ids)
        };
        let (options, state) = self
            .webauthn
            .start_passkey_registration(user, "owner", "Airlock owner", Some(exclude))
            .map_err(|e| Refused::Invalid(e.to_string()))?;
        let ceremony = self.remember(Ceremony::Enrol(Box::new(state)))?;
        Ok((ceremony, options))
    }

    /// Finish an enrolment: the new passkey is kept (on disk before this returns).
    pub fn finish_enrolment(
        &self,
        ceremony: &str,
        credential: &RegisterPublicKeyCredential,
        label: &str,
    ) -> Result<(), Refused> {
        let Ceremony::Enrol(state) = self.take(ceremony)? else {
            return Err(Refused::Ceremony);
        };
        let passkey = self
            .webauthn
            .finish_passkey_registration(credential, &state)
            .map_err(|e| Refused::Invalid(e.to_string()))?;
        let mut s = self.stored();
        if s.passkeys.len() >= MAX_PASSKEYS {
            return Err(Refused::Full);
        }
        let label: String = label.trim().chars().take(MAX_LABEL_CHARS).collect();
        let label = if label.is_empty() {
            format!("passkey {}", s.passkeys.len() + 1)
        } else {
            label
        };
        s.passkeys.push(Enrolled {
            enrolled_at: crate::runtime::now_unix(),
            label,
            last_used: None,
            passkey,
        });
        if let Err(e) = self.save(&s) {
            s.passkeys.pop();
            return Err(Refused::Failed(e));
        }
        Ok(())
    }

    /// Start a login: the ceremony's token and what the browser passes to
    /// `navigator.credentials.get`.
    pub fn start_login(&self) -> Result<(String, RequestChallengeResponse), Refused> {
        let (options, state) = self.start_assertion()?;
        let token = hex::encode(random().map_err(Refused::Failed)?);
        let now = Instant::now();
        let mut p = self.pending();
        p.logins.retain(|_, (exp, _)| *exp > now);
        drop_oldest(&mut p.logins, MAX_LOGINS_PENDING, |(e, _)| *e);
        p.logins
            .insert(key(&token), (now + CEREMONY_TTL, Box::new(state)));
        Ok((token, options))
    }

    /// Finish a login: the id of the enrolled passkey that signed this ceremony's challenge.
    pub fn finish_login(
        &self,
        ceremony: &str,
        credential: &PublicKeyCredential,
    ) -> Result<String, Refused> {
        let state = match self.pending().logins.remove(&key(ceremony)) {
            Some((exp, state)) if exp > Instant::now() => state,
            _ => return Err(Refused::Ceremony),
        };
        self.finish_assertion(credential, &state)
    }

    /// Start the assertion that approves `asked`: its challenge is bound to the request, its
    /// payload hash, and the decision with its grant's scope and duration.
    pub fn start_approval(
        &self,
        asked: ApprovalAsked,
    ) -> Result<(String, RequestChallengeResponse), Refused> {
        let (mut options, state) = self.start_assertion()?;
        let nonce = random().map_err(Refused::Failed)?;
        let challenge = approval_challenge(&nonce, &asked);
        let state = with_challenge(&state, &challenge).map_err(Refused::Failed)?;
        options.public_key.challenge = Base64UrlSafeData::from(challenge);
        let ceremony = self.remember(Ceremony::Approval {
            asked,
            nonce,
            state: Box::new(state),
        })?;
        Ok((ceremony, options))
    }

    /// Finish an approval's assertion for what the form names: the login that sends it, the
    /// request, the payload hash, the decision and its grant. The challenge is derived again
    /// from the kept nonce and what the form names, so an assertion made for anything else
    /// (another payload, or "this once" sent as a wider or longer grant) fails.
    pub fn finish_approval(
        &self,
        ceremony: &str,
        credential: &PublicKeyCredential,
        named: &ApprovalAsked,
    ) -> Result<(), Refused> {
        let Ceremony::Approval {
            asked,
            nonce,
            state,
        } = self.take(ceremony)?
        else {
            return Err(Refused::Ceremony);
        };
        if asked.login_id != named.login_id {
            // Another login's ceremony: not this browser's to finish.
            return Err(Refused::Ceremony);
        }
        let challenge = approval_challenge(&nonce, named);
        let state = with_challenge(&state, &challenge).map_err(Refused::Failed)?;
        match self.finish_assertion(credential, &state).map(|_| ()) {
            Err(Refused::Invalid(why)) if why.to_lowercase().contains("challenge") => {
                tracing::warn!(
                    asked = ?asked, named = ?named,
                    "web: an approval's passkey assertion was for another payload or decision"
                );
                Err(Refused::OtherPayload)
            }
            other => other,
        }
    }

    fn start_assertion(
        &self,
    ) -> Result<(RequestChallengeResponse, PasskeyAuthentication), Refused> {
        let keys: Vec<Passkey> = self
            .stored()
            .passkeys
            .iter()
            .map(|e| e.passkey.clone())
            .collect();
        if keys.is_empty() {
            return Err(Refused::NoneEnrolled);
        }
        self.webauthn
            .start_passkey_authentication(&keys)
            .map_err(|e| Refused::Invalid(e.to_string()))
    }

    /// Check an assertion against a ceremony's state; the id of the passkey that made it.
    fn finish_assertion(
        &self,
        credential: &PublicKeyCredential,
        state: &PasskeyAuthentication,
    ) -> Result<String, Refused> {
        let result = self
            .webauthn
            .finish_passkey_authentication(credential, state)
            .map_err(|e| Refused::Invalid(format!("{e:?}")))?;
        if !result.user_verified() {
            return Err(Refused::Invalid("the user was not verified".into()));
        }
        let mut s = self.stored();
        // The ceremony's state lists the passkeys enrolled when it started: one revoked
        // since is refused here.
        let Some(used) = s
            .passkeys
            .iter_mut()
            .find(|e| e.passkey.cred_id() == result.cred_id())
        else {
            return Err(Refused::Revoked);
        };
        // Keep the signature counter, so a cloned authenticator shows, and when it was used.
        let _ = used.passkey.update_credential(&result);
        used.last_used = Some(crate::runtime::now_unix());
        let id = passkey_id(used.passkey.cred_id());
        if let Err(e) = self.save(&s) {
            tracing::warn!(error = %e, "web: cannot keep a passkey's counter");
        }
        Ok(id)
    }

    /// Keep an enrolment's or an approval's ceremony; its token.
    fn remember(&self, c: Ceremony) -> Result<String, Refused> {
        let token = hex::encode(random().map_err(Refused::Failed)?);
        let now = Instant::now();
        let mut p = self.pending();
        p.ceremonies.retain(|_, (exp, _)| *exp > now);
        drop_oldest(&mut p.ceremonies, MAX_PENDING, |(e, _)| *e);
        p.ceremonies.insert(key(&token), (now + CEREMONY_TTL, c));
        Ok(token)
    }

    /// Take an enrolment's or an approval's ceremony (once, whatever follows).
    fn take(&self, token: &str) -> Result<Ceremony, Refused> {
        match self.pending().ceremonies.remove(&key(token)) {
            Some((exp, c)) if exp > Instant::now() => Ok(c),
            _ => Err(Refused::Ceremony),
        }
    }

    fn save(&self, s: &Stored) -> anyhow::Result<()> {
        write_stored(&self.file, s)
    }
}

/// The passkeys file of `file`, or a new owner with none when there is no file.
fn read_stored(file: &Path) -> anyhow::Result<Stored> {
    match std::fs::read(file) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            anyhow::anyhow!(
                "{} cannot be read: {e}\nhelp: restore it from a backup, or move it away and enrol a passkey again with `airlock web --enroll`",
                file.display()
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Stored {
            user: Uuid::from_bytes(random()?[..16].try_into()?),
            passkeys: Vec::new(),
        }),
        Err(e) => anyhow::bail!("cannot read {}: {e}", file.display()),
    }
}

/// Write the passkeys file crash-safely: a new file beside it, synced, renamed over it,
/// and the directory synced, so a crash leaves the old file or the new one whole.
fn write_stored(file: &Path, s: &Stored) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = file
        .parent()
        .ok_or_else(|| anyhow::anyhow!("{} has no directory", file.display()))?;
    crate::home::create_private_dir(dir)?;
    let tmp = dir.join(".passkeys.json.new");
    let bytes = serde_json::to_vec_pretty(s)?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(&bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, file)?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

/// Take passkey `id` out of `s`.
fn revoke_in(s: &mut Stored, id: &str) -> anyhow::Result<Revoked> {
    let Some(at) = s
        .passkeys
        .iter()
        .position(|e| passkey_id(e.passkey.cred_id()) == id)
    else {
        let known: Vec<String> = s.passkeys.iter().map(|e| e.info().id).collect();
        anyhow::bail!(
            "no enrolled passkey has the id `{}` (enrolled: {})\nhelp: `airlock web --passkeys` lists them",
            airlock_core::terminal_text::escape_line(id),
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        );
    };
    let gone = s.passkeys.remove(at);
    Ok(Revoked {
        passkey: gone.info(),
        remaining: s.passkeys.len(),
        logins_ended: Vec::new(),
    })
}

/// The passkeys enrolled in `state_dir`, read from the file (for when no host holds it).
pub fn list_in(state_dir: &Path) -> anyhow::Result<Vec<PasskeyInfo>> {
    Ok(read_stored(&state_dir.join(FILE))?
        .passkeys
        .iter()
        .map(Enrolled::info)
        .collect())
}

/// Revoke passkey `id` in the file of `state_dir` (for when no host holds it).
pub fn revoke_in_file(state_dir: &Path, id: &str) -> anyhow::Result<Revoked> {
    let file = state_dir.join(FILE);
    let mut s = read_stored(&file)?;
    let revoked = revoke_in(&mut s, id)?;
    write_stored(&file, &s)?;
    Ok(revoked)
}

/// The challenge of an approval's assertion: SHA-256 over a domain tag, the server's fresh
/// nonce, the request's id, the payload hash, the decision, and the grant's scope and
/// duration, each length-prefixed so no two inputs run together. (Who asked is checked
/// apart: the ceremony belongs to its login.)
pub fn approval_challenge(nonce: &[u8; 32], asked: &ApprovalAsked) -> Vec<u8> {
    let mut h = Sha256::new();
    h.update(b"airlock-web-approval-v2");
    for part in [
        &nonce[..],
        asked.request_id.as_bytes(),
        asked.payload_hash.as_bytes(),
        asked.decision.as_bytes(),
        asked.scope.as_bytes(),
        asked.duration.as_bytes(),
    ] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part);
    }
    h.finalize().to_vec()
}

/// `state` with `challenge` as the challenge the assertion must have signed.
fn with_challenge(
    state: &PasskeyAuthentication,
    challenge: &[u8],
) -> anyhow::Result<PasskeyAuthentication> {
    let mut v = serde_json::to_value(state)?;
    let slot = v
        .get_mut("ast")
        .and_then(|a| a.get_mut("challenge"))
        .ok_or_else(|| anyhow::anyhow!("the passkey library's state has no challenge to set"))?;
    *slot = serde_json::to_value(Base64UrlSafeData::from(challenge.to_vec()))?;
    Ok(serde_json::from_value(v)?)
}

/// Make room for one more in `map`, which holds at most `cap`: drop the oldest.
fn drop_oldest<V>(map: &mut HashMap<[u8; 32], V>, cap: usize, expiry: impl Fn(&V) -> Instant) {
    while map.len() >= cap {
        let Some(oldest) = map.iter().min_by_key(|(_, v)| expiry(v)).map(|(k, _)| *k) else {
            break;
        };
        map.remove(&oldest);
    }
}

fn key(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

fn random() -> anyhow::Result<[u8; 32]> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| anyhow::anyhow!("the system's random number generator failed: {e}"))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(
        request: &str,
        hash: &str,
        decision: &str,
        scope: &str,
        duration: &str,
    ) -> ApprovalAsked {
        ApprovalAsked {
            login_id: "w-1".into(),
            request_id: request.into(),
            payload_hash: hash.into(),
            decision: decision.into(),
            scope: scope.into(),
            duration: duration.into(),
        }
    }

    #[test]
    fn the_approval_challenge_binds_nonce_request_payload_decision_and_grant() {
        let n = [7u8; 32];
        let once = asked("r1", "sha256:aa", "approve", "", "");
        let c = approval_challenge(&n, &once);
        assert_eq!(c, approval_challenge(&n, &once));
        for other in [
            asked("r1", "sha256:ab", "approve", "", ""),
            asked("r2", "sha256:aa", "approve", "", ""),
            // "This once", replayed as a grant: wider, or longer, or both.
            asked("r1", "sha256:aa", "approve", "rule", ""),
            asked("r1", "sha256:aa", "approve", "", "7d"),
            asked("r1", "sha256:aa", "approve", "rule", "7d"),
            asked("r1", "sha256:aa", "rollback", "", ""),
            // Length prefixes: moving a byte from one part to the next changes it.
            asked("r1s", "ha256:aa", "approve", "", ""),
            asked("r1", "sha256:aa", "approv", "e", ""),
            asked("r1", "sha256:aa", "approve", "session", "1h"),
        ] {
            assert_ne!(c, approval_challenge(&n, &other), "{other:?}");
        }
        assert_ne!(
            approval_challenge(&n, &asked("r1", "sha256:aa", "approve", "session", "1h")),
            approval_challenge(&n, &asked("r1", "sha256:aa", "approve", "session1", "h"))
        );
        assert_ne!(c, approval_challenge(&[8u8; 32], &once));
        // Who asked is not in the challenge (the ceremony is bound to its login instead).
        let mut by_other = once.clone();
        by_other.login_id = "w-2".into();
        assert_eq!(c, approval_challenge(&n, &by_other));
    }

    /// A passkeys file with one passkey (a public key from webauthn-rs's own tests): enough
    /// to start ceremonies, not to answer one.
    fn one_enrolled(dir: &Path) -> Passkeys {
        let cred = serde_json::json!({
            "cred_id": "uZcVDBVS68E_MtAgeQpElJxldF_6cY9sSvbWqx_qRh8wiu42lyRBRmh5yFeD_r9k130dMbFHBHI9RTFgdJQIzQ",
            "cred": {"type_": "ES256", "key": {"EC_EC2": {"curve": "SECP256R1",
                "x": [194,126,127,109,252,23,131,21,252,6,223,99,44,254,140,27,230,17,94,5,133,28,104,41,144,69,171,149,161,26,200,243],
                "y": [143,123,183,156,24,178,21,248,117,159,162,69,171,52,188,252,26,59,6,47,103,92,19,58,117,103,249,0,219,8,95,196]}}},
            "counter": 2, "user_verified": true, "backup_eligible": false, "backup_state": false,
            "registration_policy": "required",
            "extensions": {"cred_protect": "NotRequested", "hmac_create_secret": "NotRequested"},
            "attestation": {"data": "None", "metadata": "None"},
            "attestation_format": "none"
        });
        let file = serde_json::json!({
            "user": "7f3c0a52-0d44-4c1e-9b57-4f0c3c1d2e11",
            "passkeys": [{"enrolled_at": 1, "label": "phone", "passkey": {"cred": cred}}]
        });
        std::fs::create_dir_all(dir.join("web")).unwrap();
        std::fs::write(dir.join(FILE), file.to_string()).unwrap();
        let p = Passkeys::open(dir, "airlock.test", "https://airlock.test:8443").unwrap();
        assert_eq!(p.enrolled(), 1);
        p
    }

    /// The attack: `POST /passkey/login` needs no login, so anyone can start login
    /// ceremonies by the hundred. They must never push out the owner's approval or
    /// enrolment under way, which then still finishes; the logins under way stay bounded.
    #[test]
    fn a_flood_of_login_ceremonies_never_drops_an_approval_or_an_enrolment() {
        let dir = tempfile::tempdir().unwrap();
        let p = one_enrolled(dir.path());
        let id = p.list()[0].id.clone();
        assert!(p.is_enrolled(&id) && !p.is_enrolled("pk-000000000000"));
        let (approval, _) = p
            .start_approval(asked("r1", "sha256:aa", "approve", "", ""))
            .unwrap();
        let link = p.new_enrol_link().unwrap();
        let (enrolment, _) = p.start_enrolment(&link).unwrap();
        let mut last_login = String::new();
        for _ in 0..(4 * MAX_PENDING) {
            last_login = p.start_login().unwrap().0;
        }
        assert!(
            matches!(p.take(&approval), Ok(Ceremony::Approval { .. })),
            "the owner's approval ceremony was dropped by a flood of logins"
        );
        assert!(
            matches!(p.take(&enrolment), Ok(Ceremony::Enrol(_))),
            "the owner's enrolment ceremony was dropped by a flood of logins"
        );
        // The logins under way are bounded apart, the newest kept.
        assert!(p.pending().logins.len() <= MAX_LOGINS_PENDING);
        // A login ceremony is not an approval's, nor the other way round.
        assert!(p.pending().logins.contains_key(&key(&last_login)));
        assert!(matches!(p.take(&last_login), Err(Refused::Ceremony)));
        let (approval, _) = p
            .start_approval(asked("r1", "sha256:aa", "approve", "", ""))
            .unwrap();
        assert!(!p.pending().logins.contains_key(&key(&approval)));
    }

    #[test]
    fn revoking_an_unknown_passkey_says_which_are_enrolled_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        assert!(list_in(dir.path()).unwrap().is_empty());
        let e = revoke_in_file(dir.path(), "pk-000000000000").unwrap_err();
        assert!(e.to_string().contains("(enrolled: none)"), "{e}");
        assert!(!dir.path().join(FILE).exists());
        let p = Passkeys::open(dir.path(), "airlock.test", "https://airlock.test:8443").unwrap();
        assert!(p.revoke("pk-000000000000").is_err());
        assert!(p.list().is_empty());
    }

    #[test]
    fn an_enrolment_link_works_once_and_no_login_starts_without_a_passkey() {
        let dir = tempfile::tempdir().unwrap();
        let p = Passkeys::open(dir.path(), "airlock.test", "https://airlock.test:8443").unwrap();
        assert_eq!(p.enrolled(), 0);
        assert!(matches!(p.start_login(), Err(Refused::NoneEnrolled)));
        let token = p.new_enrol_link().unwrap();
        assert!(p.start_enrolment(&token).is_ok());
        assert!(matches!(p.start_enrolment(&token), Err(Refused::Link)));
    }
}
