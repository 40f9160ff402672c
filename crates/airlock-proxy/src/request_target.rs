//! The request line the proxy forwards is the one the Gate decided on.
//!
//! The Gate judges a URL after WHATWG normalization (dot segments resolved, some bytes
//! escaped). Forwarding the client's raw request-target instead let a path-prefix rule
//! for `/allowed` pass `/allowed//../secret.txt`, which a server that merges slashes
//! serves as `/secret.txt`. So the proxy forwards the normalized target byte for byte,
//! and where a rule or secret binding limits paths it refuses the forms servers disagree
//! about (empty segments, encoded separators and dots, double encoding, `;` parameters).
//! Method names are compared case-sensitively, and method overrides cannot smuggle a
//! method past a decision (a rule's method list, or the ask for state-changing methods
//! after untrusted content).

use http::{HeaderMap, StatusCode, Uri};

use crate::exchange::Target;

/// A request as decided and as sent.
#[derive(Debug, Clone)]
pub(crate) struct DecidedTarget {
    /// The URL handed to the Gate.
    pub url: String,
    /// The request-target forwarded upstream: exactly the decided URL's path and query.
    pub target: String,
    /// The normalized path (what rules and bindings compare).
    pub path: String,
}

pub(crate) use airlock_core::header_facts::METHOD_OVERRIDE_HEADERS;

/// Refuse a method that is not its own upper-case spelling. HTTP methods are
/// case-sensitive: `get` is not `GET`, but the Gate's facts compare methods in upper case,
/// so a lower-case method would be decided as another one than the upstream receives.
pub(crate) fn check_method(method: &str) -> Result<(), (StatusCode, String)> {
    if method.bytes().any(|b| b.is_ascii_lowercase()) {
        return Err((
            StatusCode::BAD_REQUEST,
            format!(
                "method names are case-sensitive, and {method:?} is not {:?}\nhelp: send the method in upper case",
                method.to_ascii_uppercase()
            ),
        ));
    }
    Ok(())
}

/// The decided URL and forwarded target for a request to `target` with `uri` from the
/// request line. `paths_limited`: a rule or binding for this host limits paths, so a
/// path servers could read differently is refused.
pub(crate) fn decide_target(
    target: &Target,
    uri: &Uri,
    paths_limited: bool,
) -> Result<DecidedTarget, (StatusCode, String)> {
    let raw = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    if !raw.starts_with('/') {
        return Err((
            StatusCode::BAD_REQUEST,
            format!("the request target {raw:?} is not a path\nhelp: send an origin-form path such as /index.html"),
        ));
    }
    if paths_limited {
        if let Some(why) = airlock_core::url_facts::ambiguous_path(uri.path()) {
            return Err((
                StatusCode::FORBIDDEN,
                format!(
                    "the path {:?} holds {why}; a rule or secret for {} limits paths, so the path must mean the same to every server\nhelp: send the path without '.', '..' or empty segments and without %-escapes of '/', '\\', '.', ';' or '%'",
                    uri.path(),
                    target.host
                ),
            ));
        }
    }
    let raw_url = format!("{}://{}{raw}", target.scheme, target.authority());
    match airlock_core::url_facts::parse_url(&raw_url) {
        Ok(facts) => Ok(DecidedTarget {
            url: format!("{}://{}{}", target.scheme, target.authority(), facts.target),
            target: facts.target,
            path: facts.path,
        }),
        // The Gate refuses an invalid URL and names why; it is decided as sent.
        Err(_) => Ok(DecidedTarget {
            url: raw_url,
            target: raw.to_string(),
            path: uri.path().to_string(),
        }),
    }
}

/// Inside an intercepted tunnel, a request line in absolute form must name the tunnel's
/// own scheme and authority: the upstream connection is the CONNECT target's.
pub(crate) fn check_absolute_form(target: &Target, uri: &Uri) -> Result<(), (StatusCode, String)> {
    let Some(auth) = uri.authority() else {
        return Ok(());
    };
    let same_scheme = uri.scheme_str().is_none_or(|s| s == target.scheme);
    let same_host = airlock_core::url_facts::parse_host_port(auth.as_str())
        .ok()
        .is_some_and(|hp| {
            hp.host == target.host && hp.port.unwrap_or(default_port(target.scheme)) == target.port
        });
    if same_scheme && same_host {
        return Ok(());
    }
    Err((
        StatusCode::MISDIRECTED_REQUEST,
        format!(
            "the request names {uri} inside a tunnel to {}\nhelp: send origin-form requests inside a CONNECT tunnel",
            target.authority()
        ),
    ))
}

fn default_port(scheme: &str) -> u16 {
    if scheme == "https" {
        443
    } else {
        80
    }
}

/// Remove method-override headers (see [`METHOD_OVERRIDE_HEADERS`]); returns how many.
pub(crate) fn strip_method_overrides(headers: &mut HeaderMap) -> usize {
    METHOD_OVERRIDE_HEADERS
        .iter()
        .map(|h| match headers.remove(*h) {
            Some(_) => 1,
            None => 0,
        })
        .sum()
}

/// Whether a query or form body carries a `_method` parameter (Rails, Laravel and
/// method-override middleware treat it as the request's method). Names are compared
/// after percent-decoding and case-insensitively.
pub(crate) fn has_method_param(query_or_form: &[u8]) -> bool {
    query_or_form.split(|b| *b == b'&').any(|pair| {
        let name = pair.split(|b| *b == b'=').next().unwrap_or(b"");
        percent_decode(name).eq_ignore_ascii_case(b"_method")
    })
}

pub(crate) fn percent_decode(s: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match (
            s[i],
            s.get(i + 1).copied().and_then(hex),
            s.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push(h << 4 | l);
                i += 3;
            }
            (b'+', _, _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(host: &str) -> Target {
        Target {
            scheme: "https",
            host: host.into(),
            port: 443,
        }
    }

    #[test]
    fn the_forwarded_target_is_the_decided_one() {
        let uri: Uri = "/a/./b/../c?x=%41".parse().unwrap();
        let d = decide_target(&t("h.example"), &uri, false).unwrap();
        assert_eq!(d.target, "/a/c?x=%41");
        assert_eq!(d.url, "https://h.example/a/c?x=%41");
        let uri: Uri = "/allowed//../secret.txt".parse().unwrap();
        assert_eq!(
            decide_target(&t("h.example"), &uri, false).unwrap().target,
            "/allowed/secret.txt"
        );
        let err = decide_target(&t("h.example"), &uri, true).unwrap_err();
        assert_eq!(err.0, StatusCode::FORBIDDEN);
        assert!(
            err.1.contains("empty segment") && err.1.contains("help:"),
            "{}",
            err.1
        );
        let star: Uri = "*".parse().unwrap();
        assert!(decide_target(&t("h.example"), &star, false).is_err());
    }

    #[test]
    fn methods_are_case_sensitive() {
        assert!(check_method("GET").is_ok());
        assert!(check_method("PROPFIND").is_ok());
        for m in ["get", "Get", "pOST", "delete"] {
            assert!(
                check_method(m).unwrap_err().1.contains("case-sensitive"),
                "{m}"
            );
        }
    }

    #[test]
    fn method_params_are_found_in_any_spelling() {
        for q in [
            &b"_method=DELETE"[..],
            b"a=1&_method=PUT",
            b"%5Fmethod=x",
            b"_METHOD",
            b"_%6dethod=1",
        ] {
            assert!(has_method_param(q), "{}", String::from_utf8_lossy(q));
        }
        for q in [&b"method=DELETE"[..], b"a=_method", b"x_method=1", b""] {
            assert!(!has_method_param(q), "{}", String::from_utf8_lossy(q));
        }
    }

    #[test]
    fn absolute_form_inside_a_tunnel_must_name_the_tunnel() {
        let ok: Uri = "https://h.example/x".parse().unwrap();
        assert!(check_absolute_form(&t("h.example"), &ok).is_ok());
        let ok: Uri = "https://H.Example:443/x".parse().unwrap();
        assert!(check_absolute_form(&t("h.example"), &ok).is_ok());
        for bad in [
            "https://other.example/x",
            "http://h.example/x",
            "https://h.example:8443/x",
        ] {
            let uri: Uri = bad.parse().unwrap();
            assert!(check_absolute_form(&t("h.example"), &uri).is_err(), "{bad}");
        }
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// Path segments servers read in different ways, and plain ones.
        const SEGMENTS: &[&str] = &[
            "a", "b", ".", "..", "", "%2e", "%2E%2e", ".%2e", "%2F", "..;x", "c;d", "%25", "%252e",
            "\\", "%5C", "%00", "x%41", "~u", "%C3%A9", "é", "*", "@", ":",
        ];

        fn request_target() -> impl Strategy<Value = String> {
            (
                proptest::collection::vec(0..SEGMENTS.len(), 0..8),
                proptest::option::of("[a-z_%=&;.]{0,12}"),
            )
                .prop_map(|(segs, query)| {
                    let path: Vec<&str> = segs.iter().map(|&i| SEGMENTS[i]).collect();
                    let q = query.map(|q| format!("?{q}")).unwrap_or_default();
                    format!("/{}{q}", path.join("/"))
                })
        }

        proptest! {
            /// Deciding is idempotent: the forwarded target, decided again, is itself;
            /// the decided URL's path is the path rules compare; and where paths are
            /// limited, what is forwarded has no form servers read differently.
            #[test]
            fn the_decided_target_is_a_fixed_point(raw in request_target(), limited in any::<bool>()) {
                let Ok(uri) = raw.parse::<Uri>() else { return Ok(()); };
                let target = t("h.example");
                let Ok(d) = decide_target(&target, &uri, limited) else { return Ok(()); };
                prop_assert!(d.target.starts_with('/'), "{raw:?} gave {:?}", d.target);
                let again: Uri = d.target.parse().map_err(|e| TestCaseError::fail(format!("{:?} does not parse again: {e}", d.target)))?;
                let twice = decide_target(&target, &again, limited)
                    .map_err(|e| TestCaseError::fail(format!("{:?} refused when decided again: {}", d.target, e.1)))?;
                prop_assert_eq!(&twice.target, &d.target, "deciding {:?} twice changed it", raw);
                prop_assert_eq!(&twice.url, &d.url);
                let facts = airlock_core::url_facts::parse_url(&d.url)
                    .map_err(|e| TestCaseError::fail(format!("decided URL {:?} does not parse: {e}", d.url)))?;
                prop_assert_eq!(&facts.path, &d.path);
                if limited {
                    prop_assert_eq!(airlock_core::url_facts::ambiguous_path(&d.path), None, "{:?}", raw);
                }
            }

            /// A `_method` parameter is found however its name is cased or escaped.
            #[test]
            fn method_params_are_found_in_any_spelling_generated(
                before in "[a-z=&]{0,8}", mask in any::<u16>(), upper in any::<u16>(), value in "[A-Z]{0,6}",
            ) {
                let name: String = "_method".chars().enumerate().map(|(i, c)| {
                    let c = if upper >> i & 1 == 1 { c.to_ascii_uppercase() } else { c };
                    if mask >> i & 1 == 1 { format!("%{:02X}", c as u32) } else { c.to_string() }
                }).collect();
                let sep = if before.is_empty() || before.ends_with('&') { "" } else { "&" };
                let q = format!("{before}{sep}{name}={value}");
                prop_assert!(has_method_param(q.as_bytes()), "{q}");
            }
        }
    }
}
