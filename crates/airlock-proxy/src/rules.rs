//! The operator's network rules (`<config>/net-rules.toml`).
//!
//! A rule allows one host (optionally one port), optionally only some methods and a path
//! prefix; it may ask before each request, or mark the host pass-through (tunnelled without
//! interception, decided on host and port alone). `allow_private` lists the exact
//! `addr:port` pairs the SSRF guard lets through although they are loopback or private.
//!
//! ```toml
//! allow_private = ["127.0.0.1:8443"]
//!
//! [[rule]]
//! id = 1
//! host = "api.github.com"
//! methods = ["GET", "HEAD"]
//! path_prefix = "/repos/"
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// File name of the rules inside the config directory.
pub const RULES_FILE: &str = "net-rules.toml";

/// Methods an HTTP request may carry (the tunnel pseudo-method `CONNECT` is implied by
/// pass-through rules and never listed).
const KNOWN_METHODS: &[&str] = &[
    "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE",
];

/// All operator network rules.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetRules {
    /// Exact `addr:port` pairs that may be reached although the address is loopback,
    /// private, link-local or otherwise refused by the SSRF guard.
    #[serde(default)]
    pub allow_private: Vec<SocketAddr>,
    #[serde(default, rename = "rule")]
    pub rules: Vec<NetRule>,
}

/// One allow rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetRule {
    /// Stable number; the Cedar policy id is `net.rule.<id>`.
    pub id: u32,
    /// Lower-case host name or IP literal; `*.example.com` matches any subdomain.
    pub host: String,
    /// Only this port; without it, 443 for https and 80 for http.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// Allowed methods (upper case); empty means any method.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
    /// Only paths equal to this prefix or below it (`/p` matches `/p` and `/p/...`;
    /// `/p/` matches only below).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_prefix: Option<String>,
    /// Ask a human before each matching request.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ask: bool,
    /// Tunnel TLS without interception; decided on host and port alone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pass_through: bool,
}

/// A problem with the rules file or a rule given on the command line.
#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}\nhelp: see `airlock net list`; fix or remove the offending entry")]
    Parse { path: PathBuf, message: String },
    #[error("rule {id}: {message}\nhelp: {help}")]
    Invalid {
        id: u32,
        message: String,
        help: &'static str,
    },
    /// A rule in the file at `path` is invalid.
    #[error("{path}: {source}")]
    InFile {
        path: PathBuf,
        source: Box<RulesError>,
    },
    #[error("no rule {0}\nhelp: `airlock net list` shows the rule numbers")]
    NoSuchRule(String),
}

impl NetRules {
    /// Load `<config>/net-rules.toml`; a missing file means no rules.
    pub fn load(config_dir: &Path) -> Result<NetRules, RulesError> {
        let path = config_dir.join(RULES_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(NetRules::default()),
            Err(source) => return Err(RulesError::Read { path, source }),
        };
        Self::parse(&text, &path)
    }

    /// Parse rules text; `path` is only used in messages.
    pub fn parse(text: &str, path: &Path) -> Result<NetRules, RulesError> {
        let rules: NetRules = toml::from_str(text).map_err(|e| RulesError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        // The file's name leads, so an operator knows which file to fix.
        rules.validate().map_err(|e| RulesError::InFile {
            path: path.to_path_buf(),
            source: Box::new(e),
        })?;
        Ok(rules)
    }

    /// Replace the rules file with these rules (under the file's lock). Editing commands
    /// use [`NetRules::update`] instead, so that a concurrent edit is never lost.
    pub fn save(&self, config_dir: &Path) -> Result<(), RulesError> {
        let path = config_dir.join(RULES_FILE);
        let _lock = lock(&path)?;
        self.save_locked(config_dir)
    }

    /// Read, change and write the rules file as one step: the file's lock is held from
    /// the read to the rename, so edits from processes running at once all land. When
    /// `edit` fails, nothing is written.
    pub fn update<T, E>(
        config_dir: &Path,
        edit: impl FnOnce(&mut NetRules) -> Result<T, E>,
    ) -> Result<T, E>
    where
        E: From<RulesError>,
    {
        let path = config_dir.join(RULES_FILE);
        let _lock = lock(&path)?;
        let mut rules = NetRules::load(config_dir)?;
        let out = edit(&mut rules)?;
        rules.save_locked(config_dir)?;
        Ok(out)
    }

    /// Write the rules atomically (temp file, fsync, rename) with mode 0600; the caller
    /// holds the lock.
    fn save_locked(&self, config_dir: &Path) -> Result<(), RulesError> {
        self.validate()?;
        let path = config_dir.join(RULES_FILE);
        let text = toml::to_string_pretty(self).map_err(|e| RulesError::Parse {
            path: path.clone(),
            message: e.to_string(),
        })?;
        crate::fsutil::write_private_atomic(&path, text.as_bytes())
            .map_err(|source| RulesError::Write { path, source })
    }

    /// Check every rule; names the first bad one.
    pub fn validate(&self) -> Result<(), RulesError> {
        let mut seen = std::collections::BTreeSet::new();
        for r in &self.rules {
            if !seen.insert(r.id) {
                return Err(invalid(
                    r.id,
                    "the rule number is used twice",
                    "give each [[rule]] its own id",
                ));
            }
            r.validate()?;
        }
        Ok(())
    }

    /// Add `rule` with the next free id and return that id.
    pub fn add(&mut self, mut rule: NetRule) -> Result<u32, RulesError> {
        rule.id = self.rules.iter().map(|r| r.id).max().unwrap_or(0) + 1;
        rule.validate()?;
        let id = rule.id;
        self.rules.push(rule);
        Ok(id)
    }

    /// Remove the rule named `which`: its number, `net.rule.<n>`, or its exact host.
    pub fn revoke(&mut self, which: &str) -> Result<Vec<NetRule>, RulesError> {
        let num = which
            .strip_prefix("net.rule.")
            .unwrap_or(which)
            .parse::<u32>()
            .ok();
        let host = NetRule::parse_target(which)
            .map(|(h, _)| h)
            .unwrap_or_else(|_| which.to_ascii_lowercase());
        let (gone, kept): (Vec<_>, Vec<_>) = self
            .rules
            .drain(..)
            .partition(|r| Some(r.id) == num || r.host == host);
        self.rules = kept;
        if gone.is_empty() {
            return Err(RulesError::NoSuchRule(which.to_string()));
        }
        Ok(gone)
    }

    /// The pass-through rule for `host:port`, if any.
    pub fn pass_through_for(&self, host: &str, port: u16) -> Option<&NetRule> {
        self.rules
            .iter()
            .find(|r| r.pass_through && r.matches_host(host) && r.port.unwrap_or(443) == port)
    }
}

impl NetRule {
    /// A rule for `host` with no other restriction (id assigned by [`NetRules::add`]).
    pub fn for_host(host: &str) -> NetRule {
        NetRule {
            id: 0,
            host: host.to_ascii_lowercase(),
            port: None,
            methods: Vec::new(),
            path_prefix: None,
            ask: false,
            pass_through: false,
        }
    }

    /// Parse `host[:port]` as typed on the command line, with the same host parser the
    /// Gate applies to requests (so `2130706433` is `127.0.0.1`, `[::1]:8080` is `::1`
    /// port 8080, and `API.Example.com.` is `api.example.com`). A leading `*.` makes a
    /// wildcard over subdomains of the host that follows.
    pub fn parse_target(target: &str) -> Result<(String, Option<u16>), RulesError> {
        let (wildcard, rest) = match target.trim().strip_prefix("*.") {
            Some(r) => (true, r),
            None => (false, target.trim()),
        };
        let hp = airlock_core::url_facts::parse_host_port(rest).map_err(|e| RulesError::Invalid {
            id: 0,
            message: e.to_string().lines().next().unwrap_or("").to_string(),
            help: "write the target as host or host:port, e.g. api.github.com, *.example.com, 127.0.0.1:8443 or [::1]:8080",
        })?;
        if wildcard && hp.ip_literal {
            return Err(RulesError::Invalid {
                id: 0,
                message: format!("{target:?}: a wildcard needs a host name, not an IP address"),
                help: "drop the '*.' or name the host",
            });
        }
        let host = if wildcard {
            format!("*.{}", hp.host)
        } else {
            hp.host
        };
        Ok((host, hp.port))
    }

    fn validate(&self) -> Result<(), RulesError> {
        // The host must already be in the one form requests are compared in; a host the
        // request parser spells differently (`2130706433`, `Example.com.`) never matched.
        let spelled = if self.host.contains(':') && !self.host.starts_with('[') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        match NetRule::parse_target(&spelled) {
            Ok((h, None)) if h == self.host => {}
            Ok((h, None)) => {
                return Err(RulesError::Invalid {
                    id: self.id,
                    message: format!(
                        "host {:?} is written {h:?} by the request parser, so the rule never matched",
                        self.host
                    ),
                    help: "write the host in that form (lower case, punycode, dotted IPv4, IPv6 without brackets)",
                })
            }
            _ => {
                return Err(invalid(
                    self.id,
                    &format!("host {:?} is not a host name or IP literal", self.host),
                    "use a plain host such as api.github.com, *.example.com or 127.0.0.1 (IDN hosts in punycode)",
                ))
            }
        }
        if self.port == Some(0) {
            return Err(invalid(self.id, "port 0", "use a port from 1 to 65535"));
        }
        for m in &self.methods {
            if !KNOWN_METHODS.contains(&m.as_str()) {
                return Err(invalid(
                    self.id,
                    &format!("unknown method {m:?}"),
                    "use upper-case HTTP methods such as GET,HEAD,POST",
                ));
            }
        }
        if let Some(p) = &self.path_prefix {
            if !p.starts_with('/') || p.contains(['*', '"', '\\', '?', '#']) {
                return Err(invalid(
                    self.id,
                    &format!("path prefix {p:?} must start with '/' and hold no '*', '?', '#', quote or backslash"),
                    "write the prefix as a plain path such as /repos/",
                ));
            }
        }
        if self.pass_through && (!self.methods.is_empty() || self.path_prefix.is_some()) {
            return Err(invalid(
                self.id,
                "a pass-through host is tunnelled without interception, so its methods and paths cannot be seen",
                "drop --methods/--path-prefix, or drop --pass-through to have them enforced",
            ));
        }
        Ok(())
    }

    /// Whether `host` (lower case) is this rule's host.
    pub fn matches_host(&self, host: &str) -> bool {
        match self.host.strip_prefix("*.") {
            Some(suffix) => host.len() > suffix.len() + 1 && host.ends_with(&format!(".{suffix}")),
            None => self.host == host,
        }
    }

    /// One-line description for listings and policy reasons.
    pub fn describe(&self) -> String {
        let mut s = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if let Some(p) = self.port {
            s.push_str(&format!(":{p}"));
        }
        if !self.methods.is_empty() {
            s.push_str(&format!(" methods {}", self.methods.join(",")));
        }
        if let Some(p) = &self.path_prefix {
            s.push_str(&format!(" path {p}"));
        }
        if self.ask {
            s.push_str(" (ask)");
        }
        if self.pass_through {
            s.push_str(" (pass-through)");
        }
        s
    }
}

fn lock(path: &Path) -> Result<crate::fsutil::FileLock, RulesError> {
    crate::fsutil::FileLock::acquire(path).map_err(|source| RulesError::Write {
        path: path.to_path_buf(),
        source,
    })
}

fn invalid(id: u32, message: &str, help: &'static str) -> RulesError {
    RulesError::Invalid {
        id,
        message: message.to_string(),
        help,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse() {
        assert_eq!(
            NetRule::parse_target("API.github.com").unwrap(),
            ("api.github.com".into(), None)
        );
        assert_eq!(
            NetRule::parse_target("127.0.0.1:8443").unwrap(),
            ("127.0.0.1".into(), Some(8443))
        );
        assert_eq!(
            NetRule::parse_target("[::1]:80").unwrap(),
            ("::1".into(), Some(80))
        );
        assert!(NetRule::parse_target("https://x.com/").is_err());
        assert!(NetRule::parse_target("x.com:99999").is_err());
        assert_eq!(
            NetRule::parse_target("*.Example.COM").unwrap(),
            ("*.example.com".into(), None)
        );
        assert!(NetRule::parse_target("*.127.0.0.1").is_err());
    }

    #[test]
    fn i3_rule_hosts_are_spelled_as_the_request_parser_spells_them() {
        for (typed, host, port) in [
            ("2130706433", "127.0.0.1", None),
            ("0x7f000001", "127.0.0.1", None),
            ("[::1]:8080", "::1", Some(8080)),
            ("Api.Example.com.", "api.example.com", None),
            ("bücher.example", "xn--bcher-kva.example", None),
        ] {
            assert_eq!(
                NetRule::parse_target(typed).unwrap(),
                (host.to_string(), port),
                "{typed}"
            );
        }
        for bad in [
            "user@api.example",
            "api.example:0",
            "api.example:70000",
            "::1:8080",
        ] {
            let err = NetRule::parse_target(bad).unwrap_err().to_string();
            assert!(err.contains("help:"), "{bad}: {err}");
        }
        let mut r = NetRule::for_host("::1");
        r.port = Some(8080);
        assert_eq!(r.describe(), "[::1]:8080");
        // A file written before hosts were normalized is refused with the right spelling.
        let err = NetRules::parse(
            "[[rule]]\nid = 1\nhost = \"2130706433\"\n",
            Path::new("n.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("\"127.0.0.1\"") && err.contains("help:"),
            "{err}"
        );
    }

    #[test]
    fn add_revoke_and_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let mut rules = NetRules::default();
        let a = rules.add(NetRule::for_host("a.example")).unwrap();
        let mut b = NetRule::for_host("b.example");
        b.methods = vec!["GET".into()];
        let b = rules.add(b).unwrap();
        assert_eq!((a, b), (1, 2));
        rules.allow_private.push("127.0.0.1:8443".parse().unwrap());
        rules.save(dir.path()).unwrap();
        let mut loaded = NetRules::load(dir.path()).unwrap();
        assert_eq!(loaded, rules);
        assert_eq!(loaded.revoke("net.rule.1").unwrap()[0].host, "a.example");
        assert!(matches!(loaded.revoke("1"), Err(RulesError::NoSuchRule(_))));
        assert_eq!(loaded.revoke("b.example").unwrap().len(), 1);
    }

    #[test]
    fn bad_rules_name_the_problem() {
        let err = NetRules::parse(
            "[[rule]]\nid = 1\nhost = \"x\"\nmethods = [\"get\"]\n",
            Path::new("n.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("unknown method \"get\"") && err.contains("help:"),
            "{err}"
        );
        let err = NetRules::parse(
            "[[rule]]\nid = 1\nhost = \"x\"\nbogus = 1\n",
            Path::new("n.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("n.toml") && err.contains("bogus"), "{err}");
        let mut r = NetRule::for_host("x.example");
        r.pass_through = true;
        r.methods = vec!["GET".into()];
        assert!(NetRules::default().add(r).is_err());
    }

    #[test]
    fn wildcard_hosts() {
        let r = NetRule::for_host("*.example.com");
        assert!(r.matches_host("api.example.com"));
        assert!(!r.matches_host("example.com"));
        assert!(!r.matches_host("evilexample.com"));
    }
}
