//! `airlock memory`: the operator's view of the agent's memory — list, show, history,
//! review held changes, approve or reject them, roll back a record or everything one
//! session wrote, purge, export, and register `task_state` schemas.
//!
//! Only the operator runs these commands; the agent has no tool that reaches them. Every
//! change they make (approve, reject, rollback, purge, schema) is made by
//! [`crate::service::memory`], through the host when one runs, and recorded in the audit
//! log. Memory content was written by the agent and may hold anything, so it is printed
//! with control and invisible characters escaped.

use std::path::PathBuf;

use clap::Subcommand;
use serde_json::json;

use airlock_store::{
    MemoryOperator, MemoryRecord, MemoryRetention, MemoryVersion, Namespace, PendingChange,
    SqliteStore, Tier, Timestamp,
};

use airlock_core::terminal_text::{escape_json_text, escape_line};

use crate::home::Home;
use crate::service::memory::{
    kind_name, open_memory_store, record_json, store_err, summary_text, version_json, MemoryAct,
    MemoryActed, RecordAt,
};

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
    // The listings read the store; they change nothing.
    let store = || open_memory_store(&home);
    let act = match cmd {
        MemoryCommand::List { pinned, ns } => return list(&store()?, pinned, ns.as_deref()),
        MemoryCommand::Show { id } => return show(&store()?, &id),
        MemoryCommand::History { id } => return history(&store()?, &id),
        MemoryCommand::Review => return review(&store()?),
        MemoryCommand::Export { .. } => return export(&store()?),
        MemoryCommand::Approve { change } => MemoryAct::Approve { change, hash: None },
        MemoryCommand::Reject { change } => MemoryAct::Reject { change },
        MemoryCommand::Rollback {
            id,
            to,
            session: Some(session),
        } => {
            debug_assert!(id.is_none() && to.is_none());
            MemoryAct::RollbackSession { session }
        }
        MemoryCommand::Rollback {
            id: Some(id), to, ..
        } => MemoryAct::Rollback { id, to },
        MemoryCommand::Rollback { .. } => {
            anyhow::bail!("say what to roll back\nhelp: airlock memory rollback <id> [--to VERSION], or airlock memory rollback --session <id>")
        }
        MemoryCommand::Purge { id } => MemoryAct::Purge { id },
        MemoryCommand::Schema(SchemaCommand::Add { name, file }) => MemoryAct::RegisterSchema {
            name,
            text: crate::operator_file::read_text(&file, crate::operator_file::MEMORY_SCHEMA)?,
        },
    };
    let done: MemoryActed = crate::host::client::through_host_or(
        &home,
        |host| host.post("/v1/memory/act", &act),
        || crate::service::memory::act(&home, &act),
    )?;
    print_acted(&done)?;
    Ok(0)
}

/// Say what a change did.
fn print_acted(done: &MemoryActed) -> anyhow::Result<()> {
    let at = |r: &RecordAt| {
        format!(
            "{} is now at version {}",
            escape_line(&r.record_id),
            r.version
        )
    };
    match done {
        MemoryActed::Approved { change, now } => {
            crate::out!("approved {}: {}", escape_line(change), at(now))
        }
        MemoryActed::Rejected { change } => crate::out!("rejected {}", escape_line(change)),
        MemoryActed::RolledBack { now } => crate::out!(
            "{} is at version {} ({})",
            escape_line(&now.record_id),
            now.version,
            escape_line(&now.summary)
        ),
        MemoryActed::SessionRolledBack {
            session,
            restored,
            rejected,
        } => {
            for v in restored {
                crate::out!(
                    "{} -> version {} ({})",
                    escape_line(&v.record_id),
                    v.version,
                    escape_line(&v.summary)
                );
            }
            for c in rejected {
                crate::out!("rejected held change {}", escape_line(c));
            }
            crate::out!(
                "undid {} record(s) and rejected {} held change(s) of session {}",
                restored.len(),
                rejected.len(),
                escape_line(session)
            );
        }
        MemoryActed::Purged { id, versions } => {
            crate::out!("purged {} ({versions} versions)", escape_line(id))
        }
        MemoryActed::SchemaRegistered { name } => {
            crate::out!("registered task_state schema {}", escape_line(name))
        }
    }
    Ok(())
}

fn warn_corrupt(corrupt: &[airlock_store::CorruptRow]) {
    for bad in corrupt {
        eprintln!("warning: {}", escape_line(&bad.to_string()));
    }
}

/// One line about a record's content, escaped for the terminal.
fn summary(record: Option<&MemoryRecord>) -> String {
    escape_line(&summary_text(record))
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

fn trust(v: &MemoryVersion) -> &'static str {
    if v.untrusted() {
        "untrusted"
    } else {
        "trusted"
    }
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
