//! `verify`: walk the log and its checkpoints and report the first problem, precisely.
//!
//! The walk accepts a record when it passes every check of its own line and chains onto
//! the record accepted before it (`seq` one more, `prev` equal to its hash). At the first
//! record that does not, it looks at the rest of the file once to tell a deletion from a
//! reordering or an insertion.

use std::fmt;
use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::path::{Path, PathBuf};

use ed25519_dalek::VerifyingKey;

use crate::checkpoint::{check_checkpoint_line, CheckpointHead};
use crate::lines::{LineReader, RawLine};
use crate::log::{CHECKPOINT_FILE, LOG_FILE};
use crate::record::{check_record_line, RecordHead, MAX_RECORD_BYTES, ZERO_HASH};
use crate::AuditError;

/// Largest checkpoint line accepted (real ones are about 400 bytes).
const MAX_CHECKPOINT_BYTES: usize = 64 * 1024;

/// What kind of tampering (or damage) a problem looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProblemKind {
    /// A line's bytes changed: bad JSON, not canonical, or its hash does not match.
    Modified,
    /// Records are missing: `seq` jumps forward and the missing ones appear nowhere.
    Deleted,
    /// Records are out of order: an expected record appears later in the file.
    Reordered,
    /// A record that does not belong: a duplicate `seq`, or a `prev` that does not chain.
    Inserted,
    /// The log ends early: before the last checkpoint, mid-line, or it no longer matches
    /// what a checkpoint signed.
    Truncated,
    /// A checkpoint is damaged, forged, missing from the chain of checkpoints, or the
    /// checkpoint file is missing.
    BadCheckpoint,
}

impl ProblemKind {
    fn help(self) -> &'static str {
        match self {
            ProblemKind::BadCheckpoint => {
                "checkpoints.jsonl was altered or signed by another key; check that you passed the right public key, then treat the directory as evidence"
            }
            _ => "the audit log was altered after it was written; keep the directory as evidence and restore from a backup",
        }
    }
}

/// The first problem `verify` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// What it looks like.
    pub kind: ProblemKind,
    /// `log.jsonl` or `checkpoints.jsonl` (full path).
    pub file: PathBuf,
    /// 1-based line number (one past the last line when the problem is a missing end;
    /// 0 when the file itself is missing).
    pub line: u64,
    /// The record sequence number expected or found there, when known.
    pub seq: Option<u64>,
    /// What exactly is wrong.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {:?}", self.file.display(), self.line, self.kind)?;
        if let Some(seq) = self.seq {
            write!(f, " (record #{seq})")?;
        }
        write!(f, ": {}\nhelp: {}", self.message, self.kind.help())
    }
}

/// What `verify` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// Records accepted before the first problem (all of them when there is none).
    pub records: u64,
    /// Valid checkpoints before the first checkpoint problem.
    pub checkpoints: u64,
    /// `seq` of the last accepted record.
    pub last_seq: Option<u64>,
    /// `seq` covered by the last valid checkpoint.
    pub last_checkpoint_seq: Option<u64>,
    /// Accepted records after the last valid checkpoint. They chain correctly but no
    /// signature vouches for them yet: normal after a crash, and exactly what a removed
    /// final checkpoint looks like. A log closed cleanly has none.
    pub unsigned_tail: u64,
    /// The first problem, if any.
    pub problem: Option<Problem>,
}

impl VerifyReport {
    /// Whether no problem was found (an unsigned tail is not a problem).
    pub fn is_ok(&self) -> bool {
        self.problem.is_none()
    }
}

/// Verify the audit log in `dir` against the checkpoint key `key`.
///
/// `Err` only when the files cannot be read at all; any damage to their content is a
/// [`Problem`] in the report. Never panics on arbitrary content.
pub fn verify(dir: &Path, key: &VerifyingKey) -> Result<VerifyReport, AuditError> {
    let log_path = dir.join(LOG_FILE);
    let cp_path = dir.join(CHECKPOINT_FILE);
    if !log_path.exists() && !cp_path.exists() {
        return Err(AuditError::NoLog {
            dir: dir.to_path_buf(),
        });
    }
    let (checkpoints, cp_problem) = read_checkpoints(&cp_path, key)?;
    let mut walk = LogWalk {
        path: &log_path,
        checkpoints: &checkpoints,
        next_cp: 0,
        last: None,
        records: 0,
        lines: 0,
    };
    let mut problem = if log_path.exists() {
        walk.run()?
    } else {
        Some(Problem {
            kind: ProblemKind::Truncated,
            file: log_path.clone(),
            line: 0,
            seq: Some(0),
            message: "log.jsonl is missing".into(),
        })
    };
    let last_seq = walk.last.as_ref().map(|l| l.seq);
    let last_cp_seq = checkpoints.last().map(|c| c.seq);
    if problem.is_none() {
        problem = cp_problem;
    }
    if problem.is_none() {
        if let Some(cp_seq) = last_cp_seq {
            if last_seq.is_none_or(|s| s < cp_seq) {
                let next = last_seq.map_or(0, |s| s + 1);
                problem = Some(Problem {
                    kind: ProblemKind::Truncated,
                    file: log_path.clone(),
                    line: walk.lines + 1,
                    seq: Some(next),
                    message: format!(
                        "the log ends before record #{next}, but a signed checkpoint covers records up to #{cp_seq}: records were cut off the end"
                    ),
                });
            }
        }
    }
    let unsigned_tail = match (last_seq, last_cp_seq) {
        (Some(s), Some(c)) => s.saturating_sub(c),
        (Some(s), None) => s + 1,
        (None, _) => 0,
    };
    Ok(VerifyReport {
        records: walk.records,
        checkpoints: checkpoints.len() as u64,
        last_seq,
        last_checkpoint_seq: last_cp_seq,
        unsigned_tail,
        problem,
    })
}

/// Valid checkpoints up to the first bad one, and that first problem.
fn read_checkpoints(
    path: &Path,
    key: &VerifyingKey,
) -> Result<(Vec<CheckpointHead>, Option<Problem>), AuditError> {
    let problem = |line: u64, message: String| Problem {
        kind: ProblemKind::BadCheckpoint,
        file: path.to_path_buf(),
        line,
        seq: None,
        message,
    };
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok((
                Vec::new(),
                Some(problem(0, "checkpoints.jsonl is missing".into())),
            ))
        }
        Err(e) => return Err(AuditError::io("open", path, e)),
    };
    let mut reader = LineReader::new(file, MAX_CHECKPOINT_BYTES, 1, 0);
    let mut found: Vec<CheckpointHead> = Vec::new();
    let mut prev_line: Option<Vec<u8>> = None;
    while let Some(nl) = reader
        .next_line()
        .map_err(|e| AuditError::io("read", path, e))?
    {
        let bytes = match nl.line {
            RawLine::Complete(b) => b,
            RawLine::Unterminated => {
                let msg = "the last line has no newline: the file was cut short".into();
                return Ok((found, Some(problem(nl.number, msg))));
            }
            RawLine::TooLong => {
                let msg = format!("the line is longer than {MAX_CHECKPOINT_BYTES} bytes");
                return Ok((found, Some(problem(nl.number, msg))));
            }
        };
        match check_checkpoint_line(&bytes, key, prev_line.as_deref()) {
            Err(reason) => return Ok((found, Some(problem(nl.number, reason)))),
            Ok(head) => {
                if let Some(last) = found.last() {
                    if head.seq <= last.seq {
                        let msg = format!(
                            "checkpoint for record #{} follows one for #{}: checkpoints must move forward",
                            head.seq, last.seq
                        );
                        return Ok((found, Some(problem(nl.number, msg))));
                    }
                }
                found.push(head);
                prev_line = Some(bytes);
            }
        }
    }
    Ok((found, None))
}

/// The last record the walk accepted.
struct Accepted {
    seq: u64,
    hash: String,
    prev: String,
    line: u64,
}

struct LogWalk<'a> {
    path: &'a Path,
    checkpoints: &'a [CheckpointHead],
    next_cp: usize,
    last: Option<Accepted>,
    records: u64,
    lines: u64,
}

/// What the rest of the file (after a suspicious line) holds.
#[derive(Default)]
struct Lookahead {
    /// First later line holding a valid record with the `seq` the walk expected.
    expected_at: Option<u64>,
    /// First later line holding a valid record with the suspicious line's `seq`.
    same_seq_at: Option<u64>,
    /// The line right after the suspicious one, if it is a valid record.
    next: Option<RecordHead>,
}

impl LogWalk<'_> {
    /// Walk every line; the first problem, if any.
    fn run(&mut self) -> Result<Option<Problem>, AuditError> {
        let file = File::open(self.path).map_err(|e| AuditError::io("open", self.path, e))?;
        let mut reader = LineReader::new(file, MAX_RECORD_BYTES, 1, 0);
        while let Some(nl) = reader
            .next_line()
            .map_err(|e| AuditError::io("read", self.path, e))?
        {
            self.lines = nl.number;
            let expected = self.last.as_ref().map_or(0, |l| l.seq.saturating_add(1));
            let bytes = match nl.line {
                RawLine::Complete(b) => b,
                RawLine::Unterminated => {
                    return Ok(Some(self.problem(
                        ProblemKind::Truncated,
                        nl.number,
                        Some(expected),
                        "the last line has no newline: the file was cut short, or a write was interrupted".into(),
                    )))
                }
                RawLine::TooLong => {
                    return Ok(Some(self.problem(
                        ProblemKind::Modified,
                        nl.number,
                        Some(expected),
                        format!("the line is longer than {MAX_RECORD_BYTES} bytes"),
                    )))
                }
            };
            let head = match check_record_line(&bytes) {
                Ok(h) => h,
                Err(reason) => {
                    return Ok(Some(self.problem(
                        ProblemKind::Modified,
                        nl.number,
                        Some(expected),
                        reason,
                    )))
                }
            };
            let expected_prev = self.last.as_ref().map_or(ZERO_HASH, |l| l.hash.as_str());
            if head.seq == expected && head.prev == expected_prev {
                if let Some(p) =
                    self.check_against_checkpoint(&head, nl.number, reader.position())?
                {
                    return Ok(Some(p));
                }
                self.last = Some(Accepted {
                    seq: head.seq,
                    hash: head.hash,
                    prev: head.prev,
                    line: nl.number,
                });
                self.records += 1;
                continue;
            }
            let look = self.look_ahead(reader.position(), nl.number + 1, expected, head.seq)?;
            return Ok(Some(self.classify(&head, nl.number, expected, &look)));
        }
        Ok(None)
    }

    /// A record the chain accepts must also be the one a checkpoint signed at its `seq`.
    fn check_against_checkpoint(
        &mut self,
        head: &RecordHead,
        line: u64,
        after: u64,
    ) -> Result<Option<Problem>, AuditError> {
        while self
            .checkpoints
            .get(self.next_cp)
            .is_some_and(|c| c.seq < head.seq)
        {
            self.next_cp += 1;
        }
        let Some(cp) = self.checkpoints.get(self.next_cp) else {
            return Ok(None);
        };
        if cp.seq != head.seq {
            return Ok(None);
        }
        self.next_cp += 1;
        if cp.record_hash == head.hash {
            return Ok(None);
        }
        let look = self.look_ahead(after, line + 1, head.seq, head.seq)?;
        Ok(Some(match look.same_seq_at {
            Some(other) => self.problem(
                ProblemKind::Inserted,
                line,
                Some(head.seq),
                format!(
                    "this record #{} is not the one the checkpoint signed; another record #{} follows at line {other}",
                    head.seq, head.seq
                ),
            ),
            None => self.problem(
                ProblemKind::Truncated,
                line,
                Some(head.seq),
                format!(
                    "record #{} does not match the hash a signed checkpoint holds for it: the log was cut and rewritten from here or earlier",
                    head.seq
                ),
            ),
        }))
    }

    /// Scan the rest of the file (from byte `offset`, line `number`) for what `classify` needs.
    fn look_ahead(
        &self,
        offset: u64,
        number: u64,
        expected: u64,
        seq: u64,
    ) -> Result<Lookahead, AuditError> {
        let mut file = File::open(self.path).map_err(|e| AuditError::io("open", self.path, e))?;
        file.seek(SeekFrom::Start(offset))
            .map_err(|e| AuditError::io("read", self.path, e))?;
        let mut reader = LineReader::new(file, MAX_RECORD_BYTES, number, offset);
        let mut look = Lookahead::default();
        while let Some(nl) = reader
            .next_line()
            .map_err(|e| AuditError::io("read", self.path, e))?
        {
            let head = match nl.line {
                RawLine::Complete(b) => check_record_line(&b).ok(),
                _ => None,
            };
            if nl.number == number {
                look.next = head.clone();
            }
            if let Some(h) = head {
                if h.seq == expected && look.expected_at.is_none() {
                    look.expected_at = Some(nl.number);
                }
                if h.seq == seq && look.same_seq_at.is_none() {
                    look.same_seq_at = Some(nl.number);
                }
            }
            if look.expected_at.is_some() && look.same_seq_at.is_some() {
                break;
            }
        }
        Ok(look)
    }

    /// Name the problem with a valid record at `line` that does not chain on.
    fn classify(&self, head: &RecordHead, line: u64, expected: u64, look: &Lookahead) -> Problem {
        let seq = head.seq;
        let after = match &self.last {
            Some(l) => format!("line {} (record #{})", l.line, l.seq),
            None => "the start of the log".into(),
        };
        if seq == expected {
            let message = match look.same_seq_at {
                Some(other) => format!(
                    "record #{seq} appears again at line {other}, and this one does not chain onto {after}"
                ),
                None => format!(
                    "its `prev` is not the hash of {after}: a record was inserted here, or the one before was rewritten"
                ),
            };
            return self.problem(ProblemKind::Inserted, line, Some(seq), message);
        }
        if seq > expected {
            if let Some(other) = look.same_seq_at {
                return self.problem(
                    ProblemKind::Inserted,
                    line,
                    Some(seq),
                    format!("expected record #{expected} here; this is a copy of record #{seq}, which appears again at line {other}"),
                );
            }
            if let Some(at) = look.expected_at {
                return self.problem(
                    ProblemKind::Reordered,
                    line,
                    Some(expected),
                    format!("expected record #{expected} here but found #{seq}; #{expected} comes later, at line {at}"),
                );
            }
            let missing = if seq - expected == 1 {
                format!("record #{expected} is")
            } else {
                format!("records #{expected} to #{} are", seq - 1)
            };
            return self.problem(
                ProblemKind::Deleted,
                line,
                Some(expected),
                format!("{missing} missing: found #{seq} right after {after}"),
            );
        }
        // `seq` went back: this `seq` was already accepted, so one of the two is inserted.
        // When both claim the same predecessor and the records after this one chain onto
        // it, the earlier one is the stranger.
        if let Some(l) = &self.last {
            let next_chains = look
                .next
                .as_ref()
                .is_some_and(|n| n.prev == head.hash && n.seq == seq.saturating_add(1));
            if seq == l.seq && head.hash != l.hash && head.prev == l.prev && next_chains {
                return self.problem(
                    ProblemKind::Inserted,
                    l.line,
                    Some(seq),
                    format!("this record #{seq} is not part of the chain: the record #{seq} at line {line} is the one the log continues from"),
                );
            }
        }
        self.problem(
            ProblemKind::Inserted,
            line,
            Some(seq),
            format!("record #{seq} was already seen before {after}; expected #{expected} here"),
        )
    }

    fn problem(&self, kind: ProblemKind, line: u64, seq: Option<u64>, message: String) -> Problem {
        Problem {
            kind,
            file: self.path.to_path_buf(),
            line,
            seq,
            message,
        }
    }
}
