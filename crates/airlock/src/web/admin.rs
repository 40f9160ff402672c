//! The owner's administration of the page's access, for `airlock web --passkeys|
//! --revoke-passkey|--logout-all` (through the host's socket when it runs, or on the
//! state dir's files when none does) and for the remote Settings page. One
//! implementation for all: a running host revokes a passkey in memory and on disk at once
//! ([`passkeys::Passkeys::revoke`]), so it accepts no assertion of that passkey from then on, and
//! ends the logins it opened; without a host the files are changed: the passkey leaves
//! the passkeys file and its logins the kept logins file. Every revocation and
//! every end of all logins is recorded in the audit log (`web-passkey-revoked`,
//! `web-logout-all`), which is opened before anything changes, so nothing is done that
//! cannot be recorded.

use serde_json::json;

use airlock_audit::AuditEvent;

use super::passkeys::{self, PasskeyInfo, Revoked};
use super::Web;
use crate::home::Home;
use crate::service::decider::Decider;

/// The enrolled passkeys: the running page's (`web`), or else the file's.
pub fn list(web: Option<&Web>, home: &Home) -> anyhow::Result<Vec<PasskeyInfo>> {
    match web.and_then(|w| w.passkeys.as_ref()) {
        Some(keys) => Ok(keys.list()),
        None => passkeys::list_in(&home.state),
    }
}

/// Revoke passkey `id` as `who`, recorded, and end the logins it opened: in the running
/// page (`web`) when it holds the passkeys, or else in the state dir's files.
pub fn revoke(web: Option<&Web>, home: &Home, id: &str, who: &Decider) -> anyhow::Result<Revoked> {
    let cfg = crate::config::load(&home.config_file())?;
    let mut log = crate::service::record_log::RecordLog::open(home, &cfg)?;
    let revoked = match web.and_then(|w| w.passkeys.as_ref().map(|k| (w, k))) {
        Some((w, keys)) => {
            let mut r = keys.revoke(id)?;
            r.logins_ended = w.logins.end_opened_with(&r.passkey.id);
            r
        }
        None => {
            let mut r = passkeys::revoke_in_file(&home.state, id)?;
            // Revoked already: a login left in the file is refused anyway when a host
            // reads it (its passkey is not enrolled), so a failure here is said, not fatal.
            match super::auth::end_opened_with_in(&home.state, &r.passkey.id) {
                Ok(ended) => r.logins_ended = ended,
                Err(e) => {
                    tracing::warn!(passkey = %r.passkey.id, error = %e, "web: the revoked passkey's kept logins could not be ended; a host refuses them anyway");
                }
            }
            r
        }
    };
    let mut detail = json!({
        "passkey": revoked.passkey.id,
        "label": revoked.passkey.label,
        "remaining": revoked.remaining,
        "logins_ended": revoked.logins_ended,
    });
    detail["decided_by"] = who.detail();
    log.append(AuditEvent::by("web-passkey-revoked", "-", &who.attribution()).with_detail(detail))
        .and_then(|_| log.close())
        .map_err(|e| {
            anyhow::anyhow!(
                "passkey {} was revoked, but its audit record failed: {e}",
                revoked.passkey.id
            )
        })?;
    tracing::info!(passkey = %revoked.passkey.id, remaining = revoked.remaining, "a web passkey was revoked");
    Ok(revoked)
}

/// End every login of the page as `who`, recorded: the running page's (`web`), or else the
/// ones kept in the state dir; how many ended.
pub fn end_all_logins(web: Option<&Web>, home: &Home, who: &Decider) -> anyhow::Result<usize> {
    let cfg = crate::config::load(&home.config_file())?;
    let mut log = crate::service::record_log::RecordLog::open(home, &cfg)?;
    let (ended, ids) = match web {
        Some(w) => {
            let ids = w.logins.end_all();
            (ids.len(), ids)
        }
        None => (super::auth::end_all_in(&home.state)?, Vec::new()),
    };
    let mut detail = json!({ "ended": ended, "logins": ids });
    detail["decided_by"] = who.detail();
    log.append(AuditEvent::by("web-logout-all", "-", &who.attribution()).with_detail(detail))
        .and_then(|_| log.close())
        .map_err(|e| anyhow::anyhow!("every login was ended, but the audit record failed: {e}"))?;
    tracing::info!(ended, "every web login was ended");
    Ok(ended)
}
