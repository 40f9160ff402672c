//! Who makes an operator's decision (approve, deny, kill, revoke), for the store and the
//! audit log. It is always the owner; what differs is the client it came through: the
//! command line (the socket peer's uid proved it) or a logged-in web session. The services
//! take a [`Decider`] instead of assuming the command line, so a record says which.

use serde_json::{json, Value};

use airlock_core::terminal_text::escape_line;
use airlock_core::{Attribution, Principal, Via};

use crate::service::approvals::OPERATOR;

/// The owner, deciding through one client.
#[derive(Debug, Clone)]
pub struct Decider {
    client: Client,
}

#[derive(Debug, Clone)]
enum Client {
    /// The local command line (embedded, or through the host's socket).
    Cli,
    /// The web page, in the login session named by `session` (a short, non-secret id).
    Web { session: String },
    /// The owner's account on a chat channel (`channel`, the platform's id of the owner).
    Chat { channel: String, owner_id: String },
}

impl Decider {
    /// The owner at the command line.
    pub fn cli() -> Decider {
        Decider {
            client: Client::Cli,
        }
    }

    /// The owner through the web page, logged in as web session `session` (its public
    /// id, never the cookie).
    pub fn web(session: &str) -> Decider {
        Decider {
            client: Client::Web {
                session: session.to_string(),
            },
        }
    }

    /// The owner writing on the chat channel `channel` from their paired account
    /// `owner_id` (the platform authenticates it; the channel's state names the owner).
    pub fn chat(channel: &str, owner_id: &str) -> Decider {
        Decider {
            client: Client::Chat {
                channel: channel.to_string(),
                owner_id: owner_id.to_string(),
            },
        }
    }

    /// The principal the store records as the approver or killer.
    pub fn principal(&self) -> &'static str {
        OPERATOR
    }

    /// How audit records name the act: the owner, for the owner, via this client.
    pub fn attribution(&self) -> Attribution {
        match &self.client {
            Client::Cli => Attribution::owner_cli(),
            Client::Web { .. } => Attribution {
                principal: Principal::Owner,
                on_behalf_of: Principal::Owner,
                via: web_via(),
            },
            Client::Chat { channel, .. } => Attribution {
                principal: Principal::Owner,
                on_behalf_of: Principal::Owner,
                via: crate::channels::decisions::via_of(channel),
            },
        }
    }

    /// `decided_by` in audit records: the principal and what proves the client.
    pub fn detail(&self) -> Value {
        match &self.client {
            Client::Cli => json!({
                "principal": OPERATOR,
                "via": "cli",
                "uid": nix::unistd::getuid().as_raw(),
                "user": std::env::var("USER").ok().map(|u| escape_line(&u)),
            }),
            Client::Web { session } => json!({
                "principal": OPERATOR,
                "via": "web",
                "web_session": session,
                "uid": nix::unistd::getuid().as_raw(),
            }),
            Client::Chat { channel, owner_id } => json!({
                "principal": OPERATOR,
                "via": channel,
                "platform_id": owner_id,
            }),
        }
    }
}

/// `web`, the web page's client name.
fn web_via() -> Via {
    // A fixed, valid name: parsing cannot fail, and if it ever did the act would still be
    // recorded, only under the command line's name.
    "web".parse().unwrap_or_else(|_| Via::cli())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_web_client_is_recorded_as_the_owner_via_web() {
        let d = Decider::web("w-1");
        let a = d.attribution();
        assert_eq!(a.principal, Principal::Owner);
        assert_eq!(a.via.as_str(), "web");
        assert_eq!(d.detail()["web_session"], "w-1");
        assert_eq!(Decider::cli().attribution(), Attribution::owner_cli());
    }
}
