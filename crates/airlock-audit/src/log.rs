//! [`AuditLog`]: the one append path. Every append takes the directory lock, chains onto
//! the record that is really last on disk, writes one line and fsyncs it before returning.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use airlock_core::canonical::sha256_hex;
use airlock_core::{DecisionRecord, DecisionSink, RecordReceipt, SinkError};

use crate::checkpoint::{build_checkpoint_line, parse_checkpoint_seq};
use crate::lines::read_tail;
use crate::lock::DirLock;
use crate::mark::{read_mark_bytes, write_mark};
use crate::record::{build_record_line, parse_chain_head, MAX_RECORD_BYTES, ZERO_HASH};
use crate::seen::{SeenLine, SeenMark, SeenTails};
use crate::{AuditError, AuditEvent, CheckpointSigner, Redactor};

/// Name of the record file inside the audit directory.
pub const LOG_FILE: &str = "log.jsonl";
/// Name of the checkpoint file inside the audit directory.
pub const CHECKPOINT_FILE: &str = "checkpoints.jsonl";
/// Name of the lock file inside the audit directory.
pub const LOCK_FILE: &str = "lock";
/// Where bytes of a torn (crash-interrupted, never acknowledged) last line are kept.
pub const TORN_FILE: &str = "torn.bin";

/// Kind of the record that hands signing over from one key to the next. Only
/// [`rotate_key`] writes it; `verify` follows the keys it names.
pub const KEY_ROTATION_KIND: &str = "audit-key-rotated";
/// Kind of the record the new key signs first after a rotation.
pub const KEY_IN_USE_KIND: &str = "audit-key-in-use";

/// What an append returns: where the record sits and its hash.
pub type AppendReceipt = RecordReceipt;

/// How an [`AuditLog`] behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditOptions {
    /// Write a signed checkpoint once this many records were appended since the last one.
    /// `0` turns periodic checkpoints off (one is still written after the first record and
    /// on close).
    pub checkpoint_every: u64,
    /// `sync_data` each record before `append` returns. Turn off only for benchmarks and
    /// throwaway logs: without it, a crash can lose acknowledged records.
    pub fsync: bool,
}

impl Default for AuditOptions {
    fn default() -> Self {
        AuditOptions {
            checkpoint_every: 256,
            fsync: true,
        }
    }
}

/// The audit log in one directory (`<state>/audit/`). Many handles, in many processes,
/// may append to the same directory at once.
///
/// ```
/// use airlock_audit::{AuditEvent, AuditLog, AuditOptions, CheckpointSigner, verify};
/// let config = tempfile::tempdir().unwrap();
/// let state = tempfile::tempdir().unwrap();
/// let signer = CheckpointSigner::load_or_create(&config.path().join("audit.key")).unwrap();
/// let key = signer.verifying_key();
/// let dir = state.path().join("audit");
/// let mut log = AuditLog::open(&dir, signer, AuditOptions::default()).unwrap();
/// let receipt = log.append(AuditEvent::new("execution", "s-1", "owner")).unwrap();
/// assert_eq!(receipt.seq, 0);
/// log.close().unwrap();
/// let report = verify(&dir, &key).unwrap();
/// assert!(report.is_ok() && report.unsigned_tail == 0);
/// ```
#[derive(Debug)]
pub struct AuditLog {
    dir: PathBuf,
    log_path: PathBuf,
    cp_path: PathBuf,
    lock_path: PathBuf,
    mark_path: Option<PathBuf>,
    signer: CheckpointSigner,
    opts: AuditOptions,
    redactor: Option<Redactor>,
    closed: bool,
    /// The directory lock, while [`AuditLog::holding_lock`] holds it across appends.
    held: Option<DirLock>,
    /// Appends through this handle that failed, and the last one's error: a caller that
    /// shares the handle (a proxy beside its command) can tell its user at the end.
    failures: Option<(u64, String)>,
    /// The files' ends as this handle last checked or wrote them (see [`crate::seen`]).
    seen: std::sync::Mutex<SeenTails<(u64, String), LastCheckpoint>>,
}

/// The last checkpoint as the appender needs it.
#[derive(Debug, Clone)]
struct LastCheckpoint {
    seq: u64,
    record_hash: String,
    line_hash: String,
    key_id: String,
}

/// When [`AuditLog::append_locked`] writes a checkpoint after the record.
#[derive(Clone, Copy, PartialEq, Eq)]
enum CheckpointAfter {
    /// When one is due ([`AuditOptions::checkpoint_every`], and always after record #0).
    WhenDue,
    /// Always.
    Always,
    /// Never (a rotation whose old key is lost: nothing may sign in its name).
    Never,
}

/// Which key the log's last checkpoint must be signed by for an append to go ahead.
#[derive(Clone, Copy)]
enum KeyCheck<'a> {
    /// This key id (the appender's own).
    Is(&'a str),
    /// Any (a rotation whose old key is lost).
    Any,
}

impl AuditLog {
    /// Open (creating if needed, mode 0700) the audit directory `dir` and its files,
    /// without a high-water mark: a wipe of the whole directory, or a cut of the log
    /// together with its last checkpoints, then goes unnoticed. Programs that keep a log
    /// for an operator use [`AuditLog::open_marked`].
    ///
    /// `dir` must be in the state directory, never inside anything mounted into a sandbox.
    pub fn open(
        dir: &Path,
        signer: CheckpointSigner,
        opts: AuditOptions,
    ) -> Result<AuditLog, AuditError> {
        AuditLog::open_inner(dir, None, signer, opts)
    }

    /// Open like [`AuditLog::open`], keeping the high-water mark at `mark` (see
    /// [`HighWaterMark`](crate::HighWaterMark)). `mark` must lie outside `dir`, where
    /// whoever can write the audit directory cannot write (the operator's config
    /// directory). Every append refuses to continue a log that fell below the mark, and
    /// every checkpoint moves the mark up.
    pub fn open_marked(
        dir: &Path,
        mark: &Path,
        signer: CheckpointSigner,
        opts: AuditOptions,
    ) -> Result<AuditLog, AuditError> {
        AuditLog::open_inner(dir, Some(mark), signer, opts)
    }

    fn open_inner(
        dir: &Path,
        mark: Option<&Path>,
        signer: CheckpointSigner,
        opts: AuditOptions,
    ) -> Result<AuditLog, AuditError> {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| AuditError::io("create audit directory", dir, e))?;
        let meta = fs::metadata(dir).map_err(|e| AuditError::io("inspect", dir, e))?;
        if !meta.is_dir() {
            return Err(AuditError::io(
                "use as audit directory",
                dir,
                std::io::Error::from(std::io::ErrorKind::NotADirectory),
            ));
        }
        if meta.permissions().mode() & 0o777 != 0o700 {
            fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
                .map_err(|e| AuditError::io("restrict permissions of", dir, e))?;
        }
        if let Some(mark) = mark {
            let mark_dir = mark.parent().and_then(|p| fs::canonicalize(p).ok());
            let audit_dir = fs::canonicalize(dir).ok();
            if mark_dir.is_none()
                || mark_dir
                    .as_ref()
                    .zip(audit_dir.as_ref())
                    .is_some_and(|(m, a)| m.starts_with(a))
            {
                return Err(AuditError::BadMark {
                    path: mark.to_path_buf(),
                    detail: "its directory must exist and lie outside the audit directory".into(),
                });
            }
        }
        let log = AuditLog {
            dir: dir.to_path_buf(),
            log_path: dir.join(LOG_FILE),
            cp_path: dir.join(CHECKPOINT_FILE),
            lock_path: dir.join(LOCK_FILE),
            mark_path: mark.map(Path::to_path_buf),
            signer,
            opts,
            redactor: None,
            closed: false,
            held: None,
            failures: None,
            seen: Default::default(),
        };
        {
            let _lock = DirLock::acquire(&log.lock_path)?;
            let mut sync_dir = false;
            for path in [&log.log_path, &log.cp_path] {
                let file = match OpenOptions::new().append(true).open(path) {
                    Ok(f) => f,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        sync_dir = true;
                        OpenOptions::new()
                            .append(true)
                            .create(true)
                            .mode(0o600)
                            .open(path)
                            .map_err(|e| AuditError::io("create", path, e))?
                    }
                    Err(e) => return Err(AuditError::io("open", path, e)),
                };
                // An empty file may be one whose creator died before syncing the
                // directory below: sync it again until the first record is in.
                sync_dir |= ensure_regular(&file, path)? == 0;
            }
            // Make new directory entries durable, or a crash could lose the files. Once
            // both files hold something, their creator's sync is done (it happens under
            // this lock, before any append), and every open need not pay for another.
            if sync_dir {
                File::open(dir)
                    .and_then(|d| d.sync_all())
                    .map_err(|e| AuditError::io("fsync", dir, e))?;
            }
        }
        Ok(log)
    }

    /// Redact these secrets from every event appended from now on.
    pub fn set_redactor(&mut self, redactor: Redactor) {
        self.redactor = Some(redactor);
    }

    /// The redactor in use, if any: the same secrets the log keeps out of its records,
    /// for callers that must keep them out of other text too (tool results, transcripts).
    pub fn redactor(&self) -> Option<&Redactor> {
        self.redactor.as_ref()
    }

    /// The redactor in use, created empty if there is none, so that several components can
    /// each register the secrets they know without dropping the others'.
    pub fn redactor_mut(&mut self) -> &mut Redactor {
        self.redactor.get_or_insert_with(Redactor::new)
    }

    /// The audit directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Append `ev` as the next record and make it durable.
    ///
    /// `Ok` means the record is on disk (fsynced unless [`AuditOptions::fsync`] is off).
    /// `Err` means it must be treated as not recorded; nothing partial is left behind.
    /// When a checkpoint is due it is written too, and a failure to write it is an `Err`
    /// as well (the record itself then stays in the log).
    pub fn append(&mut self, ev: AuditEvent) -> Result<AppendReceipt, AuditError> {
        if matches!(ev.kind.as_str(), KEY_ROTATION_KIND | KEY_IN_USE_KIND) {
            return Err(AuditError::ReservedKind(ev.kind));
        }
        let ev = match &self.redactor {
            Some(r) => r.redact_event(ev),
            None => ev,
        };
        let appended = self.lock().and_then(|_lock| {
            self.append_locked(
                &ev,
                &self.signer,
                KeyCheck::Is(self.signer.key_id()),
                CheckpointAfter::WhenDue,
            )
        });
        if let Err(e) = &appended {
            let count = self.failures.as_ref().map_or(0, |(n, _)| *n);
            self.failures = Some((count + 1, e.to_string()));
        }
        appended
    }

    /// How many appends through this handle failed, with the last one's error (which
    /// names the file and ends with a `help:` line); `None` when every one succeeded.
    pub fn failed_appends(&self) -> Option<(u64, &str)> {
        self.failures.as_ref().map(|(n, e)| (*n, e.as_str()))
    }

    /// The append itself; the caller holds the directory lock.
    fn append_locked(
        &self,
        ev: &AuditEvent,
        signer: &CheckpointSigner,
        key_check: KeyCheck<'_>,
        checkpoint: CheckpointAfter,
    ) -> Result<AppendReceipt, AuditError> {
        let mut log = open_data_file(&self.log_path)?;
        let mut cps = open_data_file(&self.cp_path)?;
        let (log_len, last) = self.last_record(&log)?;
        let (cp_len, last_cp) = self.last_checkpoint(&cps)?;
        self.check_against_checkpoint(last.as_ref(), last_cp.as_ref())?;
        self.check_against_mark(last.as_ref(), last_cp.as_ref(), signer)?;
        if let (KeyCheck::Is(own), Some(cp)) = (key_check, &last_cp) {
            if cp.key_id != own {
                return Err(AuditError::KeyChanged {
                    path: self.cp_path.clone(),
                    log_key: cp.key_id.clone(),
                    own_key: own.to_string(),
                });
            }
        }

        let (seq, prev) = match &last {
            None => (0, ZERO_HASH.to_string()),
            Some((seq, hash)) => (
                seq.checked_add(1).ok_or_else(|| AuditError::SeqOverflow {
                    path: self.log_path.clone(),
                })?,
                hash.clone(),
            ),
        };
        let (line, hash) = build_record_line(ev, seq, &now_rfc3339(), &prev)?;
        let written = line.as_bytes().to_vec();
        let written_len = log_len + written.len() as u64 + 1;
        self.write_line(&mut log, &self.log_path, log_len, line)?;
        self.seen().log = Some(SeenLine::new(written_len, written, (seq, hash.clone())));

        // The first record is always signed, so that a log with records but no checkpoint
        // can only be one whose writer died between its first record and that checkpoint.
        let every = self.opts.checkpoint_every;
        let due = match checkpoint {
            CheckpointAfter::Always => true,
            CheckpointAfter::Never => false,
            CheckpointAfter::WhenDue => match &last_cp {
                None => true,
                Some(cp) => every > 0 && seq >= cp.seq.saturating_add(every),
            },
        };
        if due {
            self.write_checkpoint(signer, &mut cps, cp_len, last_cp.as_ref(), seq, &hash)?;
        }
        Ok(RecordReceipt {
            seq,
            record_hash: hash,
        })
    }

    /// Run `f` with the log's directory lock held throughout: every other handle's
    /// append (in this process or another) waits until `f` is done, while `f`'s own
    /// appends through this handle go ahead. For a decision made elsewhere (an approval
    /// answered in the store) whose records must come before anything its release lets
    /// another writer record.
    pub fn holding_lock<T>(&mut self, f: impl FnOnce(&mut AuditLog) -> T) -> Result<T, AuditError> {
        if self.held.is_some() {
            return Ok(f(self));
        }
        self.held = Some(DirLock::acquire(&self.lock_path)?);
        // Let go of the lock however `f` ends: a handle left marked as holding it would
        // append without it from then on (callers keep using a handle whose mutex a
        // panic poisoned).
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(self)));
        self.held = None;
        match out {
            Ok(out) => Ok(out),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// The directory lock for one operation, or nothing when [`AuditLog::holding_lock`]
    /// holds it already.
    fn lock(&self) -> Result<Option<DirLock>, AuditError> {
        match self.held {
            Some(_) => Ok(None),
            None => DirLock::acquire(&self.lock_path).map(Some),
        }
    }

    /// Sign a checkpoint covering the last record on disk (unless one already does) and
    /// keep the log open. For a writer that must sign now although others still hold it
    /// (a program stopping with work in flight, which [`AuditLog::close`] cannot take).
    pub fn checkpoint(&mut self) -> Result<(), AuditError> {
        self.finish()
    }

    /// Sign a final checkpoint covering the last record (unless one already does) and close.
    pub fn close(mut self) -> Result<(), AuditError> {
        let result = self.finish();
        self.closed = true;
        result
    }

    fn finish(&mut self) -> Result<(), AuditError> {
        let _lock = self.lock()?;
        let log = open_data_file(&self.log_path)?;
        let mut cps = open_data_file(&self.cp_path)?;
        let (_, last) = self.last_record(&log)?;
        let (cp_len, last_cp) = self.last_checkpoint(&cps)?;
        self.check_against_checkpoint(last.as_ref(), last_cp.as_ref())?;
        self.check_against_mark(last.as_ref(), last_cp.as_ref(), &self.signer)?;
        if let Some(cp) = &last_cp {
            if cp.key_id != self.signer.key_id() {
                return Err(AuditError::KeyChanged {
                    path: self.cp_path.clone(),
                    log_key: cp.key_id.clone(),
                    own_key: self.signer.key_id().to_string(),
                });
            }
        }
        match (&last, &last_cp) {
            (Some((seq, hash)), cp) if cp.as_ref().is_none_or(|c| *seq > c.seq) => {
                self.write_checkpoint(&self.signer, &mut cps, cp_len, last_cp.as_ref(), *seq, hash)
            }
            _ => Ok(()),
        }
    }

    /// Length of the log and the `(seq, hash)` of its last record, after setting aside a
    /// torn last line.
    fn last_record(&self, log: &File) -> Result<(u64, Option<(u64, String)>), AuditError> {
        if let Some((len, head)) = self.seen().log.as_ref().and_then(|s| s.still_in(log)) {
            return Ok((len, Some(head)));
        }
        let (len, line) = self.last_line(log, &self.log_path)?;
        let Some(line) = line else {
            return Ok((len, None));
        };
        let head = parse_chain_head(&line).map_err(|detail| AuditError::CorruptTail {
            path: self.log_path.clone(),
            detail,
        })?;
        self.seen().log = Some(SeenLine::new(len, line, head.clone()));
        Ok((len, Some(head)))
    }

    fn last_checkpoint(&self, cps: &File) -> Result<(u64, Option<LastCheckpoint>), AuditError> {
        let seen = self
            .seen()
            .checkpoints
            .as_ref()
            .and_then(|s| s.still_in(cps));
        if let Some((len, cp)) = seen {
            return Ok((len, Some(cp)));
        }
        let (len, line) = self.last_line(cps, &self.cp_path)?;
        let Some(line) = line else {
            return Ok((len, None));
        };
        let (seq, record_hash, key_id) =
            parse_checkpoint_seq(&line).map_err(|detail| AuditError::CorruptTail {
                path: self.cp_path.clone(),
                detail,
            })?;
        let cp = LastCheckpoint {
            seq,
            record_hash,
            line_hash: sha256_hex(&line),
            key_id,
        };
        self.seen().checkpoints = Some(SeenLine::new(len, line, cp.clone()));
        Ok((len, Some(cp)))
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, SeenTails<(u64, String), LastCheckpoint>> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The file's length and its last complete line. A torn last line (no newline: a
    /// writer died mid-write, so it was never acknowledged) is moved to [`TORN_FILE`].
    fn last_line(&self, file: &File, path: &Path) -> Result<(u64, Option<Vec<u8>>), AuditError> {
        let len = file
            .metadata()
            .map_err(|e| AuditError::io("inspect", path, e))?
            .len();
        let max = 2 * MAX_RECORD_BYTES as u64 + 64 * 1024;
        let mut tail = read_tail(file, len, 1, max).map_err(|e| AuditError::io("read", path, e))?;
        let mut end = len;
        if let Some(start) = tail.fragment_start {
            self.set_aside_torn_tail(file, path, start, len)?;
            end = start;
        }
        let line = tail.lines.pop();
        if line.is_none() && end > 0 {
            return Err(AuditError::CorruptTail {
                path: path.to_path_buf(),
                detail: format!("its last line is longer than {MAX_RECORD_BYTES} bytes"),
            });
        }
        Ok((end, line))
    }

    fn set_aside_torn_tail(
        &self,
        file: &File,
        path: &Path,
        start: u64,
        len: u64,
    ) -> Result<(), AuditError> {
        let torn_path = self.dir.join(TORN_FILE);
        let mut bytes = vec![0u8; (len - start).min(2 * MAX_RECORD_BYTES as u64) as usize];
        std::os::unix::fs::FileExt::read_exact_at(file, &mut bytes, start)
            .map_err(|e| AuditError::io("read", path, e))?;
        let mut torn = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(&torn_path)
            .map_err(|e| AuditError::io("open", &torn_path, e))?;
        let header = format!(
            "\n--- {} bytes from {} at offset {start}\n",
            len - start,
            path.display()
        );
        torn.write_all(header.as_bytes())
            .and_then(|()| torn.write_all(&bytes))
            .and_then(|()| torn.sync_data())
            .map_err(|e| AuditError::io("write", &torn_path, e))?;
        file.set_len(start)
            .and_then(|()| file.sync_data())
            .map_err(|e| AuditError::io("truncate torn record of", path, e))
    }

    /// Refuse to chain onto a log that no longer reaches its last signed checkpoint.
    fn check_against_checkpoint(
        &self,
        last: Option<&(u64, String)>,
        cp: Option<&LastCheckpoint>,
    ) -> Result<(), AuditError> {
        let Some(cp) = cp else { return Ok(()) };
        let detail = match last {
            None => format!(
                "the log is empty, but a checkpoint covers records up to #{}",
                cp.seq
            ),
            Some((seq, _)) if *seq < cp.seq => {
                format!(
                    "the log ends at record #{seq}, but a checkpoint covers up to #{}",
                    cp.seq
                )
            }
            Some((seq, hash)) if *seq == cp.seq && *hash != cp.record_hash => {
                format!("record #{seq} differs from the one the last checkpoint signed")
            }
            _ => return Ok(()),
        };
        Err(AuditError::Tampered {
            path: self.log_path.clone(),
            detail,
        })
    }

    /// Refuse to append to a log that fell below the high-water mark: records or
    /// checkpoints were removed, and the next record would reuse a sequence number.
    fn check_against_mark(
        &self,
        last: Option<&(u64, String)>,
        cp: Option<&LastCheckpoint>,
        signer: &CheckpointSigner,
    ) -> Result<(), AuditError> {
        let Some(mark_path) = &self.mark_path else {
            return Ok(());
        };
        let Some(bytes) = read_mark_bytes(mark_path)? else {
            return Ok(());
        };
        let own = signer.key_id();
        let seen = self
            .seen()
            .mark
            .as_ref()
            // Checked as the full path would check them now: verified under this key, or
            // another key's mark, which an appender does not verify.
            .filter(|m| {
                m.bytes == bytes && (m.verified_by.as_deref() == Some(own) || m.mark.key_id != own)
            })
            .map(|m| m.mark.clone());
        let mark = match seen {
            Some(mark) => mark,
            None => {
                let mark =
                    crate::mark::parse_mark(&bytes).map_err(|detail| AuditError::BadMark {
                        path: mark_path.clone(),
                        detail,
                    })?;
                // A mark by another key is checked by `verify`, which knows the retired
                // keys; an appender only knows its own, and its key check refuses a stale
                // key anyway.
                let verified_by = (mark.key_id == own).then(|| own.to_string());
                if verified_by.is_some() {
                    mark.check_signature(&signer.verifying_key())
                        .map_err(|detail| AuditError::BadMark {
                            path: mark_path.clone(),
                            detail,
                        })?;
                }
                self.seen().mark = Some(SeenMark {
                    bytes,
                    mark: mark.clone(),
                    verified_by,
                });
                mark
            }
        };
        let below = |detail: String| AuditError::BelowMark {
            dir: self.dir.clone(),
            mark: mark_path.clone(),
            detail,
        };
        let log_end = last.map(|(s, _)| *s);
        if log_end.is_none_or(|s| s < mark.seq) {
            return Err(below(format!(
                "{} but a checkpoint at seq {} was made; records were removed",
                log_end.map_or("the log is empty".into(), |s| format!(
                    "the log ends at seq {s}"
                )),
                mark.seq
            )));
        }
        match cp {
            Some(cp) if cp.seq > mark.seq => Ok(()),
            Some(cp) if cp.seq == mark.seq => {
                if cp.record_hash == mark.record_hash && cp.line_hash == mark.checkpoint_hash {
                    Ok(())
                } else {
                    Err(below(format!(
                        "the last checkpoint (seq {}) is not the one the high-water mark recorded; checkpoints were rewritten",
                        cp.seq
                    )))
                }
            }
            _ => Err(below(format!(
                "the checkpoints end {}, but a checkpoint at seq {} was made; checkpoints were removed",
                cp.map_or("before the first one".into(), |c| format!("at seq {}", c.seq)),
                mark.seq
            ))),
        }
    }

    fn write_checkpoint(
        &self,
        signer: &CheckpointSigner,
        cps: &mut File,
        cp_len: u64,
        last_cp: Option<&LastCheckpoint>,
        seq: u64,
        record_hash: &str,
    ) -> Result<(), AuditError> {
        let prev = last_cp.map_or(ZERO_HASH, |c| c.line_hash.as_str());
        let time = now_rfc3339();
        let line = build_checkpoint_line(signer, seq, record_hash, &time, prev)?;
        let line_hash = sha256_hex(line.as_bytes());
        self.write_line(cps, &self.cp_path, cp_len, line)?;
        // Only after the checkpoint is durable: the mark must never claim more than the log.
        if let Some(mark) = &self.mark_path {
            write_mark(mark, signer, seq, record_hash, &line_hash, &time)?;
        }
        Ok(())
    }

    /// Append `line` and a newline in one write, then fsync. On any failure, cut the file
    /// back to `len` so no partial line stays behind.
    fn write_line(
        &self,
        file: &mut File,
        path: &Path,
        len: u64,
        line: String,
    ) -> Result<(), AuditError> {
        let mut bytes = line.into_bytes();
        bytes.push(b'\n');
        let written = file
            .write_all(&bytes)
            .map_err(|e| ("write to", e))
            .and_then(|()| {
                if self.opts.fsync {
                    file.sync_data().map_err(|e| ("fsync", e))
                } else {
                    Ok(())
                }
            });
        if let Err((op, e)) = written {
            let rolled_back = file.set_len(len).and_then(|()| file.sync_data());
            let mut err = AuditError::io(op, path, e);
            if let (Err(rb), AuditError::Io { help, .. }) = (rolled_back, &mut err) {
                help.push_str(&format!(
                    "; removing the partial line also failed ({rb}), so run `airlock audit verify` once the disk is fixed"
                ));
            }
            return Err(err);
        }
        Ok(())
    }
}

/// A key rotation: the key signing checkpoints from now on, and the one it replaces.
#[derive(Debug)]
pub struct KeyRotation {
    /// The key being replaced, if its secret is still there. It signs the record that names
    /// the new key.
    pub old: Option<CheckpointSigner>,
    /// The replaced key's public half, when only that is left (its secret was lost).
    pub old_public: Option<ed25519_dalek::VerifyingKey>,
    /// The new key.
    pub new: CheckpointSigner,
    /// Who rotated (recorded as the records' principal).
    pub principal: String,
}

/// What [`rotate_key`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RotationReceipt {
    /// `seq` of the record naming the new key.
    pub seq: u64,
    /// Whether the old key signed that record (`false` when its secret was lost).
    pub signed_by_old_key: bool,
}

/// Hand signing over to `rotation.new`, leaving a signed trail in the log:
///
/// 1. a record of kind [`KEY_ROTATION_KIND`] naming the old and new public keys, and a
///    checkpoint over it signed by the old key (skipped when the old key is lost, which the
///    record says);
/// 2. a record of kind [`KEY_IN_USE_KIND`] and a checkpoint over it signed by the new key.
///
/// `verify` follows this chain of keys and reports a rotation the old key did not sign.
/// The caller installs the new key file only after this returns.
pub fn rotate_key(
    dir: &Path,
    mark: Option<&Path>,
    opts: AuditOptions,
    rotation: KeyRotation,
) -> Result<RotationReceipt, AuditError> {
    let old_public = rotation
        .old
        .as_ref()
        .map(CheckpointSigner::verifying_key)
        .or(rotation.old_public);
    let mut log = AuditLog::open_inner(dir, mark, rotation.new.clone(), opts)?;
    // No final checkpoint on drop: this handle only writes the two rotation records.
    log.closed = true;
    let _lock = DirLock::acquire(&log.lock_path)?;
    let hex = |k: &ed25519_dalek::VerifyingKey| crate::signer::hex_encode(k.as_bytes());
    let detail = serde_json::json!({
        "old_key": old_public.as_ref().map(hex),
        "old_key_id": old_public.as_ref().map(crate::key_id),
        "old_key_signs": rotation.old.is_some(),
        "new_key": rotation.new.public_key_hex(),
        "new_key_id": rotation.new.key_id(),
    });
    let handover =
        AuditEvent::new(KEY_ROTATION_KIND, "", rotation.principal.clone()).with_detail(detail);
    let receipt = match &rotation.old {
        Some(old) => log.append_locked(
            &handover,
            old,
            KeyCheck::Is(old.key_id()),
            CheckpointAfter::Always,
        )?,
        None => log.append_locked(
            &handover,
            &rotation.new,
            KeyCheck::Any,
            CheckpointAfter::Never,
        )?,
    };
    let in_use = AuditEvent::new(KEY_IN_USE_KIND, "", rotation.principal)
        .with_detail(serde_json::json!({"key_id": rotation.new.key_id()}));
    log.append_locked(
        &in_use,
        &rotation.new,
        KeyCheck::Any,
        CheckpointAfter::Always,
    )?;
    Ok(RotationReceipt {
        seq: receipt.seq,
        signed_by_old_key: rotation.old.is_some(),
    })
}

impl Drop for AuditLog {
    /// Best effort: sign a final checkpoint if `close` was not called.
    fn drop(&mut self) {
        if !self.closed {
            let _ = self.finish();
        }
    }
}

impl DecisionSink for AuditLog {
    fn record(&mut self, record: &DecisionRecord) -> Result<RecordReceipt, SinkError> {
        self.append(AuditEvent::from(record))
            .map_err(|e| SinkError(e.to_string()))
    }
}

/// Open an existing log or checkpoint file for reading and appending. It must exist (it
/// was created by `open`): a missing file means it was deleted, and a new chain must not
/// silently start over it.
fn open_data_file(path: &Path) -> Result<File, AuditError> {
    let file = OpenOptions::new()
        .read(true)
        .append(true)
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => AuditError::Missing {
                path: path.to_path_buf(),
            },
            _ => AuditError::io("open", path, e),
        })?;
    ensure_regular(&file, path)?;
    Ok(file)
}

/// The file's length, if it is a regular file.
fn ensure_regular(file: &File, path: &Path) -> Result<u64, AuditError> {
    let meta = file
        .metadata()
        .map_err(|e| AuditError::io("inspect", path, e))?;
    if meta.is_file() {
        Ok(meta.len())
    } else {
        Err(AuditError::NotAFile {
            path: path.to_path_buf(),
        })
    }
}

pub(crate) fn now_rfc3339() -> String {
    humantime::format_rfc3339_micros(SystemTime::now()).to_string()
}
