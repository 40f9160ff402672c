//! The operator's changes to the agent's memory (approve or reject a held change, roll
//! back a record or everything one session wrote, purge, register a `task_state` schema),
//! for `airlock memory` embedded and the host's `POST /v1/memory/act`. Each opens the
//! audit log before it changes anything, so no change is made that cannot be recorded,
//! and records itself as the operator's act. The listings (`list`, `show`, `history`,
//! `review`, `export`) only read the store, and the command reads it itself.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use airlock_audit::AuditEvent;
use airlock_core::terminal_text::escape_line;
use airlock_store::{
    MemoryOperator, MemoryRecord, MemoryVersion, PendingChange, SqliteStore, Timestamp,
};

use crate::config;
use crate::home::Home;
use crate::service::approvals::open_store;
use crate::service::decider::Decider;
use crate::service::fault;
use crate::service::record_log::RecordLog;

/// Characters of a record's text in a one-line summary.
const SUMMARY_CHARS: usize = 80;

/// The operator's store, with the configured memory retention.
pub fn open_memory_store(home: &Home) -> anyhow::Result<SqliteStore> {
    let retention = config::load(&home.config_file())?.memory.retention;
    Ok(open_store(home)?.with_memory_retention(retention))
}

/// A store error, said with what was being done.
pub fn store_err(what: &str, e: airlock_store::StoreError) -> anyhow::Error {
    anyhow::anyhow!("{what}: {e}")
}

pub fn kind_name(record: Option<&MemoryRecord>) -> &'static str {
    record.map_or("forgotten", |r| r.kind().as_str())
}

/// The start of a record's text, as it is (the caller escapes it for a terminal).
pub fn summary_text(record: Option<&MemoryRecord>) -> String {
    match record {
        None => "(forgotten)".into(),
        Some(r) => r.search_text().chars().take(SUMMARY_CHARS).collect(),
    }
}

/// The record as JSON, through its own declared type.
pub fn record_json(record: Option<&MemoryRecord>) -> Value {
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

pub fn version_json(v: &MemoryVersion) -> Value {
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

/// One change the operator makes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "act", rename_all = "snake_case", deny_unknown_fields)]
pub enum MemoryAct {
    Approve {
        change: String,
        /// The payload hash of the change as it was shown ([`ReviewView::payload_hash`]);
        /// when given, the change is applied only if it is still exactly that.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hash: Option<String>,
    },
    Reject {
        change: String,
    },
    Rollback {
        id: String,
        to: Option<i64>,
    },
    RollbackSession {
        session: String,
    },
    Purge {
        id: String,
    },
    /// `text` is the JSON Schema itself (the command reads the file).
    RegisterSchema {
        name: String,
        text: String,
    },
}

/// A record at a version, for the operator.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecordAt {
    pub record_id: String,
    pub version: i64,
    /// The start of its text, unescaped.
    pub summary: String,
}

impl RecordAt {
    fn of(v: &MemoryVersion) -> RecordAt {
        RecordAt {
            record_id: v.record_id.clone(),
            version: v.version,
            summary: summary_text(v.record.as_ref()),
        }
    }
}

/// What the change did.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "done", rename_all = "snake_case")]
pub enum MemoryActed {
    Approved {
        change: String,
        now: RecordAt,
    },
    Rejected {
        change: String,
    },
    RolledBack {
        now: RecordAt,
    },
    SessionRolledBack {
        session: String,
        restored: Vec<RecordAt>,
        rejected: Vec<String>,
    },
    Purged {
        id: String,
        versions: usize,
    },
    SchemaRegistered {
        name: String,
    },
}

/// A held change to memory as the operator reviews it: the record now and the one
/// proposed, each as pretty JSON through its declared type.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReviewView {
    pub change: String,
    pub record_id: String,
    pub namespace: String,
    pub tier: String,
    /// `write`, or `forget` (no proposed record).
    pub op: String,
    pub session: String,
    pub principal: String,
    pub tool_call: String,
    pub tainted: bool,
    pub reasons: Vec<String>,
    /// The record as it is, and its version; `None` for a new record.
    pub current: Option<(i64, String)>,
    pub proposed: Option<String>,
    /// `sha256:…` of everything above (its canonical JSON): what an approval of the change
    /// as shown binds to. Anything that changes what the owner sees changes it.
    pub payload_hash: String,
}

impl ReviewView {
    /// The view of held change `c`, with the record as it is now.
    fn of(store: &SqliteStore, c: &PendingChange) -> anyhow::Result<ReviewView> {
        let pretty = |r: Option<&MemoryRecord>| {
            serde_json::to_string_pretty(&record_json(r)).unwrap_or_default()
        };
        let current = match c.base_version {
            Some(_) => store
                .operator_memory_show(&c.record_id)
                .ok()
                .map(|v| (v.version, pretty(v.record.as_ref()))),
            None => None,
        };
        let mut view = ReviewView {
            change: c.id.clone(),
            record_id: c.record_id.clone(),
            namespace: c.namespace.key(),
            tier: c.tier.as_str().to_string(),
            op: if c.record.is_some() {
                "write"
            } else {
                "forget"
            }
            .into(),
            session: c.provenance.session_id.clone(),
            principal: c.provenance.principal.clone(),
            tool_call: c.provenance.tool_call_id.clone(),
            tainted: c.provenance.tainted,
            reasons: c.reasons.clone(),
            current,
            proposed: c.record.as_ref().map(|r| pretty(Some(r))),
            payload_hash: String::new(),
        };
        // The hash is over the view with an empty hash field, so it covers every shown part.
        view.payload_hash = airlock_core::canonical::content_hash(&view)
            .map_err(|e| anyhow::anyhow!("cannot hash held change {}: {e}", c.id))?;
        Ok(view)
    }
}

/// The changes waiting for review, for the web page (`airlock memory review` prints the
/// same).
pub fn reviews(home: &Home) -> anyhow::Result<(Vec<ReviewView>, usize)> {
    let store = open_memory_store(home).map_err(fault)?;
    let listing = store
        .operator_memory_reviews(false)
        .map_err(|e| fault(store_err("cannot list held changes", e)))?;
    let items = listing
        .items
        .iter()
        .map(|c| ReviewView::of(&store, c))
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok((items, listing.corrupt.len()))
}

/// One kept version of a record, for the web page's history.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VersionView {
    pub version: i64,
    pub written_at_ms: i64,
    /// How it was written: by the agent, an approved review, a rollback, ….
    pub origin: String,
    /// The operator who approved or rolled back, for those origins.
    pub actor: Option<String>,
    pub session: String,
    pub principal: String,
    pub untrusted: bool,
    pub kind: String,
    /// The record as pretty JSON; `None` when this version forgot it.
    pub text: Option<String>,
}

/// A live record in one line, for the web page's list.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RecordLine {
    pub record_id: String,
    pub version: i64,
    pub namespace: String,
    pub tier: String,
    pub kind: String,
    pub untrusted: bool,
    /// The start of its text, unescaped.
    pub summary: String,
}

/// The live records (`airlock memory list` prints the same), and how many rows were corrupt.
pub fn records(home: &Home) -> anyhow::Result<(Vec<RecordLine>, usize)> {
    let store = open_memory_store(home).map_err(fault)?;
    let listing = store
        .operator_memory_list(None, None)
        .map_err(|e| fault(store_err("cannot list the records", e)))?;
    let items = listing
        .items
        .iter()
        .map(|v| RecordLine {
            record_id: v.record_id.clone(),
            version: v.version,
            namespace: v.namespace.key(),
            tier: v.tier.as_str().to_string(),
            kind: kind_name(v.record.as_ref()).to_string(),
            untrusted: v.untrusted(),
            summary: summary_text(v.record.as_ref()),
        })
        .collect();
    Ok((items, listing.corrupt.len()))
}

/// Every kept version of record `id`, oldest first (`airlock memory history` prints the
/// same), and how many rows were corrupt.
pub fn history(home: &Home, id: &str) -> anyhow::Result<(Vec<VersionView>, usize)> {
    let store = open_memory_store(home).map_err(fault)?;
    let listing = store.operator_memory_history(id).map_err(|e| {
        store_err(
            &format!("cannot read the history of `{}`", escape_line(id)),
            e,
        )
    })?;
    let items = listing
        .items
        .iter()
        .map(|v| VersionView {
            version: v.version,
            written_at_ms: v.written_at.as_unix_ms(),
            origin: v.origin.as_str().to_string(),
            actor: v.actor.clone(),
            session: v.provenance.session_id.clone(),
            principal: v.provenance.principal.clone(),
            untrusted: v.untrusted(),
            kind: kind_name(v.record.as_ref()).to_string(),
            text: v.record.as_ref().map(|_| {
                serde_json::to_string_pretty(&record_json(v.record.as_ref())).unwrap_or_default()
            }),
        })
        .collect();
    Ok((items, listing.corrupt.len()))
}

/// Open the audit log before changing anything, so a change is never made that cannot be
/// recorded.
fn audit_log(home: &Home) -> anyhow::Result<RecordLog> {
    let cfg = config::load(&home.config_file()).map_err(fault)?;
    RecordLog::open(home, &cfg).map_err(fault)
}

fn record(
    mut log: RecordLog,
    who: &Decider,
    kind: &str,
    session: &str,
    detail: Value,
) -> anyhow::Result<()> {
    let mut detail = detail;
    detail["decided_by"] = who.detail();
    log.append(AuditEvent::by(kind, session, &who.attribution()).with_detail(detail))
        .map_err(|e| {
            fault(anyhow::anyhow!(
                "the change was made, but its audit record failed: {e}"
            ))
        })?;
    log.close().map_err(|e| fault(anyhow::anyhow!("{e}")))?;
    Ok(())
}

/// Make `act` as the operator at the command line, recorded ([`act_as`]).
pub fn act(home: &Home, act: &MemoryAct) -> anyhow::Result<MemoryActed> {
    act_as(home, act, &Decider::cli())
}

/// Make `act` as `who`, recorded.
pub fn act_as(home: &Home, act: &MemoryAct, who: &Decider) -> anyhow::Result<MemoryActed> {
    let store = open_memory_store(home).map_err(fault)?;
    let now = Timestamp::now();
    match act {
        MemoryAct::Approve { change, hash } => {
            let log = audit_log(home)?;
            let held = store
                .operator_memory_review(change)
                .map_err(|e| store_err("cannot read the change", e))?;
            if let Some(shown) = hash {
                let now_hash = ReviewView::of(&store, &held)?.payload_hash;
                if &now_hash != shown {
                    anyhow::bail!(
                        "held change `{}` is not the one that was shown: it was shown as payload {}, and is now {}; nothing was applied\nhelp: look at the change again and decide on what it is now",
                        escape_line(change),
                        escape_line(shown),
                        now_hash
                    );
                }
            }
            let v = store
                .operator_memory_approve(change, who.principal(), now)
                .map_err(|e| store_err(&format!("cannot approve `{}`", escape_line(change)), e))?;
            record(
                log,
                who,
                "memory-review-approved",
                &held.provenance.session_id,
                json!({"change": change, "version": version_json(&v)}),
            )?;
            Ok(MemoryActed::Approved {
                change: change.clone(),
                now: RecordAt::of(&v),
            })
        }
        MemoryAct::Reject { change } => {
            let log = audit_log(home)?;
            let c = store
                .operator_memory_reject(change, who.principal(), now)
                .map_err(|e| store_err(&format!("cannot reject `{}`", escape_line(change)), e))?;
            record(
                log,
                who,
                "memory-review-rejected",
                &c.provenance.session_id,
                json!({"change": c.id, "record": c.record_id, "tier": c.tier.as_str(),
                       "namespace": c.namespace.key(), "proposed": record_json(c.record.as_ref())}),
            )?;
            Ok(MemoryActed::Rejected {
                change: change.clone(),
            })
        }
        MemoryAct::Rollback { id, to } => {
            let log = audit_log(home)?;
            let v = store
                .operator_memory_rollback(id, *to, who.principal(), now)
                .map_err(|e| store_err(&format!("cannot roll back `{}`", escape_line(id)), e))?;
            record(
                log,
                who,
                "memory-rollback",
                "operator",
                json!({"record": id, "to": to, "version": version_json(&v)}),
            )?;
            Ok(MemoryActed::RolledBack {
                now: RecordAt::of(&v),
            })
        }
        MemoryAct::RollbackSession { session } => {
            let log = audit_log(home)?;
            let r = store
                .operator_memory_rollback_session(session, who.principal(), now)
                .map_err(|e| {
                    store_err(
                        &format!("cannot roll back session `{}`", escape_line(session)),
                        e,
                    )
                })?;
            record(
                log,
                who,
                "memory-rollback-session",
                session,
                json!({
                    "restored": r.restored.iter().map(version_json).collect::<Vec<_>>(),
                    "rejected": r.rejected,
                }),
            )?;
            Ok(MemoryActed::SessionRolledBack {
                session: session.clone(),
                restored: r.restored.iter().map(RecordAt::of).collect(),
                rejected: r.rejected.clone(),
            })
        }
        MemoryAct::Purge { id } => {
            let log = audit_log(home)?;
            let n = store
                .operator_memory_purge(id)
                .map_err(|e| store_err(&format!("cannot purge `{}`", escape_line(id)), e))?;
            record(
                log,
                who,
                "memory-purge",
                "operator",
                json!({"record": id, "versions": n}),
            )?;
            Ok(MemoryActed::Purged {
                id: id.clone(),
                versions: n,
            })
        }
        MemoryAct::RegisterSchema { name, text } => {
            let log = audit_log(home)?;
            store
                .operator_memory_register_schema(name, text, who.principal(), now)
                .map_err(|e| store_err(&format!("schema {}", escape_line(name)), e))?;
            record(
                log,
                who,
                "memory-schema-registered",
                "operator",
                json!({"name": name, "schema_sha256": airlock_core::canonical::sha256_hex(text.as_bytes())}),
            )?;
            Ok(MemoryActed::SchemaRegistered { name: name.clone() })
        }
    }
}
