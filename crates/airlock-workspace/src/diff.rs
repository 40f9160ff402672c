//! Bounded unified diffs of text files, every line escaped for a terminal.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use airlock_core::terminal_text::escape_line;

/// A unified diff, already escaped: no line holds a control character, and a line's own
/// content cannot fake a diff line of another file (it is always prefixed by ` `, `+`,
/// `-` or `@@`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diff {
    /// The lines, without line ends.
    pub lines: Vec<String>,
    /// How many diff lines were cut by the limits (0 when complete).
    pub cut_lines: usize,
}

/// Whether `bytes` are text worth a diff: UTF-8 with no NUL.
pub(crate) fn is_text(bytes: &[u8]) -> bool {
    !bytes.contains(&0) && std::str::from_utf8(bytes).is_ok()
}

/// Diff `old` against `new` (both text), keeping at most `max_lines` lines.
pub(crate) fn unified(old: &str, new: &str, max_lines: usize) -> Diff {
    let diff = similar::TextDiff::configure()
        .algorithm(similar::Algorithm::Myers)
        // A pathological pair of files falls back to a coarser diff instead of stalling.
        .timeout(Duration::from_millis(500))
        .diff_lines(old, new);
    let mut lines = Vec::new();
    let mut cut = 0usize;
    let mut push = |l: String, lines: &mut Vec<String>| {
        if lines.len() < max_lines {
            lines.push(l);
        } else {
            cut += 1;
        }
    };
    for hunk in diff.unified_diff().context_radius(3).iter_hunks() {
        push(hunk.header().to_string(), &mut lines);
        for change in hunk.iter_changes() {
            let sign = match change.tag() {
                similar::ChangeTag::Delete => '-',
                similar::ChangeTag::Insert => '+',
                similar::ChangeTag::Equal => ' ',
            };
            let text = change.value();
            let text = text.strip_suffix('\n').unwrap_or(text);
            push(format!("{sign}{}", escape_line(text)), &mut lines);
            if change.missing_newline() {
                push("\\ No newline at end of file".to_string(), &mut lines);
            }
        }
    }
    Diff {
        lines,
        cut_lines: cut,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_escaped_and_capped() {
        let old = "a\nb\nc\n";
        let new = "a\nB\x1b[2J\rX\nc\n";
        let d = unified(old, new, 100);
        assert!(d.lines.iter().any(|l| l == "-b"), "{:?}", d.lines);
        assert!(
            d.lines.iter().any(|l| l == "+B\\u{1b}[2J\\r"),
            "{:?}",
            d.lines
        );
        assert!(d
            .lines
            .iter()
            .all(|l| !l.contains('\x1b') && !l.contains('\r')));
        let big: String = (0..1000).map(|i| format!("{i}\n")).collect();
        let d = unified("", &big, 10);
        assert_eq!(d.lines.len(), 10);
        assert_eq!(d.cut_lines, 991);
    }

    #[test]
    fn text_detection() {
        assert!(is_text(b"hello\n"));
        assert!(!is_text(b"\x00\x01"));
        assert!(!is_text(b"\xff\xfe"));
    }
}
