//! Replacing echoed secret values by their placeholders in responses, including values
//! split across body chunks.

use aho_corasick::{AhoCorasick, MatchKind};
use bytes::{Bytes, BytesMut};
use secrecy::ExposeSecret;

use super::LoadedSecret;

/// Finds real secret values and knows each one's placeholder.
#[derive(Clone)]
pub struct Scrubber {
    matcher: AhoCorasick,
    placeholders: Vec<Vec<u8>>,
    longest: usize,
}

impl std::fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scrubber").finish_non_exhaustive()
    }
}

impl Scrubber {
    /// A scrubber for `secrets`; `None` when there are none (nothing to scrub). Each
    /// value is also looked for in its common encodings (see [`encoded_forms`]).
    pub fn new(secrets: &[LoadedSecret]) -> Option<Scrubber> {
        if secrets.is_empty() {
            return None;
        }
        let mut patterns: Vec<Vec<u8>> = Vec::new();
        let mut placeholders: Vec<Vec<u8>> = Vec::new();
        for s in secrets {
            for form in encoded_forms(s.value.expose_secret().as_bytes()) {
                if !patterns.contains(&form) {
                    patterns.push(form);
                    placeholders.push(s.info.placeholder.clone().into_bytes());
                }
            }
        }
        let matcher = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&patterns)
            .ok()?;
        Some(Scrubber {
            longest: patterns.iter().map(|v| v.len()).max().unwrap_or(1),
            matcher,
            placeholders,
        })
    }

    /// `data` with every secret value replaced; `None` if there was none.
    pub fn scrub(&self, data: &[u8]) -> Option<Vec<u8>> {
        if !self.matcher.is_match(data) {
            return None;
        }
        let mut out = Vec::with_capacity(data.len());
        self.matcher
            .replace_all_with_bytes(data, &mut out, |m, _, dst| {
                dst.extend_from_slice(&self.placeholders[m.pattern().as_usize()]);
                true
            });
        Some(out)
    }

    /// A scrubber for one streamed body.
    pub fn stream(&self) -> StreamScrubber {
        StreamScrubber {
            scrubber: self.clone(),
            held: BytesMut::new(),
            replaced: 0,
        }
    }
}

/// Shortest encoded form worth looking for: a shorter one would match ordinary text.
const MIN_ENCODED_LEN: usize = 8;

/// `value` and the forms an upstream commonly echoes it in: base64 (standard and
/// URL-safe alphabets, at each of the three byte alignments a value can have inside a
/// longer encoded blob, so with or without padding and with or without neighbours), hex
/// in both cases, and percent-encoding (only reserved bytes, or every byte; both hex
/// cases). An upstream that reflects a value in any other encoding (gzip, a cipher,
/// UTF-16, reversed, split over fields) defeats this: scrubbing is a safety net for
/// honest echoes, not a boundary.
pub fn encoded_forms(value: &[u8]) -> Vec<Vec<u8>> {
    use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
    use base64::Engine;
    let mut out = vec![value.to_vec()];
    let mut add = |form: Vec<u8>| {
        if form.len() >= MIN_ENCODED_LEN && !out.contains(&form) {
            out.push(form);
        }
    };
    for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
        for align in 0..3usize {
            // Encode behind `align` filler bytes, then keep only the characters whose six
            // bits all come from the value: they are the same whatever surrounds it.
            let mut buf = vec![0u8; align];
            buf.extend_from_slice(value);
            let enc = engine.encode(&buf).into_bytes();
            let start = (8 * align).div_ceil(6);
            let end = ((8 * (align + value.len())) / 6).min(enc.len());
            if start < end {
                add(enc[start..end].to_vec());
            }
        }
    }
    add(hex::encode(value).into_bytes());
    add(hex::encode_upper(value).into_bytes());
    let unreserved = |b: u8| b.is_ascii_alphanumeric() || b"-._~".contains(&b);
    for upper in [true, false] {
        let esc = |b: u8| {
            if upper {
                format!("%{b:02X}")
            } else {
                format!("%{b:02x}")
            }
        };
        let reserved_only: String = value
            .iter()
            .map(|&b| {
                if unreserved(b) {
                    (b as char).to_string()
                } else {
                    esc(b)
                }
            })
            .collect();
        add(reserved_only.into_bytes());
        let every: String = value.iter().map(|&b| esc(b)).collect();
        add(every.into_bytes());
    }
    out
}

/// Scrubs one body chunk by chunk. It holds back the last `longest - 1` bytes of each
/// chunk, the most a value that continues in the next chunk can have begun with.
#[derive(Debug)]
pub struct StreamScrubber {
    scrubber: Scrubber,
    held: BytesMut,
    replaced: usize,
}

impl StreamScrubber {
    /// Feed one chunk; returns the bytes that are safe to pass on.
    ///
    /// A chunk with no value in it is passed on without a copy (a slice of it), apart from
    /// the few held-back bytes; a chunk after held-back bytes is copied once to join them.
    pub fn push(&mut self, chunk: Bytes) -> Bytes {
        let buf = if self.held.is_empty() {
            chunk
        } else {
            self.held.extend_from_slice(&chunk);
            std::mem::take(&mut self.held).freeze()
        };
        let safe = buf.len().saturating_sub(self.scrubber.longest - 1);
        let mut out: Option<BytesMut> = None;
        let mut pos = 0;
        for m in self.scrubber.matcher.find_iter(&buf[..]) {
            if m.start() >= safe {
                break;
            }
            let o = out.get_or_insert_with(|| BytesMut::with_capacity(buf.len()));
            o.extend_from_slice(&buf[pos..m.start()]);
            o.extend_from_slice(&self.scrubber.placeholders[m.pattern().as_usize()]);
            self.replaced += 1;
            pos = m.end();
        }
        let keep_from = pos.max(safe);
        self.held.extend_from_slice(&buf[keep_from..]);
        match out {
            None => buf.slice(..keep_from),
            Some(mut o) => {
                o.extend_from_slice(&buf[pos..keep_from]);
                o.freeze()
            }
        }
    }

    /// End of body: the held bytes, scrubbed.
    pub fn finish(&mut self) -> Bytes {
        let rest = std::mem::take(&mut self.held);
        match self.scrubber.scrub(&rest) {
            Some(v) => {
                self.replaced += 1;
                Bytes::from(v)
            }
            None => rest.freeze(),
        }
    }

    /// How many values were replaced so far.
    pub fn replaced(&self) -> usize {
        self.replaced
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets::{HeaderTemplate, SecretInfo};
    use secrecy::SecretString;

    fn secret(value: &str, ph: &str) -> LoadedSecret {
        LoadedSecret {
            info: SecretInfo {
                name: "T".into(),
                binding: crate::secrets::Binding::parse("h", None, None, None).unwrap(),
                legacy: false,
                header: HeaderTemplate::bearer(),
                placeholder: ph.into(),
            },
            value: SecretString::from(value.to_string()),
        }
    }

    #[test]
    fn i10_echoes_in_base64_hex_and_percent_encoding_are_scrubbed() {
        use base64::engine::general_purpose::{
            STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD,
        };
        use base64::Engine;
        // '>' and '?' make the standard and URL-safe alphabets differ; ' ' and '/' need
        // percent-encoding.
        let value = "tok>?en/ value~0123456789";
        let s = Scrubber::new(&[secret(value, "PH")]).unwrap();
        let mut echoes: Vec<String> = Vec::new();
        for engine in [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD] {
            for prefix in ["", "u:", "ab:", "abc:"] {
                for suffix in ["", "x", "xy"] {
                    echoes.push(engine.encode(format!("{prefix}{value}{suffix}")));
                }
            }
        }
        echoes.push(hex::encode(value));
        echoes.push(hex::encode_upper(value));
        echoes.push("tok%3E%3Fen%2F%20value~0123456789".into());
        echoes.push("tok%3e%3fen%2f%20value~0123456789".into());
        echoes.push(value.bytes().map(|b| format!("%{b:02X}")).collect());
        echoes.push(value.bytes().map(|b| format!("%{b:02x}")).collect());
        for echo in echoes {
            let body = format!("{{\"echo\": \"{echo}\"}}");
            let out = s
                .scrub(body.as_bytes())
                .unwrap_or_else(|| panic!("{echo} not scrubbed"));
            let out = String::from_utf8_lossy(&out).into_owned();
            assert!(out.contains("PH"), "{out}");
            // Whatever survives no longer decodes to the value.
            for engine in [&STANDARD, &URL_SAFE] {
                if let Ok(d) = engine.decode(
                    out.trim_start_matches("{\"echo\": \"")
                        .trim_end_matches("\"}"),
                ) {
                    assert!(
                        !String::from_utf8_lossy(&d).contains(value),
                        "{echo} -> {out}"
                    );
                }
            }
            assert!(!out.contains(&hex::encode(value)));
        }
        // Ordinary text is left alone.
        assert_eq!(s.scrub(b"nothing here: deadbeef, dG9r, tok%3E"), None);
    }

    #[test]
    fn values_split_across_every_boundary_are_scrubbed() {
        let s = Scrubber::new(&[secret("TOPSECRETVALUE", "PH")]).unwrap();
        let body = b"aaTOPSECRETVALUEbbTOPSECRETVALUE".to_vec();
        for chunk in 1..body.len() {
            let mut st = s.stream();
            let mut out = Vec::new();
            for c in body.chunks(chunk) {
                out.extend_from_slice(&st.push(Bytes::copy_from_slice(c)));
            }
            out.extend_from_slice(&st.finish());
            assert_eq!(out, b"aaPHbbPH", "chunk size {chunk}");
        }
        assert_eq!(s.scrub(b"no secret here"), None);
    }
}
