//! `airlock sandbox pin-helper`: pin the installed sandbox helper, on the record.

use airlock_audit::AuditEvent;
use clap::Subcommand;

use crate::config;
use crate::home::Home;
use crate::sandbox_helper::{self, PIN_FILE};

#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Pin the sandbox helper beside airlock (or at helper under [sandbox]) by its
    /// SHA-256: after installing a new airlock. The audit log records the old and new pin.
    PinHelper,
}

pub fn run(c: SandboxCommand) -> anyhow::Result<i32> {
    match c {
        SandboxCommand::PinHelper => pin_helper(),
    }
}

fn pin_helper() -> anyhow::Result<i32> {
    let home = Home::from_env()?;
    let cfg = config::load(&home.config_file())?;
    // Re-pinning always reads the helper's bytes: it is how a changed helper is accepted.
    let new = sandbox_helper::checked_helper(&cfg, None)?.pin();
    let pin_path = home.config.join(PIN_FILE);
    let old = sandbox_helper::read_pin(&pin_path).unwrap_or(None);
    // The record first: a pin that changed without one would be a silent change.
    let mut log = crate::runtime::open_audit(&home, &cfg)?;
    log.append(
        AuditEvent::new("sandbox-helper-pinned", "", "owner").with_detail(serde_json::json!({
            "path": new.path.display().to_string(),
            "sha256": new.sha256,
            "previous": old.as_ref().map(|p| serde_json::json!({
                "path": p.path.display().to_string(),
                "sha256": p.sha256,
            })),
        })),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    log.close().map_err(|e| anyhow::anyhow!("{e}"))?;
    sandbox_helper::write_pin(&pin_path, &new)?;
    match old {
        Some(o) if o.sha256 == new.sha256 => crate::out!(
            "the sandbox helper {} is already pinned (SHA-256 {})",
            new.path.display(),
            new.sha256
        ),
        _ => crate::out!(
            "pinned the sandbox helper {} (SHA-256 {})",
            new.path.display(),
            new.sha256
        ),
    }
    Ok(0)
}
