//! Which arguments of a tool call are security-relevant?
//!
//! The Gate does not know any tool by name. It reads the argument's name, the words of its
//! JSON-schema description, its declared type and the shape of its value, and sorts it into
//! a role. The rule is *inverted* on purpose: an argument is a **target** (must trace to
//! trusted input) unless it is recognisably content, a time, a quantity or a flag. A new
//! tool with unfamiliar argument names is therefore judged strictly, not leniently.

use serde_json::Value;

use super::identifiers::{whole_value_identifier, IdKind};

/// The role an argument plays in an action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgRole {
    /// Where the action goes or what it acts on: recipients, addresses, accounts, URLs,
    /// hosts, user and channel ids, object ids, names of things to change. Must trace.
    Target,
    /// A credential being set or sent (password, token, key). Must trace.
    Credential,
    /// Free text carried by the action (message body, subject, title). May come from
    /// untrusted content, but destinations embedded in it must trace.
    Content,
    /// Dates, times and durations.
    Time,
    /// Amounts, counts, limits, sizes, ratings.
    Quantity,
    /// Booleans and nulls.
    Flag,
}

const CONTENT_WORDS: &[&str] = &[
    "body",
    "content",
    "contents",
    "text",
    "message",
    "msg",
    "subject",
    "title",
    "description",
    "summary",
    "note",
    "notes",
    "comment",
    "comments",
    "feedback",
    "caption",
    "reason",
    "prompt",
    "review",
    "markdown",
    "html",
    "memo",
    "headline",
    "excerpt",
    "answer",
    "reply",
    "greeting",
    "signature",
    // Where people meet, not where data goes: a calendar entry's location, a venue.
    // Identifiers inside it (a link, an address) must still trace.
    "location",
    "venue",
];
const TIME_WORDS: &[&str] = &[
    "date",
    "time",
    "day",
    "days",
    "datetime",
    "timestamp",
    "duration",
    "hour",
    "hours",
    "minute",
    "minutes",
    "year",
    "month",
    "week",
    "deadline",
    "start",
    "end",
    "until",
    "since",
    "when",
    "timezone",
    "tz",
];
const QUANTITY_WORDS: &[&str] = &[
    "amount",
    "n",
    "count",
    "limit",
    "quantity",
    "qty",
    "price",
    "cost",
    "size",
    "rating",
    "max",
    "min",
    "page",
    "offset",
    "total",
    "percent",
    "percentage",
    "score",
    "top",
    "k",
    "num",
    "recurring",
    "level",
    "priority",
];
const CREDENTIAL_WORDS: &[&str] = &[
    "password",
    "passwd",
    "passphrase",
    "passcode",
    "pin",
    "token",
    "secret",
    "apikey",
    "otp",
    "credential",
    "credentials",
];
/// Words that mark an argument as a target even when another rule would call it content
/// (`message_recipient`, `email_body_to`).
const TARGET_WORDS: &[&str] = &[
    "recipient",
    "recipients",
    "to",
    "cc",
    "bcc",
    "email",
    "emails",
    "address",
    "iban",
    "account",
    "url",
    "uri",
    "link",
    "host",
    "domain",
    "phone",
    "user",
    "users",
    "channel",
    "participant",
    "participants",
    "destination",
    "target",
    "id",
    "ids",
    "path",
    "file",
    "server",
    "endpoint",
    "webhook",
    "number",
];

/// Split `user_email`, `userEmail`, `user-email` into lower-case words.
pub fn name_words(name: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if c == '_' || c == '-' || c == ' ' || c == '.' {
            if !cur.is_empty() {
                words.push(std::mem::take(&mut cur));
            }
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower && !cur.is_empty() {
            words.push(std::mem::take(&mut cur));
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        cur.extend(c.to_lowercase());
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    words
}

fn any_in(words: &[String], list: &[&str]) -> bool {
    words.iter().any(|w| list.contains(&w.as_str()))
}

/// Decide the role of one argument. `schema` is the argument's own JSON-schema node, if
/// the tool declared one.
pub fn classify(name: &str, schema: Option<&Value>, value: &Value) -> ArgRole {
    let words = name_words(name);
    match value {
        Value::Bool(_) | Value::Null => return ArgRole::Flag,
        _ => {}
    }
    if any_in(&words, CREDENTIAL_WORDS)
        || (words.iter().any(|w| w == "key") && !any_in(&words, &["sort", "order"]))
    {
        return ArgRole::Credential;
    }
    // A value that *is* an e-mail, URL, IBAN or phone number is a target whatever its name.
    if let Value::String(s) = value {
        if let Some((kind, _)) = whole_value_identifier(s) {
            if kind != IdKind::Phone || !any_in(&words, TIME_WORDS) {
                return ArgRole::Target;
            }
        }
    }
    let is_target_named = any_in(&words, TARGET_WORDS);
    if !is_target_named {
        if any_in(&words, CONTENT_WORDS) {
            return ArgRole::Content;
        }
        if any_in(&words, TIME_WORDS) {
            return ArgRole::Time;
        }
        if any_in(&words, QUANTITY_WORDS) && value.is_number() {
            return ArgRole::Quantity;
        }
        if let Some(desc) = schema
            .and_then(|s| s.get("description"))
            .and_then(Value::as_str)
        {
            let desc_words = name_words(desc);
            if any_in(&desc_words, TARGET_WORDS) || any_in(&desc_words, &["iban", "recipient"]) {
                return ArgRole::Target;
            }
        }
        // Plain numbers that are not named like identifiers are quantities.
        if value.is_number() {
            return ArgRole::Quantity;
        }
    }
    ArgRole::Target
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn words() {
        assert_eq!(name_words("user_email"), vec!["user", "email"]);
        assert_eq!(name_words("startTime"), vec!["start", "time"]);
        assert_eq!(name_words("file-ID"), vec!["file", "id"]);
    }

    #[test]
    fn roles() {
        assert_eq!(
            classify("recipient", None, &json!("Alice")),
            ArgRole::Target
        );
        assert_eq!(classify("body", None, &json!("hello")), ArgRole::Content);
        assert_eq!(
            classify("subject", None, &json!("Refund")),
            ArgRole::Content
        );
        assert_eq!(classify("amount", None, &json!(10.0)), ArgRole::Quantity);
        assert_eq!(classify("date", None, &json!("2022-01-01")), ArgRole::Time);
        assert_eq!(classify("id", None, &json!(7)), ArgRole::Target);
        assert_eq!(classify("file_id", None, &json!("13")), ArgRole::Target);
        assert_eq!(classify("password", None, &json!("x")), ArgRole::Credential);
        assert_eq!(classify("recurring", None, &json!(true)), ArgRole::Flag);
        assert_eq!(
            classify("hotel", None, &json!("Riverside View")),
            ArgRole::Target
        );
        assert_eq!(
            classify("content", None, &json!("www.evil.com")),
            ArgRole::Target,
            "a URL value is a target"
        );
        assert_eq!(
            classify("start_time", None, &json!("2024-05-30 10:20")),
            ArgRole::Time
        );
        assert_eq!(
            classify("location", None, &json!("1-1-1 Nishi-Shinjuku, Tokyo")),
            ArgRole::Content
        );
        let schema = json!({"description": "IBAN of the recipient", "type": "string"});
        assert_eq!(
            classify("to_whom", Some(&schema), &json!("X")),
            ArgRole::Target
        );
    }
}
