//! What one [`crate::AuditLog`] handle last found, and checked, at the end of its files.
//!
//! Before every append the log's last record is checked in full (parsed, canonicalised,
//! its hash recomputed), the last checkpoint parsed and hashed, and the high-water mark's
//! signature verified: a quarter to half a millisecond per record, on the path of every
//! action. Each of those checks is a function of the bytes it reads. So a handle keeps
//! the bytes it checked (or wrote itself) with what the check found, and the next append,
//! under the same directory lock, reads the same range again and compares: bytes that are
//! equal need no second check. Anything else (another process appended, a tail was torn
//! or cut, a file was replaced or rewritten, the mark moved) shows as another length or
//! other bytes, and takes the full check again.
//!
//! The comparison covers the newline before the line, so a line that grew at its front
//! is not taken for the one that was checked.

use std::fs::File;
use std::os::unix::fs::FileExt;

use crate::mark::HighWaterMark;

/// One file's last line as checked: the file's length then, the line's bytes (without
/// its newline), and what the check found in it.
#[derive(Debug, Clone)]
pub(crate) struct SeenLine<T> {
    len: u64,
    line: Vec<u8>,
    found: T,
}

impl<T: Clone> SeenLine<T> {
    /// `line` is the last line of a file `len` bytes long, ending at `len - 1` with its
    /// newline.
    pub(crate) fn new(len: u64, line: Vec<u8>, found: T) -> SeenLine<T> {
        SeenLine { len, line, found }
    }

    /// What was found, if `file` still ends with exactly this line at this length.
    /// Any read error is "no": the caller then checks in full and reports it.
    pub(crate) fn still_in(&self, file: &File) -> Option<(u64, T)> {
        let len = file.metadata().ok()?.len();
        if len != self.len {
            return None;
        }
        // The newline that ends the line, and the one before it (none at the file's
        // start): the line is then whole, and the file's last.
        let body = self.line.len() as u64 + 1;
        let start = len.checked_sub(body)?;
        let from = start.saturating_sub(1);
        let mut buf = vec![0u8; (len - from) as usize];
        file.read_exact_at(&mut buf, from).ok()?;
        let (before, rest) = match start {
            0 => (None, &buf[..]),
            _ => (Some(buf[0]), &buf[1..]),
        };
        let whole = before.is_none_or(|b| b == b'\n');
        let same = rest.len() == body as usize
            && rest[..self.line.len()] == self.line[..]
            && rest[self.line.len()] == b'\n';
        (whole && same).then(|| (len, self.found.clone()))
    }
}

/// The mark's bytes as last read, and the mark they verified as, under the key id that
/// verified them (`None`: another key's mark, whose signature the appender does not check).
#[derive(Debug, Clone)]
pub(crate) struct SeenMark {
    pub(crate) bytes: Vec<u8>,
    pub(crate) mark: HighWaterMark,
    pub(crate) verified_by: Option<String>,
}

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct SeenTails<R, C> {
    pub(crate) log: Option<SeenLine<R>>,
    pub(crate) checkpoints: Option<SeenLine<C>>,
    pub(crate) mark: Option<SeenMark>,
}

impl<R, C> Default for SeenTails<R, C> {
    fn default() -> Self {
        SeenTails {
            log: None,
            checkpoints: None,
            mark: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file_with(bytes: &[u8]) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(bytes).unwrap();
        f
    }

    #[test]
    fn the_same_last_line_at_the_same_length_is_still_there() {
        let f = file_with(b"first\nsecond\n");
        let seen = SeenLine::new(13, b"second".to_vec(), 7u32);
        assert_eq!(seen.still_in(f.as_file()), Some((13, 7)));
        let only = file_with(b"only\n");
        let seen = SeenLine::new(5, b"only".to_vec(), 1u32);
        assert_eq!(seen.still_in(only.as_file()), Some((5, 1)));
    }

    #[test]
    fn anything_else_is_not() {
        let seen = SeenLine::new(13, b"second".to_vec(), 7u32);
        // Another record appended, a torn tail, one byte changed, the line grown at its
        // front with the length kept, the file cut.
        for bytes in [
            &b"first\nsecond\nthird\n"[..],
            b"first\nsecond\nthi",
            b"first\nsecand\n",
            b"firstXsecond\n",
            b"first\nsecond",
            b"",
        ] {
            let f = file_with(bytes);
            assert_eq!(seen.still_in(f.as_file()), None, "{bytes:?}");
        }
        let grown = file_with(b"firs\nXsecond\n");
        let seen = SeenLine::new(13, b"second".to_vec(), 7u32);
        assert_eq!(seen.still_in(grown.as_file()), None);
    }
}
