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
    /// The request-target a client sends for this URL (`path` plus `?query` when the URL
    /// has one). The proxy forwards exactly this, so the path the Gate decided on is the
    /// path the upstream gets.
    pub target: String,
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
    let Some((host, ip_literal)) = url.host().and_then(normal_host) else {
        return Err(UrlError::NoHost {
            url: raw.to_string(),
        });
    };
    // Port 0 names no service: no client can connect to it, and `parse_host_port`
    // refuses it for rules and bindings, so a request to it is refused the same way.
    if url.port() == Some(0) {
        return Err(UrlError::Invalid {
            url: raw.to_string(),
            reason: "the port must be a number from 1 to 65535".into(),
        });
    }
    let target = match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_string(),
    };
    Ok(UrlFacts {
        port: url.port_or_known_default().unwrap_or(0),
        path: url.path().to_string(),
        query: url.query().unwrap_or("").to_string(),
        target,
        scheme,
        host,
        ip_literal,
    })
}

/// The one spelling of a host that rules, bindings and requests are compared in: ASCII
/// (punycode) lower case without a trailing dot, IPv4 in dotted decimal (so `2130706433`
/// and `0x7f000001` are `127.0.0.1`), IPv6 compressed and without brackets.
fn normal_host(host: url::Host<&str>) -> Option<(String, bool)> {
    let out = match host {
        url::Host::Domain(d) => {
            let name = d.trim_end_matches('.').to_ascii_lowercase();
            // A name is a number only without its last dot, but WHATWG drops one dot
            // only: `063..` stays a name, and without its dots it reads as 0.0.0.51 (to
            // the resolver as well). The one spelling must be the address.
            match url::Host::parse(&name) {
                Ok(url::Host::Ipv4(ip)) if name.len() < d.len() => (ip.to_string(), true),
                Ok(_) => (name, false),
                // Without its dots the name is no host at all (`.2..` gives `.2`, an
                // invalid address): no spelling of it can be compared, so it is refused.
                Err(_) => return None,
            }
        }
        url::Host::Ipv4(ip) => (ip.to_string(), true),
        url::Host::Ipv6(ip) => (ip.to_string(), true),
    };
    (!out.0.is_empty()).then_some(out)
}

/// A host and optional port as an operator writes them (`api.github.com`,
/// `127.0.0.1:8443`, `[::1]:8080`), normalized exactly as [`parse_url`] normalizes the
/// host of a request, so a rule or binding can be compared with a request byte for byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    /// As [`UrlFacts::host`].
    pub host: String,
    pub port: Option<u16>,
    pub ip_literal: bool,
}

/// Parse `host[:port]` with the same host parser as [`parse_url`]; refuses URLs, paths,
/// userinfo, empty hosts and ports outside 1-65535.
pub fn parse_host_port(raw: &str) -> Result<HostPort, UrlError> {
    let invalid = |reason: &str| UrlError::Invalid {
        url: raw.to_string(),
        reason: reason.to_string(),
    };
    let t = raw.trim();
    if t.contains("://") || t.contains(['/', '?', '#', '\\']) {
        return Err(invalid("give a host (and port), not a URL or path"));
    }
    if t.contains('@') {
        return Err(UrlError::Userinfo {
            url: raw.to_string(),
        });
    }
    // Split off the port by hand: the URL parser drops a scheme's default port, and a
    // rule for `host:443` must keep it.
    let (host, port) = if let Some(rest) = t.strip_prefix('[') {
        let (_, after) = rest
            .split_once(']')
            .ok_or_else(|| invalid("unclosed '['"))?;
        let host_len = t.len() - after.len();
        match after.strip_prefix(':') {
            Some(p) => (&t[..host_len], Some(p)),
            None if after.is_empty() => (t, None),
            None => return Err(invalid("unexpected text after ']'")),
        }
    } else {
        match t.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') => (h, Some(p)),
            // More than one ':' without brackets: a bare IPv6 address.
            Some(_) => {
                return Err(invalid(
                    "write an IPv6 address in brackets, e.g. [::1]:8080",
                ))
            }
            None => (t, None),
        }
    };
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => Some(n),
            _ => return Err(invalid("the port must be a number from 1 to 65535")),
        },
    };
    let parsed = url::Host::parse(host).map_err(|e| invalid(&e.to_string()))?;
    let (host, ip_literal) = match &parsed {
        url::Host::Domain(d) => normal_host(url::Host::Domain(d.as_str())),
        url::Host::Ipv4(ip) => normal_host(url::Host::Ipv4(*ip)),
        url::Host::Ipv6(ip) => normal_host(url::Host::Ipv6(*ip)),
    }
    .ok_or_else(|| UrlError::NoHost {
        url: raw.to_string(),
    })?;
    Ok(HostPort {
        host,
        port,
        ip_literal,
    })
}

/// Why a request path cannot be held to a path prefix: a form that servers resolve in
/// different ways, so the path the Gate compares is not reliably the path a server
/// serves. `None` when the path is unambiguous.
///
/// `path` is the raw path as the client sent it (no query). Refused: dot segments (also
/// percent-encoded, and with `;` parameters such as `..;`), empty segments (`//`; a
/// trailing `/` is fine), a backslash, and percent-encoded `/`, `\`, `.`, `;`, `%`
/// (double encoding) and NUL.
pub fn ambiguous_path(path: &str) -> Option<&'static str> {
    if path.contains('\\') {
        return Some("a backslash, which some servers read as '/'");
    }
    let lower = path.to_ascii_lowercase();
    for (code, what) in [
        (
            "%2f",
            "an encoded '/' (%2F), which some servers decode into a path separator",
        ),
        (
            "%5c",
            "an encoded '\\' (%5C), which some servers decode into a path separator",
        ),
        (
            "%2e",
            "an encoded '.' (%2E), which some servers decode into a dot segment",
        ),
        (
            "%3b",
            "an encoded ';' (%3B), which some servers read as a path parameter",
        ),
        (
            "%25",
            "an encoded '%' (%25), which a server that decodes twice reads as another escape",
        ),
        (
            "%00",
            "an encoded NUL (%00), which some servers cut the path at",
        ),
    ] {
        if lower.contains(code) {
            return Some(what);
        }
    }
    let Some(rest) = path.strip_prefix('/') else {
        return Some("a path that does not start with '/'");
    };
    let segments: Vec<&str> = rest.split('/').collect();
    let last = segments.len() - 1;
    for (i, seg) in segments.iter().enumerate() {
        // `..;x` is `..` to servers that strip path parameters (Tomcat and others).
        let name = seg.split(';').next().unwrap_or("");
        if name == "." || name == ".." {
            return Some("a dot segment ('.' or '..'), which servers resolve differently");
        }
        if name.is_empty() && (i != last || seg.contains(';')) {
            return Some("an empty segment ('//'), which some servers merge into one '/'");
        }
    }
    None
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

    /// Found by the `url_parse` fuzz target: `http:4168:0/` parsed with port 0, which
    /// the host parser of rules and bindings refuses.
    #[test]
    fn port_zero_is_refused_as_by_the_host_parser() {
        for url in [
            "http:4168:0/",
            "https://example.com:0/x",
            "http://[::1]:00/",
        ] {
            let e = parse_url(url).unwrap_err();
            assert!(e.to_string().contains("port"), "{url}: {e}");
        }
        assert!(parse_host_port("example.com:0").is_err());
    }

    /// Found by the `url_parse` fuzz target: `063..` is a name to WHATWG, but the
    /// normalized `063` is the address 0.0.0.51, so normalizing twice changed the host.
    #[test]
    fn a_number_with_trailing_dots_is_the_address() {
        let f = parse_url("http://063../c").unwrap();
        assert_eq!((f.host.as_str(), f.ip_literal), ("0.0.0.51", true));
        assert_eq!(parse_url("http://0.0.0.51/c").unwrap().host, f.host);
        assert_eq!(parse_host_port("127.0.0.1..").unwrap().host, "127.0.0.1");
        assert_eq!(
            parse_url("http://example.com../").unwrap().host,
            "example.com"
        );
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
    fn the_target_is_the_normalized_path_and_query() {
        let f = parse_url("http://h/a/b/../c//d/./e?x=1&y").unwrap();
        assert_eq!(f.target, "/a/c//d/e?x=1&y");
        assert_eq!(parse_url("http://h/p?").unwrap().target, "/p?");
        assert_eq!(parse_url("http://h").unwrap().target, "/");
        assert_eq!(parse_url("http://h/%2e%2e/x").unwrap().target, "/x");
    }

    #[test]
    fn hosts_in_rules_normalize_as_in_requests() {
        let cases = [
            ("2130706433", "127.0.0.1", None),
            ("0x7f000001", "127.0.0.1", None),
            ("0x7f000001:8080", "127.0.0.1", Some(8080)),
            ("[::1]:8080", "::1", Some(8080)),
            ("[0:0::1]", "::1", None),
            ("API.Example.COM.", "api.example.com", None),
            ("bücher.example:443", "xn--bcher-kva.example", Some(443)),
        ];
        for (raw, host, port) in cases {
            let hp = parse_host_port(raw).unwrap_or_else(|e| panic!("{raw}: {e}"));
            assert_eq!((hp.host.as_str(), hp.port), (host, port), "{raw}");
            let url = parse_url(&format!("http://{raw}/")).unwrap();
            assert_eq!(url.host, hp.host, "{raw}: rule and request disagree");
        }
        for bad in [
            "user@evil.example",
            "a:b@evil.example",
            "x.example:0",
            "x.example:65536",
            "x.example:+80",
            "::1:8080",
            "https://x.example/",
            "x.example/p",
            "",
            "[::1",
            "exa mple.com",
        ] {
            assert!(parse_host_port(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn ambiguous_paths_are_named() {
        for bad in [
            "/allowed//../secret.txt",
            "/allowed/..%2fsecret.txt",
            "/allowed/%2e%2e%2fsecret.txt",
            "/allowed/%2E%2E/secret.txt",
            "/allowed/../secret.txt",
            "/allowed/./x",
            "/allowed/..",
            "/allowed/..;/secret.txt",
            "/allowed/.;x/y",
            "/allowed//x",
            "//allowed",
            "/allowed/%252e%252e/x",
            "/allowed/x%00.txt",
            "/allowed/..%5csecret",
            "/allowed\\..\\secret",
            "/allowed/..%3b/secret",
            "allowed",
        ] {
            assert!(ambiguous_path(bad).is_some(), "{bad:?} passed");
        }
        for good in [
            "/",
            "/allowed",
            "/allowed/",
            "/allowed/a.b/c..d/...",
            "/a;v=1/b",
            "/a/%41",
        ] {
            assert_eq!(ambiguous_path(good), None, "{good:?}");
        }
    }

    proptest::proptest! {
        /// A path that passes [`ambiguous_path`] is not changed by normalization: the
        /// path a prefix is compared with, the path forwarded and the path a server that
        /// does not normalize sees are one and the same.
        #[test]
        fn unambiguous_paths_are_their_own_normal_form(
            segs in proptest::collection::vec("[a.;%2eEfF5c0/\\\\]{0,6}", 1..6)
        ) {
            let path = format!("/{}", segs.join("/"));
            if ambiguous_path(&path).is_none() {
                let f = parse_url(&format!("http://h.example{path}")).unwrap();
                proptest::prop_assert_eq!(f.path, path);
            }
        }
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
