//! Who acts: the principals every audit record names, defined once for the whole host.
//!
//! A record says who did something (`principal`), whose authority it ran under
//! (`on_behalf_of`) and the client or channel it came through (`via`). Anything the model
//! proposed is an `agent:…` principal, even when the operator started the run, so the log
//! never credits the owner with what a (possibly hijacked) model asked for.
//!
//! The text forms are strict: one spelling per principal, no surrounding space, no empty or
//! over-long parts, no characters outside a small set. A stored or configured principal
//! that does not parse is refused, never guessed at.
//!
//! ```
//! use airlock_core::principal::Principal;
//! let p: Principal = "member:telegram:12345".parse().unwrap();
//! assert_eq!(p.to_string(), "member:telegram:12345");
//! assert!("Owner".parse::<Principal>().is_err());
//! let sub = Principal::sub_agent("s-2", "s-1").unwrap();
//! assert_eq!(sub.to_string(), "agent:s-2;parent=s-1");
//! ```

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Longest part (channel, platform id, session id, system part) of a principal.
pub const MAX_PART_BYTES: usize = 128;

/// One acting party.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Principal {
    /// The person who installed and runs this host.
    Owner,
    /// An administrator of a chat channel, by the channel's own user id.
    Admin {
        channel: String,
        platform_id: String,
    },
    /// A member of a chat channel, by the channel's own user id.
    Member {
        channel: String,
        platform_id: String,
    },
    /// The model of a session; `parent` is the session that spawned it, for sub-agents.
    Agent {
        session: String,
        parent: Option<String>,
    },
    /// A part of the host acting on its own (timeouts, the scheduler, the proxy, …).
    System { part: String },
}

/// Why a principal (or a `via`) string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed principal {text:?}: {why}\nhelp: write `owner`, `admin:<channel>:<platform-id>`, `member:<channel>:<platform-id>`, `agent:<session-id>` (optionally `;parent=<session-id>`) or `system:<part>`")]
pub struct PrincipalError {
    pub text: String,
    pub why: String,
}

fn err(text: &str, why: impl Into<String>) -> PrincipalError {
    PrincipalError {
        text: text.chars().take(200).collect(),
        why: why.into(),
    }
}

/// A channel or system-part name: lower-case ASCII letters, digits, `-` and `_`, starting
/// with a letter.
fn check_name<'a>(text: &str, what: &str, part: &'a str) -> Result<&'a str, PrincipalError> {
    check_len(text, what, part)?;
    let starts = part.as_bytes()[0].is_ascii_lowercase();
    let ok = part
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if !starts || !ok {
        return Err(err(
            text,
            format!("the {what} {part:?} must be lower-case letters, digits, `-` or `_`, starting with a letter"),
        ));
    }
    Ok(part)
}

/// An identifier given by someone else (a platform's user id, a session id): ASCII letters,
/// digits and `.`, `_`, `-`, `@`, `+`, starting with a letter or digit. No `:` or `;`, so
/// the text form stays unambiguous.
fn check_id<'a>(text: &str, what: &str, part: &'a str) -> Result<&'a str, PrincipalError> {
    check_len(text, what, part)?;
    let starts = part.as_bytes()[0].is_ascii_alphanumeric();
    let ok = part
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'@' | b'+'));
    if !starts || !ok {
        return Err(err(
            text,
            format!("the {what} {part:?} must be ASCII letters, digits, `.`, `_`, `-`, `@` or `+`, starting with a letter or digit"),
        ));
    }
    Ok(part)
}

fn check_len(text: &str, what: &str, part: &str) -> Result<(), PrincipalError> {
    if part.is_empty() {
        return Err(err(text, format!("the {what} is empty")));
    }
    if part.len() > MAX_PART_BYTES {
        return Err(err(
            text,
            format!("the {what} is longer than {MAX_PART_BYTES} bytes"),
        ));
    }
    Ok(())
}

impl Principal {
    /// The model of session `session`.
    pub fn agent(session: &str) -> Result<Principal, PrincipalError> {
        let text = format!("agent:{session}");
        check_id(&text, "session id", session)?;
        Ok(Principal::Agent {
            session: session.to_string(),
            parent: None,
        })
    }

    /// The model of sub-agent session `session`, spawned by session `parent`.
    pub fn sub_agent(session: &str, parent: &str) -> Result<Principal, PrincipalError> {
        format!("agent:{session};parent={parent}").parse()
    }

    /// A part of the host acting on its own, e.g. `system:approvals`.
    pub fn system(part: &str) -> Result<Principal, PrincipalError> {
        format!("system:{part}").parse()
    }

    /// Whether this principal may approve a held action. Only the owner may, today; a
    /// channel's admins get this only when a channel defines what their approval covers.
    pub fn may_approve(&self) -> bool {
        matches!(self, Principal::Owner)
    }

    /// Whether this is a model's principal (whose proposals are never the owner's word).
    pub fn is_agent(&self) -> bool {
        matches!(self, Principal::Agent { .. })
    }
}

impl FromStr for Principal {
    type Err = PrincipalError;

    fn from_str(text: &str) -> Result<Principal, PrincipalError> {
        if text == "owner" {
            return Ok(Principal::Owner);
        }
        let Some((kind, rest)) = text.split_once(':') else {
            return Err(err(text, "it is not `owner` and has no `<kind>:`"));
        };
        match kind {
            "admin" | "member" => {
                let mut parts = rest.split(':');
                let (Some(channel), Some(id), None) = (parts.next(), parts.next(), parts.next())
                else {
                    return Err(err(
                        text,
                        format!("`{kind}:` takes exactly `<channel>:<platform-id>`"),
                    ));
                };
                let channel = check_name(text, "channel", channel)?.to_string();
                let platform_id = check_id(text, "platform id", id)?.to_string();
                Ok(if kind == "admin" {
                    Principal::Admin {
                        channel,
                        platform_id,
                    }
                } else {
                    Principal::Member {
                        channel,
                        platform_id,
                    }
                })
            }
            "agent" => {
                let (session, parent) = match rest.split_once(';') {
                    None => (rest, None),
                    Some((session, tail)) => match tail.strip_prefix("parent=") {
                        Some(parent) => (session, Some(parent)),
                        None => {
                            return Err(err(
                                text,
                                "after `;` only `parent=<session-id>` may follow",
                            ))
                        }
                    },
                };
                let session = check_id(text, "session id", session)?.to_string();
                let parent = match parent {
                    Some(p) => {
                        let p = check_id(text, "parent session id", p)?;
                        if p == session {
                            return Err(err(text, "a session cannot be its own parent"));
                        }
                        Some(p.to_string())
                    }
                    None => None,
                };
                Ok(Principal::Agent { session, parent })
            }
            "system" => Ok(Principal::System {
                part: check_name(text, "system part", rest)?.to_string(),
            }),
            other => Err(err(
                text,
                format!("unknown kind {other:?} (expected owner, admin, member, agent or system)"),
            )),
        }
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Principal::Owner => f.write_str("owner"),
            Principal::Admin {
                channel,
                platform_id,
            } => write!(f, "admin:{channel}:{platform_id}"),
            Principal::Member {
                channel,
                platform_id,
            } => write!(f, "member:{channel}:{platform_id}"),
            Principal::Agent {
                session,
                parent: None,
            } => write!(f, "agent:{session}"),
            Principal::Agent {
                session,
                parent: Some(p),
            } => write!(f, "agent:{session};parent={p}"),
            Principal::System { part } => write!(f, "system:{part}"),
        }
    }
}

impl TryFrom<String> for Principal {
    type Error = PrincipalError;
    fn try_from(s: String) -> Result<Principal, PrincipalError> {
        s.parse()
    }
}

impl From<Principal> for String {
    fn from(p: Principal) -> String {
        p.to_string()
    }
}

/// The client or channel an act came through: `cli` today; `web`, `telegram`, … later.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Via(String);

impl Via {
    /// The local command line.
    pub fn cli() -> Via {
        Via("cli".into())
    }

    /// Nothing outside: a part of the host acting on its own (a timeout, the scheduler).
    pub fn internal() -> Via {
        Via("internal".into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for Via {
    type Err = PrincipalError;
    fn from_str(text: &str) -> Result<Via, PrincipalError> {
        check_name(text, "client or channel name", text).map(|s| Via(s.to_string()))
    }
}

impl fmt::Display for Via {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for Via {
    type Error = PrincipalError;
    fn try_from(s: String) -> Result<Via, PrincipalError> {
        s.parse()
    }
}

impl From<Via> for String {
    fn from(v: Via) -> String {
        v.0
    }
}

/// Who did something, under whose authority, and through which client or channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attribution {
    pub principal: Principal,
    pub on_behalf_of: Principal,
    pub via: Via,
}

impl Attribution {
    /// The owner acting at the local command line.
    pub fn owner_cli() -> Attribution {
        Attribution {
            principal: Principal::Owner,
            on_behalf_of: Principal::Owner,
            via: Via::cli(),
        }
    }

    /// A part of the host acting for `on_behalf_of`, e.g. expiring a request.
    pub fn system(part: &str, on_behalf_of: Principal, via: Via) -> Attribution {
        Attribution {
            // The part names are fixed strings in this code base; a bad one is a bug that
            // must still not panic, so it falls back to the generic host principal.
            principal: Principal::system(part).unwrap_or(Principal::System {
                part: "airlock".into(),
            }),
            on_behalf_of,
            via,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips() {
        for text in [
            "owner",
            "admin:telegram:12345",
            "member:slack:U024BE7LH",
            "member:matrix:alice@example.org",
            "agent:run-1733-42",
            "agent:s-2;parent=s-1",
            "system:scheduler",
            "system:egress-approvals",
        ] {
            let p: Principal = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(p.to_string(), text);
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(serde_json::from_str::<Principal>(&json).unwrap(), p);
        }
    }

    #[test]
    fn malformed_principals_are_refused() {
        for bad in [
            "",
            "Owner",
            " owner",
            "owner ",
            "root",
            "agent",
            "agent:",
            "agent:s 1",
            "agent:s:1",
            "agent:s-1;parent=",
            "agent:s-1;parent=s-1",
            "agent:s-1;child=s-2",
            "admin:telegram",
            "admin::123",
            "admin:telegram:",
            "admin:Telegram:1",
            "admin:telegram:1:2",
            "member:telegram:12\n3",
            "system:",
            "system:Sched",
            "user:alice",
            "owner (authorized by the agent loop)",
        ] {
            let e = bad.parse::<Principal>().unwrap_err();
            assert!(e.to_string().contains("help:"), "{bad:?}: {e}");
        }
        let long = format!("agent:{}", "a".repeat(MAX_PART_BYTES + 1));
        assert!(long
            .parse::<Principal>()
            .unwrap_err()
            .why
            .contains("longer"));
        assert!(serde_json::from_str::<Principal>("\"agent:\"").is_err());
    }

    #[test]
    fn only_the_owner_may_approve() {
        assert!(Principal::Owner.may_approve());
        for p in [
            "admin:telegram:1",
            "member:telegram:1",
            "agent:s-1",
            "system:approvals",
        ] {
            assert!(!p.parse::<Principal>().unwrap().may_approve(), "{p}");
        }
    }

    #[test]
    fn via_is_a_lower_case_name() {
        assert_eq!("telegram".parse::<Via>().unwrap().as_str(), "telegram");
        for bad in ["", "CLI", "c li", "web:1", "-x"] {
            assert!(bad.parse::<Via>().is_err(), "{bad:?}");
        }
    }

    /// A decision must name who proposed it: a session whose principal is no principal is
    /// refused before anything is recorded, and a well-formed one proposes as its agent.
    #[test]
    fn i1_a_session_with_a_malformed_principal_cannot_decide() {
        use crate::authorized::RecordReceipt;
        use crate::facts::GateConfig;
        use crate::gate::{Gate, Session, Verdict};
        use crate::policy::{PolicyEngine, Profile};
        use crate::sink::{DecisionRecord, DecisionSink, SinkError};

        struct Keep(Vec<DecisionRecord>);
        impl DecisionSink for Keep {
            fn record(&mut self, r: &DecisionRecord) -> Result<RecordReceipt, SinkError> {
                self.0.push(r.clone());
                Ok(RecordReceipt {
                    seq: self.0.len() as u64,
                    record_hash: "0".repeat(64),
                })
            }
        }
        let gate = Gate::new(
            PolicyEngine::builtin(Profile::Default).unwrap(),
            GateConfig::new("/w"),
        );
        let action = crate::Action::from_json(r#"{"type":"fs.read","path":"/w/a.txt"}"#).unwrap();
        let mut sink = Keep(Vec::new());
        for bad in ["Owner", "owner (terminal)", "user:alice"] {
            let session = Session::new("s-1", bad);
            match gate.decide(&session, action.clone(), &mut sink) {
                Verdict::Deny(d) => assert!(d.reasons[0].contains("malformed principal"), "{d:?}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
        assert!(
            sink.0.is_empty(),
            "a decision was recorded without a valid principal"
        );
        let session = Session::new("s-1", "owner");
        assert!(matches!(
            gate.decide(&session, action, &mut sink),
            Verdict::Allow(_)
        ));
        assert_eq!(sink.0[0].principal, "agent:s-1");
        assert_eq!(sink.0[0].on_behalf_of, "owner");
        assert_eq!(sink.0[0].via, "cli");
    }
}
