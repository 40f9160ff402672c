//! Shared wiring for commands that act: the audit log, the Gate for a workspace, and
//! session ids.

use std::path::Path;

use airlock_audit::{AuditLog, AuditOptions, CheckpointSigner};
use airlock_core::facts::GateConfig;
use airlock_core::gate::Gate;
use airlock_core::policy::Profile;

use crate::config::Config;
use crate::home::{create_private_dir, Home};
use crate::policies;

/// Open the audit log in the state dir, creating the signing key in the config dir on
/// first use.
pub fn open_audit(home: &Home, cfg: &Config) -> anyhow::Result<AuditLog> {
    if let Some(parent) = home.audit_key().parent() {
        create_private_dir(parent)?;
    }
    let signer =
        CheckpointSigner::load_or_create(&home.audit_key()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let opts = AuditOptions {
        checkpoint_every: cfg.audit.checkpoint_every,
        ..AuditOptions::default()
    };
    let mut log =
        AuditLog::open(&home.audit_dir(), signer, opts).map_err(|e| anyhow::anyhow!("{e}"))?;
    // Every stored secret is redacted from every record, whatever the run uses: an operator
    // who pastes a value into a command must not find it in the log (I10).
    let secrets = airlock_proxy::SecretStore::new(&home.config)
        .load_all()
        .map_err(|e| anyhow::anyhow!("cannot load the secrets store for audit redaction: {e}"))?;
    let redactor = log.redactor_mut();
    for s in secrets {
        redactor
            .add(s.info.name.clone(), s.value)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok(log)
}

/// The Gate for `workspace` under `profile`.
pub fn gate_for(
    home: &Home,
    cfg: &Config,
    profile: Profile,
    workspace: &Path,
) -> anyhow::Result<Gate> {
    let loaded = policies::load(home, profile)?;
    let mut gc = GateConfig::new(workspace);
    gc.protected = cfg.policy.protected_paths.clone();
    gc.resolver = Some(std::sync::Arc::new(sandbox_path_lookup));
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

/// A session id unique across concurrent processes: `<prefix>-<unix ms>-<pid>`.
pub fn session_id(prefix: &str) -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    format!("{prefix}-{ms}-{}", std::process::id())
}

/// Unix seconds now.
pub fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
