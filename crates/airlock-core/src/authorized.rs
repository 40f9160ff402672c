//! `Authorized<A>`: proof that the Gate allowed an action *and* that the decision was
//! durably recorded. Executors take one, so an executor that skips the Gate does not compile.
//!
//! The constructor is `pub(crate)`: only code in `airlock-core` (the Gate and the approval
//! path) can mint a token. Fields are private so a token cannot be built by struct literal.

use crate::action::IntoAction;

/// A receipt that the decision for an action was appended to the audit log.
/// Produced by a [`crate::sink::DecisionSink`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordReceipt {
    /// Sequence number of the audit record that holds the decision.
    pub seq: u64,
    /// Hash of that audit record.
    pub record_hash: String,
}

/// The right to execute exactly `A`, granted by the Gate.
#[derive(Debug)]
pub struct Authorized<A: IntoAction> {
    action: A,
    action_hash: String,
    session: String,
    receipt: RecordReceipt,
}

impl<A: IntoAction> Authorized<A> {
    pub(crate) fn mint(
        action: A,
        action_hash: String,
        session: String,
        receipt: RecordReceipt,
    ) -> Self {
        Authorized {
            action,
            action_hash,
            session,
            receipt,
        }
    }

    /// The authorized payload. Executors must run this value, byte for byte.
    pub fn action(&self) -> &A {
        &self.action
    }

    /// `sha256:` hash of the canonical action the Gate decided on.
    pub fn action_hash(&self) -> &str {
        &self.action_hash
    }

    /// Session the action belongs to.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// Where the allowing decision sits in the audit log.
    pub fn receipt(&self) -> &RecordReceipt {
        &self.receipt
    }

    /// Consume the token and take the payload. The executor should do this only at the
    /// moment it executes.
    pub fn into_action(self) -> A {
        self.action
    }
}
