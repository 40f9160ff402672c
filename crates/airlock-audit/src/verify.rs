//! `verify`: walk the log and its checkpoints and report the first problem, precisely.
//!
//! The walk accepts a record when it passes every check of its own line and chains onto
//! the record accepted before it (`seq` one more, `prev` equal to its hash). At the first
//! record that does not, it looks at the rest of the file once to tell a deletion from a
//! reordering or an insertion.
//!
//! Keys: each checkpoint must be signed by the key in use at its place in the log. That is
//! the key the first checkpoint names (the configured one, or the old key a later rotation
//! record names), until a rotation record ([`crate::KEY_ROTATION_KIND`]) hands over to the
//! key it names. The last checkpoint must be signed by the configured key: through the hash
//! chains, that one signature vouches for every record and key change before it.

use std::fmt;
use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::path::{Path, PathBuf};

use ed25519_dalek::VerifyingKey;

use crate::checkpoint::{parse_checkpoint_line, ParsedCheckpoint};
use crate::lines::{LineReader, RawLine};
use crate::log::{CHECKPOINT_FILE, LOG_FILE};
use crate::mark::read_mark;
use crate::record::{check_record_line, RecordHead, MAX_RECORD_BYTES, ZERO_HASH};
use crate::signer::{key_id, public_key_from_hex};
use crate::AuditError;

/// At most this many time regressions are listed (all are counted).
const MAX_TIME_REGRESSIONS: usize = 100;

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
    /// The chain of signing keys is broken: a checkpoint signed by a key that was not in
    /// use there, or a rotation record that does not follow from the key before it.
    KeyChain,
    /// The log fell below the high-water mark kept outside the audit directory (records or
    /// checkpoints were removed), or the mark itself is damaged.
    BelowMark,
}

impl ProblemKind {
    fn help(self) -> &'static str {
        match self {
            ProblemKind::BadCheckpoint => {
                "checkpoints.jsonl was altered or signed by another key; check that you passed the right public key, then treat the directory as evidence"
            }
            ProblemKind::KeyChain => {
                "the signing key changed without a signed rotation (`airlock audit rotate-key`); check that you passed the current public key, then treat the directory as evidence"
            }
            ProblemKind::BelowMark => {
                "records or checkpoints were removed after they were signed; keep the directory as evidence and restore it from a backup (only if the log is knowingly lost for good, move the high-water mark aside to start a new one)"
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
    /// `seq` the high-water mark covers, when one was checked.
    pub mark_seq: Option<u64>,
    /// Every change of signing key, in log order.
    pub key_changes: Vec<KeyChange>,
    /// Records whose time is earlier than the record before them (the first
    /// [`MAX_TIME_REGRESSIONS`]); a clock set back, or records written under a false clock.
    pub time_regressions: Vec<TimeRegression>,
    /// How many records went back in time, listed or not.
    pub time_regressions_total: u64,
    /// The first problem, if any.
    pub problem: Option<Problem>,
}

/// A change of signing key, as the rotation record in the log states it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyChange {
    /// `seq` of the rotation record.
    pub seq: u64,
    /// 1-based line of the rotation record in `log.jsonl`.
    pub line: u64,
    /// Id of the key replaced, if the record names it.
    pub old_key_id: Option<String>,
    /// Id of the key that signs from then on.
    pub new_key_id: String,
    /// Whether a checkpoint signed by the old key covers the rotation record. When not
    /// (the old secret key was lost), nothing but the new key vouches for the records
    /// before the rotation that no earlier checkpoint covered.
    pub signed_by_old_key: bool,
    /// Checkpoints before the rotation that could not be checked because the old public
    /// key is unknown.
    pub unchecked_checkpoints: u64,
}

/// A record whose time is earlier than the one before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeRegression {
    /// The record that goes back in time.
    pub seq: u64,
    /// Its 1-based line.
    pub line: u64,
    /// Its time.
    pub time: String,
    /// The record before it.
    pub previous_seq: u64,
    /// That record's time.
    pub previous_time: String,
}

/// What `verify_with` trusts: the current public key and, optionally, the high-water mark.
#[derive(Debug, Clone, Copy)]
pub struct Trust<'a> {
    /// The key that signs checkpoints now (the operator's public key file).
    pub key: &'a VerifyingKey,
    /// The high-water mark the log was opened with ([`crate::AuditLog::open_marked`]).
    pub mark: Option<&'a Path>,
}

impl VerifyReport {
    /// Whether no problem was found (an unsigned tail is not a problem).
    pub fn is_ok(&self) -> bool {
        self.problem.is_none()
    }
}

/// Verify the audit log in `dir` against the checkpoint key `key`, without a high-water
/// mark. See [`verify_with`].
pub fn verify(dir: &Path, key: &VerifyingKey) -> Result<VerifyReport, AuditError> {
    verify_with(dir, &Trust { key, mark: None })
}

/// Verify the audit log in `dir`: every record, every checkpoint and the chain of keys
/// ending at `trust.key`, and that the log did not fall below `trust.mark`.
///
/// `Err` only when the files cannot be read at all; any damage to their content is a
/// [`Problem`] in the report. Never panics on arbitrary content.
pub fn verify_with(dir: &Path, trust: &Trust<'_>) -> Result<VerifyReport, AuditError> {
    let log_path = dir.join(LOG_FILE);
    let cp_path = dir.join(CHECKPOINT_FILE);
    let mark = match trust.mark.map(read_mark).transpose() {
        Ok(m) => m.flatten(),
        Err(e) => {
            let problem = Problem {
                kind: ProblemKind::BelowMark,
                file: trust.mark.unwrap_or(dir).to_path_buf(),
                line: 0,
                seq: None,
                message: e.to_string(),
            };
            return Ok(VerifyReport::only(problem));
        }
    };
    if !log_path.exists() && !cp_path.exists() && mark.is_none() {
        return Err(AuditError::NoLog {
            dir: dir.to_path_buf(),
        });
    }
    let (checkpoints, cp_problem) = read_checkpoints(&cp_path)?;
    let mut walk = LogWalk {
        path: &log_path,
        cp_path: &cp_path,
        checkpoints: &checkpoints,
        anchor: trust.key,
        next_cp: 0,
        key: None,
        known_keys: vec![*trust.key],
        pending: Vec::new(),
        key_changes: Vec::new(),
        times: Vec::new(),
        times_total: 0,
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
    let last_cp_seq = checkpoints.last().map(|c| c.cp.head.seq);
    if problem.is_none() {
        problem = cp_problem;
    }
    if problem.is_none() {
        problem = walk.check_rest();
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
    if problem.is_none() && checkpoints.is_empty() && walk.records > 1 {
        // The first record is always checkpointed at once, so a writer that died leaves at
        // most that one record unsigned.
        problem = Some(Problem {
            kind: ProblemKind::BadCheckpoint,
            file: cp_path.clone(),
            line: 1,
            seq: None,
            message: format!(
                "the log holds {} records but no checkpoint: the checkpoints were removed (a crash leaves at most the first record unsigned)",
                walk.records
            ),
        });
    }
    if problem.is_none() {
        if let Some(mark) = &mark {
            problem = walk.check_mark(mark, trust.mark.unwrap_or(dir));
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
        mark_seq: mark.as_ref().map(|m| m.seq),
        key_changes: walk.key_changes,
        time_regressions: walk.times,
        time_regressions_total: walk.times_total,
        problem,
    })
}

impl VerifyReport {
    fn only(problem: Problem) -> VerifyReport {
        VerifyReport {
            records: 0,
            checkpoints: 0,
            last_seq: None,
            last_checkpoint_seq: None,
            unsigned_tail: 0,
            mark_seq: None,
            key_changes: Vec::new(),
            time_regressions: Vec::new(),
            time_regressions_total: 0,
            problem: Some(problem),
        }
    }
}

/// A checkpoint that passed every check but its signature, and its line.
struct CheckpointAt {
    line: u64,
    cp: ParsedCheckpoint,
}

/// Checkpoints valid in form and chaining, up to the first bad one, and that first problem.
/// Signatures are checked during the walk, where the key in use is known.
fn read_checkpoints(path: &Path) -> Result<(Vec<CheckpointAt>, Option<Problem>), AuditError> {
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
    let mut found: Vec<CheckpointAt> = Vec::new();
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
        match parse_checkpoint_line(&bytes, prev_line.as_deref()) {
            Err(reason) => return Ok((found, Some(problem(nl.number, reason)))),
            Ok(cp) => {
                if let Some(last) = found.last() {
                    if cp.head.seq <= last.cp.head.seq {
                        let msg = format!(
                            "checkpoint for record #{} follows one for #{}: checkpoints must move forward",
                            cp.head.seq, last.cp.head.seq
                        );
                        return Ok((found, Some(problem(nl.number, msg))));
                    }
                }
                found.push(CheckpointAt {
                    line: nl.number,
                    cp,
                });
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
    time: String,
}

struct LogWalk<'a> {
    path: &'a Path,
    cp_path: &'a Path,
    checkpoints: &'a [CheckpointAt],
    /// The configured key: the last checkpoint must be signed by it.
    anchor: &'a VerifyingKey,
    next_cp: usize,
    /// The key in use at this point of the walk, once known.
    key: Option<VerifyingKey>,
    /// Every key seen so far (for checking the high-water mark's signature).
    known_keys: Vec<VerifyingKey>,
    /// Indexes of checkpoints met while the key in use was unknown (signed by a key that is
    /// not the configured one), to be checked once a rotation record names it.
    pending: Vec<usize>,
    key_changes: Vec<KeyChange>,
    times: Vec<TimeRegression>,
    times_total: u64,
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
                self.check_time(&head, nl.number);
                if let Some(detail) = &head.rotation {
                    if let Some(p) = self.follow_rotation(detail, head.seq, nl.number) {
                        return Ok(Some(p));
                    }
                }
                self.last = Some(Accepted {
                    seq: head.seq,
                    hash: head.hash,
                    prev: head.prev,
                    line: nl.number,
                    time: head.time,
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
            .is_some_and(|c| c.cp.head.seq < head.seq)
        {
            self.next_cp += 1;
        }
        let Some(at) = self.checkpoints.get(self.next_cp) else {
            return Ok(None);
        };
        if at.cp.head.seq != head.seq {
            return Ok(None);
        }
        if let Some(p) = self.check_signature(self.next_cp) {
            return Ok(Some(p));
        }
        self.next_cp += 1;
        if at.cp.head.record_hash == head.hash {
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

    /// Check the signature of checkpoint `index` with the key in use. While no key is
    /// known yet, the configured key is tried; a checkpoint by another key waits for a
    /// rotation record to name it.
    fn check_signature(&mut self, index: usize) -> Option<Problem> {
        let at = &self.checkpoints[index];
        let key = match self.key {
            Some(k) => k,
            None if at.cp.key_id == key_id(self.anchor) => *self.anchor,
            None => {
                self.pending.push(index);
                return None;
            }
        };
        match at.cp.check_signature(&key) {
            Ok(()) => {
                self.key = Some(key);
                None
            }
            Err(reason) => Some(self.cp_problem(at, reason)),
        }
    }

    fn cp_problem(&self, at: &CheckpointAt, message: String) -> Problem {
        Problem {
            kind: ProblemKind::BadCheckpoint,
            file: self.cp_path.to_path_buf(),
            line: at.line,
            seq: Some(at.cp.head.seq),
            message,
        }
    }

    /// A rotation record hands over to the key it names. Any checkpoints still waiting for
    /// a key are checked against the old key it names.
    fn follow_rotation(
        &mut self,
        detail: &serde_json::Value,
        seq: u64,
        line: u64,
    ) -> Option<Problem> {
        let chain_problem = |message: String| Problem {
            kind: ProblemKind::KeyChain,
            file: self.path.to_path_buf(),
            line,
            seq: Some(seq),
            message,
        };
        let key_field = |f: &str| detail.get(f).and_then(serde_json::Value::as_str);
        let Some(new_key) = key_field("new_key").and_then(public_key_from_hex) else {
            return Some(chain_problem(
                "this key rotation record names no valid new key".into(),
            ));
        };
        let old_key = match detail.get("old_key") {
            Some(serde_json::Value::Null) | None => None,
            Some(_) => match key_field("old_key").and_then(public_key_from_hex) {
                Some(k) => Some(k),
                None => {
                    return Some(chain_problem(
                        "this key rotation record names an invalid old key".into(),
                    ))
                }
            },
        };
        let mut unchecked = 0;
        match (self.key, old_key) {
            (Some(in_use), Some(old)) if in_use != old => {
                return Some(chain_problem(format!(
                    "this record replaces key {}, but key {} signed the checkpoints before it",
                    key_id(&old),
                    key_id(&in_use)
                )))
            }
            (None, Some(old)) => {
                for index in std::mem::take(&mut self.pending) {
                    let at = &self.checkpoints[index];
                    if let Err(reason) = at.cp.check_signature(&old) {
                        return Some(self.cp_problem(at, reason));
                    }
                }
            }
            (None, None) => unchecked = std::mem::take(&mut self.pending).len() as u64,
            _ => {}
        }
        if !self.pending.is_empty() {
            let at = &self.checkpoints[self.pending[0]];
            let message = format!(
                "signed by key {}, which is neither the configured key nor one a key rotation names",
                at.cp.key_id
            );
            return Some(self.cp_problem(at, message));
        }
        let old = self.key.or(old_key);
        // Signed by the old key: a checkpoint at exactly this record was checked with it.
        let signed_by_old_key = self.next_cp > 0
            && self.checkpoints[self.next_cp - 1].cp.head.seq == seq
            && old.is_some_and(|k| self.checkpoints[self.next_cp - 1].cp.key_id == key_id(&k));
        self.key_changes.push(KeyChange {
            seq,
            line,
            old_key_id: old
                .as_ref()
                .map(key_id)
                .or_else(|| key_field("old_key_id").map(str::to_string)),
            new_key_id: key_id(&new_key),
            signed_by_old_key,
            unchecked_checkpoints: unchecked,
        });
        if let Some(old) = old {
            self.known_keys.push(old);
        }
        self.known_keys.push(new_key);
        self.key = Some(new_key);
        None
    }

    /// Note a record whose time is before the one accepted before it.
    fn check_time(&mut self, head: &RecordHead, line: u64) {
        let Some(prev) = &self.last else { return };
        let parse = |t: &str| humantime::parse_rfc3339_weak(t).ok();
        let (Some(now), Some(before)) = (parse(&head.time), parse(&prev.time)) else {
            return;
        };
        if now >= before {
            return;
        }
        self.times_total += 1;
        if self.times.len() < MAX_TIME_REGRESSIONS {
            self.times.push(TimeRegression {
                seq: head.seq,
                line,
                time: head.time.clone(),
                previous_seq: prev.seq,
                previous_time: prev.time.clone(),
            });
        }
    }

    /// After the walk: checkpoints it never reached (past the log's end) must still be
    /// signed, checkpoints still waiting for a key are a problem, and the last checkpoint
    /// must be signed by the configured key.
    fn check_rest(&mut self) -> Option<Problem> {
        for index in self.next_cp..self.checkpoints.len() {
            if let Some(p) = self.check_signature(index) {
                return Some(p);
            }
        }
        if let Some(&index) = self.pending.first() {
            let at = &self.checkpoints[index];
            let message = format!(
                "signed by key {}, but the configured key is {} and no key rotation record names key {}",
                at.cp.key_id,
                key_id(self.anchor),
                at.cp.key_id
            );
            return Some(self.cp_problem(at, message));
        }
        let last = self.checkpoints.last()?;
        if last.cp.key_id != key_id(self.anchor) {
            return Some(Problem {
                kind: ProblemKind::KeyChain,
                file: self.cp_path.to_path_buf(),
                line: last.line,
                seq: Some(last.cp.head.seq),
                message: format!(
                    "the last checkpoint is signed by key {}, but the configured key is {}: a rotation to it was not completed, or this is not this log's key",
                    last.cp.key_id,
                    key_id(self.anchor)
                ),
            });
        }
        None
    }

    /// The log must reach the high-water mark, and hold the checkpoint it recorded.
    fn check_mark(&self, mark: &crate::HighWaterMark, mark_path: &Path) -> Option<Problem> {
        let signed = self
            .known_keys
            .iter()
            .find(|k| key_id(k) == mark.key_id)
            .map(|k| mark.check_signature(k));
        let problem = |file: &Path, seq: Option<u64>, message: String| {
            Some(Problem {
                kind: ProblemKind::BelowMark,
                file: file.to_path_buf(),
                line: 0,
                seq,
                message,
            })
        };
        match signed {
            Some(Ok(())) => {}
            Some(Err(reason)) => {
                return problem(
                    mark_path,
                    None,
                    format!("the high-water mark is not valid: {reason}"),
                )
            }
            None => {
                return problem(
                    mark_path,
                    None,
                    format!(
                        "the high-water mark is signed by key {}, which signed nothing in this log",
                        mark.key_id
                    ),
                )
            }
        }
        let last_seq = self.last.as_ref().map(|l| l.seq);
        if last_seq.is_none_or(|s| s < mark.seq) {
            let end = match last_seq {
                Some(s) => format!("the log ends at seq {s}"),
                None => "the log is empty".into(),
            };
            return problem(
                self.path,
                Some(mark.seq),
                format!(
                    "{end} but a checkpoint at seq {} was made; records were removed",
                    mark.seq
                ),
            );
        }
        let at_mark = self.checkpoints.iter().find(|c| c.cp.head.seq == mark.seq);
        match at_mark {
            Some(c)
                if c.cp.head.record_hash == mark.record_hash
                    && c.cp.line_hash == mark.checkpoint_hash =>
            {
                None
            }
            Some(c) => problem(
                self.cp_path,
                Some(mark.seq),
                format!(
                    "the checkpoint at line {} (seq {}) is not the one the high-water mark recorded; checkpoints were rewritten",
                    c.line, mark.seq
                ),
            ),
            None => problem(
                self.cp_path,
                Some(mark.seq),
                format!(
                    "no checkpoint covers seq {}, but one was made; checkpoints were removed",
                    mark.seq
                ),
            ),
        }
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
