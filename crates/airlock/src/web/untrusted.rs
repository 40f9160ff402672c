//! Showing untrusted text: commands, tool output, fetched pages, memory, anything a model
//! or a sender wrote. The template escapes every value as HTML (maud escapes by default;
//! nothing here uses `PreEscaped`). On top of that, each character that would change how
//! text reads without being seen itself (terminal escapes, CR, bidi overrides and
//! isolates, zero-width characters: [`is_hidden_or_control`]) is drawn as a visible,
//! marked `\u{…}` token, so what the owner approves reads as what runs. A long value is
//! folded: its start is shown, and the whole of it is one click away (`<details>`, no
//! script).

use maud::{html, Markup};

use airlock_core::terminal_text::is_hidden_or_control;

/// Characters of a one-line value shown before it is folded.
pub const FOLD_LINE_CHARS: usize = 300;
/// Characters of a block (output, page text) shown before it is folded.
pub const FOLD_BLOCK_CHARS: usize = 3000;
/// Lines of a block shown before it is folded.
pub const FOLD_BLOCK_LINES: usize = 40;

/// A value on one line (a command, a URL, a name): every newline and tab is made visible.
pub fn line(text: &str) -> Markup {
    let shown = first_chars(text, FOLD_LINE_CHARS);
    fold(text, shown, false)
}

/// A value over several lines (output, a page, a message): newlines stay line breaks.
pub fn block(text: &str) -> Markup {
    let mut shown = first_chars(text, FOLD_BLOCK_CHARS);
    if let Some((i, _)) = shown.match_indices('\n').nth(FOLD_BLOCK_LINES - 1) {
        shown = &shown[..i];
    }
    fold(text, shown, true)
}

fn fold(text: &str, shown: &str, keep_lines: bool) -> Markup {
    let class = if keep_lines {
        "untrusted block"
    } else {
        "untrusted"
    };
    if shown.len() == text.len() {
        return html! { span class=(class) { (visible(text, keep_lines, &[])) } };
    }
    html! {
        details class="fold" {
            summary {
                span class=(class) { (visible(shown, keep_lines, &[])) }
                span class="more" { "… show all " (text.chars().count()) " characters" }
            }
            span class=(class) { (visible(text, keep_lines, &[])) }
        }
    }
}

/// The start of `text` up to `max` characters (a whole-character boundary).
fn first_chars(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

/// `text` with hidden characters drawn as marked escapes, and the byte ranges `marks`
/// (sorted, not overlapping, on character boundaries) highlighted.
pub fn visible(text: &str, keep_lines: bool, marks: &[(usize, usize)]) -> Markup {
    let mut pieces: Vec<(bool, &str)> = Vec::new();
    let mut at = 0;
    for &(s, e) in marks {
        if s < at || e > text.len() || !text.is_char_boundary(s) || !text.is_char_boundary(e) {
            continue;
        }
        pieces.push((false, &text[at..s]));
        pieces.push((true, &text[s..e]));
        at = e;
    }
    pieces.push((false, &text[at..]));
    html! {
        @for (marked, piece) in pieces {
            @if marked {
                mark { (runs(piece, keep_lines)) }
            } @else {
                (runs(piece, keep_lines))
            }
        }
    }
}

/// `text` as plain text for a script to set as text (the web page's live stream): newlines
/// and tabs kept, every other hidden character written as its `\u{…}` escape.
pub fn shown_as_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if is_hidden_or_control(c) && c != '\n' && c != '\t' {
            out.push_str(&escape_of(c));
        } else {
            out.push(c);
        }
    }
    out
}

/// Plain runs of text, and each hidden character as `<span class="esc">\u{…}</span>`.
fn runs(text: &str, keep_lines: bool) -> Markup {
    let mut parts: Vec<Result<&str, char>> = Vec::new();
    let mut start = 0;
    for (i, c) in text.char_indices() {
        let kept = keep_lines && (c == '\n' || c == '\t');
        if is_hidden_or_control(c) && !kept {
            parts.push(Ok(&text[start..i]));
            parts.push(Err(c));
            start = i + c.len_utf8();
        }
    }
    parts.push(Ok(&text[start..]));
    html! {
        @for p in parts {
            @match p {
                Ok(s) => { (s) }
                Err(c) => { span class="esc" title=(name_of(c)) { (escape_of(c)) } }
            }
        }
    }
}

/// How a hidden character is written: `\n`, `\r`, `\t`, else `\u{hex}`.
fn escape_of(c: char) -> String {
    match c {
        '\n' => "\\n".into(),
        '\r' => "\\r".into(),
        '\t' => "\\t".into(),
        c => format!("\\u{{{:x}}}", c as u32),
    }
}

/// What a hidden character is, for its tooltip.
fn name_of(c: char) -> &'static str {
    match c {
        '\u{1b}' => "ESC: starts a terminal escape sequence",
        '\r' => "carriage return: a terminal would overwrite the line",
        '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' => {
            "bidirectional override: reorders the text around it"
        }
        '\u{200B}'..='\u{200D}' | '\u{2060}' | '\u{FEFF}' => "zero-width character",
        _ => "control or invisible character",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_for_a_script_shows_escapes_and_bidi_and_keeps_lines() {
        let t = shown_as_text("ok\n\u{1b}[2Kred\u{202e}txt\tend\r");
        assert_eq!(t, "ok\n\\u{1b}[2Kred\\u{202e}txt\tend\\r");
    }

    #[test]
    fn markup_is_escaped_and_hidden_characters_are_shown() {
        let html = line("<script>x</script>\u{1b}[2K\rls \u{202e}txt").into_string();
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("&lt;script&gt;"), "{html}");
        assert!(html.contains(r"\u{1b}"), "{html}");
        assert!(html.contains(r"\r"), "{html}");
        assert!(html.contains(r"\u{202e}"), "{html}");
        assert!(!html.contains('\u{202e}'), "{html}");
        assert!(!html.contains('\u{1b}'), "{html}");
    }

    #[test]
    fn long_values_fold_with_the_whole_value_one_click_away() {
        let long = "a".repeat(FOLD_LINE_CHARS + 10);
        let html = line(&long).into_string();
        assert!(html.contains("<details"), "{html}");
        assert!(html.contains(&long), "the whole value is there");
        let short = line("ok").into_string();
        assert!(!short.contains("<details"), "{short}");
        let many_lines = "x\n".repeat(FOLD_BLOCK_LINES + 5);
        assert!(block(&many_lines).into_string().contains("<details"));
    }

    #[test]
    fn marks_highlight_their_ranges() {
        let html = visible("send to evil.example now", false, &[(8, 20)]).into_string();
        assert!(html.contains("<mark>evil.example</mark>"), "{html}");
    }
}
