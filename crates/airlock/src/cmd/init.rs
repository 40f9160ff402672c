//! `airlock init`: write the operator's config dir.

use airlock_core::policy::{builtin_sources, Profile};

use crate::config::{self, DEFAULT_CONFIG};
use crate::home::{create_private_dir, Home};

const LOCAL_README: &str =
    "Policy files (*.cedar) in this directory are loaded with every profile.\n\
Operator rules such as `airlock net allow` go here. Run `airlock policy check` after editing.\n";

/// Write a file whole or not at all: a running host or session reloads policy and config
/// files when they change, and must never read half of one (or write through a link).
fn write_whole(path: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    airlock_proxy::write_atomic(path, bytes, 0o600)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
}

pub fn run(force: bool) -> anyhow::Result<i32> {
    let home = Home::from_env()?;
    create_private_dir(&home.config)?;
    create_private_dir(&home.state)?;
    create_private_dir(&home.policy_dir().join("local"))?;
    let cfg = home.config_file();
    let mut wrote = Vec::new();
    if force || !cfg.exists() {
        write_whole(&cfg, DEFAULT_CONFIG.as_bytes())?;
        crate::out!("wrote {}", cfg.display());
        wrote.push(cfg.display().to_string());
    } else {
        crate::out!("kept  {}", cfg.display());
    }
    for profile in Profile::all() {
        let dir = home.policy_dir().join(profile.name());
        create_private_dir(&dir)?;
        for src in builtin_sources(profile) {
            let file = home.config.join(&src.name);
            if force || !file.exists() {
                write_whole(&file, src.text.as_bytes())?;
                crate::out!("wrote {}", file.display());
                wrote.push(file.display().to_string());
            } else {
                crate::out!("kept  {}", file.display());
            }
        }
    }
    let readme = home.policy_dir().join("local").join("README");
    if !readme.exists() {
        write_whole(&readme, LOCAL_README.as_bytes())?;
    }
    create_private_dir(home.audit_key().parent().unwrap_or(&home.config))?;
    // A new key only for a new log: over an existing log it would make every earlier
    // checkpoint fail verification. `runtime::audit_signer` refuses then, with help.
    let signer = crate::runtime::audit_signer(&home)?;
    crate::out!(
        "audit signing key {} (id {})",
        home.audit_key().display(),
        signer.key_id()
    );
    create_private_dir(&home.audit_dir())?;
    // The proxy's interception CA: the key stays in the config dir; sandboxes get ca.pem only.
    let cert = airlock_proxy::ensure_ca(&home.config).map_err(|e| anyhow::anyhow!("{e}"))?;
    crate::out!("egress proxy CA {}", cert.display());
    // Pin the helper this airlock runs. An existing pin is kept: changing it is
    // `airlock sandbox pin-helper`'s, on the record.
    let pin_path = home.config.join(crate::sandbox_helper::PIN_FILE);
    match crate::sandbox_helper::read_pin(&pin_path)? {
        Some(pin) => crate::out!("kept  {} (helper SHA-256 {})", pin_path.display(), pin.sha256),
        None => match crate::sandbox_helper::checked_helper(&config::load(&cfg)?, None) {
            Ok(helper) => {
                crate::sandbox_helper::write_pin(&pin_path, &helper.pin())?;
                crate::out!(
                    "wrote {} (helper SHA-256 {})",
                    pin_path.display(),
                    helper.sha256
                );
            }
            Err(e) => eprintln!(
                "warning: the sandbox helper was not pinned: {e:#}\nhelp: install it, then run `airlock sandbox pin-helper`"
            ),
        },
    }
    crate::out!("state in {}", home.state.display());
    crate::config_audit::record(
        &home,
        "config-init",
        serde_json::json!({"force": force, "wrote": wrote, "signing_key": signer.key_id()}),
    )?;
    Ok(0)
}
