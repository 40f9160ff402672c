//! Limits checked on policy text before Cedar parses it.
//!
//! Cedar's parser and its conversion to an AST recurse on nesting: a file with a thousand
//! nested parentheses overflows the stack and aborts every command that loads policies,
//! without naming the file. Policy files are operator-written but may be edited by
//! mistake or by a tool; a bound checked here gives a clean error that names the file
//! and line instead.

use super::errors::{line_col, PolicyError};

/// Largest policy file accepted, in bytes.
pub const MAX_POLICY_BYTES: usize = 1 << 20;

/// Deepest nesting of `(`, `[`, `{` and prefix operators (`!`, `-`) accepted.
pub const MAX_POLICY_NESTING: usize = 64;

/// Most binary operators (`&&`, `||`, `==`, `+`, `.`, …) in one policy: Cedar keeps a
/// chain of them as a left-deep tree, which its parser and later passes walk
/// recursively (a chain of 100,000 `+` overflows the stack).
pub const MAX_POLICY_OPERATORS: usize = 5_000;

/// Refuse `text` (the policy file `file`) if it is too large or nests too deeply.
pub fn check(file: &str, text: &str) -> Result<(), PolicyError> {
    let refuse = |offset: usize, message: String, help: &str| {
        let (line, _) = line_col(text, offset);
        Err(PolicyError::TooComplex {
            file: file.to_string(),
            line,
            message,
            help: help.to_string(),
        })
    };
    if text.len() > MAX_POLICY_BYTES {
        return refuse(
            MAX_POLICY_BYTES,
            format!(
                "the file is {} bytes, more than the {MAX_POLICY_BYTES} accepted",
                text.len()
            ),
            "split the policies over several files in policy/local/",
        );
    }
    let bytes = text.as_bytes();
    let mut depth: usize = 0;
    // Prefix operators nest like brackets until the operand they apply to ends; counting
    // a run of them is enough to bound `!!!!…x`.
    let mut prefix_run: usize = 0;
    let mut operators: usize = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'"' => {
                // A string literal: skip to its closing quote, honouring escapes.
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            b'!' if bytes.get(i + 1) != Some(&b'=') => prefix_run += 1,
            b'-' => prefix_run += 1,
            b'&' | b'|' | b'=' | b'<' | b'>' | b'+' | b'*' | b'.' => operators += 1,
            // The end of one policy.
            b';' if depth == 0 => operators = 0,
            _ => {}
        }
        if !matches!(b, b'!' | b'-') && !b.is_ascii_whitespace() {
            prefix_run = 0;
        }
        if depth + prefix_run > MAX_POLICY_NESTING {
            return refuse(
                i,
                format!(
                    "expressions nest more than {MAX_POLICY_NESTING} deep (brackets and \
                     prefix operators)"
                ),
                "simplify the expression, or split it into several policies",
            );
        }
        if operators > MAX_POLICY_OPERATORS {
            return refuse(
                i,
                format!("a policy has more than {MAX_POLICY_OPERATORS} operators"),
                "split the condition over several policies",
            );
        }
        i += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_outside_strings_and_comments_is_bounded() {
        let deep = format!(
            "permit (principal, action, resource) when {{ {}true{} }};",
            "(".repeat(100),
            ")".repeat(100)
        );
        let err = check("local/deep.cedar", &format!("// ok\n{deep}")).unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("local/deep.cedar:2: "), "{msg}");
        assert!(msg.contains("help: "), "{msg}");
        let quoted = format!(
            "// {}\npermit (principal, action, resource) when {{ context.x == \"{}\\\"\" }};",
            "(".repeat(100),
            "[".repeat(100)
        );
        check("local/ok.cedar", &quoted).unwrap();
        let nots = format!(
            "permit (principal, action, resource) when {{ {}true }};",
            "!".repeat(100)
        );
        assert!(check("f", &nots).is_err());
    }
}
