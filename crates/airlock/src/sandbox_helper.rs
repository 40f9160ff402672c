//! Which `airlock-sandbox-init` helper Airlock runs: only the one that was installed.
//!
//! The helper starts every sandbox, so whoever can replace it runs code outside the
//! sandbox. Airlock accepts a helper only when it
//! - sits beside the `airlock` binary, or at `helper` under `[sandbox]` in airlock.toml
//!   (`AIRLOCK_SANDBOX_INIT` may name one of these, nothing else);
//! - is owned by root or the operator and writable by no one else
//!   ([`airlock_sandbox::check_helper_file`], the same check every run makes again on the
//!   descriptor it executes);
//! - hashes to the SHA-256 pinned in the config dir (`sandbox-helper.pin`). `airlock init`
//!   pins it; a home that never ran init pins the helper it first uses (as the audit
//!   signing key is made on first use), and says so on stderr. Only
//!   `airlock sandbox pin-helper` changes a pin, and it leaves an audit record.
//!
//! The hash is checked again by each run on the descriptor it executes
//! ([`airlock_sandbox::Sandbox::pinned`]), so a helper swapped after this check is refused.
//! The pin also keeps the helper file's identity (device, inode, size, modification and
//! change times, [`HelperIdentity`]) from when its hash was taken: while the file still
//! has that identity its bytes cannot have changed, so neither check re-reads them, which
//! would cost a few milliseconds on every command.

use std::path::{Path, PathBuf};

use airlock_sandbox::{HelperIdentity, Sandbox, INIT_BINARY, INIT_ENV};
use serde::{Deserialize, Serialize};

use crate::config::{self, Config};
use crate::home::Home;

/// The pin file in the config dir.
pub const PIN_FILE: &str = "sandbox-helper.pin";

/// What is pinned: the helper's hash, and where it was when pinned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelperPin {
    pub sha256: String,
    pub path: PathBuf,
    /// The file's identity when `sha256` was taken (absent in pins written before it was
    /// kept; the next run that hashes the same bytes adds it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<HelperIdentity>,
}

/// A helper at an allowed place, its ownership and mode checked, with its hash and the
/// identity the hash belongs to.
pub struct CheckedHelper {
    pub path: PathBuf,
    pub sha256: String,
    pub identity: HelperIdentity,
}

impl CheckedHelper {
    /// The pin that names this helper.
    pub fn pin(&self) -> HelperPin {
        HelperPin {
            sha256: self.sha256.clone(),
            path: self.path.clone(),
            identity: Some(self.identity),
        }
    }

    /// A sandbox that runs this helper and checks it again on the descriptor it executes.
    fn sandbox(self) -> anyhow::Result<Sandbox> {
        Ok(Sandbox::with_init(self.path)?
            .pinned(self.sha256)
            .pinned_at(self.identity))
    }
}

/// The helper this home runs, checked and pinned, for the current process's config.
pub fn locate() -> anyhow::Result<Sandbox> {
    let home = Home::from_env()?;
    let cfg = config::load(&home.config_file())?;
    locate_for(&home, &cfg)
}

/// The helper `home` and `cfg` allow, checked against the pin (pinned now if none yet).
pub fn locate_for(home: &Home, cfg: &Config) -> anyhow::Result<Sandbox> {
    let pin_path = home.config.join(PIN_FILE);
    let pinned = read_pin(&pin_path)?;
    let helper = checked_helper(cfg, pinned.as_ref())?;
    let (path, sha256) = (&helper.path, &helper.sha256);
    match pinned {
        Some(pin) if &pin.sha256 == sha256 => {
            if pin.identity != Some(helper.identity) {
                // The same bytes under a new identity (copied, touched, or a pin from
                // before identities were kept): remember it, so later runs need not hash.
                // Failing to is harmless: the next run hashes again.
                let _ = write_pin(&pin_path, &helper.pin());
            }
        }
        Some(pin) => anyhow::bail!(
            "{} has SHA-256 {sha256}, but the helper pinned in {} ({}) has {}: it is not the helper that was installed\nhelp: if you installed a new airlock, pin its helper with `airlock sandbox pin-helper` (the audit log records it); otherwise reinstall airlock",
            path.display(),
            pin_path.display(),
            pin.path.display(),
            pin.sha256
        ),
        None => {
            if let Some(first) = pin_if_absent(&pin_path, &helper.pin())? {
                // Another process pinned first (concurrent first runs): its pin decides.
                if &first.sha256 != sha256 {
                    anyhow::bail!(
                        "{} has SHA-256 {sha256}, but the helper pinned in {} meanwhile has {}\nhelp: run `airlock sandbox pin-helper` to pin the helper you installed",
                        path.display(),
                        pin_path.display(),
                        first.sha256
                    );
                }
                return helper.sandbox();
            }
            eprintln!(
                "note: pinned the sandbox helper {} (SHA-256 {sha256}) in {}; a different helper is refused until `airlock sandbox pin-helper`",
                path.display(),
                pin_path.display()
            );
        }
    }
    helper.sandbox()
}

/// Where the helper may be, its ownership and mode checked, and its hash. The hash is
/// taken from `known` when the file still has the identity `known` was pinned with, and
/// read from the file otherwise.
pub fn checked_helper(cfg: &Config, known: Option<&HelperPin>) -> anyhow::Result<CheckedHelper> {
    let allowed = allowed_path(cfg)?;
    let path = match std::env::var_os(INIT_ENV) {
        None => allowed.clone(),
        Some(named) => {
            let named = PathBuf::from(named);
            if !same_file_path(&named, &allowed) {
                anyhow::bail!(
                    "{INIT_ENV}={} names a sandbox helper that is neither beside airlock nor at helper under [sandbox] in airlock.toml ({})\nhelp: unset {INIT_ENV}, or set helper = \"{}\" under [sandbox] and run `airlock sandbox pin-helper`",
                    named.display(),
                    allowed.display(),
                    named.display()
                );
            }
            allowed.clone()
        }
    };
    let file = std::fs::File::open(&path).map_err(|e| {
        anyhow::anyhow!(
            "{}: {e}\nhelp: install {INIT_BINARY} beside airlock, or set helper under [sandbox] in airlock.toml",
            path.display()
        )
    })?;
    airlock_sandbox::check_helper_file(&file, &path)?;
    // The identity first: a write while the bytes are hashed then changes it.
    let identity = airlock_sandbox::helper_identity(&file)
        .map_err(|e| anyhow::anyhow!("{}: cannot read it: {e}", path.display()))?;
    let sha256 = match known {
        Some(pin) if pin.identity == Some(identity) => pin.sha256.clone(),
        _ => airlock_sandbox::helper_sha256(&file)
            .map_err(|e| anyhow::anyhow!("{}: cannot read it: {e}", path.display()))?,
    };
    Ok(CheckedHelper {
        path,
        sha256,
        identity,
    })
}

/// `[sandbox] helper`, else `airlock-sandbox-init` beside the running `airlock`.
fn allowed_path(cfg: &Config) -> anyhow::Result<PathBuf> {
    if let Some(p) = &cfg.sandbox.helper {
        return Ok(p.clone());
    }
    let exe = std::env::current_exe()
        .map_err(|e| anyhow::anyhow!("cannot find the airlock binary: {e}"))?;
    Ok(exe.parent().unwrap_or(Path::new("/")).join(INIT_BINARY))
}

/// Both name the same path once symlinks and `..` are resolved (or, when either does not
/// exist, the same text).
fn same_file_path(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

pub fn read_pin(path: &Path) -> anyhow::Result<Option<HelperPin>> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text).map(Some).map_err(|e| {
            anyhow::anyhow!(
                "{}: not a helper pin ({e})\nhelp: run `airlock sandbox pin-helper` to pin the installed helper again",
                path.display()
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(anyhow::anyhow!("{}: {e}", path.display())),
    }
}

/// Write `pin` to a file of this process's own beside `path`, private to the operator.
fn write_temp(path: &Path, pin: &HelperPin) -> anyhow::Result<PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    crate::home::create_private_dir(dir)?;
    // One name per process: concurrent first runs never touch each other's file.
    let tmp = path.with_extension(format!("pin.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| anyhow::anyhow!("{}: {e}", tmp.display()))?;
    f.write_all(serde_json::to_string(pin)?.as_bytes())?;
    f.write_all(b"\n")?;
    f.sync_all()?;
    Ok(tmp)
}

/// Replace the pin atomically.
pub fn write_pin(path: &Path, pin: &HelperPin) -> anyhow::Result<()> {
    let tmp = write_temp(path, pin)?;
    std::fs::rename(&tmp, path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok(())
}

/// Pin only if nothing is pinned yet; `Some(existing)` when another process was first.
/// The link is atomic and fails on an existing name, so exactly one first pin wins.
fn pin_if_absent(path: &Path, pin: &HelperPin) -> anyhow::Result<Option<HelperPin>> {
    let tmp = write_temp(path, pin)?;
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_pin(path)?
            .map(Some)
            .ok_or_else(|| anyhow::anyhow!("{}: vanished while pinning", path.display())),
        Err(e) => Err(anyhow::anyhow!("{}: {e}", path.display())),
    }
}
