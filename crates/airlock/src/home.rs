//! Where Airlock keeps its files.
//!
//! With `AIRLOCK_HOME` set, config lives in `$AIRLOCK_HOME/config` and state in
//! `$AIRLOCK_HOME/state` (what tests use). Otherwise the XDG locations:
//! `~/.config/airlock/` (operator-owned, never mounted into a sandbox) and
//! `~/.local/share/airlock/` (database, audit log, session workspaces).

use std::path::{Path, PathBuf};

/// Resolved locations of config and state.
#[derive(Debug, Clone)]
pub struct Home {
    pub config: PathBuf,
    pub state: PathBuf,
}

impl Home {
    /// Locate the directories from the environment.
    pub fn from_env() -> anyhow::Result<Home> {
        let dirs = airlock_client::dirs::Dirs::from_env()?;
        Ok(Home {
            config: dirs.config,
            state: dirs.state,
        })
    }

    pub fn config_file(&self) -> PathBuf {
        self.config.join("airlock.toml")
    }

    pub fn policy_dir(&self) -> PathBuf {
        self.config.join("policy")
    }

    pub fn audit_dir(&self) -> PathBuf {
        self.state.join("audit")
    }

    /// The Ed25519 key that signs audit checkpoints.
    pub fn audit_key(&self) -> PathBuf {
        self.config.join("keys").join("audit-signing.key")
    }

    /// The audit log's high-water mark: kept in the config dir, out of reach of whatever
    /// can write the state dir, so that a wiped or cut log is detected.
    pub fn audit_mark(&self) -> PathBuf {
        self.config.join("keys").join("audit-high-water.mark")
    }

    pub fn sessions_dir(&self) -> PathBuf {
        self.state.join("sessions")
    }

    /// The directories a sandbox's workspace may neither be, contain nor lie in (the
    /// sandbox crate decides; see `airlock_sandbox::workspace_check`).
    pub fn operator_dirs(&self) -> airlock_sandbox::OperatorDirs {
        airlock_sandbox::OperatorDirs {
            config: Some(self.config.clone()),
            state: Some(self.state.clone()),
        }
    }
}

/// Create `dir` (and parents) with mode 0700.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}
