//! Arguments that pick one of a tool's declared options.
//!
//! A tool schema often lists the values an argument may take (`"enum": ["r", "rw"]`).
//! Such a choice can matter (read-only or read-write sharing), so it is a target like any
//! other and must trace to the owner. Options are often short codes that the owner never
//! types: they ask to share "with read permissions", and the tool wants `r`. This module
//! reads the owner's words for the option they chose.
//!
//! An option traces when the owner's words spell it by their initials (`read` → `r`,
//! `read and write` → `rw`, `read-only` → `ro`) right beside a word of the argument's own
//! name (`permission`, `permissions`). The nearness is what makes it the owner's choice
//! for *this* argument and not a coincidence of first letters elsewhere in the message.
//! And only words that option codes abbreviate count ([`OPTION_WORDS`]: read, write,
//! admin, public, …): "grant access to alice" beside an `access` argument does not choose
//! an option `a`.
//! Where the owner's words spell several options from the same start ("read and write"
//! spells both `r` and `rw`), only the longest counts: the owner said read *and write*.
//!
//! Nothing here makes a choice trace that untrusted content made: the owner's text is
//! the only input, and an option the owner did not name stays untraced (and is asked).

use serde_json::Value;

use super::arg_roles::name_words;

/// The longest option code read as initials: longer codes are words the owner would type.
const MAX_CODE_LEN: usize = 4;
/// How many tokens may stand between the argument's name and the owner's words for the
/// option: "with *read* permissions", "permission to *read and write*", "access level:
/// *read-only*".
const NEAR: usize = 3;
/// Words that join the parts of an option without being one ("read and write").
const JOINERS: &[&str] = &["and", "plus", "n"];
/// The words whose initials option codes are made of: access levels, roles, visibility,
/// yes and no, order and size. A word outside it (a name, "all", "to") spells no option.
const OPTION_WORDS: &[&str] = &[
    "read",
    "write",
    "execute",
    "exec",
    "only",
    "view",
    "viewer",
    "edit",
    "editor",
    "comment",
    "commenter",
    "admin",
    "administrator",
    "owner",
    "member",
    "guest",
    "full",
    "none",
    "public",
    "private",
    "internal",
    "yes",
    "no",
    "true",
    "false",
    "on",
    "off",
    "low",
    "medium",
    "high",
    "ascending",
    "descending",
    "small",
    "large",
    "extra",
    "daily",
    "weekly",
    "monthly",
];

/// The string options the schema node of one argument declares, following a local
/// `$ref` (`#/$defs/…`, `#/definitions/…`) into the tool's whole `input_schema` and the
/// branches of `allOf`, `anyOf` and `oneOf` (an optional enum is `anyOf: [enum, null]`).
/// Empty when the argument declares none.
///
/// A schema comes from an extension, which may be hostile: at most [`MAX_SCHEMA_NODES`]
/// nodes are visited (a cycle of references or a fan of branches that refer to each
/// other ends there), and an argument that declares more stays a plain target.
pub fn declared_options(input_schema: &Value, node: Option<&Value>) -> Vec<String> {
    let mut out = Vec::new();
    let mut budget = MAX_SCHEMA_NODES;
    if let Some(node) = node {
        collect_options(input_schema, node, &mut budget, &mut out);
    }
    if budget == 0 {
        out.clear();
    }
    out
}

/// The most schema nodes [`declared_options`] visits for one argument.
const MAX_SCHEMA_NODES: usize = 256;

fn collect_options(root: &Value, node: &Value, budget: &mut usize, out: &mut Vec<String>) {
    if *budget == 0 {
        return;
    }
    *budget -= 1;
    if let Some(options) = node.get("enum").and_then(Value::as_array) {
        out.extend(options.iter().filter_map(Value::as_str).map(str::to_string));
    }
    if let Some(target) = node
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix('#'))
        .and_then(|pointer| root.pointer(pointer))
    {
        collect_options(root, target, budget, out);
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        for branch in node
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            collect_options(root, branch, budget, out);
        }
    }
}

/// One word of the owner's text and the index of the token it came from.
struct Word {
    text: String,
    token: usize,
}

/// Did the owner's text (`trusted`, as [`super::tokens::tokens`]) choose `value` among
/// `options` for the argument called `arg_name`? See the module documentation.
pub fn owner_chose(trusted: &[String], value: &str, options: &[String], arg_name: &str) -> bool {
    let value = value.to_lowercase();
    if !is_code(&value) || !options.iter().any(|o| o.to_lowercase() == value) {
        return false;
    }
    let codes: Vec<String> = options
        .iter()
        .map(|o| o.to_lowercase())
        .filter(|o| is_code(o))
        .collect();
    let names = name_words(arg_name);
    let anchors: Vec<usize> = trusted
        .iter()
        .enumerate()
        .filter(|(_, t)| letter_words(t).any(|w| names.iter().any(|n| same_word(&w, n))))
        .map(|(i, _)| i)
        .collect();
    if anchors.is_empty() {
        return false;
    }
    let words: Vec<Word> = trusted
        .iter()
        .enumerate()
        .flat_map(|(i, t)| letter_words(t).map(move |w| Word { text: w, token: i }))
        .filter(|w| !JOINERS.contains(&w.text.as_str()))
        .collect();
    let near = |token: usize| {
        anchors
            .iter()
            .any(|&a| a != token && a.abs_diff(token) <= NEAR)
    };
    (0..words.len())
        .filter(|&start| near(words[start].token) && !is_name_word(&words[start], &names))
        .filter_map(|start| longest_spelled(&words[start..], &codes, &names))
        .any(|spelled| spelled == value)
}

/// The longest of `codes` whose letters are the initials of the first words of `words`
/// (each one of [`OPTION_WORDS`], none of them a word of the argument's name).
fn longest_spelled<'c>(words: &[Word], codes: &'c [String], names: &[String]) -> Option<&'c str> {
    codes
        .iter()
        .filter(|code| {
            let n = code.chars().count();
            words.len() >= n
                && words[..n].iter().zip(code.chars()).all(|(w, c)| {
                    OPTION_WORDS.contains(&w.text.as_str())
                        && w.text.starts_with(c)
                        && !is_name_word(w, names)
                })
        })
        .max_by_key(|code| code.len())
        .map(String::as_str)
}

fn is_name_word(word: &Word, names: &[String]) -> bool {
    names.iter().any(|n| same_word(&word.text, n))
}

/// A short code of letters only: what an option looks like when it abbreviates words.
fn is_code(value: &str) -> bool {
    (1..=MAX_CODE_LEN).contains(&value.chars().count()) && value.chars().all(char::is_alphabetic)
}

/// The same word, singular or plural ("permission", "permissions").
fn same_word(a: &str, b: &str) -> bool {
    a == b || a.strip_suffix('s') == Some(b) || b.strip_suffix('s') == Some(a)
}

/// The words of one token, split at everything that is not a letter (`read-write` gives
/// `read` and `write`).
fn letter_words(token: &str) -> impl Iterator<Item = String> + '_ {
    token
        .split(|c: char| !c.is_alphabetic())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provenance::tokens::tokens;
    use serde_json::json;

    fn chose(owner: &str, value: &str) -> bool {
        let options = vec!["r".to_string(), "rw".to_string()];
        owner_chose(&tokens(owner), value, &options, "permission")
    }

    #[test]
    fn the_owners_words_beside_the_argument_choose_the_option() {
        let owner = "Then, share the document with john.doe@gmail.com with read permissions";
        assert!(chose(owner, "r"));
        assert!(!chose(owner, "rw"), "read is not read and write");
        assert!(chose("give them read-write permission", "rw"));
        assert!(chose("with permission to read and write", "rw"));
        assert!(
            !chose("with permission to read and write", "r"),
            "the longer option spelled from the same start is the owner's"
        );
        assert!(chose("permissions: read/write", "rw"));
    }

    #[test]
    fn initials_elsewhere_in_the_message_choose_nothing() {
        // Words that start with r and w, but not beside the argument's name.
        assert!(!chose(
            "Please review the report with Walter and share it",
            "rw"
        ));
        assert!(!chose("Please review the report and share it", "r"));
        // Beside the name, but a name or a small word is no option word.
        let access = vec!["r".to_string(), "rw".to_string(), "a".to_string()];
        for owner in [
            "grant access to alice",
            "grant access to all files",
            "rachel's access",
        ] {
            for code in ["a", "r"] {
                assert!(
                    !owner_chose(&tokens(owner), code, &access, "access"),
                    "{owner}"
                );
            }
        }
        assert!(owner_chose(
            &tokens("admin access for bob"),
            "a",
            &access,
            "access"
        ));
        let ro = vec!["ro".to_string(), "rw".to_string()];
        assert!(owner_chose(
            &tokens("read-only access"),
            "ro",
            &ro,
            "access"
        ));
        // The name alone is no choice.
        assert!(!chose("share it with the usual permissions", "r"));
        // A value that is not one of the options never traces here.
        assert!(!chose("with read permissions", "x"));
        let options = vec!["read".to_string(), "write".to_string()];
        assert!(
            !owner_chose(
                &tokens("with read permission"),
                "read",
                &options,
                "permission"
            ),
            "a whole word is traced as a token, not here"
        );
    }

    #[test]
    fn options_are_found_behind_references_and_branches() {
        let schema = json!({
            "$defs": {"SharingPermission": {"enum": ["r", "rw"], "type": "string"}},
            "properties": {
                "permission": {"$ref": "#/$defs/SharingPermission"},
                "mode": {"anyOf": [{"enum": ["ro"]}, {"type": "null"}]},
                "loop": {"$ref": "#/properties/loop"},
            }
        });
        let prop = |n: &str| schema["properties"].get(n);
        assert_eq!(declared_options(&schema, prop("permission")), ["r", "rw"]);
        assert_eq!(declared_options(&schema, prop("mode")), ["ro"]);
        assert!(declared_options(&schema, prop("loop")).is_empty());
        assert!(declared_options(&schema, None).is_empty());
        // A fan of branches that all refer to the same fan (64^n paths unbounded): the
        // walk ends, and declares no options.
        let fan: Vec<Value> = (0..64).map(|_| json!({"$ref": "#/$defs/fan"})).collect();
        let hostile = json!({"$defs": {"fan": {"anyOf": fan, "enum": ["r"]}}});
        assert!(declared_options(&hostile, hostile["$defs"].get("fan")).is_empty());
    }
}
