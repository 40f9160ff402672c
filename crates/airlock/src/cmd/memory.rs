//! `airlock memory`: the operator's view of the agent's memory — list, show, history,
//! review held changes, approve or reject them, roll back a record or everything one
//! session wrote, purge, export, and register `task_state` schemas.
//!
//! Only the operator runs these commands; the agent has no tool that reaches them. Every
//! change they make (approve, reject, rollback, purge, schema) is recorded in the audit
//! log. Memory content was written by the agent and may hold anything, so it is printed
//! with control and invisible characters escaped.

use std::path::{Path, PathBuf};

use clap::Subcommand;
use serde_json::{json, Value};

use airlock_audit::AuditEvent;
use airlock_store::{
    MemoryOperator, MemoryRecord, MemoryRetention, MemoryVersion, Namespace, PendingChange,
    SqliteStore, Tier, Timestamp,
};

use airlock_core::terminal_text::{escape_json_text, escape_line};

use crate::home::Home;
use crate::service::approvals::{open_store, operator_detail, OPERATOR};
use crate::{config, runtime};

/// Characters of a record shown on one line of a listing.
const SUMMARY_CHARS: usize = 80;

#[derive(Debug, Subcommand)]
pub enum MemoryCommand {
    /// List live records: id, namespace, tier, kind, trust and a summary.
    List {
        /// Only pinned records (loaded into every session).
        #[arg(long)]
        pinned: bool,
        /// Only this namespace (`AGENT/USER`, e.g. `airlock/owner`).
        #[arg(long, value_name = "NS")]
        ns: Option<String>,
    },
    /// One record's current version, with its provenance.
    Show { id: String },
    /// Every kept version of a record.
    History { id: String },
    /// Changes waiting for your review, each as a diff against the current record.
    Review,
    /// Apply a held change.
    Approve { change: String },
    /// Drop a held change; nothing is written.
    Reject { change: String },
    /// Restore a record to an earlier version (default: the one before the current), or
    /// undo everything one session wrote (`--session`).
    Rollback {
        /// The record to roll back.
        #[arg(required_unless_present = "session", conflicts_with = "session")]
        id: Option<String>,
        /// The version to restore.
        #[arg(long, value_name = "VERSION", requires = "id")]
        to: Option<i64>,
        /// Undo every write of this session and reject its held changes.
        #[arg(long, value_name = "SESSION")]
        session: Option<String>,
    },
    /// Delete a record and its whole history for good.
    Purge { id: String },
    /// Print every kept version of every record.
    Export {
        /// As JSON (the only format).
        #[arg(long, required = true)]
        json: bool,
    },
    /// JSON Schemas for `task_state` records.
    #[command(subcommand)]
    Schema(SchemaCommand),
}

#[derive(Debug, Subcommand)]
pub enum SchemaCommand {
    /// Register (or replace) schema NAME from a JSON Schema file.
    Add { name: String, file: PathBuf },
}

pub fn run(cmd: MemoryCommand) -> anyhow::Result<i32> {
    let home = Home::from_env()?;
    let retention = crate::config::load(&home.config_file())?.memory.retention;
    let store = open_store(&home)?.with_memory_retention(retention);
    match cmd {
        MemoryCommand::List { pinned, ns } => list(&store, pinned, ns.as_deref()),
        MemoryCommand::Show { id } => show(&store, &id),
        MemoryCommand::History { id } => history(&store, &id),
        MemoryCommand::Review => review(&store),
        MemoryCommand::Approve { change } => approve(&home, &store, &change),
        MemoryCommand::Reject { change } => reject(&home, &store, &change),
        MemoryCommand::Rollback {
            id,
            to,
            session: Some(session),
        } => {
            debug_assert!(id.is_none() && to.is_none());
            rollback_session(&home, &store, &session)
        }
        MemoryCommand::Rollback {
            id: Some(id), to, ..
        } => rollback(&home, &store, &id, to),
        MemoryCommand::Rollback { .. } => {
            anyhow::bail!("say what to roll back\nhelp: airlock memory rollback <id> [--to VERSION], or airlock memory rollback --session <id>")
        }
        MemoryCommand::Purge { id } => purge(&home, &store, &id),
        MemoryCommand::Export { .. } => export(&store),
        MemoryCommand::Schema(SchemaCommand::Add { name, file }) => {
            schema_add(&home, &store, &name, &file)
        }
    }
}

fn store_err(what: &str, e: airlock_store::StoreError) -> anyhow::Error {
    anyhow::anyhow!("{what}: {e}")
}

fn warn_corrupt(corrupt: &[airlock_store::CorruptRow]) {
    for bad in corrupt {
        eprintln!("warning: {}", escape_line(&bad.to_string()));
    }
}

/// One line about a record's content.
fn summary(record: Option<&MemoryRecord>) -> String {
    match record {
        None => "(forgotten)".into(),
        Some(r) => {
            let text: String = r.search_text().chars().take(SUMMARY_CHARS).collect();
            escape_line(&text)
        }
    }
}

/// `in 12d`, `in 3h`, or `expired` (neither recalled nor loaded; `purge` removes it).
fn expiry(retention: &MemoryRetention, v: &MemoryVersion, now: Timestamp) -> String {
    match retention.expires_at(v) {
        None => "-".into(),
        Some(at) if at <= now => "expired".into(),
        Some(at) => {
            let secs = u64::try_from(at.as_unix_ms() - now.as_unix_ms()).unwrap_or(0) / 1000;
            match secs {
                0..=3599 => format!("in {}m", secs / 60),
                3600..=86_399 => format!("in {}h", secs / 3600),
                _ => format!("in {}d", secs / 86_400),
            }
        }
    }
}

fn kind_name(record: Option<&MemoryRecord>) -> &'static str {
    record.map_or("forgotten", |r| r.kind().as_str())
}

fn trust(v: &MemoryVersion) -> &'static str {
    if v.untrusted() {
        "untrusted"
    } else {
        "trusted"
    }
}

/// The record as JSON, through its own declared type.
fn record_json(record: Option<&MemoryRecord>) -> Value {
    let v = match record {
        None => return Value::Null,
        Some(MemoryRecord::Note(r)) => serde_json::to_value(r),
        Some(MemoryRecord::Fact(r)) => serde_json::to_value(r),
        Some(MemoryRecord::Preference(r)) => serde_json::to_value(r),
        Some(MemoryRecord::Contact(r)) => serde_json::to_value(r),
        Some(MemoryRecord::TaskState(r)) => serde_json::to_value(r),
    };
    v.unwrap_or(Value::Null)
}

fn version_json(v: &MemoryVersion) -> Value {
    json!({
        "id": v.record_id,
        "version": v.version,
        "namespace": v.namespace.key(),
        "tier": v.tier.as_str(),
        "kind": kind_name(v.record.as_ref()),
        "record": record_json(v.record.as_ref()),
        "untrusted": v.untrusted(),
        "provenance": {
            "session": v.provenance.session_id,
            "principal": v.provenance.principal,
            "tainted": v.provenance.tainted,
            "tool_call": v.provenance.tool_call_id,
        },
        "written_at_ms": v.written_at.as_unix_ms(),
        "origin": v.origin.as_str(),
        "actor": v.actor,
    })
}

fn list(store: &SqliteStore, pinned: bool, ns: Option<&str>) -> anyhow::Result<i32> {
    let ns = ns
        .map(Namespace::parse)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--ns: {e}"))?;
    let tier = pinned.then_some(Tier::Pinned);
    let listing = store
        .operator_memory_list(ns.as_ref(), tier)
        .map_err(|e| store_err("cannot list memory", e))?;
    warn_corrupt(&listing.corrupt);
    if listing.items.is_empty() {
        crate::out!("no memory records");
        return Ok(0);
    }
    crate::out!(
        "{:<20} {:<22} {:<7} {:<10} {:<9} {:>3} {:<10}  CONTENT",
        "ID",
        "NAMESPACE",
        "TIER",
        "KIND",
        "TRUST",
        "V",
        "EXPIRES"
    );
    let now = Timestamp::now();
    for v in &listing.items {
        crate::out!(
            "{:<20} {:<22} {:<7} {:<10} {:<9} {:>3} {:<10}  {}",
            escape_line(&v.record_id),
            escape_line(&v.namespace.key()),
            v.tier.as_str(),
            kind_name(v.record.as_ref()),
            trust(v),
            v.version,
            expiry(store.memory_retention(), v, now),
            summary(v.record.as_ref())
        );
    }
    Ok(0)
}

fn print_version(v: &MemoryVersion) -> anyhow::Result<()> {
    crate::out!(
        "{} version {} ({})",
        escape_line(&v.record_id),
        v.version,
        v.origin.as_str()
    );
    crate::out!("  namespace: {}", escape_line(&v.namespace.key()));
    crate::out!("  tier:      {}", v.tier.as_str());
    crate::out!("  kind:      {}", kind_name(v.record.as_ref()));
    crate::out!(
        "  written:   {} by session {} ({}), tool call {}{}",
        date(v.written_at),
        escape_line(&v.provenance.session_id),
        escape_line(&v.provenance.principal),
        escape_line(&v.provenance.tool_call_id),
        if v.provenance.tainted {
            ", after untrusted content"
        } else {
            ""
        }
    );
    if let Some(a) = &v.actor {
        crate::out!("  operator:  {}", escape_line(a));
    }
    crate::out!("  trust:     {}", trust(v));
    for line in pretty(v.record.as_ref()) {
        crate::out!("  | {line}");
    }
    Ok(())
}

fn pretty(record: Option<&MemoryRecord>) -> Vec<String> {
    match record {
        None => vec!["(forgotten)".into()],
        Some(_) => serde_json::to_string_pretty(&record_json(record))
            .unwrap_or_default()
            .lines()
            .map(escape_line)
            .collect(),
    }
}

fn date(t: Timestamp) -> String {
    let st = std::time::UNIX_EPOCH
        + std::time::Duration::from_millis(u64::try_from(t.as_unix_ms()).unwrap_or(0));
    humantime::format_rfc3339_seconds(st).to_string()
}

fn show(store: &SqliteStore, id: &str) -> anyhow::Result<i32> {
    let v = store
        .operator_memory_show(id)
        .map_err(|e| store_err("cannot show the record", e))?;
    print_version(&v)?;
    Ok(0)
}

fn history(store: &SqliteStore, id: &str) -> anyhow::Result<i32> {
    let listing = store
        .operator_memory_history(id)
        .map_err(|e| store_err("cannot read the history", e))?;
    warn_corrupt(&listing.corrupt);
    for v in &listing.items {
        print_version(v)?;
    }
    Ok(if listing.corrupt.is_empty() { 0 } else { 1 })
}

fn review(store: &SqliteStore) -> anyhow::Result<i32> {
    let listing = store
        .operator_memory_reviews(false)
        .map_err(|e| store_err("cannot list held changes", e))?;
    warn_corrupt(&listing.corrupt);
    if listing.items.is_empty() {
        crate::out!("no memory changes are waiting for review");
        return Ok(0);
    }
    for c in &listing.items {
        print_change(store, c)?;
        crate::out!("");
    }
    crate::out!("help: airlock memory approve <change> applies one; airlock memory reject <change> drops it");
    Ok(0)
}

fn print_change(store: &SqliteStore, c: &PendingChange) -> anyhow::Result<()> {
    crate::out!(
        "change {}: {} {} record {} in {}",
        c.id,
        if c.record.is_some() {
            "write"
        } else {
            "forget"
        },
        c.tier.as_str(),
        c.record_id,
        c.namespace.key()
    );
    crate::out!(
        "  from session {} ({}), tool call {}, {}{}",
        escape_line(&c.provenance.session_id),
        escape_line(&c.provenance.principal),
        escape_line(&c.provenance.tool_call_id),
        date(c.requested_at),
        if c.provenance.tainted {
            ", after untrusted content"
        } else {
            ""
        }
    );
    for r in &c.reasons {
        crate::out!("  held because: {}", escape_line(r));
    }
    let current = match c.base_version {
        Some(_) => store.operator_memory_show(&c.record_id).ok(),
        None => None,
    };
    let old = current
        .as_ref()
        .map_or_else(Vec::new, |v| pretty(v.record.as_ref()));
    crate::out!(
        "  --- {}",
        current
            .as_ref()
            .map_or("(new record)".to_string(), |v| format!(
                "{} version {}",
                escape_line(&v.record_id),
                v.version
            ))
    );
    crate::out!("  +++ proposed");
    for line in &old {
        crate::out!("  - {line}");
    }
    for line in pretty(c.record.as_ref()) {
        crate::out!("  + {line}");
    }
    Ok(())
}

/// Open the audit log before changing anything, so a change is never made that cannot be
/// recorded.
fn audit_log(home: &Home) -> anyhow::Result<airlock_audit::AuditLog> {
    let cfg = config::load(&home.config_file())?;
    runtime::open_audit(home, &cfg)
}

fn record(
    mut log: airlock_audit::AuditLog,
    kind: &str,
    session: &str,
    detail: Value,
) -> anyhow::Result<()> {
    let mut detail = detail;
    detail["decided_by"] = operator_detail();
    log.append(
        AuditEvent::by(kind, session, &crate::service::approvals::operator()).with_detail(detail),
    )
    .map_err(|e| anyhow::anyhow!("the change was made, but its audit record failed: {e}"))?;
    log.close().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}

fn approve(home: &Home, store: &SqliteStore, change: &str) -> anyhow::Result<i32> {
    let log = audit_log(home)?;
    let held = store
        .operator_memory_review(change)
        .map_err(|e| store_err("cannot read the change", e))?;
    let v = store
        .operator_memory_approve(change, OPERATOR, Timestamp::now())
        .map_err(|e| store_err(&format!("cannot approve `{}`", escape_line(change)), e))?;
    record(
        log,
        "memory-review-approved",
        &held.provenance.session_id,
        json!({"change": change, "version": version_json(&v)}),
    )?;
    crate::out!(
        "approved {}: {} is now at version {}",
        escape_line(change),
        v.record_id,
        v.version
    );
    Ok(0)
}

fn reject(home: &Home, store: &SqliteStore, change: &str) -> anyhow::Result<i32> {
    let log = audit_log(home)?;
    let c = store
        .operator_memory_reject(change, OPERATOR, Timestamp::now())
        .map_err(|e| store_err(&format!("cannot reject `{}`", escape_line(change)), e))?;
    record(
        log,
        "memory-review-rejected",
        &c.provenance.session_id,
        json!({"change": c.id, "record": c.record_id, "tier": c.tier.as_str(),
               "namespace": c.namespace.key(), "proposed": record_json(c.record.as_ref())}),
    )?;
    crate::out!("rejected {}", escape_line(change));
    Ok(0)
}

fn rollback(home: &Home, store: &SqliteStore, id: &str, to: Option<i64>) -> anyhow::Result<i32> {
    let log = audit_log(home)?;
    let v = store
        .operator_memory_rollback(id, to, OPERATOR, Timestamp::now())
        .map_err(|e| store_err(&format!("cannot roll back `{}`", escape_line(id)), e))?;
    record(
        log,
        "memory-rollback",
        "operator",
        json!({"record": id, "to": to, "version": version_json(&v)}),
    )?;
    crate::out!(
        "{} is at version {} ({})",
        v.record_id,
        v.version,
        summary(v.record.as_ref())
    );
    Ok(0)
}

fn rollback_session(home: &Home, store: &SqliteStore, session: &str) -> anyhow::Result<i32> {
    let log = audit_log(home)?;
    let r = store
        .operator_memory_rollback_session(session, OPERATOR, Timestamp::now())
        .map_err(|e| {
            store_err(
                &format!("cannot roll back session `{}`", escape_line(session)),
                e,
            )
        })?;
    record(
        log,
        "memory-rollback-session",
        session,
        json!({
            "restored": r.restored.iter().map(version_json).collect::<Vec<_>>(),
            "rejected": r.rejected,
        }),
    )?;
    for v in &r.restored {
        crate::out!(
            "{} -> version {} ({})",
            escape_line(&v.record_id),
            v.version,
            summary(v.record.as_ref())
        );
    }
    for c in &r.rejected {
        crate::out!("rejected held change {}", escape_line(c));
    }
    crate::out!(
        "undid {} record(s) and rejected {} held change(s) of session {}",
        r.restored.len(),
        r.rejected.len(),
        escape_line(session)
    );
    Ok(0)
}

fn purge(home: &Home, store: &SqliteStore, id: &str) -> anyhow::Result<i32> {
    let log = audit_log(home)?;
    let n = store
        .operator_memory_purge(id)
        .map_err(|e| store_err(&format!("cannot purge `{}`", escape_line(id)), e))?;
    record(
        log,
        "memory-purge",
        "operator",
        json!({"record": id, "versions": n}),
    )?;
    crate::out!("purged {} ({n} versions)", escape_line(id));
    Ok(0)
}

fn export(store: &SqliteStore) -> anyhow::Result<i32> {
    let listing = store
        .operator_memory_export()
        .map_err(|e| store_err("cannot export memory", e))?;
    let out = json!({
        "versions": listing.items.iter().map(version_json).collect::<Vec<_>>(),
        "quarantined": listing.corrupt.iter().map(|c| json!({
            "table": c.table, "row": c.row, "column": c.column, "reason": c.reason,
        })).collect::<Vec<_>>(),
    });
    crate::out!("{}", escape_json_text(&serde_json::to_string_pretty(&out)?));
    Ok(if listing.corrupt.is_empty() { 0 } else { 1 })
}

fn schema_add(home: &Home, store: &SqliteStore, name: &str, file: &Path) -> anyhow::Result<i32> {
    let text = crate::operator_file::read_text(file, crate::operator_file::MEMORY_SCHEMA)?;
    let log = audit_log(home)?;
    store
        .operator_memory_register_schema(name, &text, OPERATOR, Timestamp::now())
        .map_err(|e| store_err(&format!("{}", file.display()), e))?;
    record(
        log,
        "memory-schema-registered",
        "operator",
        json!({"name": name, "schema_sha256": airlock_core::canonical::sha256_hex(text.as_bytes())}),
    )?;
    crate::out!("registered task_state schema {}", escape_line(name));
    Ok(0)
}
