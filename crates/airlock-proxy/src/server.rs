//! The proxy server: one [`Proxy`] per sandboxed run, listening on that run's UNIX socket.
//!
//! It speaks HTTP/1.1 proxy requests: absolute-form `http://` requests, and `CONNECT`
//! tunnels, which it intercepts with Airlock's CA (so method and path are known) unless the
//! operator marked the host pass-through.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use airlock_audit::AuditLog;
use airlock_core::action::NetRequestAction;
use airlock_core::gate::Session;
use airlock_core::gate_source::GateSource;
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use secrecy::ExposeSecret;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::task::JoinHandle;

use crate::approval::{ApprovalHook, NoApprovals};
use crate::body::{full, ProxyBody};
use crate::ca::{upstream_client_config, CaError, CertificateAuthority};
use crate::client_hello::{check_server_name, read_client_hello, HelloError};
use crate::exchange::{authorize, connect_checked, handle, Target};
use crate::limits::{EgressBudget, HostRateLimiter, Limits};
use crate::net::{Connector, Resolver, SystemResolver, TcpConnector};
use crate::respond::{text, AuditHandle, Exchange};
use crate::rules::NetRules;
use crate::secrets::{Injector, LoadedSecret, Scrubber};
use crate::ssrf::AddressGuard;
use crate::tunnel::Metered;

/// Everything a run's proxy needs. Build with [`ProxyConfig::new`], then adjust fields.
pub struct ProxyConfig {
    /// The session the run belongs to (its taint is read for every decision; update it
    /// with [`Proxy::set_session`]).
    pub session: Session,
    /// The Gate, loaded with the profile's policies plus [`crate::rules_to_cedar`]: asked
    /// for the one in force at every decision, so an edit reaches a running proxy.
    pub gate: Arc<dyn GateSource>,
    /// The audit log; decisions and exchanges are appended here.
    pub audit: Arc<Mutex<AuditLog>>,
    /// The operator's net rules (pass-through hosts and SSRF exceptions are read here).
    pub rules: NetRules,
    /// The interception CA.
    pub ca: Arc<CertificateAuthority>,
    /// Decrypted secrets (see [`crate::SecretStore::load_all`]).
    pub secrets: Vec<LoadedSecret>,
    /// Extra trusted roots (PEM) for upstream TLS, beside the webpki roots.
    pub extra_roots_pem: Vec<String>,
    pub resolver: Arc<dyn Resolver>,
    pub connector: Arc<dyn Connector>,
    pub approvals: Arc<dyn ApprovalHook>,
    pub limits: Limits,
}

impl ProxyConfig {
    /// A config with the system resolver, TCP connector, no secrets, no approver (asks
    /// are denied) and default limits.
    pub fn new(
        session: Session,
        gate: Arc<dyn GateSource>,
        audit: Arc<Mutex<AuditLog>>,
        rules: NetRules,
        ca: Arc<CertificateAuthority>,
    ) -> ProxyConfig {
        ProxyConfig {
            session,
            gate,
            audit,
            rules,
            ca,
            secrets: Vec::new(),
            extra_roots_pem: Vec::new(),
            resolver: Arc::new(SystemResolver),
            connector: Arc::new(TcpConnector),
            approvals: Arc::new(NoApprovals),
            limits: Limits::default(),
        }
    }
}

/// Why a proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error(transparent)]
    Tls(#[from] CaError),
    #[error("cannot register secret {name} for redaction: {message}")]
    Redactor { name: String, message: String },
    #[error("cannot listen on {what}: {source}")]
    Listen {
        what: String,
        source: std::io::Error,
    },
    #[error("refusing to listen on {0}: the test listener binds loopback only")]
    NotLoopback(SocketAddr),
    #[error("the proxy's audit records cannot name who acts: {0}")]
    Principal(#[from] airlock_core::PrincipalError),
}

pub(crate) struct Inner {
    session: RwLock<Session>,
    /// Whether `session` is tainted, readable without cloning it (an open tunnel checks
    /// it on every read).
    tainted: AtomicBool,
    pub(crate) gate: Arc<dyn GateSource>,
    pub(crate) audit: AuditHandle,
    terms: RwLock<Arc<Terms>>,
    pub(crate) ca: Arc<CertificateAuthority>,
    pub(crate) upstream_tls: Arc<rustls::ClientConfig>,
    pub(crate) resolver: Arc<dyn Resolver>,
    pub(crate) connector: Arc<dyn Connector>,
    pub(crate) limits: Limits,
    pub(crate) budget: EgressBudget,
    pub(crate) rate: HostRateLimiter,
}

/// What the proxy serves under that its owner may change while it runs (a session's
/// proxy lives as long as the session, and `net revoke`, `secret rm` or the next tool
/// call's own approval hook must reach it): the operator's rules (pass-through and
/// private ranges; the Gate, which is live, decides the rest), the secrets it injects
/// and scrubs, and the hook that answers asks. Each use takes the terms in force.
pub(crate) struct Terms {
    pub(crate) rules: NetRules,
    pub(crate) guard: AddressGuard,
    pub(crate) injector: Injector,
    pub(crate) scrubber: Option<Scrubber>,
    /// Every secret this proxy has ever injected: the scrubber keeps looking for a
    /// secret taken back, since a response to a request made before may still carry it.
    scrubbed: Vec<LoadedSecret>,
    pub(crate) approvals: Arc<dyn ApprovalHook>,
}

impl Terms {
    fn new(
        rules: NetRules,
        secrets: Vec<LoadedSecret>,
        approvals: Arc<dyn ApprovalHook>,
        before: Option<&Terms>,
    ) -> Terms {
        let mut scrubbed = before.map(|t| t.scrubbed.clone()).unwrap_or_default();
        for s in &secrets {
            let known = scrubbed.iter().any(|k| {
                k.info.name == s.info.name && k.value.expose_secret() == s.value.expose_secret()
            });
            if !known {
                scrubbed.push(s.clone());
            }
        }
        Terms {
            guard: AddressGuard::new(rules.allow_private.clone()),
            scrubber: Scrubber::new(&scrubbed),
            scrubbed,
            injector: Injector::new(secrets),
            rules,
            approvals,
        }
    }
}

impl Inner {
    /// Whether a rule or a secret binding for `host` limits paths. Such requests must
    /// have a path every server reads the same way (see [`crate::request_target`]).
    pub(crate) fn paths_limited(&self, host: &str) -> bool {
        let terms = self.terms();
        terms
            .rules
            .rules
            .iter()
            .any(|r| !r.pass_through && r.path_prefix.is_some() && r.matches_host(host))
            || terms
                .injector
                .secrets()
                .iter()
                .any(|s| s.info.binding.path_prefix.is_some() && s.info.binding.host == host)
    }

    pub(crate) fn session(&self) -> Session {
        self.session
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether the session in force now has taken in untrusted content.
    pub(crate) fn is_tainted(&self) -> bool {
        self.tainted.load(Ordering::SeqCst)
    }

    /// The terms in force now.
    pub(crate) fn terms(&self) -> Arc<Terms> {
        self.terms.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// A run's egress proxy.
#[derive(Clone)]
pub struct Proxy {
    inner: Arc<Inner>,
}

/// A listening proxy; dropping it stops accepting (open exchanges finish).
pub struct ProxyHandle {
    task: JoinHandle<()>,
    /// The TCP address (test listener) or `None` for a UNIX socket.
    pub tcp_addr: Option<SocketAddr>,
    /// The UNIX socket path, removed on drop.
    pub socket_path: Option<PathBuf>,
}

impl Drop for ProxyHandle {
    fn drop(&mut self) {
        self.task.abort();
        if let Some(p) = &self.socket_path {
            let _ = std::fs::remove_file(p);
        }
    }
}

impl Proxy {
    /// A share of the token every audit write of this proxy holds until it is written:
    /// once the proxy and its tasks are gone, the records are all written when the
    /// caller's share is the only one left (`Arc::strong_count(&token) == 1`).
    pub fn records_token(&self) -> Arc<()> {
        self.inner.audit.pending.clone()
    }

    /// Build the proxy. Registers every secret value with the audit log's redactor, so no
    /// record can ever hold one.
    pub fn new(cfg: ProxyConfig) -> Result<Proxy, ProxyError> {
        redact_secrets(&cfg.audit, &cfg.secrets)?;
        let audit = AuditHandle {
            log: cfg.audit.clone(),
            session: cfg.session.id.clone(),
            // Requests from inside the sandbox come from commands the session's model
            // proposed: they are the agent's, under the session principal's authority.
            who: cfg.session.attribution()?,
            pending: Arc::new(()),
        };
        Ok(Proxy {
            inner: Arc::new(Inner {
                terms: RwLock::new(Arc::new(Terms::new(
                    cfg.rules,
                    cfg.secrets,
                    cfg.approvals,
                    None,
                ))),
                upstream_tls: upstream_client_config(&cfg.extra_roots_pem)?,
                tainted: AtomicBool::new(cfg.session.taint.is_tainted()),
                session: RwLock::new(cfg.session),
                gate: cfg.gate,
                audit,
                ca: cfg.ca,
                resolver: cfg.resolver,
                connector: cfg.connector,
                limits: cfg.limits,
                budget: EgressBudget::default(),
                rate: HostRateLimiter::default(),
            }),
        })
    }

    /// Replace the session (its taint changes as the run observes content).
    pub fn set_session(&self, session: Session) {
        let mut current = self
            .inner
            .session
            .write()
            .unwrap_or_else(|p| p.into_inner());
        // Under the lock, so the flag never disagrees with the session a decision reads.
        self.inner
            .tainted
            .store(session.taint.is_tainted(), Ordering::SeqCst);
        *current = session;
    }

    /// Serve from now on under `rules`, with `secrets` and answering asks with
    /// `approvals`: a rule or a secret taken back is gone for the next request, and an
    /// exchange already under way finishes as it began. The new secrets' values are
    /// added to the log's redactor first, so no record can hold one.
    pub fn set_terms(
        &self,
        rules: NetRules,
        secrets: Vec<LoadedSecret>,
        approvals: Arc<dyn ApprovalHook>,
    ) -> Result<(), ProxyError> {
        redact_secrets(&self.inner.audit.log, &secrets)?;
        let mut terms = self.inner.terms.write().unwrap_or_else(|p| p.into_inner());
        let next = Terms::new(rules, secrets, approvals, Some(&terms));
        *terms = Arc::new(next);
        Ok(())
    }

    /// Whether nothing of this proxy is under way: no client connection, exchange or
    /// tunnel (each holds the proxy's state), seen from this `Proxy` when it is the only
    /// one (a clone counts as work). Its audit records may still be queued: see
    /// [`Proxy::records_token`].
    pub fn is_quiet(&self) -> bool {
        Arc::strong_count(&self.inner) == 1
    }

    /// Request bytes sent out so far.
    pub fn egress_used(&self) -> u64 {
        self.inner.budget.used()
    }

    /// Listen on a UNIX socket at `path` (mode 0600; an old socket file is replaced).
    /// Must be called inside a tokio runtime.
    pub fn listen_unix(&self, path: &Path) -> Result<ProxyHandle, ProxyError> {
        let listener = bind_unix_socket(path)?;
        self.serve_unix(listener, path)
    }

    /// Serve on a socket bound earlier with [`bind_unix_socket`] (so that a sandbox can be
    /// built around it before this proxy exists; connections wait in its backlog). Must be
    /// called inside a tokio runtime.
    pub fn serve_unix(
        &self,
        listener: std::os::unix::net::UnixListener,
        path: &Path,
    ) -> Result<ProxyHandle, ProxyError> {
        let err = |source| ProxyError::Listen {
            what: path.display().to_string(),
            source,
        };
        listener.set_nonblocking(true).map_err(err)?;
        let listener = tokio::net::UnixListener::from_std(listener).map_err(err)?;
        // Weak: the listener is no work of its own (see [`Proxy::is_quiet`]), and a
        // proxy whose every `Proxy` is gone takes no more connections.
        let inner = Arc::downgrade(&self.inner);
        let task = tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((s, _)) => {
                        let Some(inner) = inner.upgrade() else { return };
                        tokio::spawn(serve_client(inner, s));
                    }
                    Err(e) => tracing::warn!("proxy accept failed: {e}"),
                }
            }
        });
        Ok(ProxyHandle {
            task,
            tcp_addr: None,
            socket_path: Some(path.to_path_buf()),
        })
    }

    /// Listen on a loopback TCP address (tests, and hosts without a sandbox relay yet).
    pub async fn listen_tcp(&self, addr: SocketAddr) -> Result<ProxyHandle, ProxyError> {
        if !addr.ip().is_loopback() {
            return Err(ProxyError::NotLoopback(addr));
        }
        let err = |source| ProxyError::Listen {
            what: addr.to_string(),
            source,
        };
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(err)?;
        let local = listener.local_addr().map_err(err)?;
        let inner = Arc::downgrade(&self.inner);
        let task = tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((s, _)) => {
                        let Some(inner) = inner.upgrade() else { return };
                        let _ = s.set_nodelay(true);
                        tokio::spawn(serve_client(inner, s));
                    }
                    Err(e) => tracing::warn!("proxy accept failed: {e}"),
                }
            }
        });
        Ok(ProxyHandle {
            task,
            tcp_addr: Some(local),
            socket_path: None,
        })
    }
}

async fn serve_client<S>(inner: Arc<Inner>, io: S)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let svc = service_fn(move |req| {
        let inner = inner.clone();
        async move { Ok::<_, Infallible>(entry(inner, req).await) }
    });
    if let Err(e) = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(io), svc)
        .with_upgrades()
        .await
    {
        tracing::debug!("proxy client connection ended: {e}");
    }
}

async fn entry(inner: Arc<Inner>, req: Request<Incoming>) -> Response<ProxyBody> {
    if req.method() == Method::CONNECT {
        return connect(inner, req).await;
    }
    let uri = req.uri();
    let host_port = uri
        .authority()
        .and_then(|a| airlock_core::url_facts::parse_host_port(a.as_str()).ok());
    match (uri.scheme_str(), host_port) {
        (Some("http"), Some(hp)) => {
            let target = Target {
                scheme: "http",
                host: hp.host,
                port: hp.port.unwrap_or(80),
            };
            handle(inner, req, target).await
        }
        _ => text(
            StatusCode::BAD_REQUEST,
            format!(
                "airlock: {} {} is not a proxy request\nhelp: send absolute-form http:// requests or CONNECT host:port (set HTTP_PROXY/HTTPS_PROXY)\n",
                req.method(),
                req.uri()
            ),
        ),
    }
}

/// The CONNECT target, with its host normalized by the same parser as rules and URLs
/// (so `0x7f000001:443` is `127.0.0.1` everywhere, never two spellings of one host).
fn parse_authority(req: &Request<Incoming>) -> Option<(String, u16)> {
    let auth = req.uri().authority()?;
    let hp = airlock_core::url_facts::parse_host_port(auth.as_str()).ok()?;
    Some((hp.host, hp.port?))
}

async fn connect(inner: Arc<Inner>, mut req: Request<Incoming>) -> Response<ProxyBody> {
    let Some((host, port)) = parse_authority(&req) else {
        return text(
            StatusCode::BAD_REQUEST,
            format!("airlock: CONNECT {} needs host:port\n", req.uri()),
        );
    };
    let target = Target {
        scheme: "https",
        host: host.clone(),
        port,
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    if inner.terms().rules.pass_through_for(&host, port).is_some() {
        return pass_through(inner, target, on_upgrade).await;
    }
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(up) => intercept(inner, TokioIo::new(up), target).await,
            Err(e) => tracing::debug!("CONNECT upgrade failed: {e}"),
        }
    });
    Response::new(full(""))
}

/// Terminate the client's TLS with a leaf for the CONNECT host and serve the requests
/// inside as ordinary decided exchanges.
async fn intercept<S>(inner: Arc<Inner>, io: S, target: Target)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let acceptor = tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), io);
    let start = match acceptor.await {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!("TLS from the client failed: {e}");
            return;
        }
    };
    let sni = start
        .client_hello()
        .server_name()
        .map(|s| s.to_ascii_lowercase());
    if let Some(sni) = sni.filter(|s| *s != target.host) {
        let ex = Exchange {
            method: "CONNECT".into(),
            scheme: "https".into(),
            host: target.host.clone(),
            port: target.port,
            decision: "refused".into(),
            reason: format!(
                "TLS server name {sni:?} does not match the CONNECT host {:?}",
                target.host
            ),
            ..Default::default()
        };
        inner.audit.exchange(&ex);
        return; // dropping the handshake: the client sees the connection closed
    }
    let cfg = match inner.ca.server_config(&target.host) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("minting a certificate for {} failed: {e}", target.host);
            return;
        }
    };
    let tls = match start.into_stream(cfg).await {
        Ok(t) => t,
        Err(e) => {
            tracing::debug!("TLS handshake with the client failed: {e}");
            return;
        }
    };
    let svc = service_fn(move |req| {
        let (inner, target) = (inner.clone(), target.clone());
        async move { Ok::<_, Infallible>(handle(inner, req, target).await) }
    });
    if let Err(e) = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(tls), svc)
        .await
    {
        tracing::debug!("intercepted connection ended: {e}");
    }
}

/// A pass-through host: decided on host and port alone, then tunnelled blind. After
/// untrusted content the generated rule asks (the tunnel could carry any request), and
/// what comes back is capped at `max_response_body` in all.
async fn pass_through(
    inner: Arc<Inner>,
    target: Target,
    on_upgrade: hyper::upgrade::OnUpgrade,
) -> Response<ProxyBody> {
    let url = format!(
        "https://{}:{}/",
        crate::exchange::bracket(&target.host),
        target.port
    );
    let mut ex = Exchange {
        method: "CONNECT".into(),
        scheme: "https".into(),
        host: target.host.clone(),
        port: target.port,
        path: "/".into(),
        ..Default::default()
    };
    let action = NetRequestAction {
        method: "CONNECT".into(),
        url,
        headers: vec![],
        body_bytes: 0,
        body_sha256: None,
    };
    let clean_before = !inner.is_tainted();
    if let Err(resp) = authorize(&inner, action, None, &mut ex, &target).await {
        return resp;
    }
    // Allowed unattended in a clean session: the tunnel ends if the session is tainted
    // while it is open. One approved, or allowed after taint by the operator's own
    // policy, was decided with the taint known.
    let clean_only = clean_before && ex.decision == "allow";
    let (mut upstream, addr) = match connect_checked(&inner, &target.host, target.port).await {
        Ok(s) => s,
        Err((status, reason)) => {
            ex.decision = "allow, then refused".into();
            ex.status = status.as_u16();
            ex.reason = reason.clone();
            inner.audit.exchange(&ex);
            return text(
                status,
                format!(
                    "airlock: CONNECT {}:{} failed: {reason}\n",
                    target.host, target.port
                ),
            );
        }
    };
    ex.upstream = Some(addr.to_string());
    ex.status = 200;
    tokio::spawn(async move {
        if let Ok(up) = on_upgrade.await {
            let mut client = Metered::new(TokioIo::new(up), inner.clone(), clean_only);
            // Nothing goes upstream until the client's TLS hello names the tunnel's host.
            let hello = tokio::time::timeout(
                inner.limits.upstream_timeout,
                read_client_hello(&mut client),
            )
            .await
            .unwrap_or_else(|_| Err(HelloError::Io("no ClientHello arrived in time".into())))
            .and_then(|(bytes, sni)| {
                check_server_name(&target.host, sni.as_deref()).map(|()| bytes)
            });
            match hello {
                Ok(bytes) => {
                    let ended = match upstream.write_all(&bytes).await {
                        Ok(()) => tokio::io::copy_bidirectional(&mut client, &mut upstream)
                            .await
                            .map(|_| ()),
                        Err(e) => Err(e),
                    };
                    if let Err(e) = ended {
                        ex.reason = format!("tunnel ended: {e}");
                    }
                }
                Err(e) => {
                    ex.decision = "allow, then refused".into();
                    ex.reason =
                        format!("{e}; a pass-through tunnel carries only TLS for its own host");
                    tracing::warn!(host = %target.host, "pass-through refused: {e}");
                }
            }
            ex.request_bytes = client.sent;
            ex.response_bytes = client.received;
        }
        inner.audit.event(
            "net.tunnel",
            json!({"method": "CONNECT", "host": ex.host, "port": ex.port,
            "intercepted": false, "mode": "pass-through", "decision": ex.decision,
            "policies": ex.policies,
            "request_bytes": ex.request_bytes, "response_bytes": ex.response_bytes,
            "upstream_addr": ex.upstream, "reason": ex.reason}),
        );
    });
    Response::new(full(""))
}

/// Bind the proxy's UNIX socket at `path` (mode 0600; an old socket file is replaced),
/// for [`Proxy::serve_unix`].
pub fn bind_unix_socket(path: &Path) -> Result<std::os::unix::net::UnixListener, ProxyError> {
    use std::os::unix::fs::PermissionsExt;
    let err = |source| ProxyError::Listen {
        what: path.display().to_string(),
        source,
    };
    if path.exists() {
        std::fs::remove_file(path).map_err(err)?;
    }
    let listener = std::os::unix::net::UnixListener::bind(path).map_err(err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
    Ok(listener)
}

/// Add `secrets` to (never replace) what `log` redacts: the binary registers every stored
/// secret when it opens the log.
fn redact_secrets(log: &Mutex<AuditLog>, secrets: &[LoadedSecret]) -> Result<(), ProxyError> {
    let mut log = log.lock().unwrap_or_else(|p| p.into_inner());
    let redactor = log.redactor_mut();
    for s in secrets {
        redactor
            .add(s.info.name.clone(), s.value.clone())
            .map_err(|e| ProxyError::Redactor {
                name: s.info.name.clone(),
                message: e.to_string(),
            })?;
    }
    Ok(())
}
