//! The record kinds memory can hold, with their declared shapes and size limits.
//!
//! A record is stored as its kind (a column) and a JSON body that goes through strict
//! serde into exactly that kind's struct: unknown fields are refused, every string has a
//! byte limit and the whole record has one too. Nothing is ever deserialized by guessing
//! its type: there is no untagged enum here and no `flatten`, and the only free-form JSON
//! (a `task_state`'s state) is checked against the JSON Schema the operator registered.

use serde::{Deserialize, Serialize};

use crate::error::StoreError;

/// Largest serialized record body.
pub const MAX_RECORD_BYTES: usize = 16 * 1024;
/// Largest free-text field (a note's text).
pub const MAX_TEXT_BYTES: usize = 8 * 1024;
/// Largest short field (subject, name, address, ...).
pub const MAX_SHORT_BYTES: usize = 512;
/// Most addresses on one contact.
pub const MAX_ADDRESSES: usize = 16;

/// Free text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Note {
    pub text: String,
}

/// A subject–predicate–object statement with a confidence in `[0, 1]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fact {
    pub subject: String,
    pub predicate: String,
    pub object: String,
    pub confidence: f64,
}

/// A preference of the user on one topic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preference {
    pub topic: String,
    pub value: String,
}

/// What an address of a contact is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AddressKind {
    Email,
    Phone,
    Chat,
    Postal,
    Url,
}

/// One typed address of a contact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContactAddress {
    pub kind: AddressKind,
    pub value: String,
}

/// A person and their addresses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Contact {
    pub name: String,
    #[serde(default)]
    pub addresses: Vec<ContactAddress>,
}

/// The state of a task: a JSON value valid against the operator's schema `schema`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskState {
    /// Name of a registered schema.
    pub schema: String,
    /// The state. It stays JSON data: it is validated, shown and returned, never turned
    /// into a program object.
    pub state: serde_json::Value,
}

/// The names of the record kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MemoryKind {
    Note,
    Fact,
    Preference,
    Contact,
    TaskState,
}

impl MemoryKind {
    /// Every kind, in the order they are documented.
    pub const ALL: [MemoryKind; 5] = [
        MemoryKind::Note,
        MemoryKind::Fact,
        MemoryKind::Preference,
        MemoryKind::Contact,
        MemoryKind::TaskState,
    ];

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            MemoryKind::Note => "note",
            MemoryKind::Fact => "fact",
            MemoryKind::Preference => "preference",
            MemoryKind::Contact => "contact",
            MemoryKind::TaskState => "task_state",
        }
    }

    /// The kind named `name`, if any.
    pub fn parse(name: &str) -> Option<MemoryKind> {
        MemoryKind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

/// A record of one of the declared kinds.
#[derive(Debug, Clone, PartialEq)]
pub enum MemoryRecord {
    Note(Note),
    Fact(Fact),
    Preference(Preference),
    Contact(Contact),
    TaskState(TaskState),
}

impl MemoryRecord {
    /// The record's kind.
    pub fn kind(&self) -> MemoryKind {
        match self {
            MemoryRecord::Note(_) => MemoryKind::Note,
            MemoryRecord::Fact(_) => MemoryKind::Fact,
            MemoryRecord::Preference(_) => MemoryKind::Preference,
            MemoryRecord::Contact(_) => MemoryKind::Contact,
            MemoryRecord::TaskState(_) => MemoryKind::TaskState,
        }
    }

    /// Read a body of kind `kind` strictly: the kind decides the type, the body must fit
    /// it exactly and within the limits. `Err` is the reason, for an error message.
    pub fn from_parts(kind: MemoryKind, body: &str) -> Result<MemoryRecord, String> {
        if body.len() > MAX_RECORD_BYTES {
            return Err(format!(
                "the record is {} bytes, over the {MAX_RECORD_BYTES}-byte limit",
                body.len()
            ));
        }
        fn strict<T: serde::de::DeserializeOwned>(body: &str) -> Result<T, String> {
            serde_json::from_str(body).map_err(|e| e.to_string())
        }
        let record = match kind {
            MemoryKind::Note => MemoryRecord::Note(strict(body)?),
            MemoryKind::Fact => MemoryRecord::Fact(strict(body)?),
            MemoryKind::Preference => MemoryRecord::Preference(strict(body)?),
            MemoryKind::Contact => MemoryRecord::Contact(strict(body)?),
            MemoryKind::TaskState => MemoryRecord::TaskState(strict(body)?),
        };
        record.check_limits()?;
        Ok(record)
    }

    /// The body as stored: the kind's struct as JSON, checked against the limits.
    pub fn body_json(&self) -> Result<String, StoreError> {
        self.check_limits()
            .map_err(|reason| StoreError::invalid("memory record", reason, LIMIT_HELP))?;
        let text = match self {
            MemoryRecord::Note(r) => serde_json::to_string(r),
            MemoryRecord::Fact(r) => serde_json::to_string(r),
            MemoryRecord::Preference(r) => serde_json::to_string(r),
            MemoryRecord::Contact(r) => serde_json::to_string(r),
            MemoryRecord::TaskState(r) => serde_json::to_string(r),
        }
        .map_err(|e| StoreError::invalid("memory record", e.to_string(), LIMIT_HELP))?;
        if text.len() > MAX_RECORD_BYTES {
            return Err(StoreError::invalid(
                "memory record",
                format!(
                    "{} bytes, over the {MAX_RECORD_BYTES}-byte limit",
                    text.len()
                ),
                LIMIT_HELP,
            ));
        }
        Ok(text)
    }

    /// The words full-text search indexes and a listing shows.
    pub fn search_text(&self) -> String {
        match self {
            MemoryRecord::Note(n) => n.text.clone(),
            MemoryRecord::Fact(f) => format!("{} {} {}", f.subject, f.predicate, f.object),
            MemoryRecord::Preference(p) => format!("{}: {}", p.topic, p.value),
            MemoryRecord::Contact(c) => {
                let mut s = c.name.clone();
                for a in &c.addresses {
                    s.push(' ');
                    s.push_str(&a.value);
                }
                s
            }
            MemoryRecord::TaskState(t) => format!("{} {}", t.schema, t.state),
        }
    }

    /// Per-field limits serde cannot express.
    fn check_limits(&self) -> Result<(), String> {
        let short = |field: &str, v: &str| field_limit(field, v, MAX_SHORT_BYTES);
        match self {
            MemoryRecord::Note(n) => field_limit("text", &n.text, MAX_TEXT_BYTES),
            MemoryRecord::Fact(f) => {
                short("subject", &f.subject)?;
                short("predicate", &f.predicate)?;
                short("object", &f.object)?;
                if !(0.0..=1.0).contains(&f.confidence) {
                    return Err(format!("confidence {} is outside 0 to 1", f.confidence));
                }
                Ok(())
            }
            MemoryRecord::Preference(p) => {
                short("topic", &p.topic)?;
                field_limit("value", &p.value, MAX_TEXT_BYTES)
            }
            MemoryRecord::Contact(c) => {
                short("name", &c.name)?;
                if c.addresses.len() > MAX_ADDRESSES {
                    return Err(format!(
                        "{} addresses, over the limit of {MAX_ADDRESSES}",
                        c.addresses.len()
                    ));
                }
                c.addresses
                    .iter()
                    .try_for_each(|a| short("address", &a.value))
            }
            MemoryRecord::TaskState(t) => short("schema", &t.schema),
        }
    }
}

const LIMIT_HELP: &str = "keep memory records short; large content belongs in a workspace file";

fn field_limit(field: &str, value: &str, max: usize) -> Result<(), String> {
    if value.trim().is_empty() {
        return Err(format!("`{field}` is empty"));
    }
    if value.len() > max {
        return Err(format!(
            "`{field}` is {} bytes, over the {max}-byte limit",
            value.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kind_column_decides_the_type_and_extra_fields_are_refused() {
        let r = MemoryRecord::from_parts(MemoryKind::Note, r#"{"text":"hi"}"#).unwrap();
        assert_eq!(r.kind(), MemoryKind::Note);
        let err = MemoryRecord::from_parts(MemoryKind::Note, r#"{"text":"hi","x":1}"#).unwrap_err();
        assert!(err.contains("unknown field"), "{err}");
        // A fact body under the note kind is not "guessed" into a fact.
        let fact = r#"{"subject":"a","predicate":"b","object":"c","confidence":0.5}"#;
        assert!(MemoryRecord::from_parts(MemoryKind::Note, fact).is_err());
        assert!(MemoryRecord::from_parts(MemoryKind::Fact, fact).is_ok());
        // Strings are never auto-cast into numbers.
        let fact = r#"{"subject":"a","predicate":"b","object":"c","confidence":"0.5"}"#;
        assert!(MemoryRecord::from_parts(MemoryKind::Fact, fact).is_err());
    }

    #[test]
    fn limits_are_checked_per_field_and_per_record() {
        let big = serde_json::json!({"text": "a".repeat(MAX_TEXT_BYTES + 1)}).to_string();
        assert!(MemoryRecord::from_parts(MemoryKind::Note, &big)
            .unwrap_err()
            .contains("`text`"));
        let huge = serde_json::json!({"text": "a".repeat(MAX_RECORD_BYTES + 1)}).to_string();
        assert!(MemoryRecord::from_parts(MemoryKind::Note, &huge)
            .unwrap_err()
            .contains("record"));
        let bad_conf = MemoryRecord::Fact(Fact {
            subject: "a".into(),
            predicate: "b".into(),
            object: "c".into(),
            confidence: 1.5,
        });
        assert!(bad_conf.body_json().is_err());
        let addrs = (0..=MAX_ADDRESSES)
            .map(|i| ContactAddress {
                kind: AddressKind::Email,
                value: format!("{i}@example.com"),
            })
            .collect();
        let c = MemoryRecord::Contact(Contact {
            name: "A".into(),
            addresses: addrs,
        });
        assert!(c.body_json().is_err());
    }
}
