//! Output: one JSON object per probe and a final summary, or a readable table.

use std::io::Write;

use serde::Serialize;

use crate::probe::{Probe, ProbeResult};

/// The last line of a `--json` run.
#[derive(Debug, Serialize)]
pub struct Summary {
    pub total: usize,
    pub passed: usize,
    pub failed: usize,
    pub failed_probes: Vec<&'static str>,
}

impl Summary {
    /// Tally results.
    pub fn of(results: &[ProbeResult]) -> Summary {
        let failed_probes: Vec<&'static str> = results
            .iter()
            .filter(|r| !r.pass)
            .map(|r| r.probe)
            .collect();
        Summary {
            total: results.len(),
            passed: results.len() - failed_probes.len(),
            failed: failed_probes.len(),
            failed_probes,
        }
    }
}

/// Write one result, as a JSON line or a table row.
pub fn result_line(out: &mut impl Write, result: &ProbeResult, json: bool) -> std::io::Result<()> {
    if json {
        let line = serde_json::to_string(result).map_err(std::io::Error::other)?;
        writeln!(out, "{line}")?;
    } else {
        let mark = if result.pass { "pass" } else { "FAIL" };
        writeln!(
            out,
            "{mark}  {:<18} {:<26} expected {:<24} got {}",
            result.category, result.probe, result.expected, result.got
        )?;
    }
    out.flush()
}

/// Write the summary, as `{"summary": …}` or a sentence.
pub fn summary_line(out: &mut impl Write, summary: &Summary, json: bool) -> std::io::Result<()> {
    if json {
        let line = serde_json::json!({ "summary": summary });
        writeln!(out, "{line}")?;
    } else {
        writeln!(
            out,
            "\n{} probes: {} passed, {} failed",
            summary.total, summary.passed, summary.failed
        )?;
        if !summary.failed_probes.is_empty() {
            writeln!(out, "failed: {}", summary.failed_probes.join(", "))?;
        }
    }
    out.flush()
}

/// Write the catalogue without running it.
pub fn catalogue(out: &mut impl Write, probes: &[Probe], json: bool) -> std::io::Result<()> {
    for p in probes {
        if json {
            let line = serde_json::json!({
                "probe": p.name,
                "category": p.category.as_str(),
                "expected": p.expect.describe(),
                "what": p.what,
                "host_safe": p.host_safe,
            });
            writeln!(out, "{line}")?;
        } else {
            writeln!(
                out,
                "{:<18} {:<26} {:<24} {}",
                p.category.as_str(),
                p.name,
                p.expect.describe(),
                p.what
            )?;
        }
    }
    if !json {
        writeln!(out, "\n{} probes", probes.len())?;
    }
    out.flush()
}
