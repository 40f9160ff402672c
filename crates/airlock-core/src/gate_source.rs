//! Where the loop gets the Gate for each decision.
//!
//! A session can run for hours (a chat), and the operator may take something back while
//! it does: a policy edit, `airlock net revoke`. So the loop asks its [`GateSource`] for
//! the Gate at every decision rather than holding one for the session's life. A plain
//! [`Gate`] is its own source (fixed for the session, as in tests and embeddings that
//! reload nothing); the `airlock` binary's source reloads the policy when its files change.

use std::ops::Deref;
use std::sync::Arc;

use airlock_core::gate::Gate;

/// The Gate in force now.
pub enum CurrentGate<'a> {
    Borrowed(&'a Gate),
    Shared(Arc<Gate>),
}

impl Deref for CurrentGate<'_> {
    type Target = Gate;

    fn deref(&self) -> &Gate {
        match self {
            CurrentGate::Borrowed(g) => g,
            CurrentGate::Shared(g) => g,
        }
    }
}

/// Gives the Gate in force for the next decision.
pub trait GateSource: Send + Sync {
    fn current(&self) -> CurrentGate<'_>;
}

impl GateSource for Gate {
    fn current(&self) -> CurrentGate<'_> {
        CurrentGate::Borrowed(self)
    }
}
