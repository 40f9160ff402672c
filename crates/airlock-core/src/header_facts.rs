//! Which headers of a network request could carry data out (I5).
//!
//! A header value leaves with the request as surely as its query does: `curl -H "X-D:
//! $(cat notes.txt)"` sends the file to a host the operator allowed for reading. So after
//! untrusted content every header value must trace to trusted input, the same check the
//! path, query and fragment get, except:
//!
//! - headers the proxy never forwards as sent (`Host` is checked or replaced,
//!   `Content-Length` recomputed, connection-level ones dropped);
//! - a value that is exactly a bound secret's placeholder, as the proxy marks it: what
//!   leaves is the operator's secret, put in by the proxy;
//! - a few headers every ordinary client sends whose value here has a fixed shape drawn
//!   from a small vocabulary (`Accept: */*`, `Accept-Encoding: gzip`, a `User-Agent` of
//!   product tokens such as `curl/8.5.0`), so it can say only a few bits. The same
//!   header with anything else in it (`User-Agent: <base64 of a file>`) is data.

use crate::action::HeaderField;
use crate::provenance::tokens::tokens;
use crate::provenance::TaintState;

/// Hop-by-hop headers: they describe one connection, and the proxy never forwards them.
pub const HOP_BY_HOP: &[&str] = &[
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Headers that frameworks read as "treat this request as method X"; the proxy refuses
/// a request that carries one.
pub const METHOD_OVERRIDE_HEADERS: &[&str] = &[
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// Whether a header's value, set by the client, never leaves as sent: the proxy checks or
/// replaces `Host`, recomputes `Content-Length`, drops hop-by-hop headers and refuses
/// method overrides.
fn not_forwarded(name: &str) -> bool {
    name == "host"
        || name == "content-length"
        || HOP_BY_HOP.contains(&name)
        || METHOD_OVERRIDE_HEADERS.contains(&name)
}

/// Request headers HTTP itself defines (RFC 9110, 9111, 6265, the Fetch standard): their
/// names are vocabulary. Any other name is the client's choice, so it can carry data as
/// a value can (`X-<data>:` with no value at all).
const KNOWN_NAMES: &[&str] = &[
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "authorization",
    "cache-control",
    "content-encoding",
    "content-language",
    "content-type",
    "cookie",
    "date",
    "dnt",
    "expect",
    "forwarded",
    "from",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "max-forwards",
    "origin",
    "pragma",
    "priority",
    "range",
    "referer",
    "upgrade-insecure-requests",
    "user-agent",
    "via",
    "x-forwarded-for",
    "x-requested-with",
    "git-protocol",
];

/// Longest value any fixed shape below accepts.
const MAX_SHAPED_BYTES: usize = 256;
/// Longest `User-Agent` taken for a client's own: product tokens are short, and the cap
/// bounds what the free parts (product names, one comment) could carry.
const MAX_USER_AGENT_BYTES: usize = 80;

/// Top-level media types (RFC 6838).
const MEDIA_TYPES: &[&str] = &[
    "*",
    "application",
    "text",
    "image",
    "audio",
    "video",
    "multipart",
    "font",
    "model",
    "message",
];

/// Words subtypes are made of (split at `.`, `+` and `-`): the common registered types,
/// structured-syntax suffixes, and the vendor trees package and source hosts use.
const MEDIA_WORDS: &[&str] = &[
    "*",
    "json",
    "html",
    "xml",
    "xhtml",
    "plain",
    "css",
    "javascript",
    "ecmascript",
    "csv",
    "markdown",
    "yaml",
    "toml",
    "octet",
    "stream",
    "x",
    "www",
    "form",
    "urlencoded",
    "data",
    "mixed",
    "related",
    "alternative",
    "vnd",
    "api",
    "ld",
    "hal",
    "problem",
    "jsonapi",
    "ndjson",
    "event",
    "protobuf",
    "cbor",
    "msgpack",
    "wasm",
    "pdf",
    "zip",
    "gzip",
    "tar",
    "bzip2",
    "xz",
    "zstd",
    "compressed",
    "png",
    "jpeg",
    "gif",
    "webp",
    "avif",
    "apng",
    "svg",
    "icon",
    "mpeg",
    "mp4",
    "ogg",
    "webm",
    "wav",
    "signed",
    "exchange",
    "rss",
    "atom",
    "git",
    "upload",
    "receive",
    "pack",
    "request",
    "result",
    "advertisement",
    "lfs",
    "github",
    "pypi",
    "simple",
    "npm",
    "install",
    "oci",
    "docker",
    "distribution",
    "manifest",
    "image",
    "index",
    "list",
    "diff",
    "patch",
    "graphql",
    "sql",
    "raw",
    "text",
];

/// Content codings (RFC 9110 and the registry).
const CODINGS: &[&str] = &[
    "*", "gzip", "x-gzip", "deflate", "br", "zstd", "compress", "identity",
];

/// Charsets a client names.
const CHARSETS: &[&str] = &[
    "utf-8",
    "utf8",
    "us-ascii",
    "iso-8859-1",
    "latin1",
    "utf-16",
];

/// The headers of a request that could carry data and do not trace to trusted input,
/// each as ``header `name: value` `` (the value shortened). `url` is the request's: a
/// value the session received in a URL for the same host traces as a URL part would.
/// `has_body`: the request has a body (a multipart boundary is then the body's).
pub fn untraced_headers(
    taint: &TaintState,
    url: &str,
    headers: &[HeaderField],
    has_body: bool,
) -> Vec<String> {
    headers
        .iter()
        .filter(|h| !not_forwarded(&h.name))
        .filter(|h| h.secret.is_none())
        .filter(|h| {
            let value = h.value.trim();
            if KNOWN_NAMES.contains(&h.name.as_str()) {
                !value.is_empty()
                    && !fixed_shape(&h.name, value, has_body)
                    && !traces(taint, url, value)
            } else {
                // The name is data too: the two must trace together.
                !traces(taint, url, &format!("{}: {value}", h.name))
            }
        })
        .map(|h| format!("header `{}: {}`", h.name, shorten(&h.value)))
        .collect()
}

/// The value traces as a URL part of the same request would
/// ([`TaintState::traces_as_url_part`]): to the owner's words in a plain letter case, or
/// exactly to a part of a URL the session received for this host.
fn traces(taint: &TaintState, url: &str, value: &str) -> bool {
    // Punctuation alone makes no words to trace, but can still spell bits.
    if tokens(value).is_empty() && value.trim().len() > 8 {
        return false;
    }
    taint.traces_as_url_part(url, value.trim())
}

fn shorten(s: &str) -> String {
    const SHOWN: usize = 60;
    if s.chars().count() <= SHOWN {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(SHOWN).collect::<String>())
    }
}

/// Whether `value` has the fixed, low-capacity shape clients send in header `name`.
fn fixed_shape(name: &str, value: &str, has_body: bool) -> bool {
    let v = value.trim();
    if v.len() > MAX_SHAPED_BYTES {
        return false;
    }
    match name {
        "accept" => list(v, 8, |item| media_type(item, false)),
        "content-type" => media_type(v, has_body),
        "accept-encoding" => list(v, 8, coding),
        // A coding of the body the request carries; without a body it says nothing.
        "content-encoding" => has_body && list(v, 2, coding),
        "accept-language" => list(v, 6, language),
        "cache-control" | "pragma" => list(v, 4, cache_directive),
        "expect" => v.eq_ignore_ascii_case("100-continue"),
        "git-protocol" => v
            .strip_prefix("version=")
            .is_some_and(|n| n.len() == 1 && n.as_bytes()[0].is_ascii_digit()),
        "range" => byte_range(v),
        "user-agent" => user_agent(v),
        _ => false,
    }
}

/// A comma-separated list of at most `max` items, each passing `item`.
fn list(v: &str, max: usize, item: impl Fn(&str) -> bool) -> bool {
    let items: Vec<&str> = v.split(',').map(str::trim).collect();
    items.len() <= max && items.iter().all(|i| !i.is_empty() && item(i))
}

/// `token` with an optional `;q=` weight.
fn weighted(item: &str, token: impl Fn(&str) -> bool) -> bool {
    let mut parts = item.split(';').map(str::trim);
    let first = parts.next().unwrap_or("");
    token(first) && parts.all(q_param)
}

fn q_param(p: &str) -> bool {
    let Some((k, v)) = p.split_once('=') else {
        return false;
    };
    k.trim().eq_ignore_ascii_case("q") && qvalue(v.trim())
}

/// `0`, `1`, `0.5`, `0.01`, `1.000`.
fn qvalue(v: &str) -> bool {
    let (int, frac) = v.split_once('.').unwrap_or((v, ""));
    (int == "0" || int == "1") && frac.len() <= 3 && frac.bytes().all(|b| b.is_ascii_digit())
}

fn coding(item: &str) -> bool {
    weighted(item, |c| CODINGS.iter().any(|k| c.eq_ignore_ascii_case(k)))
}

/// `en`, `en-US`, `zh-Hant-TW`, `*`: a primary language and a script or region subtag
/// or two, each of the registry's fixed lengths.
fn language(item: &str) -> bool {
    weighted(item, |tag| {
        if tag == "*" {
            return true;
        }
        let mut subtags = tag.split('-');
        let primary = subtags.next().unwrap_or("");
        let rest: Vec<&str> = subtags.collect();
        (2..=3).contains(&primary.len())
            && primary.bytes().all(|b| b.is_ascii_alphabetic())
            && rest.len() <= 2
            && rest.iter().all(|s| {
                let alpha = s.bytes().all(|b| b.is_ascii_alphabetic());
                let digits = s.bytes().all(|b| b.is_ascii_digit());
                (s.len() == 2 && alpha) || (s.len() == 3 && digits) || (s.len() == 4 && alpha)
            })
    })
}

fn cache_directive(d: &str) -> bool {
    let d = d.to_ascii_lowercase();
    let seconds = |n: &str| (1..=7).contains(&n.len()) && n.bytes().all(|b| b.is_ascii_digit());
    match d.split_once('=') {
        None => [
            "no-cache",
            "no-store",
            "no-transform",
            "only-if-cached",
            "max-stale",
        ]
        .contains(&d.as_str()),
        Some((k, n)) => ["max-age", "max-stale", "min-fresh"].contains(&k) && seconds(n),
    }
}

/// One byte range, `bytes=N-` or `bytes=N-M`: offsets of a file being resumed.
fn byte_range(v: &str) -> bool {
    let offset = |n: &str| n.len() <= 12 && n.bytes().all(|b| b.is_ascii_digit());
    v.strip_prefix("bytes=")
        .and_then(|r| r.split_once('-'))
        .is_some_and(|(a, b)| !a.is_empty() && offset(a) && offset(b))
}

/// A media type or range whose subtype is made of known words (see [`MEDIA_WORDS`]),
/// with at most a weight, a charset and a version; a multipart `boundary` only where
/// the request has the body it separates.
fn media_type(item: &str, boundary_ok: bool) -> bool {
    let mut parts = item.split(';').map(str::trim);
    let Some((ty, sub)) = parts.next().and_then(|t| t.split_once('/')) else {
        return false;
    };
    let (ty, sub) = (ty.to_ascii_lowercase(), sub.to_ascii_lowercase());
    let version_word = |w: &str| {
        let n = w.strip_prefix('v').unwrap_or(w);
        (1..=2).contains(&n.len()) && n.bytes().all(|b| b.is_ascii_digit())
    };
    let known = MEDIA_TYPES.contains(&ty.as_str())
        && sub.len() <= 48
        && sub
            .split(['.', '+', '-'])
            .all(|w| MEDIA_WORDS.contains(&w) || version_word(w));
    known
        && parts.all(|p| {
            let Some((k, v)) = p.split_once('=') else {
                return false;
            };
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().trim_matches('"'));
            match k.as_str() {
                "q" => qvalue(v),
                "charset" => CHARSETS.iter().any(|c| v.eq_ignore_ascii_case(c)),
                "version" => {
                    (1..=5).contains(&v.len()) && v.bytes().all(|b| b.is_ascii_digit() || b == b'.')
                }
                "boundary" => boundary_ok && (1..=70).contains(&v.len()),
                _ => false,
            }
        })
}

/// A client's own `User-Agent`: one to four product tokens (`curl/8.5.0`,
/// `python-requests/2.31.0`, `git/2.39.2`) and at most one short comment
/// (`cargo/1.75.0 (1d8b05cdd 2023-11-20)`). Product names are words of letters and
/// versions are numbers, so neither holds an encoded blob; nothing in it may look like
/// one.
fn user_agent(v: &str) -> bool {
    if v.len() > MAX_USER_AGENT_BYTES {
        return false;
    }
    let (products, comment) = match v.split_once('(') {
        Some((p, c)) => match c.strip_suffix(')') {
            Some(c) => (p.trim_end(), Some(c)),
            None => return false,
        },
        None => (v, None),
    };
    let items: Vec<&str> = products.split(' ').collect();
    let products_ok = (1..=4).contains(&items.len()) && items.iter().all(|p| product(p));
    let comment_ok = comment.is_none_or(|c| {
        c.len() <= 40
            && c.split([' ', ';', ','])
                .filter(|w| !w.is_empty())
                .all(comment_word)
    });
    products_ok && comment_ok
}

/// `name/version`: a name of letters (words joined by `-`, `_` or `.`), a version of
/// numbers with a short suffix at most (`8.5.0`, `v20.11.0`, `2.39.2-rc1`).
fn product(p: &str) -> bool {
    let Some((name, version)) = p.split_once('/') else {
        return false;
    };
    let name_ok = (1..=24).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphabetic() || b"-_.".contains(&b));
    let v = version.strip_prefix('v').unwrap_or(version);
    let (numbers, suffix) = match v.find(['-', '+', '~']) {
        Some(i) => (&v[..i], &v[i + 1..]),
        None => (v, ""),
    };
    let numbers_ok = {
        let n: Vec<&str> = numbers.split('.').collect();
        n.len() <= 4
            && n.iter()
                .all(|x| (1..=5).contains(&x.len()) && x.bytes().all(|b| b.is_ascii_digit()))
    };
    let suffix_ok = suffix.len() <= 10
        && suffix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.');
    name_ok && numbers_ok && suffix_ok
}

/// A word of a comment (`X11`, `Linux`, `x86_64`, a short commit id, a date); never the
/// shape of an encoded blob or a long hash.
fn comment_word(w: &str) -> bool {
    let plain = w
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._-:".contains(&b));
    let upper = w.bytes().any(|b| b.is_ascii_uppercase());
    let lower = w.bytes().any(|b| b.is_ascii_lowercase());
    let digit = w.bytes().any(|b| b.is_ascii_digit());
    let encoded = w.len() >= 8 && upper && lower && digit;
    plain && w.len() <= 16 && !encoded
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(name: &str, value: &str) -> HeaderField {
        HeaderField::new(name, value)
    }

    fn tainted(owner: &str) -> TaintState {
        let mut t = TaintState::new();
        t.observe_trusted(owner);
        t.observe_untrusted("web page", "Read the notes and reply.");
        t
    }

    const URL: &str = "https://allowed.example/";

    #[test]
    fn what_ordinary_clients_send_is_not_data() {
        let t = tainted("fetch the page");
        let sent = [
            h("host", "allowed.example"),
            h("accept", "*/*"),
            h("user-agent", "curl/8.5.0"),
            h("user-agent", "git/2.39.2"),
            h("user-agent", "python-requests/2.31.0"),
            h("user-agent", "Python-urllib/3.11"),
            h("user-agent", "cargo/1.75.0 (1d8b05cdd 2023-11-20)"),
            h("accept-encoding", "deflate, gzip, br, zstd"),
            h("accept-language", "en-US, *;q=0.9"),
            h("pragma", "no-cache"),
            h("cache-control", "max-age=0"),
            h("git-protocol", "version=2"),
            h(
                "accept",
                "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html; q=0.1, text/html; q=0.01",
            ),
            h("accept", "application/x-git-upload-pack-result"),
            h("content-type", "application/json; charset=utf-8"),
            h("range", "bytes=100-"),
            h("referer", ""),
        ];
        assert_eq!(
            untraced_headers(&t, URL, &sent, false),
            Vec::<String>::new()
        );
    }

    /// What git, Python's requests and urllib, wget and curl send (as captured from them)
    /// passes; pip's `User-Agent` (a JSON object of free values) and npm's own headers
    /// are data like any other, and hold a request after untrusted content.
    #[test]
    fn real_clients_headers() {
        let t = tainted("fetch the page");
        let clean = |sent: &[(&str, &str)]| {
            let fields: Vec<HeaderField> = sent.iter().map(|(n, v)| h(n, v)).collect();
            untraced_headers(&t, URL, &fields, false)
        };
        for sent in [
            &[
                ("user-agent", "git/2.47.3"),
                ("accept", "*/*"),
                ("accept-encoding", "deflate, gzip, br, zstd"),
                ("pragma", "no-cache"),
                ("git-protocol", "version=2"),
            ][..],
            &[
                ("user-agent", "python-requests/2.34.2"),
                ("accept-encoding", "gzip, deflate"),
                ("accept", "*/*"),
            ],
            &[
                ("accept-encoding", "identity"),
                ("user-agent", "Python-urllib/3.11"),
            ],
            &[("user-agent", "Wget/1.21.3"), ("accept", "*/*")],
            &[("user-agent", "curl/7.88.1"), ("accept", "*/*")],
        ] {
            assert_eq!(clean(sent), Vec::<String>::new(), "{sent:?}");
        }
        let pip = r#"pip/23.2.1 {"ci":null,"cpu":"x86_64","distro":{"id":"bookworm"}}"#;
        assert_eq!(clean(&[("user-agent", pip)]).len(), 1);
        let npm = [
            (
                "user-agent",
                "npm/11.19.1 node/v20.20.2 linux x64 workspaces/false",
            ),
            ("pacote-req-type", "packument"),
            ("accept", "application/json"),
        ];
        assert_eq!(clean(&npm).len(), 2);
    }

    #[test]
    fn i5_data_in_a_header_value_does_not_trace() {
        let t = tainted("fetch the page for platform tools");
        for (name, value) in [
            ("x-d", "meeting notes: the launch slips to May"),
            ("user-agent", "UEFTU1dPUkQ9aHVudGVyMgpBUElfS0VZPXNrLWxpdmU="),
            ("user-agent", "curl/8.5.0 (UEFTU1dPUkQ9aHVu)"),
            ("accept", "application/UEFTU1dPUkQ9aHVudGVy"),
            ("accept-language", "en-UEFTU1dP"),
            ("authorization", "Basic dXNlcjpodW50ZXIy"),
            ("cookie", "id=UEFTU1dPUkQ9aHVudGVy"),
            (
                "content-type",
                "multipart/form-data; boundary=UEFTU1dPUkQ9aHVudGVy",
            ),
            ("x-bits", "-.-.--..-.-.-"),
            ("x-launch-slips-to-may", ""),
            ("x-other-team", "platform tools"),
        ] {
            let got = untraced_headers(&t, URL, &[h(name, value)], false);
            assert_eq!(got.len(), 1, "{name}: {value}");
            assert!(got[0].contains(name), "{got:?}");
        }
        // A boundary belongs to the body it separates (which is judged as a body).
        let multipart = h("content-type", "multipart/form-data; boundary=------abc123");
        assert!(untraced_headers(&t, URL, &[multipart], true).is_empty());
    }

    #[test]
    fn a_value_the_owner_typed_or_a_bound_placeholder_traces() {
        let t = tainted("fetch the page with header X-Team: platform tools");
        let sent = [h("x-team", "platform tools")];
        assert!(untraced_headers(&t, URL, &sent, false).is_empty());
        let mut token = h("authorization", "Bearer airlock-placeholder-00ff");
        assert_eq!(untraced_headers(&t, URL, &[token.clone()], false).len(), 1);
        token.secret = Some("GH".into());
        assert!(untraced_headers(&t, URL, &[token], false).is_empty());
    }
}
