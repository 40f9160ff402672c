//! Swapping placeholders for values at the boundary, and spotting placeholders that go
//! where their secret is not bound (a possible exfiltration attempt).

use aho_corasick::AhoCorasick;
use http::{HeaderMap, HeaderValue};
use secrecy::ExposeSecret;

use super::LoadedSecret;

/// A placeholder seen where its secret is not bound.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Misuse {
    /// Secret name (never its value).
    pub secret: String,
    /// `header:<name>`, `url` or `body`.
    pub location: String,
}

/// What injection did to one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InjectReport {
    /// Names of the secrets put into the request.
    pub injected: Vec<String>,
    /// Placeholders that passed unchanged because they were out of place.
    pub misuse: Vec<Misuse>,
}

/// Where a request goes, as the Gate decided it: normalized host and path.
#[derive(Debug, Clone, Copy)]
pub struct Destination<'a> {
    pub scheme: &'a str,
    pub host: &'a str,
    pub port: u16,
    pub path: &'a str,
}

/// Knows every placeholder and the binding of its secret.
pub struct Injector {
    secrets: Vec<LoadedSecret>,
    placeholders: Option<AhoCorasick>,
}

impl std::fmt::Debug for Injector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Injector")
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

impl Injector {
    pub fn new(secrets: Vec<LoadedSecret>) -> Injector {
        let placeholders = if secrets.is_empty() {
            None
        } else {
            AhoCorasick::new(secrets.iter().map(|s| s.info.placeholder.as_bytes())).ok()
        };
        Injector {
            secrets,
            placeholders,
        }
    }

    /// The loaded secrets.
    pub fn secrets(&self) -> &[LoadedSecret] {
        &self.secrets
    }

    fn found(&self, data: &[u8]) -> Vec<usize> {
        let Some(m) = &self.placeholders else {
            return vec![];
        };
        let mut ids: Vec<usize> = m.find_iter(data).map(|m| m.pattern().as_usize()).collect();
        ids.dedup();
        ids
    }

    /// Rewrite `headers` of a request to `to`: in the bound header of a secret bound to
    /// this scheme, host, port and path, the placeholder becomes the value. Everything
    /// else is left as is; out-of-place placeholders (other destination, other header,
    /// `url`, `body`) are reported.
    pub fn apply(
        &self,
        to: Destination<'_>,
        url: &str,
        headers: &mut HeaderMap,
        body: &[u8],
    ) -> InjectReport {
        let mut report = InjectReport::default();
        if self.placeholders.is_none() {
            return report;
        }
        let names: Vec<http::HeaderName> = headers.keys().cloned().collect();
        for name in names {
            let values: Vec<HeaderValue> = headers.get_all(&name).iter().cloned().collect();
            let mut changed = false;
            let mut rewritten = Vec::with_capacity(values.len());
            for v in values {
                let mut text = v.as_bytes().to_vec();
                for id in self.found(&text) {
                    let s = &self.secrets[id];
                    if s.info.header.name == name.as_str()
                        && s.bound_to(to.scheme, to.host, to.port, to.path)
                    {
                        text = replace(
                            &text,
                            s.info.placeholder.as_bytes(),
                            s.value.expose_secret().as_bytes(),
                        );
                        report.injected.push(s.info.name.clone());
                        changed = true;
                    } else {
                        report.misuse.push(Misuse {
                            secret: s.info.name.clone(),
                            location: format!("header:{name}"),
                        });
                    }
                }
                rewritten.push(text);
            }
            if changed {
                headers.remove(&name);
                for t in rewritten {
                    // Values were checked for control characters when stored, so this
                    // only fails on bytes the client itself sent, which stay refused.
                    if let Ok(mut hv) = HeaderValue::from_bytes(&t) {
                        hv.set_sensitive(true);
                        headers.append(name.clone(), hv);
                    }
                }
            }
        }
        for (data, location) in [(url.as_bytes(), "url"), (body, "body")] {
            for id in self.found(data) {
                report.misuse.push(Misuse {
                    secret: self.secrets[id].info.name.clone(),
                    location: location.into(),
                });
            }
        }
        report
    }
}

fn replace(hay: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(hay.len() + to.len());
    let mut i = 0;
    while i < hay.len() {
        if hay[i..].starts_with(from) {
            out.extend_from_slice(to);
            i += from.len();
        } else {
            out.push(hay[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets::{HeaderTemplate, SecretInfo};
    use secrecy::SecretString;

    fn dest<'a>(scheme: &'a str, host: &'a str, port: u16, path: &'a str) -> Destination<'a> {
        Destination {
            scheme,
            host,
            port,
            path,
        }
    }

    fn injector() -> Injector {
        Injector::new(vec![LoadedSecret {
            info: SecretInfo {
                name: "GH".into(),
                binding: crate::secrets::Binding::parse("api.example", None, None, Some("/v1"))
                    .unwrap(),
                legacy: false,
                header: HeaderTemplate::bearer(),
                placeholder: "PH123".into(),
            },
            value: SecretString::from("REALVALUE".to_string()),
        }])
    }

    #[test]
    fn injects_only_in_bound_header_host_and_path() {
        let inj = injector();
        let mut h = HeaderMap::new();
        h.insert("authorization", HeaderValue::from_static("Bearer PH123"));
        let r = inj.apply(
            dest("https", "api.example", 443, "/v1/x"),
            "https://api.example/v1/x",
            &mut h,
            b"",
        );
        assert_eq!(r.injected, vec!["GH"]);
        assert_eq!(h["authorization"], "Bearer REALVALUE");

        for to in [
            dest("https", "other.example", 443, "/v1/x"),
            dest("https", "api.example", 443, "/v2"),
            dest("http", "api.example", 443, "/v1/x"),
            dest("http", "api.example", 80, "/v1/x"),
            dest("https", "api.example", 8443, "/v1/x"),
        ] {
            let mut h = HeaderMap::new();
            h.insert("authorization", HeaderValue::from_static("Bearer PH123"));
            let r = inj.apply(to, "u", &mut h, b"");
            assert!(r.injected.is_empty());
            assert_eq!(r.misuse[0].location, "header:authorization");
            assert_eq!(h["authorization"], "Bearer PH123");
        }
        let mut h = HeaderMap::new();
        h.insert("x-other", HeaderValue::from_static("PH123"));
        let r = inj.apply(
            dest("https", "api.example", 443, "/v1"),
            "https://api.example/v1?k=PH123",
            &mut h,
            b"tok=PH123",
        );
        let locs: Vec<&str> = r.misuse.iter().map(|m| m.location.as_str()).collect();
        assert_eq!(locs, vec!["header:x-other", "url", "body"]);
        assert_eq!(h["x-other"], "PH123");
    }
}
