//! One HTTP request through the proxy: check, decide (Gate), inject, connect to the
//! checked address, forward, and pass the response back capped and scrubbed.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use airlock_core::action::NetRequestAction;
use airlock_core::gate::Verdict;
use airlock_core::header_facts::HOP_BY_HOP;
use airlock_core::Action;
use airlock_core::Authorized;
use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use serde_json::json;

use crate::approval::ApprovalRequest;
use crate::body::{CappedBody, ProxyBody};
use crate::net::BoxStream;
use crate::request_target::{
    check_absolute_form, check_method, decide_target, has_method_param, strip_method_overrides,
};
use crate::respond::{denial_text, text, Exchange};
use crate::secrets::Destination;
use crate::server::Inner;
use crate::upstream_io;

mod headers;
mod method_override;

/// Where a request goes, as the proxy established it (absolute URI or CONNECT target).
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub scheme: &'static str,
    pub host: String,
    pub port: u16,
}

impl Target {
    pub(crate) fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        let default = if self.scheme == "https" { 443 } else { 80 };
        if self.port == default {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }

    pub(crate) fn allow_hint(&self, method: Option<&str>) -> String {
        let mut s = format!("airlock net allow {}:{}", bare(&self.host), self.port);
        if let Some(m) = method {
            s.push_str(&format!(" --methods {m}"));
        }
        s
    }
}

/// `[v6]` for IPv6 literals, the host itself otherwise.
pub(crate) fn bracket(host: &str) -> String {
    bare(host)
}

fn bare(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}

fn strip_hop_by_hop(h: &mut HeaderMap) {
    let listed: Vec<String> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|s| s.trim().to_ascii_lowercase()))
        .collect();
    for name in HOP_BY_HOP
        .iter()
        .copied()
        .chain(listed.iter().map(String::as_str))
    {
        h.remove(name);
    }
}

/// Handle one request whose destination is `target`.
pub(crate) async fn handle(
    inner: Arc<Inner>,
    req: Request<Incoming>,
    target: Target,
) -> Response<ProxyBody> {
    let (mut parts, body) = req.into_parts();
    let method = parts.method.as_str().to_string();
    let raw_url = format!(
        "{}://{}{}",
        target.scheme,
        target.authority(),
        parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/")
    );
    let mut ex = Exchange {
        method: method.clone(),
        scheme: target.scheme.into(),
        host: target.host.clone(),
        port: target.port,
        path: parts.uri.path().to_string(),
        ..Default::default()
    };
    let refuse = |ex: &mut Exchange, status: StatusCode, reason: String| {
        ex.decision = "refused".into();
        ex.status = status.as_u16();
        ex.reason = reason.clone();
        inner.audit.exchange(ex);
        text(
            status,
            format!("airlock: {} {} was refused: {reason}\n", ex.method, raw_url),
        )
    };

    if target.scheme == "https" {
        if let Some(h) = parts.headers.get(header::HOST) {
            let host = h.to_str().unwrap_or("").to_ascii_lowercase();
            if host != target.authority()
                && host != format!("{}:{}", bare(&target.host), target.port)
            {
                let reason = format!(
                    "the Host header {host:?} does not match the TLS server name {:?}\nhelp: send each request to the host the connection was opened for",
                    target.host
                );
                return refuse(&mut ex, StatusCode::MISDIRECTED_REQUEST, reason);
            }
        }
    }
    let checked = check_method(&method)
        .and_then(|()| {
            if target.scheme == "https" {
                check_absolute_form(&target, &parts.uri)
            } else {
                Ok(())
            }
        })
        .and_then(|()| decide_target(&target, &parts.uri, inner.paths_limited(&target.host)));
    let decided = match checked {
        Ok(d) => d,
        Err((status, reason)) => return refuse(&mut ex, status, reason),
    };
    ex.path = decided.path.clone();
    let url = decided.url.clone();
    // Every rule is method-sensitive: a rule's method list, and the ask that follows
    // untrusted content for anything but a bodiless GET, HEAD or OPTIONS. So a method
    // override can never make the upstream act on another method than the one decided.
    let query = decided.target.split_once('?').map(|(_, q)| q).unwrap_or("");
    if has_method_param(query.as_bytes()) {
        let reason = "the query names another method in `_method`, which the upstream could act on instead of the decided one\nhelp: send the request with the method itself".to_string();
        return refuse(&mut ex, StatusCode::FORBIDDEN, reason);
    }
    // Dropped, not refused: a client may add them by habit, and without them the
    // upstream sees the method the Gate decided on.
    strip_method_overrides(&mut parts.headers);
    // Before the decision, so the Gate judges (and an approval binds) the headers that
    // will leave, and none that a `Connection` list would drop anyway.
    strip_hop_by_hop(&mut parts.headers);
    let l = &inner.limits;
    if !inner
        .rate
        .allow(&target.host, l.host_rate_per_sec, l.host_burst)
    {
        let reason = format!(
            "rate limit for {} reached ({}/s, burst {})\nhelp: slow down and retry",
            target.host, l.host_rate_per_sec, l.host_burst
        );
        return refuse(&mut ex, StatusCode::TOO_MANY_REQUESTS, reason);
    }
    let body = match Limited::new(body, l.max_request_body as usize)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            let reason = if e
                .downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                format!(
                    "the request body is over the {}-byte cap\nhelp: send smaller requests",
                    l.max_request_body
                )
            } else {
                format!("reading the request body failed: {e}")
            };
            return refuse(&mut ex, StatusCode::PAYLOAD_TOO_LARGE, reason);
        }
    };
    if let Some(place) = method_override::body_names_method(&parts.headers, &body) {
        let reason = format!("the body names another method in `_method` (a {place}), which the upstream could act on instead of the decided one\nhelp: send the request with the method itself");
        return refuse(&mut ex, StatusCode::FORBIDDEN, reason);
    }
    let header_bytes: u64 = parts
        .headers
        .iter()
        .map(|(k, v)| (k.as_str().len() + v.len() + 4) as u64)
        .sum();
    let out_bytes = method.len() as u64 + url.len() as u64 + header_bytes + body.len() as u64;
    ex.request_bytes = out_bytes;
    if let Err(used) = inner.budget.take(out_bytes, l.egress_budget) {
        let reason = format!(
            "the session's egress budget is spent ({used} of {} bytes)\nhelp: an operator can raise the budget for new runs",
            l.egress_budget
        );
        return refuse(&mut ex, StatusCode::FORBIDDEN, reason);
    }

    let to = Destination {
        scheme: target.scheme,
        host: &target.host,
        port: target.port,
        path: &ex.path,
    };
    let fields = headers::header_fields(&parts.headers, inner.terms().injector.secrets(), &to);
    let fields = match fields {
        Ok(f) => f,
        Err(reason) => return refuse(&mut ex, StatusCode::BAD_REQUEST, reason),
    };
    let action = NetRequestAction {
        method: method.clone(),
        url: url.clone(),
        headers: fields,
        body_bytes: body.len() as u64,
        body_sha256: (!body.is_empty()).then(|| airlock_core::canonical::sha256_hex(&body)),
    };
    let preview = crate::approval::body_preview(&body);
    let auth = match authorize(&inner, action, preview, &mut ex, &target).await {
        Ok(a) => a,
        Err(resp) => return resp,
    };
    forward(inner, auth, target, parts.headers, decided.target, body, ex).await
}

/// Ask the Gate (recording the decision), and for *ask* wait for the approval hook.
pub(crate) async fn authorize(
    inner: &Arc<Inner>,
    action: NetRequestAction,
    body_preview: Option<String>,
    ex: &mut Exchange,
    target: &Target,
) -> Result<Authorized<NetRequestAction>, Response<ProxyBody>> {
    let session = inner.session();
    let hint_method = (action.method != "CONNECT").then(|| action.method.clone());
    let deny = |ex: &mut Exchange, decision: &str, reasons: &[String], policies: &[String]| {
        ex.decision = decision.into();
        ex.status = 403;
        ex.policies = policies.to_vec();
        ex.reason = reasons.join("; ");
        inner.audit.exchange(ex);
        let body = denial_text(
            &ex.method,
            &action.url,
            reasons,
            policies,
            &target.allow_hint(hint_method.as_deref()),
        );
        text(StatusCode::FORBIDDEN, body)
    };
    let verdict = {
        let (inner2, session2, action2) = (inner.clone(), session.clone(), action.clone());
        tokio::task::spawn_blocking(move || {
            let mut log = inner2.audit.log.lock().unwrap_or_else(|p| p.into_inner());
            inner2.gate.current().decide(&session2, action2, &mut *log)
        })
        .await
    };
    let verdict = match verdict {
        Ok(v) => v,
        Err(e) => {
            return Err(deny(
                ex,
                "error",
                &[format!("the decision task failed: {e}")],
                &[],
            ))
        }
    };
    match verdict {
        Verdict::Allow(a) => {
            ex.decision = "allow".into();
            Ok(a)
        }
        Verdict::Deny(d) => Err(deny(ex, "deny", &d.reasons, &d.policies)),
        Verdict::Ask(ticket) => {
            let req = ApprovalRequest {
                session: ticket.session.clone(),
                action: ticket.action().clone(),
                action_hash: ticket.action_hash.clone(),
                reasons: ticket.reasons.clone(),
                policies: ticket.policies.clone(),
                body_preview,
            };
            let policies = ticket.policies.clone();
            let timeout = inner.limits.ask_timeout;
            let answer = tokio::time::timeout(timeout, inner.terms().approvals.request(req)).await;
            let approval = match answer {
                Ok(Some(a)) => a,
                Ok(None) => {
                    let r = vec!["the approval was refused".to_string()];
                    return Err(deny(ex, "ask-refused", &r, &policies));
                }
                Err(_) => {
                    let r = vec![format!(
                        "no approval arrived within {} s, so the request is denied",
                        timeout.as_secs_f64()
                    )];
                    return Err(deny(ex, "ask-timeout", &r, &policies));
                }
            };
            let (inner2, session2) = (inner.clone(), session.clone());
            let approved = tokio::task::spawn_blocking(move || {
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0);
                // An approval releases the held request; it does not override a forbid
                // (or a revoked rule) that came while it waited: the request is decided
                // again with the policy in force now.
                let gate = inner2.gate.current();
                gate.still_permits(&session2, &Action::NetRequest(ticket.action().clone()))?;
                let mut log = inner2.audit.log.lock().unwrap_or_else(|p| p.into_inner());
                gate.approve(ticket, &approval, now, &mut *log)
                    .map_err(|e| e.to_string())
            })
            .await;
            match approved {
                Ok(Ok(a)) => {
                    ex.decision = "ask-approved".into();
                    ex.policies = policies;
                    Ok(a)
                }
                Ok(Err(e)) => Err(deny(ex, "ask-refused", &[e], &policies)),
                Err(e) => Err(deny(
                    ex,
                    "error",
                    &[format!("the approval task failed: {e}")],
                    &policies,
                )),
            }
        }
    }
}

/// Resolve on the host, check every candidate with the SSRF guard, and connect to the
/// exact address that passed.
pub(crate) async fn connect_checked(
    inner: &Inner,
    host: &str,
    port: u16,
) -> Result<(BoxStream, SocketAddr), (StatusCode, String)> {
    let ips = match host.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => {
            match tokio::time::timeout(inner.limits.upstream_timeout, inner.resolver.resolve(host))
                .await
            {
                Ok(Ok(ips)) => ips,
                Ok(Err(e)) => {
                    return Err((
                        StatusCode::BAD_GATEWAY,
                        format!("cannot resolve {host}: {e}"),
                    ))
                }
                Err(_) => {
                    return Err((
                        StatusCode::GATEWAY_TIMEOUT,
                        format!("resolving {host} timed out"),
                    ))
                }
            }
        }
    };
    let addr = inner
        .terms()
        .guard
        .pick(host, &ips, port)
        .map_err(|e| (StatusCode::FORBIDDEN, e.to_string()))?;
    match tokio::time::timeout(inner.limits.upstream_timeout, inner.connector.connect(addr)).await {
        Ok(Ok(s)) => Ok((s, addr)),
        Ok(Err(e)) => Err((
            StatusCode::BAD_GATEWAY,
            format!("cannot connect to {host} ({addr}): {e}"),
        )),
        Err(_) => Err((
            StatusCode::GATEWAY_TIMEOUT,
            format!("connecting to {host} ({addr}) timed out"),
        )),
    }
}

#[allow(clippy::too_many_arguments)]
async fn forward(
    inner: Arc<Inner>,
    auth: Authorized<NetRequestAction>,
    target: Target,
    mut headers: HeaderMap,
    path_q: String,
    body: Bytes,
    mut ex: Exchange,
) -> Response<ProxyBody> {
    let action = auth.into_action();
    let fail = |ex: &mut Exchange, status: StatusCode, reason: String| {
        ex.decision = format!("{}, then refused", ex.decision);
        ex.status = status.as_u16();
        ex.reason = reason.clone();
        inner.audit.exchange(ex);
        text(
            status,
            format!(
                "airlock: {} {} failed: {reason}\n",
                action.method, action.url
            ),
        )
    };

    strip_hop_by_hop(&mut headers);
    let to = Destination {
        scheme: target.scheme,
        host: &target.host,
        port: target.port,
        path: &ex.path,
    };
    let report = inner
        .terms()
        .injector
        .apply(to, &action.url, &mut headers, &body);
    for m in &report.misuse {
        tracing::warn!(secret = %m.secret, location = %m.location, host = %target.host, "placeholder outside its binding");
        inner.audit.event(
            "net.placeholder_misuse",
            json!({"secret": m.secret, "location": m.location, "method": ex.method,
                   "host": target.host, "path": ex.path,
                   "note": "a secret's placeholder was sent where the secret is not bound; it passed unchanged (possible exfiltration attempt)"}),
        );
    }
    ex.injected = report.injected.clone();
    if !report.injected.is_empty() {
        // Compressed responses would hide an echoed value from the scrubber.
        headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
    }
    let (stream, addr) = match connect_checked(&inner, &target.host, target.port).await {
        Ok(s) => s,
        Err((status, reason)) => return fail(&mut ex, status, reason),
    };
    ex.upstream = Some(addr.to_string());
    let io: BoxStream = if target.scheme == "https" {
        let name = match ServerName::try_from(target.host.clone()) {
            Ok(n) => n,
            Err(e) => {
                return fail(
                    &mut ex,
                    StatusCode::BAD_GATEWAY,
                    format!("bad TLS server name: {e}"),
                )
            }
        };
        let tls = tokio_rustls::TlsConnector::from(inner.upstream_tls.clone());
        let handshake = tls.connect(name, upstream_io::buffered(stream));
        match tokio::time::timeout(inner.limits.upstream_timeout, handshake).await {
            Ok(Ok(s)) => Box::new(upstream_io::GreedyRead::new(s)),
            Ok(Err(e)) => {
                return fail(
                    &mut ex,
                    StatusCode::BAD_GATEWAY,
                    format!("upstream TLS with {} failed: {e}", target.host),
                )
            }
            Err(_) => {
                return fail(
                    &mut ex,
                    StatusCode::GATEWAY_TIMEOUT,
                    "upstream TLS handshake timed out".into(),
                )
            }
        }
    } else {
        stream
    };
    let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(io)).await {
        Ok(x) => x,
        Err(e) => {
            return fail(
                &mut ex,
                StatusCode::BAD_GATEWAY,
                format!("upstream HTTP failed: {e}"),
            )
        }
    };
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("upstream connection ended: {e}");
        }
    });
    let mut req = Request::new(Full::new(body));
    *req.method_mut() = match action.method.parse() {
        Ok(m) => m,
        Err(_) => return fail(&mut ex, StatusCode::BAD_REQUEST, "bad method".into()),
    };
    *req.uri_mut() = match path_q.parse() {
        Ok(u) => u,
        Err(_) => {
            return fail(
                &mut ex,
                StatusCode::BAD_REQUEST,
                "bad request target".into(),
            )
        }
    };
    headers.remove(header::CONTENT_LENGTH);
    *req.headers_mut() = headers;
    if let Ok(h) = HeaderValue::from_str(&target.authority()) {
        req.headers_mut().insert(header::HOST, h);
    }
    let resp =
        match tokio::time::timeout(inner.limits.upstream_timeout, sender.send_request(req)).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                return fail(
                    &mut ex,
                    StatusCode::BAD_GATEWAY,
                    format!("upstream request failed: {e}"),
                )
            }
            Err(_) => {
                return fail(
                    &mut ex,
                    StatusCode::GATEWAY_TIMEOUT,
                    "upstream did not answer in time".into(),
                )
            }
        };
    let (mut parts, upstream_body) = resp.into_parts();
    ex.status = parts.status.as_u16();
    // hyper keeps a reason phrase other than the standard one and the server writes it
    // back to the sandbox: free text from the upstream that the scrubber never sees
    // (`401 invalid key <the injected key>`). The sandbox gets the standard phrase.
    parts.extensions.remove::<hyper::ext::ReasonPhrase>();
    strip_hop_by_hop(&mut parts.headers);
    let cap = inner.limits.max_response_body;
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(n) = declared.filter(|n| *n > cap) {
        let reason = format!("the response is {n} bytes, over the {cap}-byte response cap\nhelp: fetch a smaller resource or a range of it");
        return fail(&mut ex, StatusCode::BAD_GATEWAY, reason);
    }
    // One set of terms for the headers and the body alike.
    let terms = inner.terms();
    if let Some(scrubber) = &terms.scrubber {
        let names: Vec<_> = parts.headers.keys().cloned().collect();
        for name in names {
            let vals: Vec<HeaderValue> = parts.headers.get_all(&name).iter().cloned().collect();
            if vals.iter().any(|v| scrubber.scrub(v.as_bytes()).is_some()) {
                parts.headers.remove(&name);
                for v in vals {
                    let clean = scrubber
                        .scrub(v.as_bytes())
                        .unwrap_or_else(|| v.as_bytes().to_vec());
                    if let Ok(hv) = HeaderValue::from_bytes(&clean) {
                        parts.headers.append(name.clone(), hv);
                    }
                }
                ex.scrubbed += 1;
            }
        }
        // Scrubbing can change the body's length.
        parts.headers.remove(header::CONTENT_LENGTH);
    }
    let audit = inner.audit.clone();
    let header_scrubs = ex.scrubbed;
    let body = CappedBody::new(
        upstream_body,
        cap,
        terms.scrubber.as_ref().map(|s| s.stream()),
        Box::new(move |o| {
            ex.response_bytes = o.bytes;
            ex.truncated = o.truncated;
            ex.scrubbed = header_scrubs + o.scrubbed;
            if o.truncated {
                ex.reason = format!("response cut at the {cap}-byte cap");
            } else if let Some(e) = o.error {
                ex.reason = e;
            }
            audit.exchange(&ex);
        }),
    );
    Response::from_parts(parts, body.boxed())
}
