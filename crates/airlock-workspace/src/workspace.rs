//! A workspace's transaction state: opening it (and recovering an interrupted commit),
//! and committing a change set crash-safely.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use rustix::fs::{FlockOperation, Mode, OFlags};
use serde::{Deserialize, Serialize};

use crate::apply::{self, ApplyError};
use crate::journal::{CheckpointId, CommitMeta, Journal, Op, Record, RecordKind, Status, FORMAT};
use crate::node::{self, Node};
use crate::objects::Objects;
use crate::{beneath, ChangeSet, WorkspaceError};

/// How many checkpoints (and how many bytes of stored contents) a workspace keeps; the
/// oldest are pruned first, the newest is always kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Retention {
    /// Most checkpoints kept.
    pub max_checkpoints: usize,
    /// Most bytes of file contents the kept checkpoints may hold.
    pub max_bytes: u64,
}

impl Default for Retention {
    /// 200 checkpoints, 1 GiB.
    fn default() -> Self {
        Retention {
            max_checkpoints: 200,
            max_bytes: 1024 * 1024 * 1024,
        }
    }
}

/// What [`Workspace::open`] did about a commit a crash interrupted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovery {
    /// The commit's journal entry was complete, so its writes were finished.
    Finished {
        /// The checkpoint.
        checkpoint: CheckpointId,
        /// Paths it changes.
        paths: usize,
    },
    /// The commit could not be finished (its journal entry was incomplete, or a path had
    /// changed since), so what it had written was undone: the workspace is as before it.
    RolledBack {
        /// The checkpoint.
        checkpoint: CheckpointId,
        /// Paths it would have changed.
        paths: usize,
        /// Why it was not finished.
        reason: String,
    },
}

impl std::fmt::Display for Recovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Recovery::Finished { checkpoint, paths } => write!(
                f,
                "an interrupted commit (checkpoint {checkpoint}, {paths} paths) was finished: the workspace holds all of it"
            ),
            Recovery::RolledBack { checkpoint, paths, reason } => write!(
                f,
                "an interrupted commit (checkpoint {checkpoint}, {paths} paths) was rolled back: the workspace holds none of it ({reason})"
            ),
        }
    }
}

/// The steps of a commit, reported to [`Workspace::commit_observed`] as they complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitStep {
    /// The workspace's lock is held and the change set checked against the workspace.
    Locked,
    /// The prior contents are stored (fsynced).
    PriorSaved,
    /// The new contents are stored (fsynced).
    NewSaved,
    /// The journal entry is durable; from here a crash is finished by recovery.
    Journaled,
    /// One write (or removal) is done.
    Applied {
        /// Steps done.
        done: usize,
        /// Steps in all.
        total: usize,
    },
    /// Marked committed.
    Committed,
}

/// One workspace's transactions and checkpoints.
#[derive(Debug)]
pub struct Workspace {
    pub(crate) root_path: PathBuf,
    pub(crate) root: OwnedFd,
    pub(crate) state: PathBuf,
    pub(crate) objects: Objects,
    pub(crate) journal: Journal,
    pub(crate) retention: Retention,
}

/// The exclusive lock on a workspace's state, released when dropped (or when the process
/// dies: it is an `flock`).
pub(crate) struct Lock(#[allow(dead_code)] File);

#[derive(Serialize, Deserialize)]
struct Identity {
    path: String,
    dev: u64,
    ino: u64,
}

impl Workspace {
    /// Open the transaction state of `workspace` under `<state_dir>/checkpoints/` (keyed
    /// by the directory's device, inode and canonical path), finishing or rolling back a
    /// commit a crash interrupted. The `Recovery` says which; show it to the operator.
    pub fn open(
        workspace: &Path,
        state_dir: &Path,
    ) -> Result<(Workspace, Option<Recovery>), WorkspaceError> {
        Workspace::open_with(workspace, state_dir, Retention::default())
    }

    /// [`Workspace::open`] with a retention limit.
    pub fn open_with(
        workspace: &Path,
        state_dir: &Path,
        retention: Retention,
    ) -> Result<(Workspace, Option<Recovery>), WorkspaceError> {
        let canonical = workspace
            .canonicalize()
            .map_err(|e| WorkspaceError::io("resolve workspace", workspace, e))?;
        let root = rustix::fs::open(
            &canonical,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| WorkspaceError::io("open workspace", &canonical, e))?;
        let st = rustix::fs::fstat(&root)
            .map_err(|e| WorkspaceError::io("inspect workspace", &canonical, e))?;
        let key = format!(
            "{:x}-{:x}-{}",
            st.st_dev,
            st.st_ino,
            &node::sha256_hex(canonical.as_os_str().as_bytes())[..16]
        );
        let state = state_dir.join("checkpoints").join(key);
        for d in [
            state_dir.join("checkpoints"),
            state.clone(),
            state.join("objects"),
            state.join("log"),
        ] {
            std::fs::create_dir_all(&d).map_err(|e| WorkspaceError::io("create", &d, e))?;
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700));
        }
        let id_file = state.join("workspace.json");
        if !id_file.exists() {
            let id = Identity {
                path: canonical.to_string_lossy().into_owned(),
                dev: st.st_dev,
                ino: st.st_ino,
            };
            let json = serde_json::to_vec_pretty(&id).unwrap_or_default();
            crate::journal::write_durably(&id_file, &json)?;
        }
        let ws = Workspace {
            root_path: canonical,
            root,
            objects: Objects::new(state.join("objects")),
            journal: Journal::new(state.join("log")),
            state,
            retention,
        };
        let recovery = {
            let _lock = ws.lock()?;
            ws.recover()?
        };
        Ok((ws, recovery))
    }

    /// The workspace directory (canonical).
    pub fn root(&self) -> &Path {
        &self.root_path
    }

    /// This workspace's state directory (`<state>/checkpoints/<key>`).
    pub fn state_dir(&self) -> &Path {
        &self.state
    }

    pub(crate) fn lock(&self) -> Result<Lock, WorkspaceError> {
        let p = self.state.join("lock");
        let f = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&p)
            .map_err(|e| WorkspaceError::io("open lock", &p, e))?;
        rustix::fs::flock(&f, FlockOperation::LockExclusive)
            .map_err(|e| WorkspaceError::io("lock", &p, e))?;
        Ok(Lock(f))
    }

    fn recover(&self) -> Result<Option<Recovery>, WorkspaceError> {
        let (records, torn) = self.journal.load()?;
        let mut out = None;
        for id in torn {
            self.journal.remove_torn(id)?;
            if !records.iter().any(|r| r.id == id) {
                // Crashed while the journal entry was written: nothing had been applied.
                out = Some(Recovery::RolledBack {
                    checkpoint: id,
                    paths: 0,
                    reason: "its journal entry was not complete, so nothing of it had been written"
                        .into(),
                });
            }
        }
        for mut r in records.into_iter().filter(|r| r.status == Status::Pending) {
            let tag = r.id.to_string();
            apply::clean_temps(&self.root, &r.ops, &tag);
            match apply::apply(&self.root, &self.objects, &r.ops, &tag, &mut || {}) {
                Ok(()) => {
                    r.status = Status::Committed;
                    self.journal.write(&r)?;
                    out = Some(Recovery::Finished {
                        checkpoint: r.id,
                        paths: r.ops.len(),
                    });
                }
                Err(e) => {
                    let reason = match &e {
                        ApplyError::Diverged(d) => {
                            format!("{} had changed since", d.path.display())
                        }
                        ApplyError::Other(e) => {
                            e.to_string().lines().next().unwrap_or_default().to_string()
                        }
                    };
                    let spared = self.roll_back(&mut r)?;
                    let reason = if spared.is_empty() {
                        reason
                    } else {
                        let names: Vec<String> =
                            spared.iter().map(crate::RelPath::display).collect();
                        format!(
                            "{reason}; left as the owner changed them: {}",
                            names.join(", ")
                        )
                    };
                    out = Some(Recovery::RolledBack {
                        checkpoint: r.id,
                        paths: r.ops.len(),
                        reason,
                    });
                }
            }
        }
        Ok(out)
    }

    /// Undo whatever of `r` was applied and mark it rolled back. A path the owner edited
    /// since is left as the owner left it (and returned).
    fn roll_back(&self, r: &mut Record) -> Result<Vec<crate::RelPath>, WorkspaceError> {
        let reversed: Vec<Op> = r
            .ops
            .iter()
            .map(|op| Op {
                path: op.path.clone(),
                before: op.after.clone(),
                after: op.before.clone(),
            })
            .collect();
        let tag = format!("{}r", r.id);
        apply::clean_temps(&self.root, &reversed, &tag);
        let spared = match apply::apply_sparing(&self.root, &self.objects, &reversed, &tag) {
            Ok(spared) => spared,
            Err(ApplyError::Diverged(d)) => {
                return Err(WorkspaceError::corrupt(
                    &self.journal_path(r.id),
                    format!(
                        "checkpoint {} was interrupted and can be neither finished nor rolled back: {} holds neither version",
                        r.id,
                        d.path.display()
                    ),
                ))
            }
            Err(ApplyError::Other(e)) => return Err(e),
        };
        r.status = Status::RolledBack;
        self.journal.write(r)?;
        Ok(spared)
    }

    pub(crate) fn journal_path(&self, id: CheckpointId) -> PathBuf {
        self.state.join("log").join(format!("{:020}.json", id.0))
    }

    /// Commit `cs`, whose upper layer is `upper`: the Gate has allowed it. `Ok(None)` when
    /// it changes nothing.
    ///
    /// Refuses (naming the files) when the change set has conflicts, when a path no longer
    /// holds what the change set recorded as its `before` (the owner edited it since), or
    /// when the upper layer no longer holds what the change set recorded. Otherwise: the
    /// prior and new contents are stored, the journal entry is made durable, the writes are
    /// done beneath the workspace descriptor, and the entry is marked committed. A crash at
    /// any point leaves, after the next [`Workspace::open`], none of it or all of it.
    pub fn commit(
        &self,
        cs: &ChangeSet,
        upper: &Path,
        meta: CommitMeta,
    ) -> Result<Option<CheckpointId>, WorkspaceError> {
        self.commit_observed(cs, upper, meta, &mut |_| {})
    }

    /// [`Workspace::commit`], calling `observe` after each step (for progress, and for the
    /// tests that crash a commit at every step).
    pub fn commit_observed(
        &self,
        cs: &ChangeSet,
        upper: &Path,
        meta: CommitMeta,
        observe: &mut dyn FnMut(CommitStep),
    ) -> Result<Option<CheckpointId>, WorkspaceError> {
        if cs.is_empty() {
            return Ok(None);
        }
        if !cs.complete {
            return Err(WorkspaceError::Incomplete {
                scanned: cs.scanned,
            });
        }
        if !cs.conflicts.is_empty() {
            return Err(WorkspaceError::Conflict {
                paths: cs.conflicts.iter().map(|c| c.path.display()).collect(),
            });
        }
        let _lock = self.lock()?;
        let mut moved = Vec::new();
        for e in &cs.entries {
            let cur = match apply::current(&self.root, &e.path) {
                // Below a link the commit replaces (a run that turned a link into a
                // directory): nothing is there without following it. Should the link
                // stay, the write refuses to go through it.
                Err(WorkspaceError::ThroughLink { .. }) if e.before.is_none() => None,
                other => other?,
            };
            if !apply::same(&cur, &e.before) {
                moved.push(e.path.display());
            }
        }
        if !moved.is_empty() {
            return Err(WorkspaceError::Conflict { paths: moved });
        }
        observe(CommitStep::Locked);
        for e in &cs.entries {
            if let Some(Node::File { sha256, .. }) = &e.before {
                let (dir, name) = beneath::open_parent(&self.root, &e.path)
                    .map_err(|er| beneath::error("open", &e.path, er))?;
                let (f, _) = node::open_file_at(&dir, name)
                    .map_err(|er| beneath::error("open", &e.path, er))?;
                if !self.objects.put(f, sha256)? {
                    return Err(WorkspaceError::Conflict {
                        paths: vec![e.path.display()],
                    });
                }
            }
        }
        observe(CommitStep::PriorSaved);
        let upper_root = rustix::fs::open(
            upper,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| WorkspaceError::io("open upper layer", upper, e))?;
        for e in &cs.entries {
            if let Some(Node::File { sha256, .. }) = &e.after {
                let fd = beneath::open(
                    &upper_root,
                    e.path.as_path(),
                    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY,
                    Mode::empty(),
                )
                .map_err(|_| WorkspaceError::UpperChanged {
                    path: e.path.display(),
                })?;
                let f = File::from(fd);
                let regular = f.metadata().map(|m| m.is_file()).unwrap_or(false);
                if !regular || !self.objects.put(f, sha256)? {
                    return Err(WorkspaceError::UpperChanged {
                        path: e.path.display(),
                    });
                }
            }
        }
        observe(CommitStep::NewSaved);
        let ops = cs
            .entries
            .iter()
            .map(|e| Op {
                path: e.path.clone(),
                before: e.before.clone(),
                after: e.after.clone(),
            })
            .collect();
        let kind = RecordKind::Commit {
            change_set: cs.digest(),
        };
        self.transact(kind, meta, ops, observe).map(Some)
    }

    /// Journal `ops`, apply them, mark them committed, prune. The caller holds the lock and
    /// has stored every file content the ops name.
    pub(crate) fn transact(
        &self,
        kind: RecordKind,
        meta: CommitMeta,
        ops: Vec<Op>,
        observe: &mut dyn FnMut(CommitStep),
    ) -> Result<CheckpointId, WorkspaceError> {
        let (records, torn) = self.journal.load()?;
        let last = records
            .iter()
            .map(|r| r.id.0)
            .chain(torn.iter().map(|t| t.0))
            .max()
            .unwrap_or(0);
        let id = CheckpointId(last + 1);
        let time_ms = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let mut record = Record {
            format: FORMAT,
            id,
            time_ms,
            meta,
            kind,
            status: Status::Pending,
            ops,
        };
        self.journal.write(&record)?;
        observe(CommitStep::Journaled);
        let total = apply::steps(&record.ops);
        let mut done = 0;
        let tag = id.to_string();
        let result = apply::apply(&self.root, &self.objects, &record.ops, &tag, &mut || {
            done += 1;
            observe(CommitStep::Applied { done, total });
        });
        if let Err(e) = result {
            apply::clean_temps(&self.root, &record.ops, &tag);
            self.roll_back(&mut record)?;
            return Err(match e {
                ApplyError::Diverged(d) => WorkspaceError::Conflict {
                    paths: vec![d.path.display()],
                },
                ApplyError::Other(e) => e,
            });
        }
        record.status = Status::Committed;
        self.journal.write(&record)?;
        observe(CommitStep::Committed);
        self.prune()?;
        Ok(id)
    }
}
