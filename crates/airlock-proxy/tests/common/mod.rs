//! Test harness: a real proxy on 127.0.0.1, a real HTTPS upstream on 127.0.0.1 with a
//! test CA, real curl as the client, a name resolver that never touches DNS, and a
//! connector that records every connect and fails the test on any non-loopback address.
#![allow(dead_code)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use airlock_audit::{AuditLog, AuditOptions, CheckpointSigner, VerifyingKey};
use airlock_core::facts::GateConfig;
use airlock_core::gate::{Gate, Session};
use airlock_core::policy::{builtin_sources, PolicyEngine, PolicySource, Profile};
use airlock_proxy::net::{BoxFuture, BoxStream, Connector, Resolver};
use airlock_proxy::secrets::LoadedSecret;
use airlock_proxy::*;
use bytes::Bytes;
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

pub const NAMES: &[&str] = &[
    "api.test",
    "other.test",
    "ask.test",
    "big.test",
    "rebind.test",
    "loop.test",
    "pass.test",
];

/// What the upstream received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    /// The request-target exactly as it arrived on the request line (path and query).
    pub target: String,
    pub host: String,
    pub headers: Vec<(String, String)>,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

pub struct Upstream {
    pub addr: SocketAddr,
    /// A plain-HTTP server on another loopback port, recording into the same `seen`.
    pub plain_addr: SocketAddr,
    pub ca_pem: String,
    /// The upstream's own leaf certificate (DER), to tell it from one Airlock minted.
    pub leaf_der: Vec<u8>,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

/// A lazily generated body of `left` bytes, sent chunked (no length), never held whole.
struct Stream {
    left: u64,
}

static CHUNK: [u8; 65536] = [b'x'; 65536];

impl Body for Stream {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        let n = self.left.min(CHUNK.len() as u64);
        self.left -= n;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(
            &CHUNK[..n as usize],
        )))))
    }
}

type UpBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

async fn upstream_route(
    req: Request<Incoming>,
    seen: Arc<Mutex<Vec<Seen>>>,
) -> Result<Response<UpBody>, Infallible> {
    let s = Seen {
        method: req.method().to_string(),
        path: req.uri().path().to_string(),
        target: req.uri().to_string(),
        host: req
            .headers()
            .get("host")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string(),
        headers: req
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
    };
    seen.lock().unwrap().push(s.clone());
    let path = s.path.clone();
    if path == "/count" {
        // Answers only after the whole request body arrived.
        let n = match req.into_body().collect().await {
            Ok(b) => b.to_bytes().len(),
            Err(_) => return Ok(Response::new(Empty::new().boxed())),
        };
        let text = format!("received {n} bytes");
        return Ok(Response::new(
            http_body_util::Full::new(Bytes::from(text)).boxed(),
        ));
    }
    let full = |b: String| http_body_util::Full::new(Bytes::from(b)).boxed();
    if path.ends_with("/echo") {
        let auth = s.header("authorization").unwrap_or("").to_string();
        // The echo is split over several frames so values cross chunk boundaries.
        let text = format!("you sent authorization: {auth}\n");
        let mid = text.len() / 2 + 3;
        let (a, b) = text.split_at(mid);
        let frames = vec![Bytes::from(a.to_string()), Bytes::from(b.to_string())];
        let body = http_body_util::StreamBody::new(futures_util::stream::iter(
            frames
                .into_iter()
                .map(|f| Ok::<_, Infallible>(Frame::data(f))),
        ));
        let mut r = Response::new(body.boxed());
        r.headers_mut().insert("x-echo-auth", auth.parse().unwrap());
        return Ok(r);
    }
    if path.ends_with("/echo-encoded") {
        // What a careless API does: reflects the credential it got in other encodings.
        use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
        use base64::Engine;
        let auth = s.header("authorization").unwrap_or("").to_string();
        let token = auth.strip_prefix("Bearer ").unwrap_or(&auth).to_string();
        let pct: String = token.bytes().map(|b| format!("%{b:02x}")).collect();
        let text = format!(
            "b64={}\nb64url={}\nb64-shifted={}\nhex={}\nHEX={}\npct={pct}\n",
            STANDARD.encode(&auth),
            URL_SAFE_NO_PAD.encode(&token),
            STANDARD.encode(format!("x{token}")),
            hex::encode(&token),
            hex::encode_upper(&token),
        );
        return Ok(Response::new(full(text)));
    }
    if path == "/big" {
        return Ok(Response::new(
            Stream {
                left: 100 * 1024 * 1024,
            }
            .boxed(),
        ));
    }
    if path == "/big-declared" {
        let mut r = Response::new(
            Stream {
                left: 100 * 1024 * 1024,
            }
            .boxed(),
        );
        r.headers_mut()
            .insert("content-length", "104857600".parse().unwrap());
        return Ok(r);
    }
    if let Some(n) = path.strip_prefix("/bytes/") {
        let n: u64 = n.parse().unwrap();
        let mut r = Response::new(Stream { left: n }.boxed());
        r.headers_mut().insert("content-length", n.into());
        return Ok(r);
    }
    Ok(Response::new(full(format!(
        "hello from {} {} {}",
        s.host, s.method, s.path
    ))))
}

/// An HTTPS server on 127.0.0.1:0 with a certificate for [`NAMES`] from a fresh test CA.
pub async fn start_upstream() -> Upstream {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "upstream test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf =
        rcgen::CertificateParams::new(NAMES.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap()
            .signed_by(&leaf_key, &issuer)
            .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls_pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
        )
        .unwrap();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            // As real servers do: without it, small writes wait for delayed ACKs (40 ms).
            let _ = tcp.set_nodelay(true);
            let (acceptor, seen) = (acceptor.clone(), seen2.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc = hyper::service::service_fn(move |req| upstream_route(req, seen.clone()));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    let plain = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let plain_addr = plain.local_addr().unwrap();
    let seen3 = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = plain.accept().await else {
                continue;
            };
            let _ = tcp.set_nodelay(true);
            let seen = seen3.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| upstream_route(req, seen.clone()));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    Upstream {
        addr,
        plain_addr,
        ca_pem: ca_cert.pem(),
        leaf_der: leaf.der().to_vec(),
        seen,
    }
}

/// Names to scripted answers; an entry with several answers gives the next one on each
/// call (and repeats the last).
#[derive(Default)]
pub struct ScriptedResolver {
    pub answers: Mutex<HashMap<String, Vec<Vec<IpAddr>>>>,
    pub calls: AtomicUsize,
}

impl ScriptedResolver {
    pub fn set(&self, name: &str, answers: Vec<Vec<&str>>) {
        let parsed = answers
            .into_iter()
            .map(|a| a.into_iter().map(|s| s.parse().unwrap()).collect())
            .collect();
        self.answers
            .lock()
            .unwrap()
            .insert(name.to_string(), parsed);
    }
}

impl Resolver for ScriptedResolver {
    fn resolve<'a>(&'a self, host: &'a str) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let mut map = self.answers.lock().unwrap();
        let out = match map.get_mut(host) {
            Some(list) if list.len() > 1 => Ok(list.remove(0)),
            Some(list) => Ok(list[0].clone()),
            None => Err(io::Error::new(io::ErrorKind::NotFound, "no such test name")),
        };
        Box::pin(async move { out })
    }
}

/// Records every connect. A connect to anything but loopback fails the test: no packet
/// may leave for a private, link-local or public address.
#[derive(Default)]
pub struct RecordingConnector {
    pub attempts: Mutex<Vec<SocketAddr>>,
}

impl Connector for RecordingConnector {
    fn connect(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<BoxStream>> {
        self.attempts.lock().unwrap().push(addr);
        assert!(
            addr.ip().is_loopback(),
            "the proxy tried to connect to non-loopback {addr}"
        );
        Box::pin(async move {
            let s = tokio::net::TcpStream::connect(addr).await?;
            s.set_nodelay(true)?; // as the production connector does
            Ok(Box::new(s) as BoxStream)
        })
    }
}

pub struct Harness {
    pub config: tempfile::TempDir,
    pub state: tempfile::TempDir,
    pub upstream: Upstream,
    pub resolver: Arc<ScriptedResolver>,
    pub connector: Arc<RecordingConnector>,
    pub proxy: Proxy,
    pub handle: ProxyHandle,
    pub audit_key: VerifyingKey,
    pub audit_dir: PathBuf,
}

pub struct Setup {
    pub rules: NetRules,
    pub secrets: Vec<LoadedSecret>,
    pub limits: Limits,
    pub approvals: Option<Arc<dyn ApprovalHook>>,
    /// Add `127.0.0.1:<upstream port>` to allow_private.
    pub allow_upstream: bool,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            rules: NetRules::default(),
            secrets: vec![],
            limits: Limits::default(),
            approvals: None,
            allow_upstream: true,
        }
    }
}

/// A rule for `host` on the upstream's port.
pub fn rule(host: &str, port: u16, methods: &[&str]) -> NetRule {
    let mut r = NetRule::for_host(host);
    r.port = Some(port);
    r.methods = methods.iter().map(|m| m.to_string()).collect();
    r
}

impl Harness {
    /// Start an upstream first, so rules can name its port, then the proxy.
    pub async fn start(build: impl FnOnce(u16) -> Setup) -> Harness {
        Self::start_with(|u| build(u.addr.port())).await
    }

    /// As [`Harness::start`], for rules that need both upstream ports.
    pub async fn start_with(build: impl FnOnce(&Upstream) -> Setup) -> Harness {
        let upstream = start_upstream().await;
        let mut setup = build(&upstream);
        if setup.allow_upstream {
            setup.rules.allow_private.push(upstream.addr);
            setup.rules.allow_private.push(upstream.plain_addr);
        }
        let config = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        generate_ca(config.path()).unwrap();
        let ca = Arc::new(CertificateAuthority::load(config.path()).unwrap());
        let mut sources = builtin_sources(Profile::Default);
        sources.push(PolicySource {
            name: RULES_POLICY_NAME.into(),
            text: rules_to_cedar(&setup.rules),
        });
        let gate = Arc::new(Gate::new(
            PolicyEngine::load(&sources).unwrap(),
            GateConfig::new("/w"),
        ));
        let signer = CheckpointSigner::load_or_create(&config.path().join("audit.key")).unwrap();
        let audit_key = signer.verifying_key();
        let audit_dir = state.path().join("audit");
        let log = AuditLog::open(&audit_dir, signer, AuditOptions::default()).unwrap();
        let resolver = Arc::new(ScriptedResolver::default());
        for n in NAMES {
            resolver.set(n, vec![vec!["127.0.0.1"]]);
        }
        let connector = Arc::new(RecordingConnector::default());
        let mut cfg = ProxyConfig::new(
            Session::new("run-1", "owner"),
            gate,
            Arc::new(Mutex::new(log)),
            setup.rules,
            ca,
        );
        cfg.secrets = setup.secrets;
        cfg.extra_roots_pem = vec![upstream.ca_pem.clone()];
        cfg.resolver = resolver.clone();
        cfg.connector = connector.clone();
        cfg.limits = setup.limits;
        if let Some(a) = setup.approvals {
            cfg.approvals = a;
        }
        let proxy = Proxy::new(cfg).unwrap();
        let handle = proxy
            .listen_tcp("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        Harness {
            config,
            state,
            upstream,
            resolver,
            connector,
            proxy,
            handle,
            audit_key,
            audit_dir,
        }
    }

    pub fn port(&self) -> u16 {
        self.upstream.addr.port()
    }

    /// `http://<host>:<plain upstream port><path>`.
    pub fn plain_url(&self, host: &str, path: &str) -> String {
        format!("http://{host}:{}{path}", self.upstream.plain_addr.port())
    }

    /// `https://<host>:<upstream port><path>`.
    pub fn url(&self, host: &str, path: &str) -> String {
        format!("https://{host}:{}{path}", self.port())
    }

    /// Run curl through the proxy, trusting only Airlock's CA.
    pub async fn curl(&self, args: &[&str]) -> Curl {
        self.curl_trusting(&self.config.path().join(CA_CERT_FILE), args)
            .await
    }

    /// Run curl through the proxy, trusting the roots in the PEM file `ca`.
    pub async fn curl_trusting(&self, ca: &std::path::Path, args: &[&str]) -> Curl {
        let proxy = format!("http://{}", self.handle.tcp_addr.unwrap());
        let mut cmd = std::process::Command::new("curl");
        cmd.args([
            "-sS",
            "--max-time",
            "60",
            "--noproxy",
            "",
            "--proxy",
            &proxy,
            "--cacert",
        ])
        .arg(ca)
        .args(["-D", "/dev/stderr", "-w", "\n%{http_code}"])
        .args(args)
        .env_remove("HTTPS_PROXY")
        .env_remove("https_proxy")
        .env_remove("ALL_PROXY");
        let out = tokio::task::spawn_blocking(move || {
            cmd.output()
                .expect("curl must be installed (apt-get install -y curl)")
        })
        .await
        .unwrap();
        let stdout = out.stdout;
        let split = stdout.iter().rposition(|b| *b == b'\n').unwrap_or(0);
        let status = String::from_utf8_lossy(&stdout[split..])
            .trim()
            .parse()
            .unwrap_or(0);
        Curl {
            exit: out.status.code().unwrap_or(-1),
            status,
            body: stdout[..split].to_vec(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.upstream.seen.lock().unwrap().clone()
    }

    pub fn connects(&self) -> Vec<SocketAddr> {
        self.connector.attempts.lock().unwrap().clone()
    }

    /// Every audit record, after waiting for pending appends.
    pub async fn audit_records(&self, at_least: usize) -> Vec<serde_json::Value> {
        for _ in 0..100 {
            let recs = self.read_audit();
            if recs.len() >= at_least {
                return recs;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        self.read_audit()
    }

    pub fn read_audit(&self) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(self.audit_dir.join(airlock_audit::LOG_FILE))
            .unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Records of `kind` whose detail mentions `path`, waiting briefly for them.
    pub async fn exchanges(&self, path: &str) -> Vec<serde_json::Value> {
        for _ in 0..100 {
            let found: Vec<_> = self
                .read_audit()
                .into_iter()
                .filter(|r| r["kind"] == "net.exchange" && r["detail"]["path"] == path)
                .collect();
            if !found.is_empty() {
                return found;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        vec![]
    }

    /// The hash chain and checkpoints verify.
    pub async fn assert_audit_verifies(&self) {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let report = airlock_audit::verify(&self.audit_dir, &self.audit_key).unwrap();
        assert!(report.is_ok(), "audit log problem: {:?}", report.problem);
        assert!(report.records > 0);
    }
}

#[derive(Debug)]
pub struct Curl {
    pub exit: i32,
    pub status: u16,
    pub body: Vec<u8>,
    pub stderr: String,
}

impl Curl {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}
