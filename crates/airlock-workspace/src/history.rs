//! The checkpoints of a workspace: listing, showing and diffing them, undo and restore
//! (each itself a checkpoint), and the retention limit.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write;
use std::time::SystemTime;

use serde::Serialize;

use crate::apply;
use crate::journal::{CheckpointId, CommitMeta, Op, Record, RecordKind, Status};
use crate::node::{self, Node};
use crate::{beneath, RelPath, Workspace, WorkspaceError};

/// One checkpoint, for `airlock checkpoints list`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckpointInfo {
    /// Its number.
    pub id: CheckpointId,
    /// When it was made.
    pub time: SystemTime,
    /// The session it came from.
    pub session: String,
    /// Who made it.
    pub principal: String,
    /// Its note.
    pub note: String,
    /// `None` for a commit; for a restore (or undo), the checkpoint restored to before.
    pub restore_of: Option<CheckpointId>,
    /// Whether it is committed, or was interrupted and rolled back.
    pub status: Status,
    /// Whether a later undo or restore reverted it.
    pub undone: bool,
    /// The paths it changes, escaped.
    pub paths: Vec<String>,
    /// Files (and links) it added.
    pub added: usize,
    /// Files it modified.
    pub modified: usize,
    /// Files it deleted.
    pub deleted: usize,
    /// Bytes of content it wrote.
    pub bytes_written: u64,
}

/// A checkpoint with every change, for `airlock checkpoints show`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckpointDetail {
    /// The summary.
    pub info: CheckpointInfo,
    /// Each path before and after.
    pub changes: Vec<Op>,
}

/// What an undo or restore did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RestoreReport {
    /// The checkpoint the restore itself made (`None` when nothing needed to change).
    pub checkpoint: Option<CheckpointId>,
    /// The checkpoint whose prior state was restored.
    pub restored_to_before: CheckpointId,
    /// The commits reverted.
    pub reverted: Vec<CheckpointId>,
    /// The paths put back, escaped.
    pub paths: Vec<String>,
    /// Paths changed outside Airlock that `force` overwrote, escaped.
    pub forced: Vec<String>,
}

fn info(r: &Record, undone: bool) -> CheckpointInfo {
    let (mut added, mut modified, mut deleted, mut bytes) = (0, 0, 0, 0);
    for op in &r.ops {
        let file_like = !(op.before.as_ref().is_none_or(Node::is_dir)
            && op.after.as_ref().is_none_or(Node::is_dir));
        match (&op.before, &op.after) {
            (None, Some(_)) if file_like => added += 1,
            (Some(_), None) if file_like => deleted += 1,
            (Some(b), Some(a)) if file_like && !b.same_content(a) => modified += 1,
            _ => {}
        }
        if let (Some(Node::File { size, .. }), false) =
            (&op.after, same_content(&op.before, &op.after))
        {
            bytes += size;
        }
    }
    CheckpointInfo {
        id: r.id,
        time: r.time(),
        session: r.meta.session.clone(),
        principal: r.meta.principal.clone(),
        note: r.meta.note.clone(),
        restore_of: match &r.kind {
            RecordKind::Restore { target, .. } => Some(*target),
            RecordKind::Commit { .. } => None,
        },
        status: r.status,
        undone,
        paths: r.ops.iter().map(|o| o.path.display()).collect(),
        added,
        modified,
        deleted,
        bytes_written: bytes,
    }
}

fn same_content(a: &Option<Node>, b: &Option<Node>) -> bool {
    apply::same(a, b)
}

fn reverted_ids(records: &[Record]) -> HashSet<CheckpointId> {
    records
        .iter()
        .filter(|r| r.status == Status::Committed)
        .flat_map(|r| match &r.kind {
            RecordKind::Restore { reverted, .. } => reverted.clone(),
            RecordKind::Commit { .. } => Vec::new(),
        })
        .collect()
}

impl Workspace {
    /// The checkpoints kept, oldest first (interrupted and rolled-back ones included,
    /// marked by their status).
    pub fn checkpoints(&self) -> Result<Vec<CheckpointInfo>, WorkspaceError> {
        let (records, _) = self.journal.load()?;
        let reverted = reverted_ids(&records);
        Ok(records
            .iter()
            .map(|r| info(r, reverted.contains(&r.id)))
            .collect())
    }

    fn record(&self, id: CheckpointId) -> Result<Record, WorkspaceError> {
        let (records, _) = self.journal.load()?;
        let first = records.first().map(|r| r.id);
        records
            .into_iter()
            .find(|r| r.id == id)
            .ok_or(WorkspaceError::NoCheckpoint {
                id: id.to_string(),
                pruned: first.is_some_and(|f| id < f),
            })
    }

    /// One checkpoint with every change.
    pub fn show(&self, id: CheckpointId) -> Result<CheckpointDetail, WorkspaceError> {
        let (records, _) = self.journal.load()?;
        let reverted = reverted_ids(&records);
        let r = self.record(id)?;
        Ok(CheckpointDetail {
            info: info(&r, reverted.contains(&id)),
            changes: r.ops,
        })
    }

    /// What a checkpoint changed, as text: each path, and unified diffs (escaped) of text
    /// files from the stored contents.
    pub fn diff(&self, id: CheckpointId) -> Result<String, WorkspaceError> {
        let r = self.record(id)?;
        let mut out = String::new();
        let mut lines_left = 4_000usize;
        for op in &r.ops {
            let tag = match (&op.before, &op.after) {
                (None, _) => "A",
                (_, None) => "D",
                (Some(b), Some(a)) if b.same_content(a) => "P",
                _ => "M",
            };
            let _ = writeln!(
                out,
                "{tag} {} ({} => {})",
                op.path.display(),
                op.before.as_ref().map_or("nothing".into(), Node::describe),
                op.after.as_ref().map_or("nothing".into(), Node::describe)
            );
            let text = |n: &Option<Node>| -> Option<String> {
                match n {
                    None => Some(String::new()),
                    Some(Node::File { sha256, size, .. }) if *size <= 1024 * 1024 => {
                        let bytes = self.objects.get(sha256).ok()?;
                        crate::diff::is_text(&bytes)
                            .then(|| String::from_utf8(bytes).unwrap_or_default())
                    }
                    _ => None,
                }
            };
            let is_file = |n: &Option<Node>| matches!(n, Some(Node::File { .. }));
            if (is_file(&op.before) || is_file(&op.after))
                && !same_content(&op.before, &op.after)
                && lines_left > 0
            {
                if let (Some(old), Some(new)) = (text(&op.before), text(&op.after)) {
                    let d = crate::diff::unified(&old, &new, lines_left.min(400));
                    lines_left -= d.lines.len();
                    for l in &d.lines {
                        let _ = writeln!(out, "    {l}");
                    }
                    if d.cut_lines > 0 {
                        let _ = writeln!(out, "    … {} more diff lines not shown", d.cut_lines);
                    }
                }
            }
        }
        Ok(out)
    }

    /// Restore the workspace to before the last `n` live commits (commits not already
    /// reverted; undos and restores are not counted), across sessions. Refuses to
    /// overwrite files changed outside Airlock since unless `force`. The undo is itself a
    /// checkpoint: [`Workspace::restore`] of its id takes it back.
    pub fn undo(
        &self,
        n: usize,
        force: bool,
        meta: CommitMeta,
    ) -> Result<RestoreReport, WorkspaceError> {
        let (records, _) = self.journal.load()?;
        let reverted = reverted_ids(&records);
        let live: Vec<CheckpointId> = records
            .iter()
            .filter(|r| {
                r.status == Status::Committed
                    && matches!(r.kind, RecordKind::Commit { .. })
                    && !reverted.contains(&r.id)
            })
            .map(|r| r.id)
            .collect();
        if n == 0 || n > live.len() {
            return Err(WorkspaceError::NothingToUndo {
                asked: n,
                available: live.len(),
            });
        }
        self.restore(live[live.len() - n], force, meta)
    }

    /// Restore the workspace to how it was before checkpoint `id`, reverting it and every
    /// checkpoint after it. Refuses, naming them, to overwrite files changed outside
    /// Airlock since (their content is not what the last checkpoint left) unless `force`.
    pub fn restore(
        &self,
        id: CheckpointId,
        force: bool,
        meta: CommitMeta,
    ) -> Result<RestoreReport, WorkspaceError> {
        let _lock = self.lock()?;
        let (records, _) = self.journal.load()?;
        let committed: Vec<&Record> = records
            .iter()
            .filter(|r| r.status == Status::Committed)
            .collect();
        let Some(pos) = committed.iter().position(|r| r.id == id) else {
            return Err(WorkspaceError::NoCheckpoint {
                id: id.to_string(),
                pruned: records.first().is_some_and(|f| id < f.id),
            });
        };
        let span = &committed[pos..];
        // Per path: the state before the first checkpoint that touched it, and the state
        // the last one left.
        let mut plan: BTreeMap<RelPath, (Option<Node>, Option<Node>)> = BTreeMap::new();
        for r in span {
            for op in &r.ops {
                plan.entry(op.path.clone())
                    .and_modify(|e| e.1 = op.after.clone())
                    .or_insert((op.before.clone(), op.after.clone()));
            }
        }
        let mut outside = Vec::new();
        let mut ops = Vec::new();
        let mut current = BTreeMap::new();
        for (path, (target, expected)) in &plan {
            let cur = apply::current(&self.root, path)?;
            if apply::exact(&cur, target) {
                continue;
            }
            if !same_content(&cur, expected) {
                outside.push(path.clone());
            }
            if let Some(Node::Special { .. }) = target {
                return Err(WorkspaceError::Unrestorable {
                    path: path.display(),
                    why: "it was a FIFO, socket or device node, which checkpoints do not hold",
                });
            }
            if let Some(Node::File { sha256, .. }) = target {
                if !self.objects.contains(sha256) {
                    return Err(WorkspaceError::Unrestorable {
                        path: path.display(),
                        why: "its stored content is missing from the checkpoint store",
                    });
                }
            }
            current.insert(path.clone(), cur.clone());
            ops.push(Op {
                path: path.clone(),
                before: cur,
                after: target.clone(),
            });
        }
        // A directory that goes away must hold nothing the plan does not cover.
        for op in &ops {
            if matches!(op.before, Some(Node::Dir { .. }))
                && !matches!(op.after, Some(Node::Dir { .. }))
            {
                let dir = beneath::open_dir(&self.root, Some(&op.path))
                    .map_err(|e| beneath::error("open", &op.path, e))?;
                for name in node::list_dir(&dir).map_err(|e| beneath::error("list", &op.path, e))? {
                    let child = op.path.join(&name)?;
                    if !plan.contains_key(&child) {
                        outside.push(child);
                    }
                }
            }
        }
        outside.sort();
        outside.dedup();
        if !outside.is_empty() && !force {
            return Err(WorkspaceError::ChangedOutside {
                paths: outside.iter().map(RelPath::display).collect(),
            });
        }
        let reverted: Vec<CheckpointId> = span
            .iter()
            .filter(|r| matches!(r.kind, RecordKind::Commit { .. }))
            .map(|r| r.id)
            .collect();
        let paths: Vec<String> = ops.iter().map(|o| o.path.display()).collect();
        if ops.is_empty() {
            return Ok(RestoreReport {
                checkpoint: None,
                restored_to_before: id,
                reverted: Vec::new(),
                paths,
                forced: Vec::new(),
            });
        }
        // Keep what is there now, so the restore can be undone too.
        for op in &ops {
            if let Some(Node::File { sha256, .. }) = &op.before {
                let (dir, name) = beneath::open_parent(&self.root, &op.path)
                    .map_err(|e| beneath::error("open", &op.path, e))?;
                let (f, _) = node::open_file_at(&dir, name)
                    .map_err(|e| beneath::error("open", &op.path, e))?;
                if !self.objects.put(f, sha256)? {
                    return Err(WorkspaceError::ChangedOutside {
                        paths: vec![op.path.display()],
                    });
                }
            }
        }
        let forced: Vec<RelPath> = if force { outside } else { Vec::new() };
        let kind = RecordKind::Restore {
            target: id,
            reverted: reverted.clone(),
            forced: forced.clone(),
        };
        let checkpoint = self.transact(kind, meta, ops, &mut |_| {})?;
        Ok(RestoreReport {
            checkpoint: Some(checkpoint),
            restored_to_before: id,
            reverted,
            paths,
            forced: forced.iter().map(RelPath::display).collect(),
        })
    }

    /// Drop the oldest checkpoints beyond the retention limit, and the stored contents no
    /// kept checkpoint names. The caller holds the lock.
    pub(crate) fn prune(&self) -> Result<(), WorkspaceError> {
        let (records, _) = self.journal.load()?;
        let mut kept = 0usize;
        let mut bytes = 0u64;
        let mut seen: HashSet<String> = HashSet::new();
        let mut drop = Vec::new();
        for r in records.iter().rev() {
            let mut own = 0u64;
            for sha in shas(r) {
                if !seen.contains(&sha) {
                    own += self.objects.size(&sha);
                }
            }
            let over = kept >= self.retention.max_checkpoints
                || (kept > 0 && bytes + own > self.retention.max_bytes);
            if over && r.status != Status::Pending {
                drop.push(r.id);
                continue;
            }
            kept += 1;
            bytes += own;
            seen.extend(shas(r));
        }
        if drop.is_empty() {
            // Still collect contents stored for commits that failed before their entry.
            return self.objects.retain(&seen);
        }
        for id in drop {
            self.journal.remove(id)?;
        }
        self.journal.sync()?;
        self.objects.retain(&seen)
    }
}

fn shas(r: &Record) -> Vec<String> {
    r.ops
        .iter()
        .flat_map(|o| [&o.before, &o.after])
        .filter_map(|n| match n {
            Some(Node::File { sha256, .. }) => Some(sha256.clone()),
            _ => None,
        })
        .collect()
}
