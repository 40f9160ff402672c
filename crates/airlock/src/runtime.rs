//! Shared wiring for commands that act: the audit log, the Gate for a workspace, and
//! session ids.

use std::path::Path;

use airlock_audit::{AuditLog, AuditOptions, CheckpointSigner};
use airlock_core::gate::Gate;
use airlock_core::policy::Profile;
use secrecy::ExposeSecret;

use crate::config::Config;
use crate::home::{create_private_dir, Home};
use crate::policies;

/// Open the audit log in the state dir, with its high-water mark in the config dir.
pub fn open_audit(home: &Home, cfg: &Config) -> anyhow::Result<AuditLog> {
    let signer = audit_signer(home)?;
    let mut log = AuditLog::open_marked(
        &home.audit_dir(),
        &home.audit_mark(),
        signer,
        audit_options(cfg),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    // Every stored secret is redacted from every record, whatever the run uses: an operator
    // who pastes a value into a command must not find it in the log (I10).
    let secrets = airlock_proxy::SecretStore::new(&home.config)
        .load_all()
        .map_err(|e| anyhow::anyhow!("cannot load the secrets store for audit redaction: {e}"))?;
    // The log's redactor is also what keeps stored secrets out of what the model is sent
    // and what the transcript stores (the agent loop redacts tool results with it), so it
    // knows the encodings the egress proxy scrubs from responses as well.
    let redactor = log.redactor_mut();
    for s in secrets {
        let forms =
            airlock_proxy::secrets::scrub::encoded_forms(s.value.expose_secret().as_bytes())
                .into_iter()
                .filter_map(|form| String::from_utf8(form).ok())
                .map(airlock_audit::SecretString::from)
                .collect();
        redactor
            .add_with_forms(s.info.name.clone(), s.value, forms)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok(log)
}

/// How the audit log is written, from the config.
pub fn audit_options(cfg: &Config) -> AuditOptions {
    AuditOptions {
        checkpoint_every: cfg.audit.checkpoint_every,
        ..AuditOptions::default()
    }
}

/// The checkpoint signing key. It is created only while nothing it would have to continue
/// exists (no high-water mark, no audit records): a key that disappears later is an error,
/// never silently replaced, because checkpoints signed by the old key would no longer
/// verify. `airlock audit rotate-key` replaces a key on purpose.
pub fn audit_signer(home: &Home) -> anyhow::Result<CheckpointSigner> {
    let path = home.audit_key();
    if !path.exists() && !audit_has_history(home) {
        if let Some(parent) = path.parent() {
            create_private_dir(parent)?;
        }
        return CheckpointSigner::load_or_create(&path).map_err(|e| anyhow::anyhow!("{e}"));
    }
    CheckpointSigner::load(&path).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Whether an audit log was started here: a key created now could not continue it.
pub fn audit_has_history(home: &Home) -> bool {
    let non_empty = |p: std::path::PathBuf| std::fs::symlink_metadata(p).is_ok_and(|m| m.len() > 0);
    std::fs::symlink_metadata(home.audit_mark()).is_ok()
        || non_empty(home.audit_dir().join(airlock_audit::LOG_FILE))
        || non_empty(home.audit_dir().join(airlock_audit::CHECKPOINT_FILE))
}

/// The Gate for `workspace` under `profile`.
pub fn gate_for(
    home: &Home,
    cfg: &Config,
    profile: Profile,
    workspace: &Path,
) -> anyhow::Result<Gate> {
    let loaded = policies::load(home, profile)?;
    let gc = crate::service::check::gate_config(cfg, workspace.to_path_buf());
    Ok(Gate::new(loaded.engine, gc))
}

/// The PATH the sandbox gives commands. The sandbox binds the host's `/usr` read-only, so a
/// lookup on the host finds what the sandbox would run.
pub const SANDBOX_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";

/// First executable file named `program` on [`SANDBOX_PATH`].
pub fn sandbox_path_lookup(program: &str) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    SANDBOX_PATH
        .split(':')
        .map(|dir| std::path::Path::new(dir).join(program))
        .find_map(|p| {
            let meta = std::fs::metadata(&p).ok()?;
            (meta.is_file() && meta.permissions().mode() & 0o111 != 0)
                .then(|| p.display().to_string())
        })
}

/// A session id unique across concurrent processes and within one:
/// `<prefix>-<unix ms>-<pid>`, with `-<n>` after it for the n-th further id this process
/// makes (the host makes many, several in one millisecond).
pub fn session_id(prefix: &str) -> String {
    static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let pid = std::process::id();
    match MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed) {
        0 => format!("{prefix}-{ms}-{pid}"),
        n => format!("{prefix}-{ms}-{pid}-{n}"),
    }
}

/// Unix seconds now.
pub fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn session_ids_made_in_one_process_at_once_differ() {
        let ids: std::collections::HashSet<String> =
            (0..1000).map(|_| super::session_id("exec")).collect();
        assert_eq!(ids.len(), 1000);
    }
}
