//! The parts of a URL that can carry data: the userinfo, path segments and their matrix
//! parameters, query keys and values, and the fragment. After untrusted content, each of
//! them must trace to trusted input or belong to a URL the session received verbatim;
//! otherwise a request could carry the session's data out through an otherwise harmless
//! read (`GET /c?d=<a file's contents>`).
//!
//! Data rides in a URL's shape as well as in its words, so the shape yields parts too:
//! every query key, whether or not a value follows (`?<data>=`); an empty segment, pair or
//! parameter between separators (`/a//b`, `?&&`), whose count can spell data; and a part
//! that repeats an earlier one of the same URL (`?the&of&the`), whose order can. Only a
//! single trailing `/` or `&` is left out: it is how links are commonly written.
//!
//! Data rides in how a part is written, too: `Report` and `rEpOrT`, or `a` and `%61`,
//! decode to the same lower-case text. So a part received verbatim matches only as
//! written ([`UrlPart::written`]), and one that traces to the owner's words only in a
//! plain form ([`UrlPart::plain`]).

use super::identifiers::host_key;

/// One data-carrying part of a URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlPart {
    /// `userinfo`, `path segment`, `matrix parameter`, `query key`, `query value` or
    /// `fragment`; an empty one is named `empty …`.
    pub what: &'static str,
    /// The part as written (percent-encoded), for messages.
    pub raw: String,
    /// Decoded, lower-cased text used for comparison with the owner's words.
    pub text: String,
    /// The part's data exactly as written (percent-encoded as in the parsed URL), used
    /// for comparison with parts of URLs the session received.
    pub written: String,
    /// Written plainly: no escape of a character that needs none (`%61` for `a`), no
    /// mix of escape styles (`%2f` beside `%2F`, `+` beside `%20`), no stray `%`, and
    /// each word's letters all lower case, all upper case, or capitalised. The owner's
    /// words are compared in lower case, so any other form could spell data.
    pub plain: bool,
    /// An earlier part of the same URL has the same `what` and `text`.
    pub repeated: bool,
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
    let mut parts = Parts::default();
    // A client sends the userinfo (as an `Authorization` header), so it carries data.
    parts.push("userinfo", url.username());
    if let Some(p) = url.password() {
        parts.push("userinfo", p);
    }
    if let Some(segs) = url.path_segments() {
        let segs: Vec<&str> = segs.collect();
        for (i, s) in segs.iter().enumerate() {
            if s.is_empty() && i + 1 == segs.len() {
                continue;
            }
            // `;` starts a matrix parameter (`/a;k=v`); each is a part of its own.
            let mut pieces = s.split(';');
            let first = pieces.next().unwrap_or_default();
            if !first.is_empty() || !s.contains(';') {
                parts.push_kept("path segment", "empty path segment", first);
            }
            for m in pieces {
                parts.push_kept("matrix parameter", "empty matrix parameter", m);
            }
        }
    }
    if let Some(q) = url.query() {
        let pairs: Vec<&str> = q.split(['&', ';']).collect();
        for (i, pair) in pairs.iter().enumerate() {
            if pair.is_empty() && i + 1 == pairs.len() {
                continue;
            }
            match pair.split_once('=') {
                // The key is a part too: `?<data>=` carries data in the key alone.
                Some((k, v)) => {
                    parts.push_kept("query key", "empty query key", k);
                    if !v.is_empty() {
                        parts.push_as("query value", pair, v);
                    }
                }
                None => parts.push_kept("query key", "empty query pair", pair),
            }
        }
    }
    if let Some(f) = url.fragment() {
        parts.push("fragment", f);
    }
    Some((host, parts.0))
}

/// The parts found so far, in order.
#[derive(Default)]
struct Parts(Vec<UrlPart>);

impl Parts {
    /// Push `raw` when it is non-empty (an absent or empty userinfo or fragment says
    /// nothing beyond one bit).
    fn push(&mut self, what: &'static str, raw: &str) {
        if !raw.is_empty() {
            self.push_as(what, raw, raw);
        }
    }

    /// Push `raw` even when it is empty: between separators an empty part has a place,
    /// and how many there are can spell data.
    fn push_kept(&mut self, what: &'static str, empty: &'static str, raw: &str) {
        let what = if raw.is_empty() { empty } else { what };
        self.push_as(what, raw, raw);
    }

    /// Push a part shown as `shown` whose data is `raw`.
    fn push_as(&mut self, what: &'static str, shown: &str, raw: &str) {
        let cased = percent_decode(&raw.replace('+', " "));
        let text = cased.to_lowercase();
        let repeated = self.0.iter().any(|p| p.what == what && p.text == text);
        self.0.push(UrlPart {
            what,
            raw: shown.to_string(),
            text,
            written: raw.to_string(),
            plain: plain_escapes(raw) && cased.split_whitespace().all(plain_case),
            repeated,
        });
    }
}

/// Are the escapes in `raw` the only way to write what they stand for? Each `%` starts a
/// two-digit escape of a byte that is not a letter, a digit or one of `-._~` (those are
/// written as they are), the hex digits are of one case, and a space is written one way.
fn plain_escapes(raw: &str) -> bool {
    let b = raw.as_bytes();
    let (mut upper, mut lower) = (false, false);
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = |j: usize| b.get(j).copied().filter(u8::is_ascii_hexdigit);
            let (Some(h), Some(l)) = (hex(i + 1), hex(i + 2)) else {
                return false;
            };
            let byte = u8::from_str_radix(&raw[i + 1..i + 3], 16).unwrap_or(0);
            if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
                return false;
            }
            upper |= h.is_ascii_uppercase() || l.is_ascii_uppercase();
            lower |= h.is_ascii_lowercase() || l.is_ascii_lowercase();
            i += 3;
        } else {
            i += 1;
        }
    }
    let mixed_hex = upper && lower;
    let mixed_spaces = raw.contains('+') && raw.contains("%20");
    !mixed_hex && !mixed_spaces
}

/// Is a word's letter case one people write: `zurich`, `ZURICH` or `Zurich`?
pub fn plain_case(word: &str) -> bool {
    let mut letters = word.chars().filter(|c| c.is_alphabetic());
    let Some(first) = letters.next() else {
        return true;
    };
    let rest: Vec<char> = letters.collect();
    let rest_lower = rest.iter().all(|c| !c.is_uppercase());
    let rest_upper = rest.iter().all(|c| !c.is_lowercase());
    rest_lower || (first.is_uppercase() && rest_upper)
}

/// The parts of one URL as one string, remembered beside the parts of a URL received
/// verbatim: a URL whose parts repeat traces only whole, in this exact form. It starts
/// with `\u{0}`, which the URL parser always escapes, so no part as written equals it.
pub fn whole_signature(parts: &[UrlPart]) -> String {
    let mut out = String::from("\u{0}whole");
    for p in parts {
        out.push('\u{0}');
        out.push_str(p.what);
        out.push('\u{0}');
        out.push_str(&p.written);
    }
    out
}

fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(url: &str) -> Vec<(String, String)> {
        let (_, parts) = url_parts(url).unwrap();
        parts
            .iter()
            .map(|p| {
                let what = if p.repeated {
                    format!("repeated {}", p.what)
                } else {
                    p.what.to_string()
                };
                (what, p.text.clone())
            })
            .collect()
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn splits_path_query_and_fragment() {
        let (host, _) = url_parts("https://www.Example.com/a").unwrap();
        assert_eq!(host, "example.com");
        assert_eq!(
            shape("https://www.Example.com/a/b%20c?q=hello+world&flag#top"),
            pairs(&[
                ("path segment", "a"),
                ("path segment", "b c"),
                ("query key", "q"),
                ("query value", "hello world"),
                ("query key", "flag"),
                ("fragment", "top"),
            ])
        );
        let (_, none) = url_parts("www.informations.com").unwrap();
        assert!(none.is_empty());
        // A single trailing `/` or `&`, or a bare `?` or `#`, is how links are written.
        for bare in [
            "www.x.com/",
            "www.x.com/a/",
            "www.x.com/a?",
            "www.x.com/a?b&",
            "x.com/#",
        ] {
            assert!(shape(bare).len() <= 2, "{bare}: {:?}", shape(bare));
        }
        assert_eq!(
            shape("www.x.com/a?b&"),
            pairs(&[("path segment", "a"), ("query key", "b")])
        );
    }

    /// I5: a query key carries data whether or not a value follows it. Before, a key
    /// with an `=` after it was never a part, so `?<base32 of a file>=` had no parts.
    #[test]
    fn i5_every_query_key_is_a_part() {
        assert_eq!(
            shape("https://collector.example/?MFRGGZDFMZTQ="),
            pairs(&[("query key", "mfrggzdfmztq")])
        );
        assert_eq!(
            shape("https://c.example/?MFRGG=1&=x"),
            pairs(&[
                ("query key", "mfrgg"),
                ("query value", "1"),
                ("empty query key", ""),
                ("query value", "x"),
            ])
        );
    }

    /// I5: the other places data rides in a URL: the userinfo, matrix parameters, empty
    /// segments and pairs between separators (their count), and repeats (their order).
    #[test]
    fn i5_the_shape_of_a_url_is_parts_too() {
        assert_eq!(
            shape("https://MFRGG:MZXW6@c.example/"),
            pairs(&[("userinfo", "mfrgg"), ("userinfo", "mzxw6")])
        );
        assert_eq!(
            shape("https://c.example/x;MFRGG;;k=v/y"),
            pairs(&[
                ("path segment", "x"),
                ("matrix parameter", "mfrgg"),
                ("empty matrix parameter", ""),
                ("matrix parameter", "k=v"),
                ("path segment", "y"),
            ])
        );
        assert_eq!(
            shape("https://c.example/x//x/?a&&b"),
            pairs(&[
                ("path segment", "x"),
                ("empty path segment", ""),
                ("repeated path segment", "x"),
                ("query key", "a"),
                ("empty query pair", ""),
                ("query key", "b"),
            ])
        );
        assert_eq!(
            shape("https://c.example/?the&of&the=the"),
            pairs(&[
                ("query key", "the"),
                ("query key", "of"),
                ("repeated query key", "the"),
                ("query value", "the"),
            ])
        );
        // Punctuation-only parts are kept as written (they yield no tokens).
        assert_eq!(
            shape("https://c.example/((?d=((+(((+(#((("),
            pairs(&[
                ("path segment", "(("),
                ("query key", "d"),
                ("query value", "(( ((( ("),
                ("fragment", "((("),
            ])
        );
    }

    /// How a part is written can spell data that its lower-case text does not show.
    #[test]
    fn i5_only_plain_forms_are_plain() {
        let plain = |u: &str| url_parts(u).unwrap().1.iter().all(|p| p.plain);
        for u in [
            "x.com/Zurich?q=ZURICH+zurich",
            "x.com/a%2Fb?q=%C3%A9t%C3%A9",
            "x.com/?q=a%20b",
        ] {
            assert!(plain(u), "{u}");
        }
        for u in [
            "x.com/ZuRiCh",
            "x.com/?q=zURICH",
            "x.com/%7Aurich",
            "x.com/?q=%2D",
            "x.com/?q=a%2fb%2F",
            "x.com/?q=a+b%20c",
            "x.com/?q=50%",
            "x.com/?q=%4",
            "x.com/?q=%zz",
        ] {
            assert!(!plain(u), "{u}");
        }
        let (_, p) = url_parts("x.com/?Q=A%2Fb").unwrap();
        assert_eq!(p[0].written, "Q");
        assert_eq!(p[1].written, "A%2Fb");
        assert_eq!(p[1].text, "a/b");
    }

    #[test]
    fn a_signature_tells_urls_apart() {
        let sig = |u: &str| whole_signature(&url_parts(u).unwrap().1);
        assert_eq!(sig("c.example/?a&b&a"), sig("http://c.example/?a&b&a"));
        assert_ne!(sig("c.example/?a&b&a"), sig("c.example/?a&a&b"));
        assert_ne!(sig("c.example/a?b"), sig("c.example/?a&b"));
        assert_ne!(sig("c.example/?a&b&a"), sig("c.example/?a&b&A"));
    }

    /// Nothing here panics on odd input.
    #[test]
    fn odd_urls_do_not_panic() {
        for u in [
            "",
            "?",
            "#",
            ";",
            "@",
            "http://",
            "http://@/",
            "x.com/;",
            "x.com/;;/",
            "x.com?&&=&=",
            "x.com/%",
            "x.com/%zz?%=%#%",
            "http://[::1]/a;b?c#d",
            "x.com/\u{0}?\u{0}=\u{0}",
            "x.com/é;ü?ß=∂#ø",
            "x.com:99999/",
            "x.com/a?=",
            "x.com/a?==",
        ] {
            let _ = url_parts(u).map(|(_, p)| whole_signature(&p));
        }
    }

    #[test]
    fn bad_escapes_are_kept() {
        assert_eq!(percent_decode("a%zz%4"), "a%zz%4");
        assert_eq!(percent_decode("%41%42"), "AB");
    }
}
