//! `airlock audit export`: the audit log in forms log pipelines take, JSON lines or
//! OpenTelemetry logs (OTLP/JSON), to a file, stdout, or a collector's `/v1/logs`.
//!
//! Every record and every signed checkpoint goes out as its exact line from the log, so a
//! copy off the machine can be checked: `airlock audit verify --export FILE` rebuilds the
//! log from the export and runs the same verification as `airlock audit verify` (hash
//! chain, checkpoint signatures, key changes) against the operator's public key.

pub mod otlp;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;

use serde_json::Value;

use otlp::{
    AnyValue, ExportLogsServiceRequest, InstrumentationScope, KeyValue, LogRecord, Resource,
    ResourceLogs, ScopeLogs, SEVERITY_INFO,
};

/// The OTLP attribute that says whether a log record is an audit record or a checkpoint.
pub const ATTR_TYPE: &str = "airlock.audit.type";
/// The record's (or checkpoint's) own hash, and the hash it chains onto.
pub const ATTR_HASH: &str = "airlock.audit.hash";
pub const ATTR_PREV: &str = "airlock.audit.prev_hash";

/// One line of the audit directory, exactly as written.
#[derive(Debug, Clone)]
pub struct Entry {
    pub kind: EntryKind,
    /// The line's bytes (canonical JSON), which the hashes and signatures cover.
    pub line: String,
    pub value: Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    Record,
    Checkpoint,
}

impl EntryKind {
    fn as_str(self) -> &'static str {
        match self {
            EntryKind::Record => "record",
            EntryKind::Checkpoint => "checkpoint",
        }
    }
}

/// The export formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One JSON object a line: each record, then each signed checkpoint, as in the log.
    Jsonl,
    /// One OTLP/JSON `ExportLogsServiceRequest`.
    Otlp,
}

/// Every record of `log.jsonl`, then every checkpoint of `checkpoints.jsonl`.
pub fn read_audit_dir(dir: &Path) -> anyhow::Result<Vec<Entry>> {
    let mut out = Vec::new();
    for (file, kind) in [
        (airlock_audit::LOG_FILE, EntryKind::Record),
        (airlock_audit::CHECKPOINT_FILE, EntryKind::Checkpoint),
    ] {
        let path = dir.join(file);
        let f = std::fs::File::open(&path).map_err(|e| {
            anyhow::anyhow!(
                "{}: {e}\nhelp: run `airlock init`, and export from the home whose log you mean (AIRLOCK_HOME)",
                path.display()
            )
        })?;
        for (n, line) in BufReader::new(f).lines().enumerate() {
            let line =
                line.map_err(|e| anyhow::anyhow!("{} line {}: {e}", path.display(), n + 1))?;
            if line.is_empty() {
                continue;
            }
            let value: Value = serde_json::from_str(&line).map_err(|e| {
                anyhow::anyhow!(
                    "{} line {} is not JSON ({e})\nhelp: run `airlock audit verify` to find the damage",
                    path.display(),
                    n + 1
                )
            })?;
            out.push(Entry { kind, line, value });
        }
    }
    Ok(out)
}

/// JSON lines: each line of the log verbatim. A checkpoint is told from a record by its
/// `signature` field.
pub fn to_jsonl(entries: &[Entry]) -> String {
    let mut s = String::new();
    for e in entries {
        s.push_str(&e.line);
        s.push('\n');
    }
    s
}

/// The OTLP/JSON request carrying every entry: the exact line as the body (what the
/// hashes cover), and the fields a pipeline filters on as attributes.
pub fn to_otlp(entries: &[Entry], host: &str) -> ExportLogsServiceRequest {
    let now = unix_nanos(std::time::SystemTime::now());
    let log_records = entries
        .iter()
        .map(|e| {
            let field = |k: &str| e.value.get(k).and_then(Value::as_str).map(str::to_owned);
            let mut attributes = vec![KeyValue::string(ATTR_TYPE, e.kind.as_str())];
            if let Some(seq) = e.value.get("seq").and_then(Value::as_u64) {
                attributes.push(KeyValue::int("airlock.audit.seq", seq));
            }
            let named: &[(&str, &str)] = match e.kind {
                EntryKind::Record => &[
                    ("kind", "airlock.audit.kind"),
                    ("session", "airlock.session"),
                    ("principal", "airlock.principal"),
                    ("decision", "airlock.decision"),
                    ("hash", ATTR_HASH),
                    ("prev", ATTR_PREV),
                ],
                EntryKind::Checkpoint => &[
                    ("record_hash", "airlock.audit.checkpoint.record_hash"),
                    ("key_id", "airlock.audit.checkpoint.key_id"),
                    ("signature", "airlock.audit.checkpoint.signature"),
                    ("prev", ATTR_PREV),
                ],
            };
            for (field_name, key) in named {
                if let Some(v) = field(field_name) {
                    attributes.push(KeyValue::string(key, v));
                }
            }
            if e.kind == EntryKind::Checkpoint {
                // A checkpoint line has no `hash` field; its identity is its line's hash,
                // which the next checkpoint's `prev` names.
                attributes.push(KeyValue::string(
                    ATTR_HASH,
                    airlock_core::canonical::sha256_hex(e.line.as_bytes()),
                ));
            }
            let time = field("time")
                .and_then(|t| humantime::parse_rfc3339_weak(&t).ok())
                .map_or(0, unix_nanos);
            LogRecord {
                time_unix_nano: time.to_string(),
                observed_time_unix_nano: now.to_string(),
                severity_number: SEVERITY_INFO,
                severity_text: "INFO".into(),
                body: AnyValue::StringValue(e.line.clone()),
                attributes,
            }
        })
        .collect();
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Resource {
                attributes: vec![
                    KeyValue::string("service.name", "airlock"),
                    KeyValue::string("service.version", env!("CARGO_PKG_VERSION")),
                    KeyValue::string("host.name", host),
                ],
            },
            scope_logs: vec![ScopeLogs {
                scope: InstrumentationScope {
                    name: "airlock.audit".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                },
                log_records,
            }],
        }],
    }
}

fn unix_nanos(t: std::time::SystemTime) -> u128 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// The log and checkpoint lines of an export (either format), checked for consistency:
/// an OTLP record's hash attributes must be the ones its body carries, so a pipeline that
/// filters on them sees what was signed.
pub fn lines_from_export(text: &str) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let mut log = Vec::new();
    let mut checkpoints = Vec::new();
    let trimmed = text.trim_start();
    if let Ok(req) = serde_json::from_str::<ExportLogsServiceRequest>(trimmed) {
        for rl in &req.resource_logs {
            for sl in &rl.scope_logs {
                for (i, r) in sl.log_records.iter().enumerate() {
                    let line = r.body.as_str().to_owned();
                    let value: Value = serde_json::from_str(&line).map_err(|e| {
                        anyhow::anyhow!("log record {i}: its body is not an audit line ({e})")
                    })?;
                    let body_field = |k: &str| value.get(k).and_then(Value::as_str);
                    let own_hash = match body_field("signature") {
                        Some(_) => Some(airlock_core::canonical::sha256_hex(line.as_bytes())),
                        None => body_field("hash").map(str::to_owned),
                    };
                    for (attr, want) in [
                        (ATTR_HASH, own_hash.as_deref()),
                        (ATTR_PREV, body_field("prev")),
                    ] {
                        if r.attribute(attr) != want {
                            anyhow::bail!(
                                "log record {i}: attribute {attr} = {:?} but its body says {:?}: the export was altered\nhelp: export again from the original log",
                                r.attribute(attr),
                                want
                            );
                        }
                    }
                    match r.attribute(ATTR_TYPE) {
                        Some("checkpoint") => checkpoints.push(line),
                        Some("record") => log.push(line),
                        other => anyhow::bail!(
                            "log record {i}: {ATTR_TYPE} = {other:?}, not \"record\" or \"checkpoint\"\nhelp: give the file `airlock audit export` wrote"
                        ),
                    }
                }
            }
        }
        return Ok((log, checkpoints));
    }
    for (n, line) in text.lines().enumerate() {
        if line.is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(line).map_err(|e| {
            anyhow::anyhow!(
                "line {} is neither JSON lines nor an OTLP/JSON request ({e})\nhelp: give the file `airlock audit export` wrote",
                n + 1
            )
        })?;
        if value.get("signature").is_some() {
            checkpoints.push(line.to_owned());
        } else {
            log.push(line.to_owned());
        }
    }
    Ok((log, checkpoints))
}

/// Rebuild an audit directory from an export, to verify it with the log's own verifier.
pub fn rebuild_audit_dir(text: &str, dir: &Path) -> anyhow::Result<()> {
    let (log, checkpoints) = lines_from_export(text)?;
    for (file, lines) in [
        (airlock_audit::LOG_FILE, log),
        (airlock_audit::CHECKPOINT_FILE, checkpoints),
    ] {
        let mut f = std::fs::File::create(dir.join(file))?;
        for l in lines {
            f.write_all(l.as_bytes())?;
            f.write_all(b"\n")?;
        }
        f.sync_all()?;
    }
    Ok(())
}

/// `POST` the OTLP/JSON request to `endpoint` (its `/v1/logs` path is added when missing).
pub fn post_otlp(endpoint: &str, body: &str) -> anyhow::Result<String> {
    let url = url::Url::parse(endpoint).map_err(|e| {
        anyhow::anyhow!(
            "collector endpoint {endpoint:?} is not a URL ({e})\nhelp: give one such as http://127.0.0.1:4318"
        )
    })?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        anyhow::bail!(
            "collector endpoint {endpoint:?} is not an http(s) URL with a host\nhelp: give one such as https://collector.example:4318"
        );
    }
    let mut url = url;
    if !url.path().ends_with("/v1/logs") {
        let path = format!("{}/v1/logs", url.path().trim_end_matches('/'));
        url.set_path(&path);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let target = url.to_string();
    let body = body.to_owned();
    rt.block_on(async move {
        // No system proxy: audit data goes straight to the collector named.
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(std::time::Duration::from_secs(30))
            .build()?;
        let resp = client
            .post(&target)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("cannot reach the collector at {target}: {e}\nhelp: check [audit] otlp_endpoint in airlock.toml, or give --endpoint"))?;
        let status = resp.status();
        if !status.is_success() {
            anyhow::bail!(
                "the collector at {target} answered {status}\nhelp: check the collector's logs; the export was not accepted"
            );
        }
        Ok(target)
    })
}
