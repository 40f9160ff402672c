//! # airlock-proxy — the sandbox's only way out
//!
//! Every request is a `net.request` decided by the Gate; see the crate README section in
//! `docs/` and [`server::Proxy`] for how a run starts one.
pub mod cedar;
mod fsutil;
pub use fsutil::{write_atomic, FileLock};
pub mod rules;

pub use cedar::{rules_to_cedar, RULES_POLICY_NAME};
pub use rules::{NetRule, NetRules, RulesError, RULES_FILE};
pub mod ca;
pub mod ca_bundle;
pub mod net;
pub mod secrets;
pub mod ssrf;

pub use ca::{
    ensure_ca, generate_ca, upstream_client_config, CertificateAuthority, CA_CERT_FILE, CA_KEY_FILE,
};
pub use ca_bundle::{
    build_ca_bundle, ensure_ca_bundle, ensure_ca_bundle_from, system_roots, SystemRoots,
    CA_BUNDLE_FILE, SYSTEM_CA_FILES,
};
pub use net::{BoxFuture, BoxStream, Connector, Resolver, SystemResolver, TcpConnector};
pub use secrets::SecretStore;
pub use ssrf::AddressGuard;
pub mod approval;
pub mod body;
mod client_hello;
mod exchange;
pub mod limits;
mod request_target;
pub mod respond;
pub mod server;
mod tunnel;
mod upstream_io;

pub use approval::{ApprovalHook, ApprovalRequest, ChannelApprovals, NoApprovals, PendingApproval};
pub use limits::Limits;
pub use server::{bind_unix_socket, Proxy, ProxyConfig, ProxyError, ProxyHandle};
