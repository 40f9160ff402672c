//! What an approver is shown for a held action: the exact payload, in a form a person
//! can check quickly.

use similar::TextDiff;

use airlock_store::{ApprovalPreview, MAX_PREVIEW_BYTES};

use super::tools::PlannedCall;

/// Longest body excerpt shown for an HTTP request.
const BODY_PREVIEW_CHARS: usize = 4096;

/// The preview for `call`.
pub fn preview(call: &PlannedCall) -> ApprovalPreview {
    match call {
        PlannedCall::Shell(a) => ApprovalPreview::Command {
            command: a.command.clone(),
            cwd: a.cwd.clone(),
        },
        PlannedCall::ReadFile(a) => ApprovalPreview::Other {
            summary: format!("read file {}", a.0.path),
        },
        PlannedCall::ListDir(a) => ApprovalPreview::Other {
            summary: format!("list directory {}", a.0.path),
        },
        PlannedCall::Write {
            action,
            content,
            previous,
        } => {
            let old = previous.as_deref().unwrap_or("");
            let diff = TextDiff::from_lines(old, content.as_str())
                .unified_diff()
                .context_radius(3)
                .header(&format!("a/{}", action.path), &format!("b/{}", action.path))
                .to_string();
            ApprovalPreview::FileDiff {
                path: action.path.clone(),
                diff: cap(diff, MAX_PREVIEW_BYTES / 2),
            }
        }
        PlannedCall::Fetch { action, body } => ApprovalPreview::Http {
            method: action.method.clone(),
            url: action.url.clone(),
            body_preview: body.as_ref().map(|b| cap(b.clone(), BODY_PREVIEW_CHARS)),
            headers: Vec::new(),
        },
        PlannedCall::SendMessage(a) => ApprovalPreview::Message {
            channel: a.channel.clone(),
            recipient: if a.destination.is_empty() {
                "owner".into()
            } else {
                a.destination.clone()
            },
            // The file it carries out is part of what is approved: its path, size and
            // the start of its hash, after the text.
            text: match &a.attachment {
                Some(f) => format!(
                    "{}\n[with the workspace file {} ({} bytes, sha256 {})]",
                    cap(a.text.clone(), MAX_PREVIEW_BYTES / 2),
                    f.path,
                    f.bytes,
                    f.sha256.get(..16).unwrap_or(&f.sha256)
                ),
                None => cap(a.text.clone(), MAX_PREVIEW_BYTES / 2),
            },
        },
        // Memory changes the Gate asks about are held in the memory store's review queue,
        // not here; this covers an operator policy that routes them anyway.
        PlannedCall::SpawnAgent(a) => ApprovalPreview::Other {
            summary: cap(
                format!(
                    "start sub-agent `{}` with tools [{}]{}:\n{}",
                    a.name,
                    a.tools.join(", "),
                    a.workspace
                        .as_ref()
                        .map(|w| format!(" in workspace subfolder {w}"))
                        .unwrap_or_default(),
                    a.prompt
                ),
                MAX_PREVIEW_BYTES / 2,
            ),
        },
        // Everything the owner agrees to: when it runs (in words and as dates), what each
        // run is asked, where the result goes, and what each run may spend.
        PlannedCall::ScheduleTask(a) => {
            let mut lines = vec![
                format!("schedule a task: {}", a.description),
                format!(
                    "  schedule:    {} ({})",
                    a.schedule,
                    a.time_zone.as_deref().unwrap_or("the host's time zone")
                ),
            ];
            for (i, r) in a.next_runs.iter().enumerate() {
                lines.push(format!(
                    "  {:<12} {r}",
                    if i == 0 { "next runs:" } else { "" }
                ));
            }
            lines.push(format!(
                "  deliver to:  {}",
                a.deliver_to.as_deref().unwrap_or("the run history")
            ));
            lines.push(format!(
                "  budget:      {} per run",
                a.budget.as_deref().unwrap_or("the per-session budget")
            ));
            lines.push(format!(
                "  per day:     {}; every run also counts against the owner's per-day budget",
                a.budget_per_day
                    .as_deref()
                    .unwrap_or("no limit of the task's own")
            ));
            lines.push(format!("  prompt:      {}", a.prompt));
            ApprovalPreview::Other {
                summary: cap(lines.join("\n"), MAX_PREVIEW_BYTES / 2),
            }
        }
        PlannedCall::Memory(m) => ApprovalPreview::Other {
            summary: cap(
                serde_json::to_string(&m.action()).unwrap_or_default(),
                MAX_PREVIEW_BYTES / 2,
            ),
        },
    }
}

/// Cut `text` to at most `max` bytes on a character boundary, saying how much was left out.
fn cap(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let omitted = text.len() - end;
    text.truncate(end);
    text.push_str(&format!("\n[… {omitted} more bytes not shown]"));
    text
}
