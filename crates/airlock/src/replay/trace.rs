//! The replay trace format (`../shared/eval/agentdojo/README.md`): one JSON object per
//! line, each a recorded agent run with its tools and events.

use serde::Deserialize;
use serde_json::Value;

use airlock_core::action::ToolAnnotations;

/// Largest trace line accepted. Traces are recorded runs; a line past this is refused
/// with an error instead of exhausting memory.
pub const MAX_TRACE_LINE: usize = 64 * 1024 * 1024;

#[derive(Debug, Clone, Deserialize)]
pub struct ToolDef {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub input_schema: Value,
    #[serde(default)]
    pub annotations: ToolAnnotations,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Event {
    User {
        text: String,
    },
    Call {
        id: String,
        tool: String,
        #[serde(default)]
        args: Value,
        /// Ground truth for scoring only; the Gate never sees it.
        #[serde(default)]
        label: Option<String>,
    },
    Result {
        id: String,
        #[serde(default)]
        text: String,
        #[serde(default = "yes")]
        untrusted: bool,
    },
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Deserialize)]
pub struct Trace {
    pub id: String,
    #[serde(default)]
    pub source: String,
    /// `benign` or `attack`.
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub tools: Vec<ToolDef>,
    pub events: Vec<Event>,
}

/// Why a trace line was refused.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("line {line}: {size} bytes, over the {limit}-byte limit")]
    TooLong {
        line: usize,
        size: usize,
        limit: usize,
    },
    #[error("line {line}: not a valid trace: {source}\nhelp: each line is one JSON object with \"id\", \"tools\" and \"events\" (see the replay format in docs/replay.md)")]
    Json {
        line: usize,
        source: serde_json::Error,
    },
    #[error("line {line}: trace {id}: call {call} uses tool {tool:?}, which the trace does not declare in \"tools\"")]
    UnknownTool {
        line: usize,
        id: String,
        call: String,
        tool: String,
    },
    #[error("line {line}: trace {id}: call id {call:?} appears twice")]
    DuplicateCall {
        line: usize,
        id: String,
        call: String,
    },
}

/// Parse and check one trace line (1-based `line` for messages).
pub fn parse_trace(text: &str, line: usize) -> Result<Trace, TraceError> {
    if text.len() > MAX_TRACE_LINE {
        return Err(TraceError::TooLong {
            line,
            size: text.len(),
            limit: MAX_TRACE_LINE,
        });
    }
    let trace: Trace =
        serde_json::from_str(text).map_err(|source| TraceError::Json { line, source })?;
    let mut seen = std::collections::HashSet::new();
    for e in &trace.events {
        if let Event::Call { id, tool, .. } = e {
            if !trace.tools.iter().any(|t| &t.name == tool) {
                return Err(TraceError::UnknownTool {
                    line,
                    id: trace.id.clone(),
                    call: id.clone(),
                    tool: tool.clone(),
                });
            }
            if !seen.insert(id.clone()) {
                return Err(TraceError::DuplicateCall {
                    line,
                    id: trace.id.clone(),
                    call: id.clone(),
                });
            }
        }
    }
    Ok(trace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_minimal_trace() {
        let t = parse_trace(
            r#"{"id":"t","kind":"benign","tools":[{"name":"f","annotations":{"readOnlyHint":true}}],
                "events":[{"type":"user","text":"hi"},{"type":"call","id":"1","tool":"f","args":{}},
                          {"type":"result","id":"1","text":"ok"}]}"#,
            1,
        )
        .unwrap();
        assert_eq!(t.events.len(), 3);
        assert!(t.tools[0].annotations.read_only_hint);
    }

    #[test]
    fn errors_name_the_line() {
        let e = parse_trace("{not json", 7).unwrap_err().to_string();
        assert!(e.starts_with("line 7:"), "{e}");
        let e = parse_trace(
            r#"{"id":"t","tools":[],"events":[{"type":"call","id":"1","tool":"x"}]}"#,
            3,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("does not declare"), "{e}");
    }
}
