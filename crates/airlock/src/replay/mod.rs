//! `airlock replay`: run recorded agent traces through the real Gate.
//!
//! Each trace is a fresh session. User text is trusted input; every result and every tool
//! description is an untrusted observation; every call is a `tool.call` the Gate decides.
//! Decisions are printed (JSON lines with `--json`) and scored against the labels.

pub mod metrics;
pub mod trace;

use std::io::{BufRead, Read, Write};

use serde_json::json;

use airlock_core::action::{Action, ToolCallAction};
use airlock_core::gate::{Gate, Session};
use airlock_core::terminal_text::{escape_json_text, escape_line};
use airlock_core::DecisionKind;

use metrics::{baseline_decision, Metrics, ScoredCall, ScoredTrace};
use trace::{parse_trace, Event, Trace};

/// Decisions for every call of every trace, with scores for the Gate and the baselines.
pub struct ReplayReport {
    pub gate: Metrics,
    pub allow_all: Metrics,
    pub rule_of_two: Metrics,
    pub traces: usize,
    pub calls: usize,
    /// Lines that could not be parsed, with the error.
    pub errors: Vec<String>,
}

/// One decided call, as printed.
pub struct CallDecision<'a> {
    pub trace: &'a str,
    pub call: &'a str,
    pub decision: DecisionKind,
    pub reasons: &'a [String],
}

/// Replay one trace through `gate`, calling `emit` for each call's decision.
pub fn replay_trace(
    gate: &Gate,
    t: &Trace,
    emit: &mut dyn FnMut(CallDecision<'_>),
) -> (ScoredTrace, [ScoredTrace; 2]) {
    let mut session = Session::new(t.id.clone(), "owner");
    for tool in &t.tools {
        if !tool.description.is_empty() {
            session.observe_tool_description(
                &format!("tool description {}", tool.name),
                &tool.description,
            );
        }
    }
    let attack = t.kind == "attack";
    let mut scored = ScoredTrace {
        attack,
        calls: Vec::new(),
    };
    let mut allow_all = ScoredTrace {
        attack,
        calls: Vec::new(),
    };
    let mut rule_of_two = ScoredTrace {
        attack,
        calls: Vec::new(),
    };
    let mut seen_result = false;
    // Each call's arguments, for its result: a source the owner named may vouch for
    // the addresses it lists.
    let mut call_args: std::collections::HashMap<&str, &serde_json::Value> =
        std::collections::HashMap::new();
    for e in &t.events {
        match e {
            Event::User { text } => session.observe_trusted(text),
            Event::Result {
                id,
                text,
                untrusted,
            } => {
                if *untrusted {
                    let source = format!("result of call {id}");
                    match call_args.get(id.as_str()) {
                        Some(args) => session.observe_tool_result(&source, args, text),
                        None => session.observe_untrusted(&source, text),
                    }
                } else {
                    session.observe_trusted(text);
                }
                seen_result = true;
            }
            Event::Call {
                id,
                tool,
                args,
                label,
            } => {
                call_args.insert(id.as_str(), args);
                let def = t.tools.iter().find(|d| &d.name == tool);
                let action = Action::ToolCall(ToolCallAction {
                    server: if t.source.is_empty() {
                        "trace".into()
                    } else {
                        t.source.clone()
                    },
                    tool: tool.clone(),
                    arguments: args.clone(),
                    input_schema: def.map(|d| d.input_schema.clone()).unwrap_or_default(),
                    annotations: def.map(|d| d.annotations.clone()).unwrap_or_default(),
                });
                let eval = gate.evaluate(&session, &action);
                emit(CallDecision {
                    trace: &t.id,
                    call: id,
                    decision: eval.decision,
                    reasons: &eval.reasons,
                });
                let read_only = def.is_some_and(|d| d.annotations.read_only_hint);
                let injection = label.as_deref() == Some("injection");
                scored.calls.push(ScoredCall {
                    read_only,
                    injection,
                    decision: eval.decision,
                });
                allow_all.calls.push(ScoredCall {
                    read_only,
                    injection,
                    decision: baseline_decision("allow-all", read_only, seen_result),
                });
                rule_of_two.calls.push(ScoredCall {
                    read_only,
                    injection,
                    decision: baseline_decision("rule-of-two", read_only, seen_result),
                });
            }
        }
    }
    (scored, [allow_all, rule_of_two])
}

/// Consume `input` up to and including the next newline, without keeping it; returns how
/// many bytes were consumed.
fn skip_line(input: &mut dyn BufRead) -> std::io::Result<u64> {
    let mut skipped = 0u64;
    loop {
        let available = input.fill_buf()?;
        if available.is_empty() {
            return Ok(skipped);
        }
        let (used, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (available.len(), false),
        };
        input.consume(used);
        skipped += used as u64;
        if done {
            return Ok(skipped);
        }
    }
}

/// Replay every trace of `input`, writing decisions to `out` (JSON lines if `json`).
/// `progress` is told each line read (for a progress bar).
pub fn replay(
    gate: &Gate,
    input: &mut dyn BufRead,
    out: &mut dyn Write,
    as_json: bool,
    progress: &mut dyn FnMut(u64),
) -> std::io::Result<ReplayReport> {
    let mut scored = Vec::new();
    let mut base_a = Vec::new();
    let mut base_r = Vec::new();
    let mut errors = Vec::new();
    let mut calls = 0usize;
    let mut buf = Vec::new();
    let mut line_no = 0usize;
    loop {
        buf.clear();
        // At most one byte past the longest trace line is held: a file of one endless
        // line costs a bounded buffer, not the host's memory.
        let limit = trace::MAX_TRACE_LINE as u64 + 1;
        let n = (&mut *input).take(limit).read_until(b'\n', &mut buf)?;
        if n == 0 {
            break;
        }
        line_no += 1;
        progress(n as u64);
        if n as u64 == limit && buf.last() != Some(&b'\n') {
            let skipped = skip_line(input)?;
            progress(skipped);
            errors.push(
                trace::TraceError::TooLong {
                    line: line_no,
                    size: (n as u64 + skipped) as usize,
                    limit: trace::MAX_TRACE_LINE,
                }
                .to_string(),
            );
            continue;
        }
        let Ok(text) = std::str::from_utf8(&buf) else {
            errors.push(format!("line {line_no}: not valid UTF-8"));
            continue;
        };
        if text.trim().is_empty() {
            continue;
        }
        let t = match parse_trace(text, line_no) {
            Ok(t) => t,
            Err(e) => {
                errors.push(e.to_string());
                continue;
            }
        };
        let mut write_err = None;
        let (s, [a, r]) = replay_trace(gate, &t, &mut |d| {
            calls += 1;
            let res = if as_json {
                writeln!(
                    out,
                    "{}",
                    escape_json_text(
                        &json!({"trace": d.trace, "call": d.call, "decision": d.decision.as_str(), "reasons": d.reasons})
                            .to_string()
                    )
                )
            } else {
                // Trace ids and reasons come from the trace file: shown, never obeyed.
                writeln!(
                    out,
                    "{:<5} {} #{}  {}",
                    d.decision.as_str(),
                    escape_line(d.trace),
                    escape_line(d.call),
                    escape_line(&d.reasons.join("; "))
                )
            };
            if let Err(e) = res {
                write_err.get_or_insert(e);
            }
        });
        if let Some(e) = write_err {
            return Err(e);
        }
        scored.push(s);
        base_a.push(a);
        base_r.push(r);
    }
    Ok(ReplayReport {
        traces: scored.len(),
        gate: Metrics::score(&scored),
        allow_all: Metrics::score(&base_a),
        rule_of_two: Metrics::score(&base_r),
        calls,
        errors,
    })
}
