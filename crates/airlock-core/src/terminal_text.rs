//! Text for a terminal: the one escaping every operator-facing string goes through.
//!
//! Text from a model, a tool, a command line or a record can carry bytes that a terminal
//! obeys instead of showing: ESC sequences that erase or rewrite a line, CR that returns to
//! its start, C1 controls, DEL, bidirectional overrides that reorder it, and zero-width
//! characters that hide part of it. What the operator approves must be what runs, so every
//! such character is shown as a visible escape (`\u{1b}`, `\r`, `\u{202e}`) instead.
//!
//! ```
//! use airlock_core::terminal_text::{escape_line, escape_block};
//! assert_eq!(escape_line("rm -rf ./x \u{1b}[2K\rls -la"), "rm -rf ./x \\u{1b}[2K\\rls -la");
//! assert_eq!(escape_block("one\ntwo\u{202e}"), "one\ntwo\\u{202e}");
//! ```

/// Whether `c` changes how a terminal shows text without being shown itself: every C0 and
/// C1 control, DEL, and the Unicode format characters that reorder or hide text (bidi
/// embeddings, overrides and isolates, zero-width characters, the byte-order mark, soft
/// hyphen, and the rest of category Cf that matters on a terminal).
pub fn is_hidden_or_control(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00AD}'               // soft hyphen
            | '\u{034F}'             // combining grapheme joiner
            | '\u{061C}'             // Arabic letter mark
            | '\u{115F}' | '\u{1160}' // Hangul fillers, shown as nothing
            | '\u{17B4}' | '\u{17B5}' // Khmer inherent vowels, shown as nothing
            | '\u{180B}'..='\u{180F}' // Mongolian variation selectors and separator
            | '\u{200B}'..='\u{200F}' // zero-width space/joiners, LRM, RLM
            | '\u{2028}' | '\u{2029}' // line and paragraph separators
            | '\u{202A}'..='\u{202E}' // bidi embeddings and overrides
            | '\u{2060}'..='\u{206F}' // word joiner, invisible operators, bidi isolates
            | '\u{3164}'             // Hangul filler
            | '\u{FE00}'..='\u{FE0F}' // variation selectors
            | '\u{FEFF}'             // byte-order mark / zero-width no-break space
            | '\u{FFA0}'             // halfwidth Hangul filler
            | '\u{FFF9}'..='\u{FFFB}' // interlinear annotation
            | '\u{1D173}'..='\u{1D17A}' // musical formatting controls
            | '\u{E0000}'..='\u{E007F}' // tag characters
            | '\u{E0100}'..='\u{E01EF}' // variation selectors supplement
        )
}

/// `text` on one line: newlines, CR, tab, every control and every invisible format
/// character as a visible escape, and a backslash doubled so an escape cannot be forged.
/// Use it wherever one line must show all of a value: a command for approval, a path, a
/// name, a field of a record.
pub fn escape_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        push_escaped(&mut out, c, false);
    }
    out
}

/// `text` over several lines: like [`escape_line`], except that `\n` stays a line break
/// (and a tab stays a tab). Use it for model text and tool output, which are meant to
/// span lines; a CR or an escape sequence still cannot rewrite a line already shown.
pub fn escape_block(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        push_escaped(&mut out, c, true);
    }
    out
}

/// [`escape_line`] of at most `max_chars` characters of `text`, with a marker saying how
/// much was left out. The bound is on the input, so the result is at most about ten times
/// `max_chars` long.
pub fn escape_line_bounded(text: &str, max_chars: usize) -> String {
    let mut chars = text.char_indices();
    match chars.nth(max_chars) {
        None => escape_line(text),
        Some((cut, _)) => format!(
            "{}… [{} more bytes not shown]",
            escape_line(&text[..cut]),
            text.len() - cut
        ),
    }
}

/// Serialized JSON made safe for a terminal while staying the same JSON: every hidden or
/// control character serde leaves raw (DEL, C1 controls, bidi and zero-width characters)
/// becomes a `\uXXXX` escape. Those characters can only occur inside JSON strings, where
/// the escape means the same character; the line breaks of pretty-printed JSON stay.
pub fn escape_json_text(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if c != '\n' && is_hidden_or_control(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn push_escaped(out: &mut String, c: char, multi_line: bool) {
    match c {
        '\n' if multi_line => out.push('\n'),
        '\t' if multi_line => out.push('\t'),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\\' if !multi_line => out.push_str("\\\\"),
        c if is_hidden_or_control(c) => {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        }
        c => out.push(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nothing_raw(shown: &str, multi_line: bool) -> bool {
        !shown
            .chars()
            .any(|c| is_hidden_or_control(c) && !(multi_line && (c == '\n' || c == '\t')))
    }

    #[test]
    fn every_kind_of_terminal_control_is_made_visible() {
        for (hostile, visible) in [
            ("ls\u{1b}[2K\rrm -rf ~", "ls\\u{1b}[2K\\rrm -rf ~"),
            ("a\u{9b}31mred", "a\\u{9b}31mred"), // C1 CSI
            ("del\u{7f}", "del\\u{7f}"),
            ("bell\u{7}", "bell\\u{7}"),
            ("cat \u{202e}txt.exe", "cat \\u{202e}txt.exe"),
            ("iso\u{2066}late\u{2069}", "iso\\u{2066}late\\u{2069}"),
            ("zero\u{200b}width", "zero\\u{200b}width"),
            ("bom\u{feff}", "bom\\u{feff}"),
            ("tag\u{e0041}", "tag\\u{e0041}"),
            ("line\u{2028}sep", "line\\u{2028}sep"),
            ("two\nlines", "two\\nlines"),
            ("forged \\u{1b}", "forged \\\\u{1b}"),
        ] {
            let shown = escape_line(hostile);
            assert_eq!(shown, visible);
            assert!(nothing_raw(&shown, false), "{shown:?}");
        }
    }

    #[test]
    fn blocks_keep_line_breaks_but_not_carriage_returns() {
        let shown = escape_block("ok\nfake prompt\r\u{1b}[1Aover\u{202d}");
        assert_eq!(shown, "ok\nfake prompt\\r\\u{1b}[1Aover\\u{202d}");
        assert!(nothing_raw(&shown, true));
        assert_eq!(escape_block("tab\there \\n"), "tab\there \\n");
    }

    #[test]
    fn json_stays_the_same_json_without_raw_controls() {
        let value = serde_json::json!({"t": "a\u{7f}b\u{9b}c\u{202e}d\u{e0041}\u{1b}\n"});
        let text = serde_json::to_string_pretty(&value).unwrap();
        let shown = escape_json_text(&text);
        assert!(nothing_raw(&shown, true), "{shown}");
        assert!(
            shown.contains("\\u202e") && shown.contains("\\udb40\\udc41"),
            "{shown}"
        );
        let back: serde_json::Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(back, value);
    }

    #[test]
    fn bounded_lines_say_what_was_cut() {
        assert_eq!(escape_line_bounded("short", 10), "short");
        let shown = escape_line_bounded(&format!("é{}", "x".repeat(100)), 3);
        assert_eq!(shown, "éxx… [98 more bytes not shown]");
    }
}
