//! URL normalization: scheme, host (IDNA, lower case), port and path.
//!
//! Parsing follows the WHATWG URL standard (the `url` crate), which is what browsers and
//! most HTTP clients do, so the host the Gate judges is the host a client would contact.
//! Userinfo (`https://trusted.com@evil.com/`) is refused outright: it exists mostly to
//! confuse readers about which host is contacted.

use serde::Serialize;

/// Facts about a URL for the policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UrlFacts {
    pub scheme: String,
    /// ASCII (punycode) lower-case host, without brackets for IPv6.
    pub host: String,
    pub port: u16,
    pub path: String,
    pub query: String,
    /// The host is an IP literal (v4 or v6), not a name.
    pub ip_literal: bool,
}

/// Why a URL was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("invalid URL {url:?}: {reason}")]
    Invalid { url: String, reason: String },
    #[error("URL {url:?} carries userinfo (user:password@)\nhelp: put credentials in the secrets store; the proxy adds them at the boundary")]
    Userinfo { url: String },
    #[error("URL {url:?} has scheme {scheme:?}; only http and https are allowed")]
    Scheme { url: String, scheme: String },
    #[error("URL {url:?} has no host")]
    NoHost { url: String },
}

/// Parse an absolute http(s) URL into facts.
pub fn parse_url(raw: &str) -> Result<UrlFacts, UrlError> {
    let url = url::Url::parse(raw.trim()).map_err(|e| UrlError::Invalid {
        url: raw.to_string(),
        reason: e.to_string(),
    })?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(UrlError::Userinfo {
            url: raw.to_string(),
        });
    }
    let scheme = url.scheme().to_string();
    if scheme != "http" && scheme != "https" {
        return Err(UrlError::Scheme {
            url: raw.to_string(),
            scheme,
        });
    }
    let (host, ip_literal) = match url.host() {
        Some(url::Host::Domain(d)) => (d.trim_end_matches('.').to_ascii_lowercase(), false),
        Some(url::Host::Ipv4(ip)) => (ip.to_string(), true),
        Some(url::Host::Ipv6(ip)) => (ip.to_string(), true),
        None => {
            return Err(UrlError::NoHost {
                url: raw.to_string(),
            })
        }
    };
    if host.is_empty() {
        return Err(UrlError::NoHost {
            url: raw.to_string(),
        });
    }
    Ok(UrlFacts {
        port: url.port_or_known_default().unwrap_or(0),
        path: url.path().to_string(),
        query: url.query().unwrap_or("").to_string(),
        scheme,
        host,
        ip_literal,
    })
}

/// Host of a URL-like string that may lack a scheme (`www.example.com/page`), as tools
/// and users often write them. Returns `None` for anything that does not look like a
/// host-bearing URL, and for userinfo tricks.
pub fn loose_host(raw: &str) -> Option<String> {
    let trimmed = raw.trim();
    let with_scheme = if trimmed.contains("://") {
        trimmed.to_string()
    } else {
        format!("https://{trimmed}")
    };
    let facts = parse_url(&with_scheme).ok()?;
    if !facts.ip_literal && !facts.host.contains('.') {
        return None;
    }
    Some(facts.host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_normalized() {
        let f = parse_url("HTTPS://Example.COM./a/../b?q=1").unwrap();
        assert_eq!(
            (f.scheme.as_str(), f.host.as_str(), f.port, f.path.as_str()),
            ("https", "example.com", 443, "/b")
        );
        assert_eq!(f.query, "q=1");
        let f = parse_url("http://bücher.example:8080/").unwrap();
        assert_eq!(f.host, "xn--bcher-kva.example");
        assert_eq!(f.port, 8080);
    }

    #[test]
    fn userinfo_is_refused() {
        assert!(matches!(
            parse_url("https://trusted.com@evil.com/"),
            Err(UrlError::Userinfo { .. })
        ));
        assert!(matches!(
            parse_url("https://a:b@evil.com/"),
            Err(UrlError::Userinfo { .. })
        ));
    }

    #[test]
    fn odd_ip_forms_become_ip_literals() {
        // 0x7f.1 is 127.0.0.1 to many resolvers; WHATWG parsing makes that explicit.
        let f = parse_url("http://0x7f.1/").unwrap();
        assert!(f.ip_literal);
        assert_eq!(f.host, "127.0.0.1");
        assert!(parse_url("http://[::1]:80/").unwrap().ip_literal);
    }

    #[test]
    fn other_schemes_are_refused() {
        assert!(matches!(
            parse_url("file:///etc/passwd"),
            Err(UrlError::Scheme { .. })
        ));
        assert!(parse_url("not a url").is_err());
    }

    #[test]
    fn loose_hosts() {
        assert_eq!(
            loose_host("www.Example.com/x").as_deref(),
            Some("www.example.com")
        );
        assert_eq!(loose_host("Alice"), None);
        assert_eq!(loose_host("https://x.com@evil.com"), None);
    }
}
