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
    /// A scrubber for `secrets`; `None` when there are none (nothing to scrub).
    pub fn new(secrets: &[LoadedSecret]) -> Option<Scrubber> {
        if secrets.is_empty() {
            return None;
        }
        let values: Vec<&[u8]> = secrets
            .iter()
            .map(|s| s.value.expose_secret().as_bytes())
            .collect();
        let matcher = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&values)
            .ok()?;
        Some(Scrubber {
            longest: values.iter().map(|v| v.len()).max().unwrap_or(1),
            matcher,
            placeholders: secrets
                .iter()
                .map(|s| s.info.placeholder.clone().into_bytes())
                .collect(),
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
                host: "h".into(),
                path_prefix: None,
                header: HeaderTemplate::bearer(),
                placeholder: ph.into(),
            },
            value: SecretString::from(value.to_string()),
        }
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
