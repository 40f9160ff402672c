//! The parts of a URL that can carry data: path segments, query keys and values, and the
//! fragment. After untrusted content, each of them must trace to trusted input or belong
//! to a URL the session received verbatim; otherwise a request could carry the session's
//! data out through an otherwise harmless read (`GET /c?d=<a file's contents>`).

use super::identifiers::host_key;

/// One data-carrying part of a URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlPart {
    /// `path segment`, `query value`, `query key` or `fragment`.
    pub what: &'static str,
    /// The part as written (percent-encoded), for messages.
    pub raw: String,
    /// Decoded, lower-cased text used for comparison.
    pub text: String,
}

/// A URL's host key and its data-carrying parts. Accepts bare `www.x.com/a?b=c` too.
pub fn url_parts(raw: &str) -> Option<(String, Vec<UrlPart>)> {
    let raw = raw.trim();
    let with_scheme = if raw.contains("://") {
        raw.to_string()
    } else {
        format!("http://{raw}")
    };
    let url = url::Url::parse(&with_scheme).ok()?;
    let host = host_key(url.host_str()?);
    let decode = |s: &str| -> String {
        let plus = s.replace('+', " ");
        percent_decode(&plus).to_lowercase()
    };
    let mut parts = Vec::new();
    if let Some(segs) = url.path_segments() {
        for s in segs.filter(|s| !s.is_empty()) {
            parts.push(UrlPart {
                what: "path segment",
                raw: s.to_string(),
                text: decode(s),
            });
        }
    }
    if let Some(q) = url.query() {
        for pair in q.split(['&', ';']).filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                // A key next to a value is the request's vocabulary (`q=`, `page=`).
                Some((_, v)) => {
                    if !v.is_empty() {
                        parts.push(UrlPart {
                            what: "query value",
                            raw: pair.to_string(),
                            text: decode(v),
                        });
                    }
                }
                None => parts.push(UrlPart {
                    what: "query key",
                    raw: pair.to_string(),
                    text: decode(pair),
                }),
            }
        }
    }
    if let Some(f) = url.fragment().filter(|f| !f.is_empty()) {
        parts.push(UrlPart {
            what: "fragment",
            raw: f.to_string(),
            text: decode(f),
        });
    }
    Some((host, parts))
}

fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_path_query_and_fragment() {
        let (host, parts) =
            url_parts("https://www.Example.com/a/b%20c?q=hello+world&flag#top").unwrap();
        assert_eq!(host, "example.com");
        let got: Vec<(&str, &str)> = parts.iter().map(|p| (p.what, p.text.as_str())).collect();
        assert_eq!(
            got,
            vec![
                ("path segment", "a"),
                ("path segment", "b c"),
                ("query value", "hello world"),
                ("query key", "flag"),
                ("fragment", "top"),
            ]
        );
        let (_, none) = url_parts("www.informations.com").unwrap();
        assert!(none.is_empty());
    }

    #[test]
    fn bad_escapes_are_kept() {
        assert_eq!(percent_decode("a%zz%4"), "a%zz%4");
        assert_eq!(percent_decode("%41%42"), "AB");
    }
}
