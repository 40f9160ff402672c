//! Reading JSON-lines files safely: forwards with a per-line size limit (for `verify`),
//! and backwards from the end (for appending and `tail`), so neither huge lines nor huge
//! files cost more memory than one bounded line.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::fs::FileExt;

/// One line as read forwards.
#[derive(Debug)]
pub(crate) enum RawLine {
    /// A line ended by `\n` (the newline is not included).
    Complete(Vec<u8>),
    /// Bytes at the end of the file with no `\n` after them.
    Unterminated,
    /// A line longer than the limit; its bytes were skipped.
    TooLong,
}

/// A line and its 1-based line number.
#[derive(Debug)]
pub(crate) struct NumberedLine {
    pub number: u64,
    pub line: RawLine,
}

/// Forward reader yielding [`NumberedLine`]s, never holding more than `max + 1` bytes of
/// one line.
pub(crate) struct LineReader<R> {
    inner: BufReader<R>,
    max: usize,
    next_number: u64,
    offset: u64,
}

impl<R: Read> LineReader<R> {
    pub(crate) fn new(inner: R, max: usize, first_number: u64, offset: u64) -> Self {
        LineReader {
            inner: BufReader::with_capacity(64 * 1024, inner),
            max,
            next_number: first_number,
            offset,
        }
    }

    /// Byte offset just past the last line returned.
    pub(crate) fn position(&self) -> u64 {
        self.offset
    }

    /// The next line, or `None` at the end of the file.
    pub(crate) fn next_line(&mut self) -> io::Result<Option<NumberedLine>> {
        let mut buf = Vec::new();
        let limit = self.max as u64 + 1;
        let n = (&mut self.inner).take(limit).read_until(b'\n', &mut buf)?;
        if n == 0 {
            return Ok(None);
        }
        let number = self.next_number;
        self.next_number += 1;
        let line = if buf.last() == Some(&b'\n') {
            self.offset += n as u64;
            buf.pop();
            RawLine::Complete(buf)
        } else if n as u64 == limit {
            let skipped = self.skip_rest_of_line()?;
            self.offset += n as u64 + skipped;
            RawLine::TooLong
        } else {
            self.offset += n as u64;
            RawLine::Unterminated
        };
        Ok(Some(NumberedLine { number, line }))
    }

    /// Consume bytes up to and including the next `\n`; returns how many.
    fn skip_rest_of_line(&mut self) -> io::Result<u64> {
        let mut skipped = 0u64;
        loop {
            let available = self.inner.fill_buf()?;
            if available.is_empty() {
                return Ok(skipped);
            }
            match available.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    self.inner.consume(i + 1);
                    return Ok(skipped + i as u64 + 1);
                }
                None => {
                    let len = available.len();
                    self.inner.consume(len);
                    skipped += len as u64;
                }
            }
        }
    }
}

/// The end of a file, read backwards.
#[derive(Debug, Default)]
pub(crate) struct Tail {
    /// Up to `n` last complete lines, in file order, without their newlines.
    pub lines: Vec<Vec<u8>>,
    /// Offset where trailing bytes with no `\n` begin, if the file does not end in `\n`.
    pub fragment_start: Option<u64>,
}

const CHUNK: u64 = 16 * 1024;

/// Read the last `n` complete lines of the first `len` bytes of `file`, reading backwards
/// in chunks. Stops after about `max_bytes` bytes: lines cut off by that are not returned.
pub(crate) fn read_tail(file: &File, len: u64, n: usize, max_bytes: u64) -> io::Result<Tail> {
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    let mut pos = len;
    let mut newlines = 0usize;
    let mut total = 0u64;
    while pos > 0 && newlines <= n && total < max_bytes {
        let size = CHUNK.min(pos);
        pos -= size;
        let mut buf = vec![0u8; size as usize];
        file.read_exact_at(&mut buf, pos)?;
        newlines += buf.iter().filter(|&&b| b == b'\n').count();
        total += size;
        chunks.push(buf);
    }
    let data: Vec<u8> = chunks.into_iter().rev().flatten().collect();
    let mut tail = Tail::default();
    let Some(last_nl) = data.iter().rposition(|&b| b == b'\n') else {
        if pos == 0 && !data.is_empty() {
            tail.fragment_start = Some(0);
        }
        return Ok(tail);
    };
    if last_nl + 1 < data.len() {
        tail.fragment_start = Some(pos + last_nl as u64 + 1);
    }
    let complete = &data[..last_nl];
    let mut pieces: Vec<&[u8]> = complete.split(|&b| b == b'\n').collect();
    if pos > 0 {
        // The first piece may start mid-line: we did not read back to its beginning.
        pieces.remove(0);
    }
    let skip = pieces.len().saturating_sub(n);
    tail.lines = pieces[skip..].iter().map(|p| p.to_vec()).collect();
    Ok(tail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file_with(bytes: &[u8]) -> (tempfile::NamedTempFile, u64) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(bytes).unwrap();
        (f, bytes.len() as u64)
    }

    #[test]
    fn tail_finds_last_lines_and_fragment() {
        let (f, len) = file_with(b"a\nbb\nccc\ndd");
        let t = read_tail(f.as_file(), len, 2, 1 << 20).unwrap();
        assert_eq!(t.lines, vec![b"bb".to_vec(), b"ccc".to_vec()]);
        assert_eq!(t.fragment_start, Some(9));
        let t = read_tail(f.as_file(), len, 10, 1 << 20).unwrap();
        assert_eq!(t.lines.len(), 3);
        let (f, len) = file_with(b"");
        let t = read_tail(f.as_file(), len, 1, 1 << 20).unwrap();
        assert!(t.lines.is_empty() && t.fragment_start.is_none());
        let (f, len) = file_with(b"partial");
        let t = read_tail(f.as_file(), len, 1, 1 << 20).unwrap();
        assert_eq!(t.fragment_start, Some(0));
    }

    #[test]
    fn tail_across_chunks() {
        let mut data = Vec::new();
        for i in 0..5000 {
            writeln!(data, "line-{i:08}").unwrap();
        }
        let (f, len) = file_with(&data);
        let t = read_tail(f.as_file(), len, 3000, u64::MAX).unwrap();
        assert_eq!(t.lines.len(), 3000);
        assert_eq!(t.lines[0], b"line-00002000".to_vec());
        assert_eq!(t.lines[2999], b"line-00004999".to_vec());
    }

    #[test]
    fn forward_reader_limits_long_lines() {
        let (f, _) = file_with(b"short\nxxxxxxxxxxxxxxxxxxxx\nok\nend");
        let mut r = LineReader::new(f.reopen().unwrap(), 8, 1, 0);
        let mut got = Vec::new();
        while let Some(l) = r.next_line().unwrap() {
            got.push((l.number, r.position(), format!("{:?}", l.line)));
        }
        assert_eq!(got.len(), 4);
        assert!(got[1].2.contains("TooLong"));
        assert_eq!((got[2].0, got[2].1), (3, 30));
        assert!(got[3].2.contains("Unterminated"));
    }
}
