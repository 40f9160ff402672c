//! Limits on what the normalizer reads, checked before and during the parse.
//!
//! A command line comes from a model that may be hijacked, so the work spent on it must
//! be bounded: tree-sitter's parser allocates per token and per ambiguous stack, and a
//! few kilobytes of nested `$(` used to cost gigabytes. Anything over a bound is
//! `unparsed` (which the Gate asks about) and is found cheaply.
//!
//! The text must also read the same to the Gate and to the shell. tree-sitter-bash treats
//! CR, FF and VT as blanks, bash and dash treat them as word characters; other control
//! characters are invisible to an operator reading the command. A command holding any
//! control character except tab and newline is therefore unparsed.

/// Deepest bracket nesting accepted (`$(`, `(`, `{`, `${`, `[`), see [`nesting_depth`].
pub(crate) const MAX_NESTING: usize = 64;

/// Parser operations allowed for one command line, its nested shell strings included.
/// tree-sitter's memory grows with the work it does (a long pipeline keeps several
/// stack versions alive: about 750 bytes per node), so this bound is what keeps the
/// parse's memory small; ordinary commands need a few operations per syntax node, and
/// 100 KB of dense shell, or a megabyte of here-document, stay well inside it.
pub(crate) const MAX_PARSE_OPS: usize = 300_000;

/// Most syntax tree nodes walked for one command line, nested shell strings included.
pub(crate) const MAX_NODES: usize = 200_000;

/// The first character of `src` that the shell and the Gate could read differently, or
/// that an operator cannot see: any control character other than tab and newline.
pub(crate) fn forbidden_control(src: &str) -> Option<(usize, char)> {
    src.char_indices()
        .find(|&(_, c)| c.is_control() && c != '\t' && c != '\n')
}

/// Why `src` is refused for holding a control character, if it does.
pub(crate) fn control_reason(src: &str) -> Option<String> {
    let (at, c) = forbidden_control(src)?;
    Some(format!(
        "the command holds the control character U+{:04X} ({}) at byte {at}; the shell and \
         the Gate could read it differently",
        c as u32,
        control_name(c)
    ))
}

fn control_name(c: char) -> &'static str {
    match c {
        '\0' => "NUL",
        '\r' => "carriage return",
        '\x0b' => "vertical tab",
        '\x0c' => "form feed",
        '\x1b' => "escape",
        '\x7f' => "delete",
        '\u{80}'..='\u{9f}' => "C1 control",
        _ => "control",
    }
}

/// How deeply `src` nests brackets: every unescaped `(`, `{`, `[` raises the depth, every
/// closer lowers it. Quotes nest only through substitutions (`"$(… "$(…)" …)"`), whose
/// brackets are counted; backquotes nest only when escaped, and the parse-work bound
/// covers them. Quoting is deliberately not understood (a `(` inside quotes still
/// counts), so unbalanced brackets in quoted text can only raise the estimate, which at
/// worst makes an unusual command unparsed. Linear, no allocation.
pub(crate) fn nesting_depth(src: &str) -> usize {
    let mut depth: usize = 0;
    let mut max = 0;
    let mut escaped = false;
    for b in src.bytes() {
        if escaped {
            escaped = false;
            continue;
        }
        match b {
            b'\\' => escaped = true,
            b'(' | b'{' | b'[' => {
                depth += 1;
                max = max.max(depth);
            }
            b')' | b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// Why `src` is refused before parsing, if it is: too long, a control character, or
/// nested too deeply.
pub(crate) fn precheck(src: &str) -> Option<String> {
    if src.len() > super::MAX_COMMAND_BYTES {
        return Some(format!(
            "command line is {} bytes, more than the {} analysed",
            src.len(),
            super::MAX_COMMAND_BYTES
        ));
    }
    if let Some(reason) = control_reason(src) {
        return Some(reason);
    }
    let depth = nesting_depth(src);
    if depth > MAX_NESTING {
        return Some(format!(
            "brackets and substitutions nest {depth} deep, more than the {MAX_NESTING} \
             analysed"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_other_than_tab_and_newline_are_found() {
        for c in [
            '\r', '\x0b', '\x0c', '\0', '\x1b', '\x7f', '\u{85}', '\u{9b}', '\x01',
        ] {
            let src = format!("ls{c}# ; rm -rf x");
            assert_eq!(forbidden_control(&src), Some((2, c)), "{c:?}");
            assert!(control_reason(&src).is_some());
        }
        assert_eq!(forbidden_control("ls\t-l\necho é"), None);
    }

    #[test]
    fn nesting_is_over_estimated_never_under() {
        assert_eq!(nesting_depth("ls -la"), 0);
        assert_eq!(nesting_depth("echo $(echo $(id))"), 2);
        assert_eq!(nesting_depth("echo \"$(echo \"$(id)\")\""), 2);
        assert_eq!(nesting_depth("echo '((('"), 3);
        assert_eq!(nesting_depth("a ) ) ( b"), 1);
        assert_eq!(nesting_depth(&"$(".repeat(100)), 100);
        assert_eq!(nesting_depth("echo \\(\\(\\("), 0);
    }
}
