//! Where a decider gets the Gate for each decision.
//!
//! A session can run for hours (a chat), a held request can wait for minutes, and the
//! operator may take something back meanwhile: a policy edit, `airlock net revoke`. So the
//! agent loop and the egress proxy ask their [`GateSource`] for the Gate at every decision
//! (an approval's included) rather than holding one for their whole life. A plain [`Gate`]
//! is its own source (fixed, as in tests and embeddings that reload nothing); the `airlock`
//! binary's source reloads the policy when its files change.

use std::ops::Deref;
use std::sync::Arc;

use crate::gate::Gate;

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
