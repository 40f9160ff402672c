//! `[web]` checked at the host's start: where the page listens, and the `Host` and
//! `Origin` values it answers to. Anything but loopback is refused here, with what is
//! missing: the page off loopback needs a public DNS name, TLS and passkeys, and this
//! version has no passkeys yet, so it never serves off loopback.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::config::WebSection;

/// How long a login lasts unless `[web] session_minutes` says otherwise.
pub const DEFAULT_SESSION: Duration = Duration::from_secs(12 * 3600);
/// The longest login `session_minutes` may ask for.
pub const MAX_SESSION: Duration = Duration::from_secs(7 * 24 * 3600);

/// `[web]` as the host serves it.
#[derive(Debug, Clone)]
pub struct WebSettings {
    /// The address asked for (its port may be 0; the bound one is in [`Bound`]).
    pub listen: SocketAddr,
    pub session: Duration,
}

/// The page's address once bound, and what requests must name to be answered.
#[derive(Debug, Clone)]
pub struct Bound {
    pub addr: SocketAddr,
    /// `Host` header values answered: the address itself and `localhost` at its port.
    pub hosts: Vec<String>,
    /// `Origin` values answered: `http://` and each of `hosts`.
    pub origins: Vec<String>,
    /// The base of the login link.
    pub base_url: String,
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
    if !addr.ip().is_loopback() {
        let missing: Vec<&str> = [
            (
                "web.public_name (a DNS name, never an IP)",
                public_name_ok(section),
            ),
            ("web.tls_cert", section.tls_cert.is_some()),
            ("web.tls_key", section.tls_key.is_some()),
        ]
        .into_iter()
        .filter(|(_, ok)| !ok)
        .map(|(k, _)| k)
        .collect();
        if !missing.is_empty() {
            anyhow::bail!(
                "airlock.toml: web.listen = {listen} is not a loopback address, and the web page off loopback needs TLS for a public name; missing: {}\nhelp: listen on 127.0.0.1 (reach it from another machine through an SSH tunnel), or set web.public_name, web.tls_cert and web.tls_key",
                missing.join(", ")
            );
        }
        anyhow::bail!(
            "airlock.toml: web.listen = {listen} is not a loopback address; off loopback every login and approval must be a passkey assertion, and this version of Airlock has no passkey support yet, so it serves the page on loopback only\nhelp: listen on 127.0.0.1 and reach it from another machine through an SSH tunnel (ssh -L 7464:127.0.0.1:7464 host)"
        );
    }
    if section.tls_cert.is_some() || section.tls_key.is_some() || section.public_name.is_some() {
        anyhow::bail!(
            "airlock.toml: web.public_name, web.tls_cert and web.tls_key are for an address off loopback, and web.listen = {listen} is loopback\nhelp: remove them; on loopback the page is served over plain HTTP to this machine only"
        );
    }
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
    }))
}

/// A public name must be a DNS name: passkeys are bound to it, and an IP cannot carry one.
fn public_name_ok(section: &WebSection) -> bool {
    section
        .public_name
        .as_deref()
        .is_some_and(|n| !n.is_empty() && n.parse::<IpAddr>().is_err() && n.contains('.'))
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
        }
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
        assert!(check(&section("[::1]:7464")).unwrap().is_some());
        let e = check(&section("0.0.0.0:7464")).unwrap_err().to_string();
        assert!(e.contains("not a loopback address"), "{e}");
        assert!(e.contains("web.tls_cert"), "{e}");
        let mut full = section("192.0.2.1:443");
        full.public_name = Some("airlock.example.org".into());
        full.tls_cert = Some("/c.pem".into());
        full.tls_key = Some("/k.pem".into());
        let e = check(&full).unwrap_err().to_string();
        assert!(e.contains("passkey"), "{e}");
        full.public_name = Some("192.0.2.1".into());
        let e = check(&full).unwrap_err().to_string();
        assert!(e.contains("never an IP"), "{e}");
        let e = check(&section("localhost:80")).unwrap_err().to_string();
        assert!(e.contains("is not an IP address with a port"), "{e}");
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
