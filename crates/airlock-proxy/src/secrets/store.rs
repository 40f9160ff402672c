//! The secrets store: `<config>/secrets.json` (metadata and ciphertext, 0600) encrypted
//! with XChaCha20-Poly1305 under `<config>/secrets.key` (32 random bytes, 0600).
//!
//! Each entry binds the value to a host, an optional path prefix and a header template,
//! and carries a random placeholder token: the only thing a sandbox ever receives. The
//! binding is the AEAD's associated data, so an entry cannot be re-bound to another host
//! by editing the JSON.

use std::path::{Path, PathBuf};

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

/// Metadata and ciphertext file in the config directory.
pub const SECRETS_FILE: &str = "secrets.json";
/// Key file in the config directory.
pub const SECRETS_KEY_FILE: &str = "secrets.key";
/// Largest secret value accepted.
pub const MAX_SECRET_BYTES: usize = 16 * 1024;
const PLACEHOLDER_PREFIX: &str = "airlock-placeholder-";

/// Errors of the store. They never contain a secret value.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    #[error("cannot {what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is damaged: {message}\nhelp: restore it from a backup, or remove it and set the secrets again")]
    Damaged { path: PathBuf, message: String },
    #[error("secret {name:?} cannot be decrypted (wrong key or edited entry)\nhelp: set it again with `airlock secret set {name} --host <host>`")]
    Decrypt { name: String },
    #[error("invalid secret name {0:?}\nhelp: use letters, digits, '_', '-' or '.', at most 64 characters")]
    BadName(String),
    #[error("invalid header template {0:?}\nhelp: write it as 'Header-Name: text {{}} text' with exactly one {{}} where the value goes")]
    BadTemplate(String),
    #[error("invalid host {0:?}\nhelp: give the plain host name the secret is for, such as api.github.com")]
    BadHost(String),
    #[error("invalid path prefix {0:?}\nhelp: a path prefix starts with '/'")]
    BadPath(String),
    #[error("the secret value is {0}\nhelp: pipe exactly the value on stdin (one line, at most 16 KiB, no control characters)")]
    BadValue(&'static str),
    #[error("no secret named {0:?}\nhelp: `airlock secret list` shows the names")]
    NotFound(String),
    #[error("random number generator failed: {0}")]
    Random(String),
}

/// Where and how a secret is sent: `Authorization: Bearer {}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeaderTemplate {
    /// Lower-case header name.
    pub name: String,
    /// Value text with one `{}` where the secret goes.
    pub value: String,
}

impl HeaderTemplate {
    /// Parse `Name: text {} text`.
    pub fn parse(s: &str) -> Result<HeaderTemplate, SecretsError> {
        let bad = || SecretsError::BadTemplate(s.to_string());
        let (name, value) = s.split_once(':').ok_or_else(bad)?;
        let name = name.trim().to_ascii_lowercase();
        let value = value.trim().to_string();
        if http::HeaderName::from_bytes(name.as_bytes()).is_err()
            || value.matches("{}").count() != 1
            || value.chars().any(|c| c.is_control())
        {
            return Err(bad());
        }
        Ok(HeaderTemplate { name, value })
    }

    /// The default template, `Authorization: Bearer {}`.
    pub fn bearer() -> HeaderTemplate {
        HeaderTemplate {
            name: "authorization".into(),
            value: "Bearer {}".into(),
        }
    }

    /// `Name: value` as written by an operator.
    pub fn display(&self) -> String {
        format!("{}: {}", self.name, self.value)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    host: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    path_prefix: Option<String>,
    header: HeaderTemplate,
    placeholder: String,
    nonce: String,
    ciphertext: String,
}

impl Entry {
    fn aad(&self) -> Vec<u8> {
        let fields = [
            "airlock-secret-v1",
            &self.name,
            &self.host,
            self.path_prefix.as_deref().unwrap_or(""),
            &self.header.name,
            &self.header.value,
            &self.placeholder,
        ];
        fields.join("\0").into_bytes()
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileFormat {
    version: u32,
    secrets: Vec<Entry>,
}

/// What `airlock secret list` shows: never the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretInfo {
    pub name: String,
    pub host: String,
    pub path_prefix: Option<String>,
    pub header: HeaderTemplate,
    /// The token the sandbox gets in place of the value.
    pub placeholder: String,
}

/// A decrypted secret, ready for the proxy. The value is a [`SecretString`], so `Debug`
/// never prints it.
#[derive(Debug, Clone)]
pub struct LoadedSecret {
    pub info: SecretInfo,
    pub value: SecretString,
}

impl LoadedSecret {
    /// Whether a request to `host` and `path` is the one this secret is bound to.
    pub fn bound_to(&self, host: &str, path: &str) -> bool {
        if !self.info.host.eq_ignore_ascii_case(host) {
            return false;
        }
        match &self.info.path_prefix {
            None => true,
            Some(p) if p.ends_with('/') => path.starts_with(p.as_str()),
            Some(p) => path == p || path.starts_with(&format!("{p}/")),
        }
    }
}

/// The store in one config directory.
#[derive(Debug, Clone)]
pub struct SecretStore {
    dir: PathBuf,
}

impl SecretStore {
    /// The store in `config_dir` (files are created on first `set`).
    pub fn new(config_dir: &Path) -> SecretStore {
        SecretStore {
            dir: config_dir.to_path_buf(),
        }
    }

    fn file(&self) -> PathBuf {
        self.dir.join(SECRETS_FILE)
    }

    fn read(&self) -> Result<FileFormat, SecretsError> {
        let path = self.file();
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(FileFormat {
                    version: 1,
                    secrets: vec![],
                })
            }
            Err(source) => {
                return Err(SecretsError::Io {
                    what: "read",
                    path,
                    source,
                })
            }
        };
        serde_json::from_str(&text).map_err(|e| SecretsError::Damaged {
            path,
            message: e.to_string(),
        })
    }

    fn write(&self, f: &FileFormat) -> Result<(), SecretsError> {
        let path = self.file();
        let text = serde_json::to_string_pretty(f).map_err(|e| SecretsError::Damaged {
            path: path.clone(),
            message: e.to_string(),
        })?;
        crate::fsutil::write_private_atomic(&path, text.as_bytes()).map_err(|source| {
            SecretsError::Io {
                what: "write",
                path,
                source,
            }
        })
    }

    fn cipher(&self, create: bool) -> Result<XChaCha20Poly1305, SecretsError> {
        let path = self.dir.join(SECRETS_KEY_FILE);
        let key = match std::fs::read(&path) {
            Ok(k) => k,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                let mut k = vec![0u8; 32];
                getrandom::fill(&mut k).map_err(|e| SecretsError::Random(e.to_string()))?;
                crate::fsutil::create_private(&path, &k).map_err(|source| SecretsError::Io {
                    what: "create",
                    path: path.clone(),
                    source,
                })?;
                k
            }
            Err(source) => {
                return Err(SecretsError::Io {
                    what: "read",
                    path,
                    source,
                })
            }
        };
        XChaCha20Poly1305::new_from_slice(&key).map_err(|_| SecretsError::Damaged {
            path,
            message: "the key must be exactly 32 bytes".into(),
        })
    }

    /// Store `value` for `name`, bound to `host` (and `path_prefix`), sent through
    /// `header`. Setting an existing name replaces it but keeps its placeholder, so runs
    /// that already hold the placeholder keep working. Returns the placeholder.
    pub fn set(
        &self,
        name: &str,
        host: &str,
        path_prefix: Option<&str>,
        header: HeaderTemplate,
        value: &SecretString,
    ) -> Result<String, SecretsError> {
        validate_name(name)?;
        let host = host.trim().to_ascii_lowercase();
        if host.is_empty()
            || host.contains(['/', ':', ' ', '*']) && host.parse::<std::net::IpAddr>().is_err()
        {
            return Err(SecretsError::BadHost(host));
        }
        if let Some(p) = path_prefix {
            if !p.starts_with('/') {
                return Err(SecretsError::BadPath(p.to_string()));
            }
        }
        let v = value.expose_secret();
        if v.is_empty() {
            return Err(SecretsError::BadValue("empty"));
        }
        if v.len() > MAX_SECRET_BYTES {
            return Err(SecretsError::BadValue("longer than 16 KiB"));
        }
        if v.chars().any(|c| c.is_control()) {
            // CR/LF would let the value split a header; other controls are never valid.
            return Err(SecretsError::BadValue("holding control characters"));
        }
        let cipher = self.cipher(true)?;
        let mut file = self.read()?;
        let placeholder = match file.secrets.iter().find(|e| e.name == name) {
            Some(e) => e.placeholder.clone(),
            None => new_placeholder()?,
        };
        let mut nonce = [0u8; 24];
        getrandom::fill(&mut nonce).map_err(|e| SecretsError::Random(e.to_string()))?;
        let mut entry = Entry {
            name: name.to_string(),
            host,
            path_prefix: path_prefix.map(str::to_string),
            header,
            placeholder: placeholder.clone(),
            nonce: hex::encode(nonce),
            ciphertext: String::new(),
        };
        let aad = entry.aad();
        let ct = cipher
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: v.as_bytes(),
                    aad: &aad,
                },
            )
            .map_err(|_| SecretsError::Decrypt {
                name: name.to_string(),
            })?;
        entry.ciphertext = hex::encode(ct);
        file.version = 1;
        file.secrets.retain(|e| e.name != name);
        file.secrets.push(entry);
        self.write(&file)?;
        Ok(placeholder)
    }

    /// Names, bindings and placeholders; never values.
    pub fn list(&self) -> Result<Vec<SecretInfo>, SecretsError> {
        Ok(self.read()?.secrets.iter().map(info).collect())
    }

    /// Remove `name`.
    pub fn remove(&self, name: &str) -> Result<(), SecretsError> {
        let mut file = self.read()?;
        let before = file.secrets.len();
        file.secrets.retain(|e| e.name != name);
        if file.secrets.len() == before {
            return Err(SecretsError::NotFound(name.to_string()));
        }
        self.write(&file)
    }

    /// Decrypt every secret for the proxy.
    pub fn load_all(&self) -> Result<Vec<LoadedSecret>, SecretsError> {
        let file = self.read()?;
        if file.secrets.is_empty() {
            return Ok(vec![]);
        }
        let cipher = self.cipher(false)?;
        let damaged = |m: &str| SecretsError::Damaged {
            path: self.file(),
            message: m.to_string(),
        };
        let mut out = Vec::new();
        for e in &file.secrets {
            let nonce = hex::decode(&e.nonce).map_err(|_| damaged("nonce is not hex"))?;
            if nonce.len() != 24 {
                return Err(damaged("nonce is not 24 bytes"));
            }
            let ct = hex::decode(&e.ciphertext).map_err(|_| damaged("ciphertext is not hex"))?;
            let aad = e.aad();
            let pt = cipher
                .decrypt(
                    XNonce::from_slice(&nonce),
                    Payload {
                        msg: &ct,
                        aad: &aad,
                    },
                )
                .map_err(|_| SecretsError::Decrypt {
                    name: e.name.clone(),
                })?;
            let value = String::from_utf8(pt).map_err(|_| SecretsError::Decrypt {
                name: e.name.clone(),
            })?;
            out.push(LoadedSecret {
                info: info(e),
                value: SecretString::from(value),
            });
        }
        Ok(out)
    }

    /// The placeholder of `name`, for `airlock exec --secret <name>`.
    pub fn placeholder(&self, name: &str) -> Result<String, SecretsError> {
        self.read()?
            .secrets
            .iter()
            .find(|e| e.name == name)
            .map(|e| e.placeholder.clone())
            .ok_or_else(|| SecretsError::NotFound(name.to_string()))
    }
}

fn info(e: &Entry) -> SecretInfo {
    SecretInfo {
        name: e.name.clone(),
        host: e.host.clone(),
        path_prefix: e.path_prefix.clone(),
        header: e.header.clone(),
        placeholder: e.placeholder.clone(),
    }
}

fn validate_name(name: &str) -> Result<(), SecretsError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c));
    if ok {
        Ok(())
    } else {
        Err(SecretsError::BadName(name.to_string()))
    }
}

fn new_placeholder() -> Result<String, SecretsError> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| SecretsError::Random(e.to_string()))?;
    Ok(format!("{PLACEHOLDER_PREFIX}{}", hex::encode(b)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn set_list_load_remove() {
        let dir = tempfile::tempdir().unwrap();
        let store = SecretStore::new(dir.path());
        let value = SecretString::from("s3cr3t-value-123".to_string());
        let ph = store
            .set(
                "GH",
                "api.github.com",
                Some("/repos"),
                HeaderTemplate::bearer(),
                &value,
            )
            .unwrap();
        assert!(ph.starts_with(PLACEHOLDER_PREFIX));
        let on_disk = std::fs::read_to_string(dir.path().join(SECRETS_FILE)).unwrap();
        assert!(!on_disk.contains("s3cr3t"), "value stored in clear");
        for f in [SECRETS_FILE, SECRETS_KEY_FILE] {
            let mode = std::fs::metadata(dir.path().join(f))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{f}");
        }
        // Re-setting keeps the placeholder.
        let ph2 = store
            .set(
                "GH",
                "api.github.com",
                None,
                HeaderTemplate::bearer(),
                &value,
            )
            .unwrap();
        assert_eq!(ph, ph2);
        let all = store.load_all().unwrap();
        assert_eq!(all[0].value.expose_secret(), "s3cr3t-value-123");
        assert!(!format!("{all:?}").contains("s3cr3t"));
        store.remove("GH").unwrap();
        assert!(matches!(store.remove("GH"), Err(SecretsError::NotFound(_))));
    }

    #[test]
    fn rebinding_by_editing_the_file_fails_to_decrypt() {
        let dir = tempfile::tempdir().unwrap();
        let store = SecretStore::new(dir.path());
        store
            .set(
                "T",
                "good.example",
                None,
                HeaderTemplate::bearer(),
                &SecretString::from("v".to_string()),
            )
            .unwrap();
        let path = dir.path().join(SECRETS_FILE);
        let edited = std::fs::read_to_string(&path)
            .unwrap()
            .replace("good.example", "evil.example");
        std::fs::write(&path, edited).unwrap();
        assert!(matches!(
            store.load_all(),
            Err(SecretsError::Decrypt { .. })
        ));
    }

    #[test]
    fn bad_input_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = SecretStore::new(dir.path());
        let v = SecretString::from("a\r\nX-Evil: 1".to_string());
        let err = store
            .set("T", "h.example", None, HeaderTemplate::bearer(), &v)
            .unwrap_err();
        assert!(!err.to_string().contains("X-Evil"));
        assert!(HeaderTemplate::parse("Authorization Bearer {}").is_err());
        assert!(HeaderTemplate::parse("Authorization: Bearer").is_err());
        assert_eq!(
            HeaderTemplate::parse("X-Api-Key: {}").unwrap(),
            HeaderTemplate {
                name: "x-api-key".into(),
                value: "{}".into()
            }
        );
        assert!(matches!(
            store.set(
                "bad name",
                "h",
                None,
                HeaderTemplate::bearer(),
                &SecretString::from("v".to_string())
            ),
            Err(SecretsError::BadName(_))
        ));
    }
}
