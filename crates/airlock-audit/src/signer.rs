//! The Ed25519 key that signs checkpoints, and its key files.
//!
//! Key files are one line of text, so an operator can read and copy them:
//! - secret key (mode 0600, in the operator's config directory): `ed25519-secret:<64 hex>`
//! - public key (written beside it as `<name>.pub`): `ed25519-public:<64 hex>`

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use airlock_core::canonical::sha256_hex;
use ed25519_dalek::{Signer, SigningKey, VerifyingKey};

use crate::AuditError;

const SECRET_PREFIX: &str = "ed25519-secret:";
const PUBLIC_PREFIX: &str = "ed25519-public:";

/// Signs audit checkpoints. Its `Debug` shows only the key id.
#[derive(Clone)]
pub struct CheckpointSigner {
    key: SigningKey,
    key_id: String,
}

impl std::fmt::Debug for CheckpointSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckpointSigner")
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

/// Short id of a public key: the first 16 hex digits of the SHA-256 of its bytes.
pub fn key_id(key: &VerifyingKey) -> String {
    sha256_hex(key.as_bytes())[..16].to_string()
}

impl CheckpointSigner {
    /// Load the secret key at `path`, or create one there (mode 0600) if there is none,
    /// along with its public key at `<path>.pub`. `path` belongs in the operator's config
    /// directory, never in the state directory next to the log it protects.
    ///
    /// Refuses a key file that group or others can read.
    pub fn load_or_create(path: &Path) -> Result<CheckpointSigner, AuditError> {
        if !path.exists() {
            create_key_file(path)?;
        }
        let signer = load_secret(path)?;
        let pub_path = public_key_path(path);
        if !pub_path.exists() {
            let text = format!("{PUBLIC_PREFIX}{}\n", signer.public_key_hex());
            fs::write(&pub_path, text)
                .map_err(|e| AuditError::io("write public key", &pub_path, e))?;
        }
        Ok(signer)
    }

    /// Load the secret key at `path`, which must exist. A key that is missing is never
    /// replaced silently: checkpoints signed by the old key would no longer verify, and a
    /// new key must be introduced by a signed rotation instead ([`crate::rotate_key`]).
    pub fn load(path: &Path) -> Result<CheckpointSigner, AuditError> {
        match fs::symlink_metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(AuditError::KeyMissing {
                    path: path.to_path_buf(),
                })
            }
            _ => {}
        }
        let signer = load_secret(path)?;
        let pub_path = public_key_path(path);
        if !pub_path.exists() {
            let text = format!("{PUBLIC_PREFIX}{}\n", signer.public_key_hex());
            write_atomic(&pub_path, text.as_bytes(), 0o644)?;
        }
        Ok(signer)
    }

    /// A fresh random key, not yet stored anywhere.
    pub fn generate() -> Result<CheckpointSigner, AuditError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| AuditError::Randomness(e.to_string()))?;
        Ok(CheckpointSigner::from_signing_key(SigningKey::from_bytes(
            &seed,
        )))
    }

    /// Store this key as a new secret key file at `path` (mode 0600, fsynced). Fails if
    /// anything is already there: a key file is never overwritten.
    pub fn write_new(&self, path: &Path) -> Result<(), AuditError> {
        let text = format!("{SECRET_PREFIX}{}\n", hex_encode(self.key.as_bytes()));
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| AuditError::io("create signing key", path, e))?;
        f.write_all(text.as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(|e| AuditError::io("write signing key", path, e))?;
        sync_parent(path)
    }

    /// Use an existing key (for tests and for callers that keep keys elsewhere).
    pub fn from_signing_key(key: SigningKey) -> CheckpointSigner {
        let key_id = key_id(&key.verifying_key());
        CheckpointSigner { key, key_id }
    }

    /// The public half, for `verify`.
    pub fn verifying_key(&self) -> VerifyingKey {
        self.key.verifying_key()
    }

    /// The public key as 64 hex digits.
    pub fn public_key_hex(&self) -> String {
        hex_encode(self.key.verifying_key().as_bytes())
    }

    /// See [`key_id`].
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// Hex Ed25519 signature of `message`.
    pub(crate) fn sign_hex(&self, message: &[u8]) -> String {
        hex_encode(&self.key.sign(message).to_bytes())
    }
}

/// Where [`CheckpointSigner::load_or_create`] puts the public key: `<path>.pub`.
pub fn public_key_path(secret_path: &Path) -> PathBuf {
    let mut name = secret_path.as_os_str().to_owned();
    name.push(".pub");
    PathBuf::from(name)
}

/// Replace the file at `path` with `bytes` so that a crash leaves the old or the new
/// content, never a mix: write a temporary file beside it, fsync, rename, fsync the
/// directory.
/// `.tmp-<pid>-<n>`: unique among the processes and the threads writing at once (a host
/// runs many logs in one process).
fn unique_tmp_suffix() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!(".tmp-{}-{n}", std::process::id())
}

pub(crate) fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), AuditError> {
    let tmp = {
        let mut name = path.as_os_str().to_owned();
        name.push(unique_tmp_suffix());
        PathBuf::from(name)
    };
    let _ = fs::remove_file(&tmp);
    let written = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(AuditError::io("write", path, e));
    }
    sync_parent(path)
}

fn sync_parent(path: &Path) -> Result<(), AuditError> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    fs::File::open(parent)
        .and_then(|d| d.sync_all())
        .map_err(|e| AuditError::io("fsync", parent, e))
}

/// Parse 64 hex digits as a public key.
pub(crate) fn public_key_from_hex(hex: &str) -> Option<VerifyingKey> {
    VerifyingKey::from_bytes(&hex_decode_32(hex)?).ok()
}

/// Load the key that verifies checkpoints from `path`: a public key file
/// (`ed25519-public:<hex>`) or the secret key file itself.
pub fn load_verifier(path: &Path) -> Result<VerifyingKey, AuditError> {
    let text = read_key_text(path)?;
    if text.starts_with(SECRET_PREFIX) {
        return Ok(load_secret(path)?.verifying_key());
    }
    let Some(hex) = text.strip_prefix(PUBLIC_PREFIX) else {
        return Err(key_format_error(path));
    };
    let bytes = hex_decode_32(hex).ok_or_else(|| key_format_error(path))?;
    VerifyingKey::from_bytes(&bytes).map_err(|e| AuditError::Key {
        path: path.to_path_buf(),
        detail: format!("not a valid Ed25519 public key ({e})"),
        help: "restore the file from the operator's copy of the public key".into(),
    })
}

fn create_key_file(path: &Path) -> Result<(), AuditError> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| AuditError::Randomness(e.to_string()))?;
    let key = SigningKey::from_bytes(&seed);
    let text = format!("{SECRET_PREFIX}{}\n", hex_encode(key.as_bytes()));
    // Write a private temporary file, then hard-link it into place: the link fails if
    // another process created the key meanwhile, so nobody ever reads a half-written key
    // and two processes never end up with different keys.
    let tmp = {
        let mut name = path.as_os_str().to_owned();
        name.push(unique_tmp_suffix());
        PathBuf::from(name)
    };
    let written = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(AuditError::io("create signing key", &tmp, e));
    }
    let linked = fs::hard_link(&tmp, path);
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(AuditError::io("create signing key", path, e)),
    }
}

fn load_secret(path: &Path) -> Result<CheckpointSigner, AuditError> {
    let meta = fs::metadata(path).map_err(|e| AuditError::io("read signing key", path, e))?;
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(AuditError::Key {
            path: path.to_path_buf(),
            detail: format!(
                "the secret key is readable by others (mode {:o})",
                meta.permissions().mode() & 0o777
            ),
            help: format!("run `chmod 600 {}`", path.display()),
        });
    }
    let text = read_key_text(path)?;
    let seed = text
        .strip_prefix(SECRET_PREFIX)
        .and_then(hex_decode_32)
        .ok_or_else(|| key_format_error(path))?;
    Ok(CheckpointSigner::from_signing_key(SigningKey::from_bytes(
        &seed,
    )))
}

fn read_key_text(path: &Path) -> Result<String, AuditError> {
    let bytes = fs::read(path).map_err(|e| AuditError::io("read key", path, e))?;
    if bytes.len() > 4096 {
        return Err(key_format_error(path));
    }
    String::from_utf8(bytes)
        .map(|t| t.trim().to_string())
        .map_err(|_| key_format_error(path))
}

fn key_format_error(path: &Path) -> AuditError {
    AuditError::Key {
        path: path.to_path_buf(),
        detail: format!(
            "expected one line `{SECRET_PREFIX}<64 hex digits>` or `{PUBLIC_PREFIX}<64 hex digits>`"
        ),
        help: "point at the key written by `CheckpointSigner::load_or_create` or its `.pub` file"
            .into(),
    }
}

pub(crate) fn hex_encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn hex_decode<const N: usize>(s: &str) -> Option<[u8; N]> {
    let s = s.as_bytes();
    if s.len() != 2 * N {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (i, pair) in s.chunks(2).enumerate() {
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

fn hex_decode_32(s: &str) -> Option<[u8; 32]> {
    hex_decode::<32>(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_key_is_private_reloads_and_has_a_public_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.key");
        let a = CheckpointSigner::load_or_create(&path).unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let b = CheckpointSigner::load_or_create(&path).unwrap();
        assert_eq!(a.public_key_hex(), b.public_key_hex());
        let v = load_verifier(&public_key_path(&path)).unwrap();
        assert_eq!(v, a.verifying_key());
        assert_eq!(load_verifier(&path).unwrap(), a.verifying_key());
        assert!(!format!("{a:?}").contains(&hex_encode(a.key.as_bytes())));
    }

    #[test]
    fn readable_key_and_garbage_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.key");
        CheckpointSigner::load_or_create(&path).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let err = CheckpointSigner::load_or_create(&path)
            .unwrap_err()
            .to_string();
        assert!(err.contains("chmod 600"), "{err}");
        let junk = dir.path().join("junk.pub");
        fs::write(&junk, b"\xff\x00garbage").unwrap();
        assert!(matches!(load_verifier(&junk), Err(AuditError::Key { .. })));
    }
}
