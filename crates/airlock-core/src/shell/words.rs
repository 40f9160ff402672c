//! Quote removal: a tree-sitter word node becomes the string bash would pass to the program.
//!
//! A word whose value depends on the runtime (parameter, command, arithmetic or process
//! expansion, globs, brace expansion, `~`) is *dynamic*: it keeps its source text and is
//! flagged, because no static value is the truth for it.

use tree_sitter::Node;

/// Deepest nesting of word structure (`${a:-${b:-…}}`) evaluated; deeper words are an error
/// so that evaluation, which recurses, cannot exhaust the stack.
pub(crate) const MAX_WORD_NESTING: usize = 128;

/// A word after quote removal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Word {
    /// The value after quote removal, or the source text when `dynamic`.
    pub text: String,
    /// The value depends on an expansion.
    pub dynamic: bool,
}

impl Word {
    /// A static word with a known value.
    pub(crate) fn literal(text: impl Into<String>) -> Self {
        Word {
            text: text.into(),
            dynamic: false,
        }
    }
}

/// Word structure nested deeper than [`MAX_WORD_NESTING`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooDeep;

/// The source text of `node`. The parser sees non-ASCII bytes as placeholders (see
/// `parse::parse_into`), so a node could in theory end inside a multi-byte character;
/// such a slice is replaced by U+FFFD and the word is made dynamic by the caller.
pub(crate) fn source<'a>(src: &'a str, node: Node) -> Option<&'a str> {
    src.get(node.byte_range())
}

/// Node kinds that form (part of) a shell word.
pub(crate) fn is_word_kind(kind: &str) -> bool {
    matches!(
        kind,
        "word"
            | "string"
            | "raw_string"
            | "ansi_c_string"
            | "translated_string"
            | "number"
            | "concatenation"
            | "simple_expansion"
            | "expansion"
            | "command_substitution"
            | "process_substitution"
            | "arithmetic_expansion"
            | "brace_expression"
            | "extglob_pattern"
    )
}

/// Evaluate `node` as one shell word.
pub(crate) fn eval_word(node: Node, src: &str) -> Result<Word, TooDeep> {
    let mut piece = Pieces::default();
    collect(node, src, &mut piece, 0)?;
    let Some(source) = self::source(src, node) else {
        return Ok(Word {
            text: "\u{fffd}".into(),
            dynamic: true,
        });
    };
    if piece.dynamic || has_brace_expansion(&piece.unquoted) {
        return Ok(Word {
            text: source.to_string(),
            dynamic: true,
        });
    }
    Ok(Word {
        text: piece.value,
        dynamic: false,
    })
}

#[derive(Default)]
struct Pieces {
    value: String,
    /// Unquoted source characters, to look for brace expansion across pieces.
    unquoted: String,
    dynamic: bool,
}

fn collect(node: Node, src: &str, out: &mut Pieces, depth: usize) -> Result<(), TooDeep> {
    if depth > MAX_WORD_NESTING {
        return Err(TooDeep);
    }
    let Some(text) = source(src, node) else {
        out.dynamic = true;
        return Ok(());
    };
    match node.kind() {
        "word" | "number" => {
            // A leading `~` is tilde expansion; unquoted glob characters make a pattern.
            if out.value.is_empty() && out.unquoted.is_empty() && text.starts_with('~') {
                out.dynamic = true;
            }
            let (value, glob) = unescape_unquoted(text);
            out.dynamic |= glob;
            out.value.push_str(&value);
            out.unquoted.push_str(text);
        }
        "raw_string" => {
            out.value.push_str(
                text.strip_prefix('\'')
                    .unwrap_or(text)
                    .strip_suffix('\'')
                    .unwrap_or(""),
            );
        }
        "ansi_c_string" => {
            let inner = text
                .strip_prefix("$'")
                .and_then(|t| t.strip_suffix('\''))
                .unwrap_or("");
            out.value.push_str(&decode_ansi_c(inner));
        }
        "string" | "translated_string" => {
            let mut cursor = node.walk();
            let expands = node
                .named_children(&mut cursor)
                .any(|child| child.kind() != "string_content");
            if expands {
                out.dynamic = true;
            } else {
                // The value is the whole text between the quotes, unescaped at once: the
                // grammar leaves line breaks (and a lone `$`) outside its content nodes,
                // so joining those nodes dropped them (`sh -c "a<newline>rm x"` read as
                // `sh -c "arm x"`, hiding `rm`).
                let inner = text
                    .strip_prefix("$\"")
                    .or_else(|| text.strip_prefix('"'))
                    .and_then(|t| t.strip_suffix('"'));
                match inner {
                    Some(inner) => out.value.push_str(&unescape_double_quoted(inner)),
                    None => out.dynamic = true,
                }
            }
        }
        "concatenation" => {
            let mut cursor = node.walk();
            for child in node.children(&mut cursor) {
                if child.is_named() {
                    collect(child, src, out, depth + 1)?;
                } else {
                    // Anonymous pieces of a concatenation (e.g. a bare `$`) are literal text.
                    let t = source(src, child).unwrap_or("\u{fffd}");
                    out.value.push_str(t);
                    out.unquoted.push_str(t);
                }
            }
        }
        _ => {
            // Expansions, substitutions, brace expressions, extglobs, anything unknown.
            out.dynamic = true;
            // Walk the expansion's own words so that very deep nesting is still bounded.
            let mut cursor = node.walk();
            for child in node.named_children(&mut cursor) {
                if is_word_kind(child.kind()) && child.kind() != "command_substitution" {
                    collect(child, src, &mut Pieces::default(), depth + 1)?;
                }
            }
        }
    }
    Ok(())
}

/// Remove backslash escapes from unquoted text; report unescaped glob characters.
fn unescape_unquoted(text: &str) -> (String, bool) {
    let mut value = String::with_capacity(text.len());
    let mut glob = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\n') | None => {}
                Some(next) => value.push(next),
            },
            '*' | '?' | '[' => {
                glob = true;
                value.push(c);
            }
            _ => value.push(c),
        }
    }
    (value, glob)
}

/// Inside double quotes a backslash escapes only `$`, `` ` ``, `"`, `\` and newline.
fn unescape_double_quoted(text: &str) -> String {
    let mut value = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.peek() {
                Some('$' | '`' | '"' | '\\') => {
                    value.push(chars.next().unwrap_or('\\'));
                }
                Some('\n') => {
                    chars.next();
                }
                _ => value.push('\\'),
            }
        } else {
            value.push(c);
        }
    }
    value
}

/// Decode the escapes of a `$'…'` string as bash does.
pub(crate) fn decode_ansi_c(inner: &str) -> String {
    let mut out = String::with_capacity(inner.len());
    let chars: Vec<char> = inner.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        if c != '\\' || i >= chars.len() {
            out.push(c);
            continue;
        }
        let e = chars[i];
        i += 1;
        match e {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            'a' => out.push('\x07'),
            'b' => out.push('\x08'),
            'e' | 'E' => out.push('\x1b'),
            'f' => out.push('\x0c'),
            'v' => out.push('\x0b'),
            '\\' | '\'' | '"' | '?' => out.push(e),
            'c' => {
                if let Some(&ctl) = chars.get(i) {
                    i += 1;
                    out.push(char::from((ctl as u32 as u8) & 0x1f));
                }
            }
            'x' | 'u' | 'U' => {
                let max = match e {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                let digits: String = chars[i..]
                    .iter()
                    .take(max)
                    .take_while(|d| d.is_ascii_hexdigit())
                    .collect();
                i += digits.len();
                match u32::from_str_radix(&digits, 16)
                    .ok()
                    .and_then(char::from_u32)
                {
                    Some(ch) if !digits.is_empty() => out.push(ch),
                    _ => {
                        out.push('\\');
                        out.push(e);
                    }
                }
            }
            '0'..='7' => {
                let mut value = e.to_digit(8).unwrap_or(0);
                let mut n = 1;
                while n < 3 {
                    match chars.get(i).and_then(|d| d.to_digit(8)) {
                        Some(d) => {
                            value = value * 8 + d;
                            i += 1;
                            n += 1;
                        }
                        None => break,
                    }
                }
                out.push(char::from_u32(value & 0xff).unwrap_or('\u{fffd}'));
            }
            other => {
                out.push('\\');
                out.push(other);
            }
        }
    }
    out
}

/// Brace expansion needs an unquoted, unescaped `{` … `}` holding a `,` or `..`. A
/// backslash-escaped character (`\{`, `\}`) is literal: it is blanked out before looking,
/// or `printf %s \{a..b\}` would count as dynamic, though bash passes `{a..b}` as is.
fn has_brace_expansion(unquoted: &str) -> bool {
    let mut plain = String::with_capacity(unquoted.len());
    let mut chars = unquoted.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if chars.next().is_some() {
                plain.push(' ');
            }
        } else {
            plain.push(c);
        }
    }
    let unquoted = plain.as_str();
    let Some(open) = unquoted.find('{') else {
        return false;
    };
    let rest = &unquoted[open + 1..];
    match rest.rfind('}') {
        Some(close) => {
            let inner = &rest[..close];
            inner.contains(',') || inner.contains("..")
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn word(src: &str) -> Word {
        let mut parser = tree_sitter::Parser::new();
        parser
            .set_language(&tree_sitter_bash::LANGUAGE.into())
            .expect("grammar loads");
        let cmd = format!("echo {src}");
        let tree = parser.parse(&cmd, None).expect("parse");
        let command = tree.root_node().named_child(0).expect("command");
        let arg = command.child_by_field_name("argument").expect("argument");
        eval_word(arg, &cmd).expect("not too deep")
    }

    #[test]
    fn escaped_braces_are_literal_and_unescaped_ones_expand() {
        for (src, value) in [
            ("\\{a..b\\}", "{a..b}"),
            ("\\{/usr/bin/../bin/rm\\}", "{/usr/bin/../bin/rm}"),
            ("x\\{a,b\\}y", "x{a,b}y"),
        ] {
            let w = word(src);
            assert!(!w.dynamic, "{src}");
            assert_eq!(w.text, value, "{src}");
        }
        for src in ["{a..b}", "x{a,b}", "\\x{1..3}", "{a,b\\}}"] {
            assert!(word(src).dynamic, "{src} expands");
        }
    }

    #[test]
    fn quote_removal() {
        assert_eq!(word("'a b'"), Word::literal("a b"));
        assert_eq!(word("\"a \\\"b\\\" \\x\""), Word::literal("a \"b\" \\x"));
        assert_eq!(word("a\\ b"), Word::literal("a b"));
        assert_eq!(word("$'a\\nb\\x41\\101'"), Word::literal("a\nbAA"));
        assert_eq!(word("pre'x'\"y\"post"), Word::literal("prexypost"));
        assert_eq!(word("\\;"), Word::literal(";"));
    }

    #[test]
    fn expansions_are_dynamic_and_keep_source() {
        for src in [
            "$HOME", "${x:-y}", "\"$x\"", "a$(id)b", "`id`", "*.rs", "a?c", "[ab]", "~/x", "{a,b}",
            "x{1..3}", "$((1+2))",
        ] {
            let w = word(src);
            assert!(w.dynamic, "{src} should be dynamic");
            assert_eq!(w.text, src);
        }
        assert!(!word("'*'").dynamic);
        assert!(!word("\\*").dynamic);
        assert!(!word("'{a,b}'").dynamic);
    }
}
