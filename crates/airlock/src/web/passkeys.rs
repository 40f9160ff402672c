//! Passkeys (WebAuthn, by `webauthn-rs`) for the page served remotely: the owner's enrolled
//! passkeys, kept crash-safely in the state dir, and the ceremonies under way.
//!
//! - **Enrolment** starts from a one-time link of `airlock web --enroll` (single use, a
//!   minute), which only the owner can ask for through the host's socket.
//! - **A login** is an assertion of an enrolled passkey.
//! - **An approval** is an assertion whose challenge is the SHA-256 of a fresh nonce, the
//!   request's id and the hash of the payload drawn on the page ([`approval_challenge`]).
//!   The server keeps the nonce; on return it derives the challenge again from the hash the
//!   form names and checks the assertion against that, so an assertion made for one payload
//!   cannot approve another.
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
/// Ceremonies or enrolment links outstanding at once; more drops the oldest.
const MAX_PENDING: usize = 32;
/// Passkeys the owner may enrol.
const MAX_PASSKEYS: usize = 16;

/// The file's name under the state dir.
pub const FILE: &str = "web/passkeys.json";

/// What an approval's assertion was asked for.
#[derive(Debug, Clone)]
pub struct ApprovalAsked {
    pub login_id: String,
    pub request_id: String,
    pub payload_hash: String,
}

enum Ceremony {
    Enrol(Box<PasskeyRegistration>),
    Login(Box<PasskeyAuthentication>),
    Approval {
        asked: ApprovalAsked,
        nonce: [u8; 32],
        state: Box<PasskeyAuthentication>,
    },
}

#[derive(Default)]
struct Pending {
    enrol_links: HashMap<[u8; 32], Instant>,
    ceremonies: HashMap<[u8; 32], (Instant, Ceremony)>,
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
    #[error("the passkey assertion was made for another payload or request than this form names, so it approves nothing; reload the approvals page")]
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
        drop_oldest(&mut p.enrol_links, |e| *e);
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
        let ceremony = self.remember(Ceremony::Login(Box::new(state)))?;
        Ok((ceremony, options))
    }

    /// Finish a login: the id of the enrolled passkey that signed this ceremony's challenge.
    pub fn finish_login(
        &self,
        ceremony: &str,
        credential: &PublicKeyCredential,
    ) -> Result<String, Refused> {
        let Ceremony::Login(state) = self.take(ceremony)? else {
            return Err(Refused::Ceremony);
        };
        self.finish_assertion(credential, &state)
    }

    /// Start the assertion that approves `asked`: its challenge is bound to the request and
    /// its payload hash.
    pub fn start_approval(
        &self,
        asked: ApprovalAsked,
    ) -> Result<(String, RequestChallengeResponse), Refused> {
        let (mut options, state) = self.start_assertion()?;
        let nonce = random().map_err(Refused::Failed)?;
        let challenge = approval_challenge(&nonce, &asked.request_id, &asked.payload_hash);
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
    /// request and the payload hash. The challenge is derived again from the kept nonce and
    /// the form's request and hash, so an assertion made for anything else fails.
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
        let challenge = approval_challenge(&nonce, &named.request_id, &named.payload_hash);
        let state = with_challenge(&state, &challenge).map_err(Refused::Failed)?;
        match self.finish_assertion(credential, &state).map(|_| ()) {
            Err(Refused::Invalid(why)) if why.to_lowercase().contains("challenge") => {
                tracing::warn!(
                    asked_request = %asked.request_id, asked_hash = %asked.payload_hash,
                    named_request = %named.request_id, named_hash = %named.payload_hash,
                    "web: an approval's passkey assertion was for another payload"
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

    /// Keep a ceremony; its token.
    fn remember(&self, c: Ceremony) -> Result<String, Refused> {
        let token = hex::encode(random().map_err(Refused::Failed)?);
        let now = Instant::now();
        let mut p = self.pending();
        p.ceremonies.retain(|_, (exp, _)| *exp > now);
        drop_oldest(&mut p.ceremonies, |(e, _)| *e);
        p.ceremonies.insert(key(&token), (now + CEREMONY_TTL, c));
        Ok(token)
    }

    /// Take a ceremony (once, whatever follows).
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
/// nonce, the request's id and the payload hash, each length-prefixed so no two inputs
/// run together.
pub fn approval_challenge(nonce: &[u8; 32], request_id: &str, payload_hash: &str) -> Vec<u8> {
    let mut h = Sha256::new();
    h.update(b"airlock-web-approval-v1");
    for part in [&nonce[..], request_id.as_bytes(), payload_hash.as_bytes()] {
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

fn drop_oldest<V>(map: &mut HashMap<[u8; 32], V>, expiry: impl Fn(&V) -> Instant) {
    while map.len() >= MAX_PENDING {
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

    #[test]
    fn the_approval_challenge_binds_nonce_request_and_payload() {
        let n = [7u8; 32];
        let c = approval_challenge(&n, "r1", "sha256:aa");
        assert_eq!(c, approval_challenge(&n, "r1", "sha256:aa"));
        assert_ne!(c, approval_challenge(&n, "r1", "sha256:ab"));
        assert_ne!(c, approval_challenge(&n, "r2", "sha256:aa"));
        assert_ne!(c, approval_challenge(&[8u8; 32], "r1", "sha256:aa"));
        // Length prefixes: moving a byte from the id to the hash changes it.
        assert_ne!(
            approval_challenge(&n, "r1s", "ha256:aa"),
            approval_challenge(&n, "r1", "sha256:aa")
        );
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
