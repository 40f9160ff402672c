//! Audit records of configuration changes: `init`, `net allow|revoke|allow-private`,
//! `secret set|rm` and policy files that changed since the last run. Each names the
//! operator at the command line; a secret's record holds its name and binding, never its
//! value (the log also redacts every stored value).

use serde_json::Value;

use crate::config;
use crate::home::Home;
use crate::service::approvals::{operator, operator_detail};
use airlock_audit::AuditEvent;

/// The `session` of configuration records: they belong to no conversation.
pub const CONFIG_SESSION: &str = "config";

/// Append one configuration record of `kind` with `detail` (plus who decided).
pub fn record(home: &Home, kind: &str, detail: Value) -> anyhow::Result<()> {
    let cfg = config::load(&home.config_file())?;
    let mut log = crate::service::record_log::RecordLog::open(home, &cfg)?;
    log.with(|log| append(log, kind, detail))?;
    log.close().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}

/// Append one configuration record to a log the caller already holds open.
pub fn append(log: &mut airlock_audit::AuditLog, kind: &str, detail: Value) -> anyhow::Result<()> {
    let mut detail = detail;
    detail["decided_by"] = operator_detail();
    log.append(AuditEvent::by(kind, CONFIG_SESSION, &operator()).with_detail(detail))
        .map_err(|e| {
            anyhow::anyhow!("the configuration was changed, but its audit record failed: {e}")
        })?;
    Ok(())
}
