//! Scoring recorded traces against the Gate (`airlock replay`, `POST /v1/replay`).

use std::io::{BufRead, Write};

use serde::{Deserialize, Serialize};

use airlock_core::gate::Gate;

use crate::replay::metrics::Comparison;

/// Traces to score.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplayRequest {
    /// The trace file (JSON lines), an absolute path. The host reads it itself, with the
    /// same checks as the command (it runs as the same user: see `host::socket`).
    pub traces: std::path::PathBuf,
    #[serde(default)]
    pub profile: Option<String>,
    /// One JSON line per call in `stdout` instead of the text lines.
    #[serde(default)]
    pub json: bool,
}

/// What the command prints: `stdout` on standard output, `stderr` (errors and the score
/// table) on standard error, and its exit status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayOutput {
    pub stdout: String,
    pub stderr: String,
    pub exit: i32,
}

/// Replay `traces` through `gate` (its workspace `/workspace`, as the traces assume),
/// writing the per-call lines to `out`; returns the rest of the output (`stdout` empty).
pub fn replay(
    gate: &Gate,
    profile: &str,
    traces: &mut dyn BufRead,
    out: &mut dyn Write,
    as_json: bool,
    progress: &mut dyn FnMut(u64),
) -> anyhow::Result<ReplayOutput> {
    let report = crate::replay::replay(gate, traces, out, as_json, progress)?;
    let mut err = Vec::new();
    for e in &report.errors {
        writeln!(
            err,
            "error: {}",
            airlock_core::terminal_text::escape_block(e)
        )?;
    }
    writeln!(
        err,
        "replayed {} traces, {} calls, profile {}",
        report.traces, report.calls, profile
    )?;
    let cmp = Comparison {
        columns: vec![
            (profile, &report.gate),
            ("allow-all", &report.allow_all),
            ("rule-of-two", &report.rule_of_two),
        ],
    };
    write!(err, "{cmp}")?;
    Ok(ReplayOutput {
        stdout: String::new(),
        stderr: String::from_utf8(err)?,
        exit: if report.errors.is_empty() { 0 } else { 2 },
    })
}

/// The Gate configuration replays use.
pub fn gate_config() -> airlock_core::facts::GateConfig {
    airlock_core::facts::GateConfig::new("/workspace")
}
