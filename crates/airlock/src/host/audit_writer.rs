//! The host's one audit writer: every run in the host appends through the same open log.
//!
//! Embedded, each command opens the log (loading the signing key and every stored secret
//! for the redactor) and closes it with a signed checkpoint. In the host that work is done
//! once: records still go through [`airlock_audit::AuditLog::append`], which takes the
//! directory lock, chains onto the record really last on disk and syncs each record before
//! it returns (I1: a decision is durable before its action runs), so the records are the
//! same as embedded; checkpoints come every `[audit] checkpoint_every` records and one at
//! the host's stop ([`HostAudit::close`]).
//!
//! The writer is opened again when what it was opened with changes: the `[audit]`
//! options, or the secrets store, whose every secret the redactor must know (I10: a
//! secret added while the host runs is redacted from the next record on). Runs still
//! holding the old handle finish through it; its last holder's drop signs its checkpoint.
//!
//! At the stop ([`HostAudit::close`]) the last checkpoint is signed even when a run past
//! the stop's grace still holds the writer: the host's stop record names such runs as
//! interrupted (the process, and with it their sandboxes, ends right after), and the
//! checkpoint covers it. Once closed, the writer opens no new handle, so nothing of the
//! host's own starts a record past its last checkpoint.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use airlock_audit::{AuditEvent, AuditLog, AuditOptions};

use crate::config::Config;
use crate::home::Home;

/// The secrets store file as it was when the writer loaded it: (size, mtime, mtime_nsec, inode).
type SecretsStamp = Option<(u64, i64, i64, u64)>;

struct Opened {
    log: Arc<Mutex<AuditLog>>,
    options: AuditOptions,
    secrets: SecretsStamp,
}

/// See the module documentation.
pub struct HostAudit {
    home: Home,
    current: Mutex<Current>,
}

#[derive(Default)]
struct Current {
    opened: Option<Opened>,
    /// Set by [`HostAudit::close`]: no handle is opened again.
    closed: bool,
}

fn secrets_file(home: &Home) -> PathBuf {
    home.config.join(airlock_proxy::secrets::SECRETS_FILE)
}

fn secrets_stamp(home: &Home) -> SecretsStamp {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(secrets_file(home))
        .ok()
        .map(|m| (m.size(), m.mtime(), m.mtime_nsec(), m.ino()))
}

/// The number of appends `log` refused so far.
pub fn failures(log: &Mutex<AuditLog>) -> u64 {
    crate::service::exec::lock(log)
        .failed_appends()
        .map(|(n, _)| n)
        .unwrap_or(0)
}

impl HostAudit {
    pub fn new(home: Home) -> HostAudit {
        HostAudit {
            home,
            current: Mutex::new(Current::default()),
        }
    }

    fn current(&self) -> MutexGuard<'_, Current> {
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The writer for a run under `cfg`, opened now if none is, or if it was opened with
    /// other `[audit]` options or before the secrets store last changed.
    pub fn log(&self, cfg: &Config) -> anyhow::Result<Arc<Mutex<AuditLog>>> {
        let options = crate::runtime::audit_options(cfg);
        let secrets = secrets_stamp(&self.home);
        let mut current = self.current();
        anyhow::ensure!(
            !current.closed,
            "the host has stopped: its audit log is closed with its last checkpoint, and nothing more is recorded through it"
        );
        if let Some(o) = current.opened.as_ref() {
            if o.options == options && o.secrets == secrets {
                return Ok(o.log.clone());
            }
        }
        let log = Arc::new(Mutex::new(crate::runtime::open_audit(&self.home, cfg)?));
        // The old handle, if any, is dropped by its last holder, which signs a checkpoint.
        current.opened = Some(Opened {
            log: log.clone(),
            options,
            secrets,
        });
        Ok(log)
    }

    /// Append one record of the host's own act (`system:<part>`, on the owner's behalf)
    /// through the writer: its start and stop, what it recovered, an edit it refused to
    /// load, what a channel dropped. The operator did not make these at a command line,
    /// so they do not name the operator as who decided.
    pub fn record_system(
        &self,
        cfg: &Config,
        part: &str,
        kind: &str,
        detail: serde_json::Value,
    ) -> anyhow::Result<()> {
        let log = self.log(cfg)?;
        let who = airlock_core::Attribution::system(
            part,
            airlock_core::Principal::Owner,
            airlock_core::Via::internal(),
        );
        crate::service::exec::lock(&log)
            .append(
                AuditEvent::by(kind, crate::config_audit::CONFIG_SESSION, &who).with_detail(detail),
            )
            .map_err(|e| anyhow::anyhow!("the host's `{kind}` record failed: {e}"))?;
        Ok(())
    }

    /// Close the writer with a signed checkpoint (at the host's stop). When runs past the
    /// stop's grace still hold it, the checkpoint is signed anyway, over the last record
    /// on disk (the stop's own, which names them as interrupted): the process ends right
    /// after, and their sandboxes with it. Returns how many handles other holders kept.
    pub fn close(&self) -> anyhow::Result<usize> {
        let opened = {
            let mut current = self.current();
            current.closed = true;
            current.opened.take()
        };
        let Some(opened) = opened else {
            return Ok(0);
        };
        match Arc::try_unwrap(opened.log) {
            Ok(log) => log
                .into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .close()
                .map(|()| 0)
                .map_err(|e| anyhow::anyhow!("closing the audit log: {e}")),
            Err(shared) => {
                let holders = Arc::strong_count(&shared) - 1;
                crate::service::exec::lock(&shared)
                    .checkpoint()
                    .map_err(|e| anyhow::anyhow!("signing the audit log's last checkpoint: {e}"))?;
                Ok(holders)
            }
        }
    }
}
