//! Where a service's own records go: the kill switch, approvals answered, memory changes
//! reviewed, configuration changes.
//!
//! Embedded, a service opens the log for its call and closes it with a signed
//! checkpoint, as every command does. In the host (`airlock serve`), the same service runs
//! in the host's process, for a client of its socket or for the web page, and must not
//! open a second writer beside the host's one ([`crate::host::audit_writer`]): it appends
//! through the host's writer, and checkpoints come at the host's pace.
//!
//! The host says so once, at its start ([`serve_through_host`]), for its state dir; a
//! service finds the writer from there rather than through every signature between the
//! API route and the record. A process that is not the host, or a call for another state
//! dir, opens the log as before.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use airlock_audit::{AppendReceipt, AuditError, AuditEvent, AuditLog};

use crate::config::Config;
use crate::home::Home;
use crate::host::audit_writer::HostAudit;

/// The host's writer, for its state dir; set once by the host at its start.
static HOST_WRITER: OnceLock<(PathBuf, Weak<HostAudit>)> = OnceLock::new();

/// Record this process's services through `audit`, the host's one writer for `home`.
pub fn serve_through_host(home: &Home, audit: &Arc<HostAudit>) {
    let _ = HOST_WRITER.set((home.state.clone(), Arc::downgrade(audit)));
}

/// A service's handle on the audit log: its own, or the host's one writer.
pub enum RecordLog {
    /// Boxed: an open log is large beside a shared handle.
    Own(Box<AuditLog>),
    Host(Arc<Mutex<AuditLog>>),
}

impl RecordLog {
    /// The host's writer when this process is the host of `home`'s state dir, else the
    /// log opened for this call.
    pub fn open(home: &Home, cfg: &Config) -> anyhow::Result<RecordLog> {
        if let Some((state, audit)) = HOST_WRITER.get() {
            if *state == home.state {
                if let Some(audit) = audit.upgrade() {
                    return Ok(RecordLog::Host(audit.log(cfg)?));
                }
            }
        }
        Ok(RecordLog::Own(Box::new(crate::runtime::open_audit(
            home, cfg,
        )?)))
    }

    /// Work with the log itself, for helpers that take `&mut AuditLog` (the host's writer
    /// is locked for the call; nothing in `f` may open or lock it again).
    pub fn with<R>(&mut self, f: impl FnOnce(&mut AuditLog) -> R) -> R {
        match self {
            RecordLog::Own(log) => f(log),
            RecordLog::Host(log) => f(&mut crate::service::exec::lock(log)),
        }
    }

    pub fn append(&mut self, ev: AuditEvent) -> Result<AppendReceipt, AuditError> {
        self.with(|log| log.append(ev))
    }

    /// Done: a log of its own is closed with a signed checkpoint; the host's writer stays
    /// open.
    pub fn close(self) -> Result<(), AuditError> {
        match self {
            RecordLog::Own(log) => (*log).close(),
            RecordLog::Host(_) => Ok(()),
        }
    }
}
