//! `[web]` checked at the host's start: where the page listens, in which regime, and the
//! `Host` and `Origin` values it answers to.
//!
//! Two regimes, chosen by `web.public_name` (not by the listening address, so the remote
//! one can be run, and tested, on loopback too):
//! - **local** (no `public_name`): plain HTTP on a loopback address only, logins by a
//!   one-time link from `airlock web`;
//! - **remote** (`public_name` set): HTTPS for that DNS name with the configured certificate
//!   and key, logins and approvals by passkey. Any address that is not loopback needs it,
//!   and the host refuses to start without a name, a certificate and a key.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use super::connections::{DEFAULT_MAX_CONNECTIONS, MAX_MAX_CONNECTIONS, MIN_MAX_CONNECTIONS};
use crate::config::WebSection;

/// How long a login lasts unless `[web] session_minutes` says otherwise.
pub const DEFAULT_SESSION: Duration = Duration::from_secs(12 * 3600);
/// The longest login `session_minutes` may ask for.
pub const MAX_SESSION: Duration = Duration::from_secs(7 * 24 * 3600);
/// Pages read a minute per login unless `[web] reads_per_minute` says otherwise: far more
/// than a person clicks, with the page's own polling (every few seconds) included.
pub const DEFAULT_READS_PER_MINUTE: u32 = 600;

/// `[web]` as the host serves it.
#[derive(Debug, Clone)]
pub struct WebSettings {
    /// The address asked for (its port may be 0; the bound one is in [`Bound`]).
    pub listen: SocketAddr,
    pub session: Duration,
    /// Pages read a minute per login, or per address before a login.
    pub reads_per_minute: u32,
    /// Connections held at once ([`super::connections`]).
    pub max_connections: usize,
    /// The remote regime's name and TLS files; `None` for the local regime.
    pub remote: Option<Remote>,
}

/// The remote regime: the public DNS name (the passkeys' relying party) and its TLS files.
#[derive(Debug, Clone)]
pub struct Remote {
    pub name: String,
    pub tls_cert: PathBuf,
    pub tls_key: PathBuf,
    /// The port the page is reached at, when not the listening one (`web.public_port`).
    pub public_port: Option<u16>,
}

/// The page's address once bound, and what requests must name to be answered.
#[derive(Debug, Clone)]
pub struct Bound {
    pub addr: SocketAddr,
    /// `Host` header values answered: locally the address itself and `localhost` at its
    /// port; remotely the public name (with its port unless it is 443).
    pub hosts: Vec<String>,
    /// `Origin` values answered: `http://` (local) or `https://` (remote) and each of `hosts`.
    pub origins: Vec<String>,
    /// The base of the login and enrolment links.
    pub base_url: String,
    /// The public name when the page is served remotely (over TLS, with passkeys).
    pub remote_name: Option<String>,
}

/// `[web]` checked, or `None` when it has no `listen` (no web page).
pub fn check(section: &WebSection) -> anyhow::Result<Option<WebSettings>> {
    let Some(listen) = section.listen.as_deref() else {
        for (key, set) in [
            ("public_name", section.public_name.is_some()),
            ("tls_cert", section.tls_cert.is_some()),
            ("tls_key", section.tls_key.is_some()),
        ] {
            if set {
                anyhow::bail!(
                    "airlock.toml: web.{key} is set, but web.listen is not, so there is no web page\nhelp: set web.listen = \"127.0.0.1:7464\", or remove web.{key}"
                );
            }
        }
        return Ok(None);
    };
    let addr: SocketAddr = listen.parse().map_err(|_| {
        anyhow::anyhow!(
            "airlock.toml: web.listen = {listen:?} is not an IP address with a port\nhelp: write web.listen = \"127.0.0.1:7464\" (or \"[::1]:7464\")"
        )
    })?;
    if let Some(name) = section.public_name.as_deref() {
        check_public_name(name)?;
    }
    let remote = match (&section.public_name, &section.tls_cert, &section.tls_key) {
        (None, None, None) if addr.ip().is_loopback() => None,
        (Some(name), Some(cert), Some(key)) => Some(Remote {
            name: name.to_ascii_lowercase(),
            tls_cert: cert.clone(),
            tls_key: key.clone(),
            public_port: section.public_port,
        }),
        _ => {
            let missing: Vec<&str> = [
                (
                    "web.public_name (a DNS name, never an IP)",
                    section.public_name.is_some(),
                ),
                ("web.tls_cert", section.tls_cert.is_some()),
                ("web.tls_key", section.tls_key.is_some()),
            ]
            .into_iter()
            .filter(|(_, ok)| !ok)
            .map(|(k, _)| k)
            .collect();
            if addr.ip().is_loopback() {
                anyhow::bail!(
                    "airlock.toml: the web page served remotely needs a public name with its TLS certificate and key together; missing: {}\nhelp: set all three of web.public_name, web.tls_cert and web.tls_key, or none of them for the page on loopback only",
                    missing.join(", ")
                );
            }
            anyhow::bail!(
                "airlock.toml: web.listen = {listen} is not a loopback address, and the web page off loopback needs TLS for a public name; missing: {}\nhelp: listen on 127.0.0.1 (reach it from another machine through an SSH tunnel), or set web.public_name, web.tls_cert and web.tls_key",
                missing.join(", ")
            );
        }
    };
    match section.public_port {
        Some(0) => anyhow::bail!(
            "airlock.toml: web.public_port = 0 is not a port\nhelp: give the port the page is reached at (e.g. 443), or remove web.public_port to use the listening one"
        ),
        Some(p) if remote.is_none() => anyhow::bail!(
            "airlock.toml: web.public_port = {p} is set, but the page is served on loopback only (no web.public_name), where it answers at its listening port\nhelp: remove web.public_port, or serve the page remotely with web.public_name, web.tls_cert and web.tls_key"
        ),
        _ => {}
    }
    let reads_per_minute = match section.reads_per_minute {
        None => DEFAULT_READS_PER_MINUTE,
        Some(0) => anyhow::bail!(
            "airlock.toml: web.reads_per_minute = 0 would refuse every page\nhelp: give the pages a login may read a minute (default {DEFAULT_READS_PER_MINUTE})"
        ),
        Some(n) => n,
    };
    let max_connections = match section.max_connections {
        None => DEFAULT_MAX_CONNECTIONS,
        Some(n) if (MIN_MAX_CONNECTIONS..=MAX_MAX_CONNECTIONS).contains(&n) => n,
        Some(n) => anyhow::bail!(
            "airlock.toml: web.max_connections = {n} is out of range\nhelp: give between {MIN_MAX_CONNECTIONS} (a browser opens several connections to the page at once) and {MAX_MAX_CONNECTIONS} (each is a file descriptor); the default is {DEFAULT_MAX_CONNECTIONS}"
        ),
    };
    let session = match section.session_minutes {
        None => DEFAULT_SESSION,
        Some(m) => {
            let d = Duration::from_secs(m.saturating_mul(60));
            if m == 0 || d > MAX_SESSION {
                anyhow::bail!(
                    "airlock.toml: web.session_minutes = {m} is out of range\nhelp: give between 1 and {} minutes; a login always expires",
                    MAX_SESSION.as_secs() / 60
                );
            }
            d
        }
    };
    Ok(Some(WebSettings {
        listen: addr,
        session,
        reads_per_minute,
        max_connections,
        remote,
    }))
}

/// A public name must be a DNS name: passkeys are bound to it, and an IP cannot carry one.
fn check_public_name(name: &str) -> anyhow::Result<()> {
    let bare = name.trim_start_matches('[').trim_end_matches(']');
    if bare.parse::<IpAddr>().is_ok() {
        anyhow::bail!(
            "airlock.toml: web.public_name = {name:?} is an IP address, and it must be a DNS name: passkeys are bound to a name, never to an IP\nhelp: give the DNS name the page is reached by, e.g. web.public_name = \"airlock.example.org\""
        );
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if name.len() > 253 || !name.contains('.') || !name.split('.').all(label_ok) {
        anyhow::bail!(
            "airlock.toml: web.public_name = {name:?} is not a DNS name with a dot (no port, no scheme)\nhelp: give the DNS name the page is reached by, e.g. web.public_name = \"airlock.example.org\""
        );
    }
    Ok(())
}

impl Bound {
    /// What requests to `addr` must name.
    pub fn at(addr: SocketAddr) -> Bound {
        let port = addr.port();
        let own = match addr.ip() {
            IpAddr::V4(ip) => format!("{ip}:{port}"),
            IpAddr::V6(ip) => format!("[{ip}]:{port}"),
        };
        // `localhost` is always this machine to a browser, so it cannot be an attacker's
        // rebound name.
        let hosts = vec![own.clone(), format!("localhost:{port}")];
        let origins = hosts.iter().map(|h| format!("http://{h}")).collect();
        Bound {
            addr,
            hosts,
            origins,
            base_url: format!("http://{own}"),
            remote_name: None,
        }
    }

    /// What requests to `addr` must name when it is served as `name` over TLS: only that
    /// name, at `public_port` (a router forwards it to `addr`) or else the bound port, so
    /// neither a bare IP, a rebound name nor the forwarded-to port reaches it.
    pub fn remote(addr: SocketAddr, name: &str, public_port: Option<u16>) -> Bound {
        let port = public_port.unwrap_or(addr.port());
        let mut hosts = vec![format!("{name}:{port}")];
        if port == 443 {
            hosts.insert(0, name.to_string());
        }
        let origins = hosts.iter().map(|h| format!("https://{h}")).collect();
        Bound {
            addr,
            base_url: format!("https://{}", hosts[0]),
            hosts,
            origins,
            remote_name: Some(name.to_string()),
        }
    }

    /// Whether the page is served remotely (TLS, passkeys).
    pub fn is_remote(&self) -> bool {
        self.remote_name.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(listen: &str) -> WebSection {
        WebSection {
            listen: Some(listen.into()),
            ..WebSection::default()
        }
    }

    #[test]
    fn loopback_is_served_and_anything_else_is_refused_with_what_is_missing() {
        assert!(check(&WebSection::default()).unwrap().is_none());
        let s = check(&section("127.0.0.1:0")).unwrap().unwrap();
        assert_eq!(s.session, DEFAULT_SESSION);
        assert!(s.remote.is_none());
        assert!(check(&section("[::1]:7464")).unwrap().is_some());
        let e = check(&section("0.0.0.0:7464")).unwrap_err().to_string();
        assert!(e.contains("not a loopback address"), "{e}");
        assert!(e.contains("web.tls_cert"), "{e}");
        let mut full = section("192.0.2.1:443");
        full.public_name = Some("Airlock.example.org".into());
        full.tls_cert = Some("/c.pem".into());
        full.tls_key = Some("/k.pem".into());
        let r = check(&full).unwrap().unwrap().remote.unwrap();
        assert_eq!(r.name, "airlock.example.org");
        full.public_name = Some("192.0.2.1".into());
        let e = check(&full).unwrap_err().to_string();
        assert!(e.contains("never to an IP"), "{e}");
        full.public_name = Some("[::1]".into());
        let e = check(&full).unwrap_err().to_string();
        assert!(e.contains("is an IP address"), "{e}");
        full.public_name = Some("airlock.example.org:443".into());
        let e = check(&full).unwrap_err().to_string();
        assert!(e.contains("not a DNS name"), "{e}");
        let e = check(&section("localhost:80")).unwrap_err().to_string();
        assert!(e.contains("is not an IP address with a port"), "{e}");
    }

    #[test]
    fn the_remote_regime_follows_the_public_name_even_on_loopback() {
        let mut s = section("127.0.0.1:0");
        s.public_name = Some("airlock.test".into());
        let e = check(&s).unwrap_err().to_string();
        assert!(e.contains("web.tls_cert, web.tls_key"), "{e}");
        s.tls_cert = Some("/c.pem".into());
        s.tls_key = Some("/k.pem".into());
        assert!(check(&s).unwrap().unwrap().remote.is_some());
        let b = Bound::remote("127.0.0.1:5000".parse().unwrap(), "airlock.test", None);
        assert_eq!(b.hosts, ["airlock.test:5000"]);
        assert_eq!(b.origins, ["https://airlock.test:5000"]);
        assert_eq!(b.base_url, "https://airlock.test:5000");
        let b = Bound::remote("0.0.0.0:443".parse().unwrap(), "airlock.test", None);
        assert_eq!(b.base_url, "https://airlock.test");
        assert!(b.hosts.contains(&"airlock.test:443".to_string()));
    }

    #[test]
    fn a_public_port_replaces_the_listening_one_in_the_origin() {
        let mut s = section("127.0.0.1:0");
        s.public_port = Some(8443);
        let e = check(&s).unwrap_err().to_string();
        assert!(
            e.contains("web.public_port = 8443") && e.contains("loopback only"),
            "{e}"
        );
        s.public_name = Some("airlock.test".into());
        s.tls_cert = Some("/c.pem".into());
        s.tls_key = Some("/k.pem".into());
        let r = check(&s).unwrap().unwrap().remote.unwrap();
        assert_eq!(r.public_port, Some(8443));
        s.public_port = Some(0);
        let e = check(&s).unwrap_err().to_string();
        assert!(e.contains("web.public_port = 0"), "{e}");
        let b = Bound::remote("127.0.0.1:5000".parse().unwrap(), "airlock.test", Some(443));
        assert_eq!(b.hosts, ["airlock.test", "airlock.test:443"]);
        assert_eq!(b.base_url, "https://airlock.test");
        let b = Bound::remote(
            "127.0.0.1:5000".parse().unwrap(),
            "airlock.test",
            Some(8443),
        );
        assert_eq!(b.hosts, ["airlock.test:8443"]);
        assert_eq!(b.origins, ["https://airlock.test:8443"]);
    }

    #[test]
    fn reads_a_minute_default_and_zero_is_refused() {
        let mut s = section("127.0.0.1:0");
        assert_eq!(
            check(&s).unwrap().unwrap().reads_per_minute,
            DEFAULT_READS_PER_MINUTE
        );
        s.reads_per_minute = Some(0);
        let e = check(&s).unwrap_err().to_string();
        assert!(e.contains("web.reads_per_minute = 0"), "{e}");
        s.reads_per_minute = Some(30);
        assert_eq!(check(&s).unwrap().unwrap().reads_per_minute, 30);
    }

    #[test]
    fn max_connections_default_and_out_of_range_named() {
        let mut s = section("127.0.0.1:0");
        assert_eq!(
            check(&s).unwrap().unwrap().max_connections,
            DEFAULT_MAX_CONNECTIONS
        );
        for bad in [0, MIN_MAX_CONNECTIONS - 1, MAX_MAX_CONNECTIONS + 1] {
            s.max_connections = Some(bad);
            let e = check(&s).unwrap_err().to_string();
            assert!(e.contains(&format!("web.max_connections = {bad}")), "{e}");
        }
        s.max_connections = Some(24);
        assert_eq!(check(&s).unwrap().unwrap().max_connections, 24);
    }

    #[test]
    fn the_bound_address_names_its_hosts_and_origins() {
        let b = Bound::at("127.0.0.1:5000".parse().unwrap());
        assert_eq!(b.hosts, ["127.0.0.1:5000", "localhost:5000"]);
        assert_eq!(b.origins[0], "http://127.0.0.1:5000");
        let b = Bound::at("[::1]:5000".parse().unwrap());
        assert_eq!(b.hosts[0], "[::1]:5000");
    }
}
