//! Memory for the agent loop on this host: the store's memory, bound to the namespace of
//! the session being run.
//!
//! The namespace is `airlock/<principal>`: the built-in agent acting for the session's
//! principal. It comes from the stored session record, never from anything the model
//! sends, so a session cannot read or write another namespace even by naming it.

use airlock_agent::agent::SessionMemory;
use airlock_store::{MemoryRetention, Namespace, SessionRecord, SqliteStore};

use crate::home::Home;
use crate::service::approvals::open_store;

/// The agent part of the namespace of Airlock's own loop.
pub const AGENT_NAME: &str = "airlock";

/// The namespace a session's memory lives in.
pub fn session_namespace(record: &SessionRecord) -> anyhow::Result<Namespace> {
    Namespace::new(AGENT_NAME, &record.gate.principal).map_err(|e| {
        anyhow::anyhow!(
            "session `{}` has no usable memory namespace: {e}",
            record.gate.id
        )
    })
}

/// The memory store of one session's namespace.
pub struct HostMemory {
    store: SqliteStore,
    namespace: Namespace,
}

impl HostMemory {
    /// Memory for the session `record`, on its own connection to the state database.
    /// Records past their `retention` are neither recalled nor loaded.
    pub fn open(
        home: &Home,
        record: &SessionRecord,
        retention: MemoryRetention,
    ) -> anyhow::Result<HostMemory> {
        Ok(HostMemory {
            store: open_store(home)?.with_memory_retention(retention),
            namespace: session_namespace(record)?,
        })
    }

    /// The view the agent loop uses.
    pub fn session_memory(&self) -> SessionMemory<'_> {
        SessionMemory::new(&self.store, &self.namespace)
    }

    /// The namespace.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }
}
