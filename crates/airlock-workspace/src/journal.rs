//! The checkpoint records (`log/<id>.json`): one per commit or restore, written and
//! fsynced as `pending` before the workspace is touched, rewritten as `committed` once
//! every write is durable. A record is replaced only by an fsynced rename, so a reader
//! sees the old or the new one, never a mix.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::objects::sync_dir;
use crate::{Node, RelPath, WorkspaceError};

/// The format version written in every record.
pub(crate) const FORMAT: u32 = 1;

/// A checkpoint's number, unique and increasing within one workspace, never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CheckpointId(pub u64);

impl std::fmt::Display for CheckpointId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::str::FromStr for CheckpointId {
    type Err = WorkspaceError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.trim()
            .parse::<u64>()
            .map(CheckpointId)
            .map_err(|_| WorkspaceError::NoCheckpoint {
                id: airlock_core::terminal_text::escape_line(s),
                pruned: false,
            })
    }
}

/// Who made a commit and why, kept in its checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommitMeta {
    /// The session the change came from.
    pub session: String,
    /// Who committed it (`agent:<session>`, `owner`, …).
    pub principal: String,
    /// Free text: the command, the tool call, "undo 2".
    pub note: String,
}

/// Whether a record's writes are done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Journaled; writes may be under way (only ever seen after a crash).
    Pending,
    /// Every write is durable.
    Committed,
    /// Interrupted and rolled back by recovery; the workspace is as before it.
    RolledBack,
}

/// What a record did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum RecordKind {
    /// A change set committed.
    Commit {
        /// [`ChangeSet::digest`](crate::ChangeSet::digest) of what was decided.
        change_set: String,
    },
    /// A restore to before `target` (an undo is one too).
    Restore {
        /// The checkpoint restored to before.
        target: CheckpointId,
        /// The commits it reverted.
        reverted: Vec<CheckpointId>,
        /// Paths changed outside Airlock that `force` overwrote.
        forced: Vec<RelPath>,
    },
}

/// One path's change, as journaled: enough to redo or undo it from the object store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Op {
    /// The path.
    pub path: RelPath,
    /// Before (file contents are objects).
    pub before: Option<Node>,
    /// After (file contents are objects).
    pub after: Option<Node>,
}

/// A checkpoint record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Record {
    pub format: u32,
    pub id: CheckpointId,
    /// Milliseconds since the Unix epoch.
    pub time_ms: u64,
    pub meta: CommitMeta,
    pub kind: RecordKind,
    pub status: Status,
    pub ops: Vec<Op>,
}

impl Record {
    pub(crate) fn time(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(self.time_ms)
    }
}

/// The `log/` directory.
#[derive(Debug, Clone)]
pub(crate) struct Journal {
    dir: PathBuf,
}

impl Journal {
    pub(crate) fn new(dir: PathBuf) -> Journal {
        Journal { dir }
    }

    fn file(&self, id: CheckpointId) -> PathBuf {
        self.dir.join(format!("{:020}.json", id.0))
    }

    /// Write (or replace) a record durably.
    pub(crate) fn write(&self, r: &Record) -> Result<(), WorkspaceError> {
        let dest = self.file(r.id);
        let tmp = self.dir.join(format!("{:020}.json.tmp", r.id.0));
        let json = serde_json::to_vec_pretty(r)
            .map_err(|e| WorkspaceError::corrupt(&dest, e.to_string()))?;
        write_durably(&tmp, &json)?;
        std::fs::rename(&tmp, &dest).map_err(|e| WorkspaceError::io("rename", &dest, e))?;
        sync_dir(&self.dir)
    }

    /// Every record, oldest first, and the ids of half-written ones (`*.json.tmp`, which
    /// a crash left before the record was in place: nothing of theirs was applied).
    pub(crate) fn load(&self) -> Result<(Vec<Record>, Vec<CheckpointId>), WorkspaceError> {
        let mut records = Vec::new();
        let mut torn = Vec::new();
        let rd =
            std::fs::read_dir(&self.dir).map_err(|e| WorkspaceError::io("list", &self.dir, e))?;
        for ent in rd {
            let ent = ent.map_err(|e| WorkspaceError::io("list", &self.dir, e))?;
            let name = ent.file_name().to_string_lossy().into_owned();
            if let Some(stem) = name.strip_suffix(".json.tmp") {
                if let Ok(n) = stem.parse::<u64>() {
                    torn.push(CheckpointId(n));
                }
                continue;
            }
            let Some(stem) = name.strip_suffix(".json") else {
                continue;
            };
            let path = ent.path();
            let id = stem
                .parse::<u64>()
                .map_err(|_| WorkspaceError::corrupt(&path, "a record's name is not its number"))?;
            let bytes = std::fs::read(&path).map_err(|e| WorkspaceError::io("read", &path, e))?;
            let r: Record = serde_json::from_slice(&bytes).map_err(|e| {
                WorkspaceError::corrupt(&path, format!("the record does not parse: {e}"))
            })?;
            if r.id.0 != id || r.format != FORMAT {
                return Err(WorkspaceError::corrupt(
                    &path,
                    "the record's id or format does not match its file",
                ));
            }
            records.push(r);
        }
        records.sort_by_key(|r| r.id);
        torn.sort();
        Ok((records, torn))
    }

    /// Remove a half-written record.
    pub(crate) fn remove_torn(&self, id: CheckpointId) -> Result<(), WorkspaceError> {
        let tmp = self.dir.join(format!("{:020}.json.tmp", id.0));
        let _ = std::fs::remove_file(&tmp);
        sync_dir(&self.dir)
    }

    /// Remove a record (retention).
    pub(crate) fn remove(&self, id: CheckpointId) -> Result<(), WorkspaceError> {
        let f = self.file(id);
        std::fs::remove_file(&f).map_err(|e| WorkspaceError::io("remove", &f, e))
    }

    /// Sync the directory after removals.
    pub(crate) fn sync(&self) -> Result<(), WorkspaceError> {
        sync_dir(&self.dir)
    }
}

/// Write `bytes` to `path` and fsync it.
pub(crate) fn write_durably(path: &Path, bytes: &[u8]) -> Result<(), WorkspaceError> {
    use std::io::Write;
    let mut f = std::fs::File::create(path).map_err(|e| WorkspaceError::io("create", path, e))?;
    f.write_all(bytes)
        .map_err(|e| WorkspaceError::io("write", path, e))?;
    f.sync_all()
        .map_err(|e| WorkspaceError::io("fsync", path, e))
}
