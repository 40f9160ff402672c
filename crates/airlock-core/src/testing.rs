//! Test-only token minting for executor crates' own tests (feature `testing`).
//!
//! Executors require [`Authorized`] so they cannot run anything the Gate did not allow.
//! Their unit tests still need to run payloads; this module lets them, and only when the
//! `testing` feature is on. The `airlock` binary never enables it.

use crate::action::IntoAction;
use crate::authorized::{Authorized, RecordReceipt};

/// Mint a token for `action` without a Gate decision. Test code only.
pub fn authorize_for_tests<A: IntoAction>(action: A) -> Authorized<A> {
    let hash = action
        .to_action()
        .hash()
        .unwrap_or_else(|_| "sha256:test".into());
    Authorized::mint(
        action,
        hash,
        "test-session".into(),
        RecordReceipt {
            seq: 0,
            record_hash: "test".into(),
        },
    )
}
