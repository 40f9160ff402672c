//! Listing and revoking the owner's passkeys, for `airlock web --passkeys|--revoke-passkey`
//! (through the host's socket when it runs, or on the file when none does) and for the
//! remote Settings page. One implementation for all three: a running host revokes in
//! memory and on disk at once ([`Passkeys::revoke`]), so it accepts no assertion of that
//! passkey from then on and ends the logins it opened; without a host the file is
//! changed. Every revocation is recorded in the audit log (`web-passkey-revoked`), which is
//! opened before anything changes, so no revocation is made that cannot be recorded.

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

/// Revoke passkey `id` as `who`, recorded: in the running page (`web`) when it holds the
/// passkeys, ending that passkey's logins, or else in the file.
pub fn revoke(web: Option<&Web>, home: &Home, id: &str, who: &Decider) -> anyhow::Result<Revoked> {
    let cfg = crate::config::load(&home.config_file())?;
    let mut log = crate::runtime::open_audit(home, &cfg)?;
    let revoked = match web.and_then(|w| w.passkeys.as_ref().map(|k| (w, k))) {
        Some((w, keys)) => {
            let mut r = keys.revoke(id)?;
            r.logins_ended = w.logins.end_opened_with(&r.passkey.id);
            r
        }
        None => passkeys::revoke_in_file(&home.state, id)?,
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
