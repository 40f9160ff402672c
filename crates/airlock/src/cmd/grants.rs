//! `airlock grants list|revoke`: the standing grants that let actions through without
//! asking, made by `airlock approvals approve --for … [--scope …]`.
//!
//! A grant the operator cannot see is one nobody takes back, so `list` shows every grant
//! in force (its scope, what it matches, the session, when it was made and ends, and how
//! often it was used) and `revoke` ends one, or all with `--all`. Every revocation leaves
//! its own `grant-revoked` audit record naming the operator and what the grant allowed.
//!
//! The grant's fields come from the store, which an approved payload shaped in part:
//! everything printed is escaped for the terminal.

use clap::Subcommand;
use serde_json::json;

use airlock_audit::{AuditEvent, AuditLog};
use airlock_core::terminal_text::escape_line;
use airlock_store::{GrantAdmin, GrantScope, GrantTarget, StoreError, Timestamp};

use crate::home::Home;
use crate::service::approvals::{open_store, operator_detail, OPERATOR};
use crate::service::decider::Decider;
pub use crate::service::grants::{append_revocation, grant_json, revoke_all_recorded};
use crate::{config, runtime};

/// `airlock grants …`
#[derive(Debug, Subcommand)]
pub enum GrantsCommand {
    /// Grants in force: id, scope, what it matches, session, created, expiry, uses.
    List {
        /// One JSON object per line instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a grant by id, or every grant in force with `--all`.
    #[command(group(clap::ArgGroup::new("which").required(true).args(["id", "all"])))]
    Revoke {
        /// The grant to revoke (as `list` shows it).
        id: Option<String>,
        /// Revoke every grant in force, of every session and every rule.
        #[arg(long)]
        all: bool,
    },
}

pub fn run(cmd: GrantsCommand) -> anyhow::Result<i32> {
    let home = Home::from_env()?;
    match cmd {
        GrantsCommand::List { json } => list(&home, json),
        GrantsCommand::Revoke { id: Some(id), .. } => revoke_one(&home, &id),
        GrantsCommand::Revoke { id: None, .. } => revoke_all(&home),
    }
}

fn list(home: &Home, json: bool) -> anyhow::Result<i32> {
    let store = open_store(home)?;
    let now = Timestamp::now();
    let listing = store
        .active_grants(now)
        .map_err(|e| anyhow::anyhow!("cannot list the grants: {e}"))?;
    for bad in &listing.corrupt {
        eprintln!("warning: {bad}\nhelp: `airlock grants revoke <id>` revokes it all the same");
    }
    if json {
        for g in &listing.items {
            crate::out!("{}", grant_json(g));
        }
        return Ok(0);
    }
    if listing.items.is_empty() {
        crate::out!("no grants are in force");
        return Ok(0);
    }
    crate::out!(
        "{:<28} {:<8} {:<28} {:>7} {:>8} {:>5}  MATCHES",
        "ID",
        "SCOPE",
        "SESSION",
        "CREATED",
        "EXPIRES",
        "USES"
    );
    for g in &listing.items {
        let (scope, session) = scope_columns(&g.scope);
        crate::out!(
            "{:<28} {:<8} {:<28} {:>7} {:>8} {:>5}  {}",
            escape_line(&g.id),
            scope,
            escape_line(session),
            format!(
                "{} ago",
                human_ms(now.as_unix_ms() - g.created_at.as_unix_ms())
            ),
            human_ms(g.expires_at.as_unix_ms() - now.as_unix_ms()),
            g.uses,
            target_summary(&g.target)
        );
    }
    Ok(0)
}

fn revoke_one(home: &Home, id: &str) -> anyhow::Result<i32> {
    airlock_store::validate_id("grant", id).map_err(|e| anyhow::anyhow!("{e}"))?;
    let cfg = config::load(&home.config_file())?;
    let store = open_store(home)?;
    // The audit log must be writable before anything is revoked.
    let mut log = runtime::open_audit(home, &cfg)?;
    let now = Timestamp::now();
    let shown = escape_line(id);
    let revoked = match store.revoke_grant(id, now) {
        Ok(Some(g)) => g,
        Ok(None) => {
            crate::out!("grant {shown} was already revoked");
            return Ok(0);
        }
        Err(StoreError::NotFound { .. }) => anyhow::bail!(
            "no grant `{shown}`\nhelp: `airlock grants list` shows the grants in force"
        ),
        Err(StoreError::CorruptRow(c)) => {
            // Revoked all the same; record it with what can be said about it.
            append_corrupt_revocation(&mut log, id, &c.to_string())?;
            log.close().map_err(|e| anyhow::anyhow!("{e}"))?;
            eprintln!("warning: {c}");
            crate::out!("revoked grant {shown} (its stored row is malformed)");
            return Ok(0);
        }
        Err(e) => anyhow::bail!("cannot revoke grant `{shown}`: {e}"),
    };
    append_revocation(&mut log, &revoked, "grants revoke", &Decider::cli())?;
    log.close().map_err(|e| anyhow::anyhow!("{e}"))?;
    crate::out!("revoked grant {shown}: {}", target_summary(&revoked.target));
    Ok(0)
}

fn revoke_all(home: &Home) -> anyhow::Result<i32> {
    let cfg = config::load(&home.config_file())?;
    let store = open_store(home)?;
    let mut log = runtime::open_audit(home, &cfg)?;
    let revoked = revoke_all_recorded(&store, &mut log, "grants revoke --all", &Decider::cli())?;
    log.close().map_err(|e| anyhow::anyhow!("{e}"))?;
    crate::out!("{} grant(s) revoked", revoked);
    Ok(0)
}

fn append_corrupt_revocation(log: &mut AuditLog, id: &str, problem: &str) -> anyhow::Result<()> {
    let ev = AuditEvent::new("grant-revoked", "-", OPERATOR).with_detail(json!({
        "grant": {"id": id, "malformed": problem},
        "decided_by": operator_detail(),
        "command": "grants revoke",
    }));
    log.append(ev).map_err(|e| {
        anyhow::anyhow!(
            "grant `{}` was revoked, but its audit record failed: {e}",
            escape_line(id)
        )
    })?;
    Ok(())
}

fn scope_columns(scope: &GrantScope) -> (&'static str, &str) {
    match scope {
        GrantScope::Session { session_id } => ("session", session_id),
        GrantScope::Rule => ("rule", "(every session)"),
    }
}

/// What a grant lets through, on one line: the action kind and whether it is the exact
/// approved payload or a pattern (the pattern key is a hash; `list --json` has it whole).
fn target_summary(t: &GrantTarget) -> String {
    match t {
        GrantTarget::Payload {
            action_kind,
            action_hash,
        } => format!(
            "{} exactly {}",
            escape_line(action_kind),
            escape_line(short(action_hash))
        ),
        GrantTarget::Pattern {
            action_kind,
            pattern,
        } => format!(
            "{} matching pattern {}",
            escape_line(action_kind),
            escape_line(short(pattern))
        ),
    }
}

/// The first characters of a hash: enough to tell grants apart on screen.
fn short(hash: &str) -> &str {
    let end = hash
        .char_indices()
        .nth(23)
        .map(|(i, _)| i)
        .unwrap_or(hash.len());
    &hash[..end]
}

/// `45s`, `12m`, `3h`, `2d`; a negative span shows as `0s`.
fn human_ms(ms: i64) -> String {
    let s = u64::try_from(ms).unwrap_or(0) / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m", s / 60),
        3600..=86_399 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}
