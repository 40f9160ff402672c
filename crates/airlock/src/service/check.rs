//! Deciding one action in a fresh, untainted session, without running it (`airlock check`,
//! `POST /v1/check`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use airlock_core::action::Action;
use airlock_core::facts::GateConfig;
use airlock_core::gate::{Gate, Session};

use crate::config::Config;

/// What to decide.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckRequest {
    /// The action, as `airlock check --action` takes it.
    pub action: Action,
    /// The workspace the action is judged against (absolute).
    pub workspace: PathBuf,
    /// `--profile`; the config's profile when absent.
    #[serde(default)]
    pub profile: Option<String>,
}

/// The decision, as `airlock check --json` prints it (the keys in this order).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckReport {
    pub decision: String,
    pub reasons: Vec<String>,
    pub policies: Vec<String>,
    pub facts: serde_json::Value,
    pub action_hash: String,
    pub profile: String,
}

/// The Gate's configuration for `workspace`, for every decision this binary makes about
/// a workspace (checks, runs, approvals). Its file tools and sandboxed runs write only
/// through workspace transactions (`staged_writes`).
pub fn gate_config(cfg: &Config, workspace: PathBuf) -> GateConfig {
    let mut gc = GateConfig::new(workspace);
    gc.protected = cfg.policy.protected_paths.clone();
    gc.resolver = Some(std::sync::Arc::new(crate::runtime::sandbox_path_lookup));
    gc.staged_writes = true;
    gc
}

/// Decide `action` with `gate` (already configured for the request's workspace).
pub fn evaluate(gate: &Gate, profile: &str, action: &Action) -> anyhow::Result<CheckReport> {
    action.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
    let session = Session::new("check", "owner");
    let eval = gate.evaluate(&session, action);
    Ok(CheckReport {
        decision: eval.decision.as_str().to_string(),
        reasons: eval.reasons,
        policies: eval.policies,
        facts: eval.facts,
        action_hash: eval.action_hash,
        profile: profile.to_string(),
    })
}
