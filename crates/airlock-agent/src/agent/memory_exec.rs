//! Carrying out memory calls: the session's view of the memory store.
//!
//! A [`SessionMemory`] pairs the store with the namespace of the session it was made
//! for; the host makes it from the session record, so the model can never name another
//! namespace. Writes and reads take the [`Authorized`] token the Gate minted; a write the
//! Gate asked about becomes a held change, and nothing is written until the owner
//! approves it.

use airlock_core::gate::AskTicket;
use airlock_core::Authorized;
use airlock_store::{
    Listing, MemoryEntry, MemoryStore, MemoryVersion, Namespace, PendingChange, SearchHit,
    StoreError, Timestamp, WriteProvenance,
};

use super::memory_tools::{MemoryLookup, MemoryReadCall, MemoryWriteCall};

/// What a read returned.
#[derive(Debug, Clone)]
pub enum MemoryReadResult {
    Hits(Listing<SearchHit>),
    Entry(Box<MemoryEntry>),
}

/// The memory of one session's namespace.
#[derive(Clone, Copy)]
pub struct SessionMemory<'a> {
    store: &'a dyn MemoryStore,
    namespace: &'a Namespace,
}

impl std::fmt::Debug for SessionMemory<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionMemory")
            .field("namespace", &self.namespace.key())
            .finish_non_exhaustive()
    }
}

impl<'a> SessionMemory<'a> {
    /// The memory of `namespace`, which the host derives from the session (its principal
    /// and the agent's name).
    pub fn new(store: &'a dyn MemoryStore, namespace: &'a Namespace) -> SessionMemory<'a> {
        SessionMemory { store, namespace }
    }

    /// The namespace.
    pub fn namespace(&self) -> &Namespace {
        self.namespace
    }

    /// Apply a write the Gate allowed.
    pub fn write(
        &self,
        auth: Authorized<MemoryWriteCall>,
        provenance: &WriteProvenance,
    ) -> Result<MemoryVersion, StoreError> {
        self.store.memory_write(
            self.namespace,
            &auth.action().write,
            provenance,
            Timestamp::now(),
        )
    }

    /// Hold a write the Gate asked about for the owner's review.
    pub fn hold(
        &self,
        ticket: &AskTicket<MemoryWriteCall>,
        provenance: &WriteProvenance,
    ) -> Result<PendingChange, StoreError> {
        self.store.memory_propose(
            self.namespace,
            &ticket.action().write,
            provenance,
            &ticket.reasons,
            Timestamp::now(),
        )
    }

    /// Run a read the Gate allowed.
    pub fn read(&self, auth: Authorized<MemoryReadCall>) -> Result<MemoryReadResult, StoreError> {
        match &auth.action().lookup {
            MemoryLookup::Search { query, limit } => self
                .store
                .memory_search(self.namespace, query, *limit)
                .map(MemoryReadResult::Hits),
            MemoryLookup::Get { id } => self
                .store
                .memory_get(self.namespace, id)
                .map(|e| MemoryReadResult::Entry(Box::new(e))),
        }
    }

    /// Look up a record's current version to plan a forget (its tier decides the action
    /// the Gate sees). Nothing of it reaches the model.
    pub(crate) fn locate(&self, id: &str) -> Result<MemoryEntry, StoreError> {
        self.store.memory_get(self.namespace, id)
    }

    /// The pinned records, loaded at the start of every turn.
    pub fn pinned(&self) -> Result<Listing<MemoryEntry>, StoreError> {
        self.store.memory_pinned(self.namespace)
    }
}
