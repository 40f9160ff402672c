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
    #[error("invalid host {0:?}\nhelp: give the host (and port) the secret is for, such as api.github.com or 127.0.0.1:8443, with --port agreeing")]
    BadHost(String),
    #[error("invalid scheme {0:?}\nhelp: a secret is sent over https (the default) or http")]
    BadScheme(String),
    #[error("invalid path prefix {0:?}\nhelp: a path prefix starts with '/' and holds no '.' or '..' segment, no '//', no backslash and no %-escape of '/', '\\', '.', ';' or '%'")]
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
    /// `http` or `https`. Absent in entries stored before bindings named a scheme and
    /// port: those are bound to https on 443 (see [`SecretInfo::legacy`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    scheme: Option<String>,
    host: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    port: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    path_prefix: Option<String>,
    header: HeaderTemplate,
    placeholder: String,
    nonce: String,
    ciphertext: String,
}

impl Entry {
    fn aad(&self) -> Vec<u8> {
        let prefix = self.path_prefix.as_deref().unwrap_or("");
        let mut fields = vec![
            "airlock-secret-v1",
            &self.name,
            &self.host,
            prefix,
            &self.header.name,
            &self.header.value,
            &self.placeholder,
        ];
        // Entries that name a scheme and port bind them too, so neither can be edited
        // in the file; older entries keep the AAD they were encrypted with.
        let port = self.port.map(|p| p.to_string());
        if let (Some(scheme), Some(port)) = (&self.scheme, &port) {
            fields[0] = "airlock-secret-v2";
            fields.push(scheme);
            fields.push(port);
        }
        fields.join("\0").into_bytes()
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileFormat {
    version: u32,
    secrets: Vec<Entry>,
}

/// Where a secret may be sent: one scheme, host and port, optionally only below a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// `http` or `https`.
    pub scheme: String,
    /// Normalized as the Gate normalizes request hosts.
    pub host: String,
    pub port: u16,
    pub path_prefix: Option<String>,
}

impl Binding {
    /// A binding from what an operator typed: `host[:port]` (the same host parser as
    /// requests and net rules), an optional scheme (default https) and an optional port
    /// (default the scheme's: 443 or 80; a port in `host` counts as given).
    pub fn parse(
        host: &str,
        scheme: Option<&str>,
        port: Option<u16>,
        path_prefix: Option<&str>,
    ) -> Result<Binding, SecretsError> {
        let scheme = scheme.unwrap_or("https").to_ascii_lowercase();
        if scheme != "https" && scheme != "http" {
            return Err(SecretsError::BadScheme(scheme));
        }
        let hp = airlock_core::url_facts::parse_host_port(host)
            .map_err(|_| SecretsError::BadHost(host.to_string()))?;
        let port = match (hp.port, port) {
            (Some(a), Some(b)) if a != b => return Err(SecretsError::BadHost(host.to_string())),
            (Some(p), _) | (None, Some(p)) => p,
            (None, None) if scheme == "http" => 80,
            (None, None) => 443,
        };
        let b = Binding {
            scheme,
            host: hp.host,
            port,
            path_prefix: path_prefix.map(str::to_string),
        };
        b.validate()?;
        Ok(b)
    }

    /// Check a binding however it was built: a known scheme, a port, a host already in
    /// the form requests are compared in, and an unambiguous path prefix.
    pub fn validate(&self) -> Result<(), SecretsError> {
        if self.scheme != "https" && self.scheme != "http" {
            return Err(SecretsError::BadScheme(self.scheme.clone()));
        }
        let spelled = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        match airlock_core::url_facts::parse_host_port(&spelled) {
            Ok(hp) if hp.host == self.host && hp.port.is_none() && self.port != 0 => {}
            _ => return Err(SecretsError::BadHost(self.host.clone())),
        }
        if let Some(p) = &self.path_prefix {
            if !p.starts_with('/') || airlock_core::url_facts::ambiguous_path(p).is_some() {
                return Err(SecretsError::BadPath(p.to_string()));
            }
        }
        Ok(())
    }

    /// `https://api.example:443/v1`, for listings.
    pub fn display(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        format!(
            "{}://{host}:{}{}",
            self.scheme,
            self.port,
            self.path_prefix.as_deref().unwrap_or("")
        )
    }
}

/// What `airlock secret list` shows: never the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretInfo {
    pub name: String,
    pub binding: Binding,
    pub header: HeaderTemplate,
    /// The token the sandbox gets in place of the value.
    pub placeholder: String,
    /// Stored before bindings named a scheme and port; now bound to https on 443.
    pub legacy: bool,
}

/// A decrypted secret, ready for the proxy. The value is a [`SecretString`], so `Debug`
/// never prints it.
#[derive(Debug, Clone)]
pub struct LoadedSecret {
    pub info: SecretInfo,
    pub value: SecretString,
}

impl LoadedSecret {
    /// Whether a request to `scheme://host:port` + `path` is the one this secret is bound
    /// to. `host` and `path` are the normalized forms the Gate decided on.
    pub fn bound_to(&self, scheme: &str, host: &str, port: u16, path: &str) -> bool {
        let b = &self.info.binding;
        if b.scheme != scheme || b.host != host || b.port != port {
            return false;
        }
        match &b.path_prefix {
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

    /// Hold the store's lock across a whole read-modify-write (see
    /// [`crate::fsutil::FileLock`]), so that concurrent `set`/`rm` never undo each other.
    fn lock(&self) -> Result<crate::fsutil::FileLock, SecretsError> {
        let path = self.file();
        crate::fsutil::FileLock::acquire(&path).map_err(|source| SecretsError::Io {
            what: "lock",
            path,
            source,
        })
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

    /// Store `value` for `name`, bound to `binding`, sent through `header`. Setting an
    /// existing name replaces it but keeps its placeholder, so runs that already hold the
    /// placeholder keep working. Returns the placeholder.
    pub fn set(
        &self,
        name: &str,
        binding: &Binding,
        header: HeaderTemplate,
        value: &SecretString,
    ) -> Result<String, SecretsError> {
        validate_name(name)?;
        binding.validate()?;
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
        let _lock = self.lock()?;
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
            scheme: Some(binding.scheme.clone()),
            host: binding.host.clone(),
            port: Some(binding.port),
            path_prefix: binding.path_prefix.clone(),
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
        let _lock = self.lock()?;
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
    let legacy = e.scheme.is_none() || e.port.is_none();
    SecretInfo {
        name: e.name.clone(),
        binding: Binding {
            // An entry from before bindings named a scheme and port goes to https on 443
            // only: what such a binding was meant for, and never plain http.
            scheme: e.scheme.clone().unwrap_or_else(|| "https".into()),
            host: e.host.clone(),
            port: e.port.unwrap_or(443),
            path_prefix: e.path_prefix.clone(),
        },
        header: e.header.clone(),
        placeholder: e.placeholder.clone(),
        legacy,
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

    fn binding(host: &str, prefix: Option<&str>) -> Binding {
        Binding::parse(host, None, None, prefix).unwrap()
    }

    #[test]
    fn set_list_load_remove() {
        let dir = tempfile::tempdir().unwrap();
        let store = SecretStore::new(dir.path());
        let value = SecretString::from("s3cr3t-value-123".to_string());
        let ph = store
            .set(
                "GH",
                &binding("api.github.com", Some("/repos")),
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
                &binding("api.github.com", None),
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
                &binding("good.example", None),
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
            .set(
                "T",
                &binding("h.example", None),
                HeaderTemplate::bearer(),
                &v,
            )
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
                &binding("h", None),
                HeaderTemplate::bearer(),
                &SecretString::from("v".to_string())
            ),
            Err(SecretsError::BadName(_))
        ));
    }
}

#[cfg(test)]
mod binding_tests {
    use super::*;

    #[test]
    fn i3_a_binding_names_scheme_and_port() {
        let b = Binding::parse("API.Example.", None, None, Some("/v1")).unwrap();
        assert_eq!(b.display(), "https://api.example:443/v1");
        let b = Binding::parse("api.example", Some("http"), None, None).unwrap();
        assert_eq!((b.scheme.as_str(), b.port), ("http", 80));
        let b = Binding::parse("[::1]:8443", None, None, None).unwrap();
        assert_eq!((b.host.as_str(), b.port), ("::1", 8443));
        assert_eq!(
            Binding::parse("2130706433", None, Some(9), None)
                .unwrap()
                .host,
            "127.0.0.1"
        );
        for (host, scheme, port, prefix) in [
            ("api.example", Some("ftp"), None, None),
            ("api.example:80", None, Some(81), None),
            ("user@api.example", None, None, None),
            ("api.example", None, None, Some("/api//../x")),
            ("api.example", None, None, Some("/api/%2e%2e")),
            ("api.example", None, None, Some("api")),
        ] {
            assert!(
                Binding::parse(host, scheme, port, prefix).is_err(),
                "{host} {scheme:?} {port:?} {prefix:?}"
            );
        }
    }

    #[test]
    fn i3_entries_stored_without_scheme_and_port_are_bound_to_https_443() {
        let dir = tempfile::tempdir().unwrap();
        let store = SecretStore::new(dir.path());
        let b = Binding::parse("api.example", None, None, None).unwrap();
        store
            .set(
                "OLD",
                &b,
                HeaderTemplate::bearer(),
                &SecretString::from("v".to_string()),
            )
            .unwrap();
        // Rewrite the entry as an older version stored it: no scheme or port, and the
        // version-1 associated data.
        let path = dir.path().join(SECRETS_FILE);
        let mut file: FileFormat =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let cipher = store.cipher(false).unwrap();
        let e = &mut file.secrets[0];
        e.scheme = None;
        e.port = None;
        let nonce = [7u8; 24];
        let aad = e.aad();
        let ct = cipher
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: b"v",
                    aad: &aad,
                },
            )
            .unwrap();
        e.nonce = hex::encode(nonce);
        e.ciphertext = hex::encode(ct);
        std::fs::write(&path, serde_json::to_string(&file).unwrap()).unwrap();
        let all = store.load_all().unwrap();
        assert!(all[0].info.legacy);
        assert_eq!(all[0].info.binding.display(), "https://api.example:443");
        assert!(all[0].bound_to("https", "api.example", 443, "/"));
        assert!(!all[0].bound_to("http", "api.example", 80, "/"));
        assert!(!all[0].bound_to("https", "api.example", 8443, "/"));
        // Editing the port into a newer entry breaks its associated data.
        store
            .set(
                "NEW",
                &b,
                HeaderTemplate::bearer(),
                &SecretString::from("w".to_string()),
            )
            .unwrap();
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("\"port\": 443", "\"port\": 8080");
        std::fs::write(&path, text).unwrap();
        assert!(matches!(
            store.load_all(),
            Err(SecretsError::Decrypt { .. })
        ));
    }
}
