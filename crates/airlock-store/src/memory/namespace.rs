//! Memory namespaces: one per agent and user.
//!
//! Every memory query takes a [`Namespace`], and the SQL of every query filters on it, so
//! no read or write can reach another namespace's rows. The agent loop gets its namespace
//! from the session it runs (the session's principal and the host's agent name); no tool
//! argument can name one.

use std::fmt;

use crate::error::StoreError;

/// Longest agent or user part of a namespace.
pub const MAX_NAMESPACE_PART: usize = 64;

/// The memory space of one agent acting for one user, written `agent/user`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Namespace {
    agent: String,
    user: String,
}

impl Namespace {
    /// The namespace of `agent` acting for `user` (a session's principal).
    pub fn new(agent: &str, user: &str) -> Result<Namespace, StoreError> {
        check_part("namespace agent", agent)?;
        check_part("namespace user", user)?;
        Ok(Namespace {
            agent: agent.to_string(),
            user: user.to_string(),
        })
    }

    /// Parse the `agent/user` form the operator types (`airlock memory list --ns`).
    pub fn parse(text: &str) -> Result<Namespace, StoreError> {
        match text.split_once('/') {
            Some((agent, user)) => Namespace::new(agent, user),
            None => Err(StoreError::invalid(
                "namespace",
                format!("`{}` has no `/`", text.escape_debug()),
                "write a namespace as AGENT/USER, for example `airlock/owner`",
            )),
        }
    }

    /// The agent part.
    pub fn agent(&self) -> &str {
        &self.agent
    }

    /// The user part.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The stored form, `agent/user`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.agent, self.user)
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.agent, self.user)
    }
}

fn check_part(field: &'static str, part: &str) -> Result<(), StoreError> {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '@');
    if part.is_empty() || part.len() > MAX_NAMESPACE_PART || !part.chars().all(ok) {
        return Err(StoreError::invalid(
            field,
            format!("`{}` is not a valid namespace part", part.escape_debug()),
            format!(
                "use 1 to {MAX_NAMESPACE_PART} characters from A-Z, a-z, 0-9, `_`, `.`, `-`, `@`"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cannot_hold_a_separator_or_wildcard() {
        for bad in ["", "a/b", "%", "*", "a b", &"x".repeat(65)] {
            assert!(Namespace::new(bad, "owner").is_err(), "{bad:?}");
            assert!(Namespace::new("airlock", bad).is_err(), "{bad:?}");
        }
        let ns = Namespace::parse("airlock/owner").unwrap();
        assert_eq!(ns.key(), "airlock/owner");
        assert!(Namespace::parse("airlock").is_err());
        assert!(Namespace::parse("a/b/c").is_err());
    }
}
