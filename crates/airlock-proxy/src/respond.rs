//! Answers the proxy gives itself (denials, refusals, errors) and the per-request audit
//! record.

use std::sync::{Arc, Mutex};

use airlock_audit::{AuditEvent, AuditLog};
use http::{header, Response, StatusCode};
use serde_json::{json, Value};

use crate::body::{full, ProxyBody};

/// Everything the audit log keeps about one request (never header values or bodies).
#[derive(Debug, Clone, Default)]
pub struct Exchange {
    pub method: String,
    pub scheme: String,
    pub host: String,
    pub port: u16,
    pub path: String,
    /// `allow`, `deny`, `ask-approved`, `ask-timeout`, `refused`, `error`.
    pub decision: String,
    pub status: u16,
    pub request_bytes: u64,
    pub response_bytes: u64,
    pub truncated: bool,
    pub policies: Vec<String>,
    pub reason: String,
    pub injected: Vec<String>,
    pub scrubbed: usize,
    pub upstream: Option<String>,
}

impl Exchange {
    fn detail(&self) -> Value {
        json!({
            "method": self.method, "scheme": self.scheme, "host": self.host, "port": self.port,
            "path": self.path, "decision": self.decision, "status": self.status,
            "request_bytes": self.request_bytes, "response_bytes": self.response_bytes,
            "truncated": self.truncated, "policies": self.policies, "reason": self.reason,
            "secrets_injected": self.injected, "echoes_scrubbed": self.scrubbed,
            "upstream_addr": self.upstream,
        })
    }
}

/// The audit log shared by every connection of one proxy.
#[derive(Clone)]
pub struct AuditHandle {
    pub(crate) log: Arc<Mutex<AuditLog>>,
    pub(crate) session: String,
    pub(crate) who: airlock_core::Attribution,
    /// Held by this handle and by every write it queued: the proxy's records are all
    /// written once only outside holders are left ([`crate::server::Proxy::records_token`]).
    /// The log itself may be shared with other proxies (a host's one writer), so its own
    /// count says nothing about this proxy.
    pub(crate) pending: Arc<()>,
}

impl AuditHandle {
    /// Append an event off the async threads (appends fsync). Failures are logged: the
    /// decision itself was recorded by the Gate before anything ran.
    pub(crate) fn event(&self, kind: &str, detail: Value) {
        let ev = AuditEvent::by(kind, &self.session, &self.who).with_detail(detail);
        let log = self.log.clone();
        let pending = self.pending.clone();
        let write = move || {
            let _pending = pending;
            let mut log = log.lock().unwrap_or_else(|p| p.into_inner());
            if let Err(e) = log.append(ev) {
                tracing::error!("audit append failed: {e}");
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn_blocking(write);
            }
            Err(_) => write(),
        }
    }

    pub(crate) fn exchange(&self, ex: &Exchange) {
        self.event("net.exchange", ex.detail());
    }
}

/// A plain-text answer from the proxy itself.
pub fn text(status: StatusCode, body: String) -> Response<ProxyBody> {
    let mut r = Response::new(full(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r.headers_mut()
        .insert("x-airlock-proxy", http::HeaderValue::from_static("refused"));
    r
}

/// The 403 for a Gate denial: names the deciding policies and how to allow the request.
pub fn denial_text(
    method: &str,
    url: &str,
    reasons: &[String],
    policies: &[String],
    allow_hint: &str,
) -> String {
    let mut s = format!("airlock: {method} {url} was denied by the egress policy\n");
    for r in reasons {
        s.push_str(&format!("reason: {r}\n"));
    }
    if !policies.is_empty() {
        s.push_str(&format!("deciding policies: {}\n", policies.join(", ")));
    }
    s.push_str(&format!(
        "help: an operator can allow it with `{allow_hint}`\n"
    ));
    s
}
