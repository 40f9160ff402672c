//! # airlock-workspace — every run a transaction
//!
//! A sandboxed run writes into an overlay's upper layer, never into the workspace. When it
//! ends, this crate:
//!
//! 1. computes the **change set** from the upper layer against the workspace
//!    ([`ChangeSet::compute`]): added, modified, deleted, renamed, mode-changed files and
//!    links, with unified diffs of text files, sizes and hashes of binary ones; device
//!    nodes, FIFOs, sockets and extended attributes dropped and listed; set-user-ID,
//!    set-group-ID and sticky bits stripped; owner edits during the run flagged as
//!    conflicts;
//! 2. gives the Gate the plain facts to decide on ([`ChangeSet::summary`]) and the
//!    operator an escaped, bounded view ([`ChangeSet::render`]);
//! 3. once the Gate allowed it, **commits** it crash-safely ([`Workspace::commit`]): a
//!    checkpoint of the prior contents (content-addressed, fsynced) and a journal entry
//!    first, then the writes beneath the workspace descriptor (`openat2` with
//!    `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`, temp file and rename), then the mark that
//!    it is done. [`Workspace::open`] finishes or rolls back a commit a crash interrupted.
//! 4. keeps **checkpoints** and undoes them ([`Workspace::undo`], [`Workspace::restore`]),
//!    refusing to overwrite changes made outside Airlock unless forced.
//!
//! Host-side writes (the agent's `write_file` and `edit_file`) are staged into an
//! upper-layer-shaped directory with [`Staging`], so they take the same path.
//!
//! ## Architecture invariant
//! Computes, applies and restores; never decides. Whether a change set commits is the
//! Gate's decision, made on [`CommitSummary`]; nothing here reads policy. Every path from a
//! run is kept as raw bytes ([`RelPath`]) and shown only escaped; no link in the workspace
//! or the upper layer is ever followed. Plain blocking I/O: no async runtime.
//!
//! The on-disk format and the guarantees are in `docs/checkpoints.md`.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod apply;
mod beneath;
mod changeset;
mod diff;
mod error;
mod history;
mod journal;
mod links;
mod node;
mod objects;
mod options;
mod rel_path;
mod render;
mod scan;
mod staging;
mod summary;
mod workspace;

pub use beneath::open_subdir;
pub use changeset::{ChangeKind, ChangeSet, Conflict, Dropped, DroppedKind, Entry};
pub use diff::Diff;
pub use error::WorkspaceError;
pub use history::{CheckpointDetail, CheckpointInfo, RestoreReport};
pub use journal::{CheckpointId, CommitMeta, Op, RecordKind, Status};
pub use node::{sha256_hex, Node, SpecialKind, KEPT_MODE_BITS};
pub use options::{ChangeSetOptions, DiffLimits, Limits, PathPatterns, DEFAULT_SENSITIVE};
pub use rel_path::{display_bytes, RelPath};
pub use staging::Staging;
pub use summary::{touches, CommitSummary, LimitExceeded};
pub use workspace::{CommitStep, Recovery, Retention, Workspace};
