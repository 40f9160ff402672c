//! `airlock approvals list|show|approve|deny`: the operator's side of the approvals queue.
//!
//! The local operator is the authenticated principal here: the CLI runs as the operator,
//! on the operator's config and state, which nothing the agent can write reaches (I4).
//! An approval is bound to the hash of the payload the store holds (and, with `--hash`, to
//! the hash the operator saw in `show`); a grant always expires, within the store's cap.
//! `--for` alone grants the exact payload again in the same session; `--scope session`
//! or `--scope rule` widens it to actions with the same asking rules and target shape
//! (defined in `airlock_agent::agent::grant_pattern`), in that session or in all.
//! Every decision is appended to the audit log with who decided.
//!
//! Everything shown comes from the payload, which the attacker may have shaped: every
//! control character and every bidirectional-override character is escaped before it
//! reaches the terminal.

use std::time::Duration;

use clap::Subcommand;

use airlock_core::terminal_text::escape_line;
use airlock_store::ApprovalPreview;

use crate::home::Home;
use crate::service::approvals::{self as service, human, Scope};

/// Longest preview line in `list`.
const LIST_PREVIEW_CHARS: usize = 72;

/// `airlock approvals …`
#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// Requests waiting for a decision: id, session, age, expiry and a one-line preview.
    List,
    /// One request: the exact payload, its hash, the preview, reasons, policies, expiry.
    Show { id: String },
    /// Approve a pending request; what runs is the held payload, byte for byte.
    Approve {
        id: String,
        /// Also let the same payload through in this session without asking, for this
        /// long (`30m`, `2h`; at most 30 days).
        #[arg(long = "for", value_name = "DURATION")]
        duration: Option<String>,
        /// Widen the grant from the exact payload to matching actions: `session` in this
        /// session, `rule` in every session held by the same rule (needs `--for`; see the
        /// grants section of docs/policy.md for what matches).
        #[arg(long, value_enum, requires = "duration")]
        scope: Option<Scope>,
        /// Refuse unless the held payload has this hash (as printed by `show`).
        #[arg(long, value_name = "sha256:…")]
        hash: Option<String>,
    },
    /// Deny a pending request.
    Deny {
        id: String,
        #[arg(long)]
        reason: Option<String>,
    },
}

pub fn run(cmd: ApprovalsCommand) -> anyhow::Result<i32> {
    let home = Home::from_env()?;
    match cmd {
        ApprovalsCommand::List => list(&home),
        ApprovalsCommand::Show { id } => show(&home, &id),
        ApprovalsCommand::Approve {
            id,
            duration,
            scope,
            hash,
        } => approve(&home, &id, duration.as_deref(), scope, hash.as_deref()),
        ApprovalsCommand::Deny { id, reason } => deny(&home, &id, reason.as_deref()),
    }
}

fn list(home: &Home) -> anyhow::Result<i32> {
    let listing: service::ApprovalsListing = crate::host::client::through_host_or(
        home,
        |host| host.get("/v1/approvals"),
        || service::list(home, &()),
    )?;
    for bad in &listing.corrupt {
        eprintln!("warning: {}", escape_line(bad));
    }
    for r in &listing.orphaned {
        crate::out!(
            "orphaned {}  {}  ({}; it cannot be approved)",
            escape_line(&r.id),
            one_line_preview(&r.preview),
            escape_line(r.note.as_deref().unwrap_or("its waiting process is gone"))
        );
    }
    if listing.pending.is_empty() {
        crate::out!("no approval requests are waiting");
        return Ok(0);
    }
    crate::out!(
        "{:<28} {:<28} {:>6} {:>8}  PREVIEW",
        "ID",
        "SESSION",
        "AGE",
        "EXPIRES"
    );
    let now = listing.now_ms;
    for r in &listing.pending {
        crate::out!(
            "{:<28} {:<28} {:>6} {:>8}  {}",
            escape_line(&r.id),
            escape_line(&r.session_id),
            human(since(r.created_at_ms, now)),
            human(since(now, r.expires_at_ms)),
            one_line_preview(&r.preview)
        );
    }
    Ok(0)
}

fn show(home: &Home, id: &str) -> anyhow::Result<i32> {
    let shown: service::ApprovalShown = crate::host::client::through_host_or(
        home,
        |host| host.post("/v1/approvals/show", &id.to_string()),
        || service::show(home, id),
    )?;
    let (r, now) = (&shown.request, shown.now_ms);
    let status = r.status.as_str();
    crate::out!("approval {}  ({})", escape_line(&r.id), status);
    crate::out!("session:   {}", escape_line(&r.session_id));
    crate::out!("action:    {}", escape_line(&r.action_kind));
    crate::out!("created:   {} ago", human(since(r.created_at_ms, now)));
    if status == "pending" {
        crate::out!("expires:   in {}", human(since(now, r.expires_at_ms)));
    } else if let Some(by) = &r.decided_by {
        crate::out!("decided:   by {}", escape_line(by));
    }
    if let Some(note) = &r.note {
        crate::out!("note:      {}", escape_line(note));
    }
    crate::out!("reasons:");
    for reason in &r.reasons {
        crate::out!("  - {}", escape_line(reason));
    }
    crate::out!("policies:  {}", escape_line(&r.policies.join(", ")));
    crate::out!("preview:");
    for line in preview_lines(&r.preview) {
        crate::out!("  {line}");
    }
    crate::out!("payload (exact, canonical JSON; this is what runs):");
    crate::out!("  {}", escape_line(&r.payload));
    crate::out!("payload hash: {}", escape_line(&r.payload_hash));
    if status == "pending" {
        crate::out!(
            "help: `airlock approvals approve {id} --hash {}` or `airlock approvals deny {id}`",
            escape_line(&r.payload_hash),
            id = escape_line(&r.id)
        );
    }
    Ok(0)
}

fn approve(
    home: &Home,
    id: &str,
    duration: Option<&str>,
    scope: Option<Scope>,
    hash: Option<&str>,
) -> anyhow::Result<i32> {
    let input = service::ApproveInput {
        id: id.to_string(),
        duration: duration.map(str::to_string),
        scope,
        hash: hash.map(str::to_string),
    };
    let done: service::Approved = crate::host::client::through_host_or(
        home,
        |host| host.post("/v1/approvals/approve", &input),
        || service::approve(home, &input),
    )?;
    crate::out!(
        "approved {} ({})",
        escape_line(&done.id),
        escape_line(&done.payload_hash)
    );
    if let Some(g) = &done.grant {
        crate::out!(
            "grant {} lets {} through for {} ({})",
            escape_line(&g.id),
            escape_line(&g.matches),
            escape_line(&g.lasts),
            escape_line(&g.reach)
        );
    }
    Ok(0)
}

fn deny(home: &Home, id: &str, reason: Option<&str>) -> anyhow::Result<i32> {
    let input = service::DenyInput {
        id: id.to_string(),
        reason: reason.map(str::to_string),
    };
    let done: service::Denied = crate::host::client::through_host_or(
        home,
        |host| host.post("/v1/approvals/deny", &input),
        || service::deny(home, &input),
    )?;
    crate::out!("denied {}", escape_line(&done.id));
    Ok(0)
}

/// From `earlier` to `later` (unix ms), none when `later` is not after it.
fn since(earlier_ms: i64, later_ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(later_ms.saturating_sub(earlier_ms)).unwrap_or(0))
}

fn one_line_preview(p: &ApprovalPreview) -> String {
    let escaped = escape_line(&p.headline());
    if escaped.chars().count() > LIST_PREVIEW_CHARS {
        let cut: String = escaped.chars().take(LIST_PREVIEW_CHARS - 1).collect();
        format!("{cut}…")
    } else {
        escaped
    }
}

fn preview_lines(p: &ApprovalPreview) -> Vec<String> {
    match p {
        ApprovalPreview::Command { command, cwd } => vec![
            format!("command: {}", escape_line(command)),
            format!("cwd:     {}", escape_line(cwd)),
        ],
        ApprovalPreview::Http {
            method,
            url,
            body_preview,
            headers,
        } => {
            let mut v = vec![format!("{} {}", escape_line(method), escape_line(url))];
            v.extend(
                headers
                    .iter()
                    .map(|(n, val)| format!("  {}: {}", escape_line(n), escape_line(val))),
            );
            if let Some(body) = body_preview {
                v.push("body:".into());
                v.extend(escape_block(body).into_iter().map(|l| format!("  {l}")));
            }
            v
        }
        ApprovalPreview::FileDiff { path, diff } => {
            let mut v = vec![format!("write {}", escape_line(path))];
            v.extend(escape_block(diff));
            v
        }
        ApprovalPreview::Message {
            channel,
            recipient,
            text,
        } => {
            let mut v = vec![
                format!("channel:   {}", escape_line(channel)),
                format!("recipient: {}", escape_line(recipient)),
                "text:".into(),
            ];
            v.extend(escape_block(text).into_iter().map(|l| format!("  {l}")));
            v
        }
        ApprovalPreview::Other { summary } => escape_block(summary),
    }
}

/// `text` as lines, each escaped with [`escape_line`].
fn escape_block(text: &str) -> Vec<String> {
    text.split('\n').map(escape_line).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_escapes_and_bidi_are_neutralized() {
        let hostile = "ls\x1b[2K\rrm -rf ~\u{202E}gnp.exe\u{7}";
        let shown = escape_line(hostile);
        assert!(!shown
            .chars()
            .any(airlock_core::terminal_text::is_hidden_or_control));
        assert_eq!(shown, "ls\\u{1b}[2K\\rrm -rf ~\\u{202e}gnp.exe\\u{7}");
    }
}
