//! Every sandboxed run, and every file-tool write, is a transaction on the workspace.
//!
//! The run writes into its own overlay upper layer (`<state>/runs/<session>/upper`, see
//! [`airlock_sandbox::WorkspaceOverlay`]); the workspace itself is only the overlay's
//! lower layer. When the run is over, [`Transaction::settle`] computes the change set
//! ([`airlock_workspace::ChangeSet`]), proposes it to the Gate as `workspace.commit` in
//! the run's session (same taint), and then:
//!
//! - allowed: commits it as a checkpoint ([`airlock_workspace::Workspace::commit`]);
//! - asked: holds it in the approvals queue with the rendered change set as the preview
//!   ([`hold`]), and commits only the approved payload; the workspace is untouched
//!   meanwhile;
//! - denied, unanswered or refused: discards it.
//!
//! Each outcome is an audit record beside the Gate's decision (`workspace-commit`,
//! `workspace-discard`). The caller removes the run's layers afterwards.

mod facts;
pub mod history;
mod hold;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use serde_json::json;

use airlock_audit::{AuditEvent, AuditLog};
use airlock_core::action::WorkspaceCommitAction;
use airlock_core::gate::{Session, Verdict};
use airlock_core::terminal_text::escape_line;
use airlock_core::{Attribution, Authorized, Principal, Via};
use airlock_sandbox::WorkspaceOverlay;
use airlock_workspace::{ChangeSet, ChangeSetOptions, CommitMeta, Workspace};

pub use facts::commit_action;
pub(crate) use hold::append;
pub use hold::HoldSettings;

use crate::config::Config;
use crate::home::Home;
use crate::service::caller::Notices;

/// The directory under the state dir that holds each run's layers.
pub const RUNS_DIR: &str = "runs";

/// How a run's change set ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// The run changed nothing.
    Unchanged,
    /// Committed as this checkpoint.
    Committed { checkpoint: String, files: u64 },
    /// Not committed (denied, unanswered, refused, or it could not be computed); the
    /// workspace is as it was.
    Discarded { why: String },
}

impl Settled {
    /// One line for the operator or the model.
    pub fn note(&self) -> String {
        match self {
            Settled::Unchanged => "the run changed no file".into(),
            Settled::Committed { checkpoint, files } => format!(
                "the run's changes ({files} files) were committed as checkpoint {checkpoint} (`airlock undo` reverts it)"
            ),
            Settled::Discarded { why } => format!(
                "the run's changes were NOT committed; the workspace is unchanged: {}",
                escape_line(why)
            ),
        }
    }
}

/// A fresh overlay for the run `run_id`, its layers owned by the sandbox's uid.
pub fn create_overlay(home: &Home, cfg: &Config, run_id: &str) -> anyhow::Result<WorkspaceOverlay> {
    WorkspaceOverlay::create(
        &home.state.join(RUNS_DIR),
        run_id,
        cfg.sandbox.uid,
        cfg.sandbox.uid,
    )
    .map_err(|e| anyhow::anyhow!("cannot create the run's workspace layer: {e}"))
}

/// What change sets are computed against: the built-in sensitive list plus
/// `[workspace] sensitive_paths`, `[policy] protected_paths` and the per-run limits.
pub fn change_set_options(cfg: &Config, started: Option<SystemTime>) -> ChangeSetOptions {
    let mut opts = ChangeSetOptions::new(&cfg.policy.protected_paths, started);
    opts.sensitive
        .extend(cfg.workspace.sensitive_paths.iter().cloned());
    opts.limits.max_bytes_written = cfg.workspace.max_bytes_written;
    opts.limits.max_files_changed = cfg.workspace.max_files_changed;
    opts.limits.max_files_deleted = cfg.workspace.max_files_deleted;
    opts
}

/// Open `workspace`'s checkpoints, finishing or rolling back a commit a crash interrupted,
/// and tell the caller (`notices`) what recovery did. Every command that opens a workspace
/// comes through here; the caller records the outcome with [`record_recovery`] once its
/// log is open.
pub fn open_workspace(
    home: &Home,
    workspace: &Path,
    notices: &Notices,
) -> anyhow::Result<(Workspace, Option<String>)> {
    let (ws, recovery) = Workspace::open(workspace, &home.state).map_err(|e| {
        anyhow::anyhow!(
            "cannot open the checkpoints of {}: {e}",
            workspace.display()
        )
    })?;
    let note = recovery.map(|r| r.to_string());
    if let Some(text) = &note {
        notices.line(&format!(
            "airlock: workspace {}: {}",
            escape_line(&workspace.display().to_string()),
            escape_line(text)
        ));
    }
    Ok((ws, note))
}

/// Record what [`open_workspace`]'s recovery did (nothing when it did nothing).
pub fn record_recovery(log: &Mutex<AuditLog>, workspace: &Path, note: Option<&str>) {
    if let Some(text) = note {
        append(
            log,
            AuditEvent::by("workspace-recovery", "cli", &system())
                .with_detail(json!({"workspace": workspace, "recovery": text})),
        );
    }
}

/// The host part that commits and discards, acting for the owner.
fn system() -> Attribution {
    Attribution::system("workspace", Principal::Owner, Via::internal())
}

/// Everything settling a change set needs.
pub struct Transaction<'a> {
    pub home: &'a Home,
    pub cfg: &'a Config,
    /// The Gate in force at each decision (a session's reloads its policy).
    pub gate: &'a dyn airlock_agent::agent::GateSource,
    pub log: &'a Mutex<AuditLog>,
    /// How long a held commit waits for an answer.
    pub approval_timeout: Duration,
    /// Set when the caller stopped waiting for the run.
    pub cancelled: Option<&'a AtomicBool>,
    /// Where a held commit and a recovery are told.
    pub notices: &'a Notices,
}

impl Transaction<'_> {
    /// Decide and apply the change set the run left in `upper` against `workspace`.
    /// `started` is when the run started (for conflicts with the owner's edits); `note`
    /// says what made the change (the command, the tool call).
    pub fn settle(
        &self,
        session: &Session,
        workspace: &Path,
        upper: &Path,
        started: Option<SystemTime>,
        note: &str,
    ) -> Settled {
        let settled = self.settle_inner(session, workspace, upper, started, note);
        if let Settled::Discarded { why } = &settled {
            append(
                self.log,
                AuditEvent::by("workspace-discard", &session.id, &system())
                    .with_detail(json!({"workspace": workspace, "why": why, "note": note})),
            );
        }
        settled
    }

    fn settle_inner(
        &self,
        session: &Session,
        workspace: &Path,
        upper: &Path,
        started: Option<SystemTime>,
        note: &str,
    ) -> Settled {
        let discard = |why: String| Settled::Discarded { why };
        let opts = change_set_options(self.cfg, started);
        let cs = match ChangeSet::compute(workspace, upper, &opts) {
            Ok(cs) => cs,
            Err(e) => return discard(format!("the change set could not be computed: {e}")),
        };
        if cs.is_empty() {
            return Settled::Unchanged;
        }
        let action = commit_action(workspace, &cs);
        // Decided (and recorded) with the log locked for the decision alone: a held
        // commit records more while it waits.
        let verdict =
            self.gate
                .current()
                .decide(session, action, &mut *crate::service::exec::lock(self.log));
        let token = match verdict {
            Verdict::Allow(t) => t,
            Verdict::Deny(d) => {
                return discard(format!(
                    "denied by policy ({}): {}",
                    d.policies.join(", "),
                    d.reasons.join("; ")
                ))
            }
            Verdict::Ask(ticket) => {
                let settings = HoldSettings {
                    home: self.home,
                    timeout: self.approval_timeout,
                    limits: self.cfg.approvals,
                    cancelled: self.cancelled,
                    notices: self.notices,
                };
                match hold::hold(
                    &settings,
                    self.gate,
                    self.log,
                    session,
                    ticket,
                    &cs.render(),
                ) {
                    Ok(t) => t,
                    Err(why) => return discard(format!("held and not approved: {why}")),
                }
            }
        };
        self.commit(session, workspace, upper, &cs, &token, note)
    }

    /// Commit the authorized change set as a checkpoint, and record it.
    fn commit(
        &self,
        session: &Session,
        workspace: &Path,
        upper: &Path,
        cs: &ChangeSet,
        token: &Authorized<WorkspaceCommitAction>,
        note: &str,
    ) -> Settled {
        // The change set committed is the one decided: its digest is in the token.
        if cs.digest() != token.action().change_set_sha256 {
            return Settled::Discarded {
                why: "the change set differs from the one decided".into(),
            };
        }
        let principal = session
            .attribution()
            .map(|a| a.principal.to_string())
            .unwrap_or_default();
        let ws = match open_workspace(self.home, workspace, self.notices) {
            Ok((ws, note)) => {
                record_recovery(self.log, workspace, note.as_deref());
                ws
            }
            Err(e) => return Settled::Discarded { why: e.to_string() },
        };
        let meta = CommitMeta {
            session: session.id.clone(),
            principal,
            note: note.to_string(),
        };
        let a = token.action();
        let files = a.files_added + a.files_modified + a.files_deleted;
        match ws.commit(cs, upper, meta) {
            Ok(None) => Settled::Unchanged,
            Ok(Some(id)) => {
                append(
                    self.log,
                    AuditEvent::by("workspace-commit", &session.id, &system())
                        .with_action(
                            serde_json::to_value(token.action().clone()).unwrap_or_default(),
                            token.action_hash().to_string(),
                        )
                        .with_detail(json!({"workspace": workspace, "checkpoint": id.to_string(),
                            "files": files, "note": note})),
                );
                Settled::Committed {
                    checkpoint: id.to_string(),
                    files,
                }
            }
            Err(e) => Settled::Discarded {
                why: format!("the commit failed and was rolled back: {e}"),
            },
        }
    }
}

/// The run's layers, removed when dropped (whatever the run's outcome).
pub struct RunLayers(Option<WorkspaceOverlay>);

impl RunLayers {
    pub fn new(overlay: WorkspaceOverlay) -> RunLayers {
        RunLayers(Some(overlay))
    }

    /// The upper layer the run writes into.
    pub fn upper(&self) -> PathBuf {
        self.0.as_ref().map(|o| o.upper.clone()).unwrap_or_default()
    }
}

impl Drop for RunLayers {
    fn drop(&mut self) {
        if let Some(o) = self.0.take() {
            if let Err(e) = o.remove() {
                eprintln!("airlock: warning: the run's layer could not be removed: {e}");
            }
        }
    }
}
