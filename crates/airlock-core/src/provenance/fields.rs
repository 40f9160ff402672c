//! Identifier fields in untrusted content: `id: 7`, `'file_id': '13'`, `"eventId": "x"`.
//!
//! A short identifier (`7`, `13`, `ord_1029`) may trace even though the owner never typed
//! it: when it is the entire value of an id field in a tool result (the owner asked to
//! change "my rent payment", the listing says `id: 7`) and no untrusted text mentions it
//! anywhere else. An injection that wants a particular object acted on has to name it,
//! and naming it anywhere outside an id field contests it.

use regex::Regex;
use std::sync::OnceLock;

use super::arg_roles::name_words;

/// One id field's value, lower-cased, with the byte span of the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdField {
    pub value: String,
    pub start: usize,
    pub end: usize,
}

fn field_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    // key, optional closing quote, `:` or `=`, optional opening quote, a value without
    // spaces up to the next delimiter.
    RE.get_or_init(|| {
        Regex::new(r#"([A-Za-z][A-Za-z0-9_\-]{0,63})['"]?[ \t]*[:=][ \t]*['"]?([A-Za-z0-9][A-Za-z0-9_.:@+\-]{0,127})"#)
            .expect("the id field pattern is valid")
    })
}

/// Is `key` the name of an identifier field (`id`, `id_`, `file_id`, `eventId`, `uuid`)?
fn is_id_key(key: &str) -> bool {
    name_words(key)
        .iter()
        .any(|w| matches!(w.as_str(), "id" | "ids" | "uuid" | "guid"))
}

/// The id fields of `text`. A value must end at a delimiter (quote, comma, bracket,
/// whitespace or the end), so `id: 7 days` is not the id `7`… days.
pub fn id_fields(text: &str) -> Vec<IdField> {
    let mut out = Vec::new();
    for c in field_re().captures_iter(text) {
        let (Some(key), Some(val)) = (c.get(1), c.get(2)) else {
            continue;
        };
        if !is_id_key(key.as_str()) {
            continue;
        }
        let mut v = val.as_str();
        // A trailing full stop or colon ends a sentence, it is not part of the id.
        v = v.trim_end_matches(['.', ':']);
        let end = val.start() + v.len();
        let next = text[end..].chars().next();
        let ends_field = next.is_none_or(|ch| {
            ch.is_whitespace() || matches!(ch, '\'' | '"' | ',' | '}' | ']' | ')' | ';' | '.')
        });
        let line_rest = text[end..].split('\n').next().unwrap_or("");
        let closes = line_rest
            .trim_start_matches(['\'', '"', '.'])
            .trim_start()
            .chars()
            .next()
            .is_none_or(|ch| matches!(ch, ',' | '}' | ']' | ')' | ';'));
        if v.is_empty() || !ends_field || !closes {
            continue;
        }
        out.push(IdField {
            value: v.to_lowercase(),
            start: val.start(),
            end,
        });
    }
    out
}

/// Largest number of tokens in a data value that may vouch for a target. One: a name,
/// a channel or an id is one token; words inside a longer value (`subject: Delete file
/// 13`) are talked about, not listed.
pub const MAX_VALUE_TOKENS: usize = 1;

/// The whole value of a data field or list item: `sender: Alice`, `- general`,
/// `'name': 'Dora'`. Lower-cased.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataField {
    pub value: String,
    pub start: usize,
    pub end: usize,
}

fn quoted_pair_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r#"['"][A-Za-z][A-Za-z0-9_\- ]{0,39}['"][ \t]*:[ \t]*['"]([^'"\n]{1,120})['"]"#)
            .expect("the quoted pair pattern is valid")
    })
}

/// Is `key` (the text before a `:` on a line) a field name rather than prose?
fn looks_like_key(key: &str) -> bool {
    let k = key.trim().trim_matches(['\'', '"']);
    !k.is_empty()
        && k.len() <= 40
        && k.split_whitespace().count() <= 3
        && k.chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | ' '))
}

/// Short whole values of data fields and list items in `text` (YAML-style lines, and
/// quoted pairs of Python or JSON dicts).
pub fn data_fields(text: &str) -> Vec<DataField> {
    let mut out = Vec::new();
    let push = |raw: &str, start: usize, out: &mut Vec<DataField>| {
        let trimmed = raw.trim();
        let lead = raw.len() - raw.trim_start().len();
        let inner = trimmed.trim_matches(['\'', '"']);
        let toks = super::tokens::tokens(inner);
        if toks.is_empty() || toks.len() > MAX_VALUE_TOKENS {
            return;
        }
        let s = start + lead;
        out.push(DataField {
            value: toks.join(" "),
            start: s,
            end: s + trimmed.len(),
        });
    };
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches(['\n', '\r']);
        let indent = body.len() - body.trim_start().len();
        let mut rest = &body[indent..];
        let mut at = offset + indent;
        let listed = if let Some(r) = rest.strip_prefix("- ") {
            at += 2;
            rest = r;
            true
        } else {
            false
        };
        match rest.find(':') {
            Some(i) if looks_like_key(&rest[..i]) && rest[i + 1..].starts_with([' ', '\t']) => {
                push(&rest[i + 1..], at + i + 1, &mut out);
            }
            Some(i) if looks_like_key(&rest[..i]) && i + 1 == rest.len() => {}
            _ if listed => push(rest, at, &mut out),
            _ => {}
        }
        offset += line.len();
    }
    for c in quoted_pair_re().captures_iter(text) {
        if let Some(v) = c.get(1) {
            push(v.as_str(), v.start(), &mut out);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(t: &str) -> Vec<String> {
        id_fields(t).into_iter().map(|f| f.value).collect()
    }

    #[test]
    fn finds_id_fields_in_yaml_dicts_and_json() {
        assert_eq!(
            values("- amount: 50.0\n  id: 6\n  recipient: SE35\n- id: 7\n"),
            vec!["6", "7"]
        );
        assert_eq!(
            values("{'file_id': '13', 'name': 'x', 'owner_id': 'u_2'}"),
            vec!["13", "u_2"]
        );
        assert_eq!(
            values(r#"{"eventId": "DocAppointment1"}"#),
            vec!["docappointment1"]
        );
        assert_eq!(values("id_: '24'"), vec!["24"]);
    }

    #[test]
    fn short_field_values_and_list_items_are_data() {
        let t = "- body: I read an interesting article on a site today\n  recipient: general\n  sender: Bob\n- random\n{'name': 'Riverside View', 'x': 'a long sentence with many words in it'}";
        let v: Vec<String> = data_fields(t).into_iter().map(|f| f.value).collect();
        assert_eq!(v, vec!["general", "bob", "random"]);
        for f in data_fields(t) {
            assert!(t[f.start..f.end].to_lowercase().contains(&f.value), "{f:?}");
        }
    }

    #[test]
    fn prose_and_other_keys_are_not_id_fields() {
        assert!(values("amount: 12\ndate: 2024-12-01\n").is_empty());
        assert!(values("Delete the file with ID 13 now").is_empty());
        assert!(values("my id: 7 days ago I wrote").is_empty());
    }
}
