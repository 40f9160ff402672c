//! The checkpoints of one workspace as the operator uses them: list, show, diff, undo and
//! restore. `cmd/checkpoints.rs` parses and prints; this opens the workspace (running its
//! recovery), and records every undo and restore in the audit log.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::json;

use airlock_audit::{AuditEvent, AuditLog};
use airlock_core::Attribution;
use airlock_workspace::{
    CheckpointDetail, CheckpointId, CheckpointInfo, CommitMeta, RestoreReport, Workspace,
};

use super::{append, open_workspace, record_recovery};
use crate::config::Config;
use crate::home::Home;
use crate::runtime;

/// One workspace's checkpoints, opened for the operator.
pub struct Checkpoints {
    ws: Workspace,
    log: Mutex<AuditLog>,
}

/// The workspace an operator command means: `--workspace DIR`, or the current directory.
pub fn workspace_dir(dir: Option<&Path>) -> anyhow::Result<PathBuf> {
    let dir = match dir {
        Some(d) => std::path::absolute(d)?,
        None => std::env::current_dir()?,
    };
    dir.canonicalize().map_err(|e| {
        anyhow::anyhow!(
            "workspace {}: {e}\nhelp: run in the workspace or pass --workspace DIR",
            dir.display()
        )
    })
}

impl Checkpoints {
    /// Open `workspace`'s checkpoints; an interrupted commit is finished or rolled back
    /// first, said on stderr, and recorded.
    pub fn open(home: &Home, cfg: &Config, workspace: &Path) -> anyhow::Result<Checkpoints> {
        let (ws, recovered) =
            open_workspace(home, workspace, &crate::service::caller::Notices::Stderr)?;
        let log = Mutex::new(runtime::open_audit(home, cfg)?);
        record_recovery(&log, workspace, recovered.as_deref());
        Ok(Checkpoints { ws, log })
    }

    /// Every checkpoint, oldest first; only `session`'s when given.
    pub fn list(&self, session: Option<&str>) -> anyhow::Result<Vec<CheckpointInfo>> {
        let all = self.ws.checkpoints().map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(all
            .into_iter()
            .filter(|c| session.is_none_or(|s| c.session == s))
            .collect())
    }

    pub fn show(&self, id: &str) -> anyhow::Result<CheckpointDetail> {
        self.ws
            .show(parse_id(id)?)
            .map_err(|e| anyhow::anyhow!("{e}"))
    }

    pub fn diff(&self, id: &str) -> anyhow::Result<String> {
        self.ws
            .diff(parse_id(id)?)
            .map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// Restore to before the last `n` commits (whichever sessions made them).
    pub fn undo(&self, n: usize, force: bool) -> anyhow::Result<RestoreReport> {
        let meta = owner_meta(format!("undo {n}"));
        let result = self.ws.undo(n, force, meta);
        self.record("workspace-undo", json!({"n": n, "force": force}), &result);
        result.map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// Restore to before checkpoint `id`.
    pub fn restore(&self, id: &str, force: bool) -> anyhow::Result<RestoreReport> {
        let parsed = parse_id(id)?;
        let meta = owner_meta(format!("restore {parsed}"));
        let result = self.ws.restore(parsed, force, meta);
        self.record(
            "workspace-restore",
            json!({"checkpoint": parsed.to_string(), "force": force}),
            &result,
        );
        result.map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// Record an undo or restore, refused or done.
    fn record(
        &self,
        kind: &str,
        mut detail: serde_json::Value,
        result: &Result<RestoreReport, airlock_workspace::WorkspaceError>,
    ) {
        detail["workspace"] = json!(self.ws.root());
        match result {
            Ok(r) => detail["report"] = serde_json::to_value(r).unwrap_or_default(),
            Err(e) => detail["refused"] = json!(e.to_string()),
        }
        append(
            &self.log,
            AuditEvent::by(kind, "cli", &Attribution::owner_cli()).with_detail(detail),
        );
    }

    /// Sign the log's final checkpoint.
    pub fn close(self) -> anyhow::Result<()> {
        self.log
            .into_inner()
            .unwrap_or_else(|p| p.into_inner())
            .close()
            .map_err(|e| anyhow::anyhow!("{e}"))
    }
}

fn owner_meta(note: String) -> CommitMeta {
    CommitMeta {
        session: "cli".into(),
        principal: "owner".into(),
        note,
    }
}

fn parse_id(id: &str) -> anyhow::Result<CheckpointId> {
    id.parse::<CheckpointId>().map_err(|e| {
        anyhow::anyhow!("{e}\nhelp: `airlock checkpoints list` shows the checkpoint ids")
    })
}
