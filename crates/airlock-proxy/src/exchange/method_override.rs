//! `_method` in a request body: Rails (Rack), Laravel, Symfony and method-override
//! middleware take it as the request's method, so a POST could act as a DELETE on the
//! upstream while the Gate decided on a POST.
//!
//! Frameworks disagree on which bodies they read: Rack reads form fields of a POST with
//! no `Content-Type` and multipart field names, Laravel reads JSON keys as well. So every
//! body is read in every one of these ways, whatever its `Content-Type` says: a
//! declared type is the client's to choose, and a server may read another.

use http::{header, HeaderMap};
use serde_json::Value;

use crate::request_target::{has_method_param, percent_decode};

/// Where `body` names another method, if it does: `form body`, `multipart field` or
/// `JSON key`.
pub(super) fn body_names_method(headers: &HeaderMap, body: &[u8]) -> Option<&'static str> {
    if body.is_empty() {
        return None;
    }
    if has_method_param(body) {
        return Some("form body");
    }
    if multipart_names_method(body) {
        return Some("multipart field");
    }
    let declared_json = headers.get_all(header::CONTENT_TYPE).iter().any(|v| {
        v.as_bytes()
            .to_ascii_lowercase()
            .windows(4)
            .any(|w| w == b"json")
    });
    if json_names_method(body, declared_json) {
        return Some("JSON key");
    }
    None
}

/// A `Content-Disposition` line anywhere in the body whose field name is `_method`. The
/// lines are looked for without the boundary: a part a server would find is a part here.
fn multipart_names_method(body: &[u8]) -> bool {
    body.split(|b| *b == b'\n').any(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let lower = line.to_ascii_lowercase();
        let Some(rest) = lower.strip_prefix(b"content-disposition:") else {
            return false;
        };
        rest.split(|b| *b == b';').any(|param| {
            let param = param.trim_ascii();
            let Some(eq) = param.iter().position(|b| *b == b'=') else {
                return false;
            };
            let (key, value) = (param[..eq].trim_ascii(), param[eq + 1..].trim_ascii());
            let value = value
                .strip_prefix(b"\"")
                .and_then(|v| v.strip_suffix(b"\""))
                .unwrap_or(value);
            match key {
                b"name" => is_method(value),
                // RFC 5987 form: `name*=utf-8''_method`.
                b"name*" => {
                    let v = value
                        .windows(2)
                        .position(|w| w == b"''")
                        .map_or(value, |i| &value[i + 2..]);
                    is_method(v)
                }
                _ => false,
            }
        })
    })
}

fn is_method(name: &[u8]) -> bool {
    percent_decode(name).eq_ignore_ascii_case(b"_method")
}

/// A top-level `_method` key of a JSON object body. A body that says it is JSON but
/// does not parse is refused if it holds `_method` at all: a lenient parser upstream may
/// still read it.
fn json_names_method(body: &[u8], declared_json: bool) -> bool {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => map.keys().any(|k| k.eq_ignore_ascii_case("_method")),
        Ok(_) => false,
        Err(_) => {
            declared_json
                && body
                    .to_ascii_lowercase()
                    .windows(b"_method".len())
                    .any(|w| w == b"_method")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_type(t: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(t) = t {
            h.insert(header::CONTENT_TYPE, t.parse().unwrap());
        }
        h
    }

    #[test]
    fn every_way_a_framework_reads_a_body_is_checked() {
        let multipart =
            b"--x\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nDELETE\r\n--x--\r\n";
        let star = b"--x\r\ncontent-disposition: form-data; name*=utf-8''%5Fmethod\r\n\r\nPUT\r\n--x--\r\n";
        for (ty, body, want) in [
            (None, &b"a=1&_method=DELETE"[..], Some("form body")),
            (Some("text/plain"), &b"_method=PUT"[..], Some("form body")),
            (Some("multipart/form-data; boundary=x"), &multipart[..], Some("multipart field")),
            (None, &star[..], Some("multipart field")),
            (Some("application/json"), &br#"{"a":1,"_method":"DELETE"}"#[..], Some("JSON key")),
            (None, &br#"{"\u005fmethod":"DELETE"}"#[..], Some("JSON key")),
            (Some("application/json"), &br#"{"_method":"DELETE""#[..], Some("JSON key")),
            (Some("application/json"), &br#"{"note":"define_method is Ruby"}"#[..], None),
            (None, &b"a=1&b=2"[..], None),
            (Some("multipart/form-data; boundary=x"), &b"--x\r\nContent-Disposition: form-data; name=\"file\"; filename=\"_method\"\r\n\r\n1\r\n--x--"[..], None),
        ] {
            assert_eq!(body_names_method(&with_type(ty), body), want, "{ty:?} {}", String::from_utf8_lossy(body));
        }
    }
}
