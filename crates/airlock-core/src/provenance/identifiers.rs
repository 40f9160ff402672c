//! High-specificity identifiers found in text: e-mail addresses, URLs and host names,
//! IBANs and account numbers, phone numbers.
//!
//! These are the values an attacker must name to redirect an action to themselves, so they
//! are what provenance tracks most carefully. Each is reduced to a canonical key so that
//! `GB29 NWBK 6016…` and `gb29nwbk6016…` compare equal.

use regex::Regex;
use std::sync::OnceLock;

use crate::url_facts::loose_host;

/// The kind of a high-specificity identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IdKind {
    Email,
    Host,
    Iban,
    Phone,
}

/// One identifier found in a text, with its byte span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub kind: IdKind,
    /// Canonical comparison key (lower-case e-mail, host without `www.`, compact IBAN,
    /// digits of a phone number).
    pub key: String,
    pub start: usize,
    pub end: usize,
}

fn email_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"(?i)\b[a-z0-9._%+\-]{1,64}@[a-z0-9\-]{1,63}(?:\.[a-z0-9\-]{1,63})+\b").unwrap()
    })
}

fn url_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    // Scheme URLs, and bare names with a common prefix or a dotted name with a TLD-like end.
    RE.get_or_init(|| {
        Regex::new(r"(?i)\b(?:https?://[^\s<>'\x22]+|(?:www\.)?(?:[a-z0-9](?:[a-z0-9\-]{0,61}[a-z0-9])?\.)+[a-z]{2,24}(?:/[^\s<>'\x22]*)?)").unwrap()
    })
}

fn iban_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    // ISO 13616 shape: country code, check digits, 10–30 alphanumerics (spaces allowed in
    // groups of four as printed on paper).
    RE.get_or_init(|| {
        Regex::new(r"\b[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b").unwrap()
    })
}

fn phone_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"(?:\+|\b)[0-9][0-9 ().\-]{6,18}[0-9]\b").unwrap())
}

/// Canonical key of an e-mail address.
pub fn email_key(s: &str) -> String {
    s.trim().to_lowercase()
}

/// Canonical key of a host: lower case, without a leading `www.`.
pub fn host_key(host: &str) -> String {
    let h = host.trim().trim_end_matches('.').to_lowercase();
    h.strip_prefix("www.").map(str::to_string).unwrap_or(h)
}

/// Canonical key of an IBAN or account number: upper case, no spaces.
pub fn iban_key(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_whitespace())
        .collect::<String>()
        .to_uppercase()
}

/// Canonical key of a phone number: its digits.
pub fn phone_key(s: &str) -> String {
    s.chars().filter(|c| c.is_ascii_digit()).collect()
}

fn looks_like_number_not_phone(s: &str) -> bool {
    // Amounts and dates ("1000.00", "2022-01-01") are not phone numbers.
    let digits = phone_key(s).len();
    digits < 7
        || s.contains('.') && !s.contains(' ') && s.matches('.').count() == 1
        || is_date_like(s)
}

fn is_date_like(s: &str) -> bool {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(r"^\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2})?)?$").unwrap())
        .is_match(s.trim())
}

/// Which patterns can match `text` at all, from what each one requires: an e-mail an `@`,
/// a URL or host a `.` or `://`, an IBAN or phone number two ASCII digits. A pattern is
/// compiled on its first search, which costs 0.2–0.8 ms each; a short command such as
/// `ls -la` needs none of them.
struct Possible {
    email: bool,
    url: bool,
    digits: bool,
}

impl Possible {
    fn of(text: &str) -> Possible {
        Possible {
            email: text.contains('@'),
            url: text.contains('.') || text.contains("://"),
            digits: text.bytes().filter(u8::is_ascii_digit).nth(1).is_some(),
        }
    }
}

/// All identifiers in `text`. Overlaps are resolved in favour of the more specific kind
/// (an e-mail's domain is not also reported as a host).
pub fn find_identifiers(text: &str) -> Vec<Found> {
    let mut out: Vec<Found> = Vec::new();
    let possible = Possible::of(text);
    let overlaps =
        |out: &Vec<Found>, s: usize, e: usize| out.iter().any(|f| s < f.end && f.start < e);
    let matches = |possible: bool, re: fn() -> &'static Regex| {
        if possible {
            re().find_iter(text).collect()
        } else {
            Vec::new()
        }
    };
    for m in matches(possible.email, email_re) {
        out.push(Found {
            kind: IdKind::Email,
            key: email_key(m.as_str()),
            start: m.start(),
            end: m.end(),
        });
    }
    for m in matches(possible.url, url_re) {
        if overlaps(&out, m.start(), m.end()) {
            continue;
        }
        let raw = m
            .as_str()
            .trim_end_matches(['.', ',', ';', ':', ')', '!', '?']);
        if let Some(host) = loose_host(raw) {
            // A bare dotted word such as "e.g" or a file name "notes.txt" is not a host.
            if !raw.contains("://")
                && !raw.to_lowercase().starts_with("www.")
                && !plausible_bare_host(&host)
            {
                continue;
            }
            out.push(Found {
                kind: IdKind::Host,
                key: host_key(&host),
                start: m.start(),
                end: m.start() + raw.len(),
            });
        }
    }
    for m in matches(possible.digits, iban_re) {
        if overlaps(&out, m.start(), m.end()) {
            continue;
        }
        out.push(Found {
            kind: IdKind::Iban,
            key: iban_key(m.as_str()),
            start: m.start(),
            end: m.end(),
        });
    }
    for m in matches(possible.digits, phone_re) {
        if overlaps(&out, m.start(), m.end()) || looks_like_number_not_phone(m.as_str()) {
            continue;
        }
        out.push(Found {
            kind: IdKind::Phone,
            key: phone_key(m.as_str()),
            start: m.start(),
            end: m.end(),
        });
    }
    out.sort_by_key(|f| f.start);
    out
}

/// Bare names (no scheme, no `www.`) count as hosts only with a TLD that is not a common
/// file extension, so `report.pdf` or `main.rs` are not mistaken for hosts.
fn plausible_bare_host(host: &str) -> bool {
    const FILE_EXTENSIONS: &[&str] = &[
        "txt", "md", "pdf", "doc", "docx", "xls", "xlsx", "csv", "json", "yaml", "yml", "toml",
        "rs", "py", "js", "ts", "sh", "png", "jpg", "jpeg", "gif", "html", "htm", "xml", "zip",
        "gz", "tar", "log", "cfg", "conf", "ini", "lock", "c", "h", "cpp", "go", "java", "rb",
        "pptx", "odt", "svg", "mp3", "mp4", "exe", "bin",
    ];
    let tld = host.rsplit('.').next().unwrap_or("");
    host.contains('.') && !FILE_EXTENSIONS.contains(&tld)
}

/// Classify a whole argument value as one identifier, if it is exactly one.
pub fn whole_value_identifier(value: &str) -> Option<(IdKind, String)> {
    let v = value.trim();
    if v.is_empty() {
        return None;
    }
    let found = find_identifiers(v);
    match found.as_slice() {
        [one] if one.start == 0 && one.end >= v.trim_end_matches(['/', '.']).len() => {
            Some((one.kind, one.key.clone()))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(t: &str) -> Vec<(IdKind, String)> {
        find_identifiers(t)
            .into_iter()
            .map(|f| (f.kind, f.key))
            .collect()
    }

    #[test]
    fn finds_each_kind() {
        assert_eq!(
            kinds("mail Bob@Example.com now"),
            vec![(IdKind::Email, "bob@example.com".into())]
        );
        assert_eq!(
            kinds("see www.Secure-Systems-252.com/x."),
            vec![(IdKind::Host, "secure-systems-252.com".into())]
        );
        assert_eq!(
            kinds("https://api.github.com/repos"),
            vec![(IdKind::Host, "api.github.com".into())]
        );
        assert_eq!(
            kinds("to US133000000121212121212 asap"),
            vec![(IdKind::Iban, "US133000000121212121212".into())]
        );
        assert_eq!(
            kinds("GB29 NWBK 6016 1331 9268 19"),
            vec![(IdKind::Iban, "GB29NWBK60161331926819".into())]
        );
        assert_eq!(
            kinds("call +1 (555) 010-9999"),
            vec![(IdKind::Phone, "15550109999".into())]
        );
    }

    #[test]
    fn ignores_non_identifiers() {
        assert!(kinds("amount 1000.00 on 2022-01-01, see notes.txt and main.rs").is_empty());
        assert!(kinds("e.g. this").is_empty());
    }

    #[test]
    fn whole_values() {
        assert_eq!(
            whole_value_identifier("www.dora-website.com"),
            Some((IdKind::Host, "dora-website.com".into()))
        );
        assert_eq!(
            whole_value_identifier("dora@gmail.com"),
            Some((IdKind::Email, "dora@gmail.com".into()))
        );
        assert_eq!(whole_value_identifier("Hello dora@gmail.com"), None);
        assert_eq!(whole_value_identifier("Alice"), None);
    }

    /// The shortcut only skips a pattern that cannot match: on texts built from the
    /// characters the patterns care about, a pattern ruled out never finds anything.
    #[test]
    fn patterns_ruled_out_never_match() {
        const PIECES: &[&str] = &[
            "a", "Z", "x", "GB", "www", "http", "s", "://", "/", ".", "@", "-", "_", "%", "+", " ",
            "\t", "(", ")", "1", "9", "0", "é", "ſ", "K", "com", "org", "'", "\"", "<",
        ];
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let mut ruled_out = [0usize; 3];
        for _ in 0..20_000 {
            let len = 1 + next(24);
            let text: String = (0..len).map(|_| PIECES[next(PIECES.len())]).collect();
            let p = Possible::of(&text);
            if !p.email {
                ruled_out[0] += 1;
                assert!(!email_re().is_match(&text), "{text:?}");
            }
            if !p.url {
                ruled_out[1] += 1;
                assert!(!url_re().is_match(&text), "{text:?}");
            }
            if !p.digits {
                ruled_out[2] += 1;
                assert!(!iban_re().is_match(&text), "{text:?}");
                assert!(!phone_re().is_match(&text), "{text:?}");
            }
        }
        assert!(ruled_out.iter().all(|n| *n > 1_000), "{ruled_out:?}");
        // And texts that may match still do.
        assert_eq!(find_identifiers("mail bob@example.com").len(), 1);
        assert!(find_identifiers("ls -la /tmp").is_empty());
    }
}
