//! Shared fixture of the I3 tests: a real config dir (CA, net rules, an encrypted secret),
//! the real Gate and audit log, a real HTTPS upstream on 127.0.0.1 with its own test CA,
//! and runs of real commands (curl) in the real sandbox routed through a real per-run
//! proxy by `airlock::egress`. Only the proxy's name resolver is replaced, by one that
//! answers `*.test` names with 127.0.0.1 and never touches DNS.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use airlock::config::Config;
use airlock::egress::{Egress, EgressSetup};
use airlock::home::{create_private_dir, Home};
use airlock::runtime;
use airlock_audit::{AuditLog, CheckpointSigner};
use airlock_core::action::ExecAction;
use airlock_core::gate::{Gate, Session, Verdict};
use airlock_core::policy::Profile;
use airlock_proxy::net::BoxFuture;
use airlock_proxy::secrets::HeaderTemplate;
use airlock_proxy::{NetRule, NetRules, Resolver, SecretStore};
use airlock_sandbox::{OutputMode, RunOutcome, Sandbox, SandboxProfile};

/// The real value of the test secret. It must never reach the sandbox.
pub const SECRET_VALUE: &str = "s3cr3t-REAL-VALUE-7f3a9c";
pub const SECRET_NAME: &str = "api-token";
pub const SECRET_VAR: &str = "API_TOKEN";

/// What the upstream received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub host: String,
    pub authorization: Option<String>,
}

/// An HTTPS server on 127.0.0.1:0 whose certificate (for `*.test` names) comes from a
/// fresh test CA. `/.../echo` answers with the Authorization header it received, in the
/// body and in `x-echo-auth`; everything else answers `hello from <host> <method> <path>`.
pub struct Upstream {
    pub port: u16,
    pub ca_pem: String,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

pub fn start_upstream() -> Upstream {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "i3 upstream test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let names = ["api.test", "other.test", "nope.test"]
        .map(String::from)
        .to_vec();
    let leaf = rcgen::CertificateParams::new(names)
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls_pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
        )
        .unwrap();
    let cfg = Arc::new(cfg);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    std::thread::spawn(move || {
        for tcp in listener.incoming() {
            let Ok(tcp) = tcp else { continue };
            let (cfg, seen) = (cfg.clone(), seen2.clone());
            std::thread::spawn(move || {
                let Ok(conn) = rustls::ServerConnection::new(cfg) else {
                    return;
                };
                let _ = serve(rustls::StreamOwned::new(conn, tcp), &seen);
            });
        }
    });
    Upstream {
        port,
        ca_pem: ca_cert.pem(),
        seen,
    }
}

/// One request per connection (`Connection: close`), enough for curl through the proxy.
fn serve(
    stream: rustls::StreamOwned<rustls::ServerConnection, std::net::TcpStream>,
    seen: &Mutex<Vec<Seen>>,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let (mut host, mut authorization, mut length) = (String::new(), None, 0usize);
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h == "\r\n" {
            break;
        }
        let Some((k, v)) = h.split_once(':') else {
            continue;
        };
        let v = v.trim().to_string();
        match k.to_ascii_lowercase().as_str() {
            "host" => host = v,
            "authorization" => authorization = Some(v),
            "content-length" => length = v.parse().unwrap_or(0),
            _ => {}
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    seen.lock().unwrap().push(Seen {
        method: method.clone(),
        path: path.clone(),
        host: host.clone(),
        authorization: authorization.clone(),
    });
    let mut extra = String::new();
    let text = if path.ends_with("/echo") {
        let auth = authorization.unwrap_or_default();
        extra = format!("x-echo-auth: {auth}\r\n");
        format!("you sent authorization: {auth}\n")
    } else {
        format!("hello from {host} {method} {path}\n")
    };
    let mut stream = reader.into_inner();
    write!(
        stream,
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n{extra}connection: close\r\n\r\n{text}",
        text.len()
    )?;
    stream.flush()?;
    stream.conn.send_close_notify();
    stream.flush()
}

/// `*.test` -> 127.0.0.1; anything else is unknown. Never touches DNS.
pub struct TestResolver;

impl Resolver for TestResolver {
    fn resolve<'a>(&'a self, host: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>> {
        let answer = if host.ends_with(".test") {
            Ok(vec![IpAddr::from([127, 0, 0, 1])])
        } else {
            Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no such test name",
            ))
        };
        Box::pin(async move { answer })
    }
}

pub struct Fixture {
    pub tmp: tempfile::TempDir,
    pub home: Home,
    pub ws: PathBuf,
    pub upstream: Upstream,
    pub gate: Arc<Gate>,
    pub audit: Arc<Mutex<AuditLog>>,
}

fn rule(host: &str, port: u16, methods: &[&str]) -> NetRule {
    let mut r = NetRule::for_host(host);
    r.port = Some(port);
    r.methods = methods.iter().map(|m| m.to_string()).collect();
    r
}

/// The operator allows `api.test` for GET only and `other.test` for any method, both on
/// the upstream's port (and that exact loopback address past the SSRF guard), and stores
/// one secret bound to `api.test` under `/v1`.
pub fn fixture() -> Fixture {
    let upstream = start_upstream();
    let tmp = tempfile::Builder::new()
        .prefix("airlock-i3-")
        .tempdir_in("/tmp")
        .unwrap();
    let home = Home {
        config: tmp.path().join("config"),
        state: tmp.path().join("state"),
    };
    create_private_dir(&home.config).unwrap();
    create_private_dir(&home.state).unwrap();
    airlock_proxy::generate_ca(&home.config).unwrap();
    let mut rules = NetRules::default();
    rules
        .add(rule("api.test", upstream.port, &["GET"]))
        .unwrap();
    rules.add(rule("other.test", upstream.port, &[])).unwrap();
    rules
        .allow_private
        .push(format!("127.0.0.1:{}", upstream.port).parse().unwrap());
    rules.save(&home.config).unwrap();
    SecretStore::new(&home.config)
        .set(
            SECRET_NAME,
            "api.test",
            Some("/v1"),
            HeaderTemplate::bearer(),
            &secrecy::SecretString::from(SECRET_VALUE),
        )
        .unwrap();
    // The workspace: writable by the sandbox uid (65534 when the tests run as root).
    let ws = tmp.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&ws, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let ws = ws.canonicalize().unwrap();
    let cfg = Config::default();
    let gate = Arc::new(runtime::gate_for(&home, &cfg, Profile::Default, &ws).unwrap());
    let audit = Arc::new(Mutex::new(runtime::open_audit(&home, &cfg).unwrap()));
    Fixture {
        tmp,
        home,
        ws,
        upstream,
        gate,
        audit,
    }
}

pub fn sandbox() -> Sandbox {
    let init = PathBuf::from(env!("CARGO_BIN_EXE_airlock")).with_file_name("airlock-sandbox-init");
    Sandbox::with_init(init)
        .expect("build airlock-sandbox-init first (cargo build --workspace --bins)")
}

impl Fixture {
    pub fn url(&self, host: &str, path: &str) -> String {
        format!("https://{host}:{}{path}", self.upstream.port)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.upstream.seen.lock().unwrap().clone()
    }

    /// Decide `command` at the Gate (recorded in the audit log), then run it in the
    /// sandbox with a fresh egress proxy, exactly as `airlock exec` wires them.
    pub fn run(&self, command: &str, secrets: &[&str]) -> RunOutcome {
        let mut session = Session::new(runtime::session_id("i3"), "owner");
        session.observe_trusted(command);
        let action = ExecAction {
            command: command.into(),
            cwd: String::new(),
            env: vec![],
        };
        let verdict = self
            .gate
            .decide(&session, action, &mut *self.audit.lock().unwrap());
        let Verdict::Allow(token) = verdict else {
            panic!("the Gate did not allow {command:?}");
        };
        let names: Vec<String> = secrets.iter().map(|s| s.to_string()).collect();
        let mut setup = EgressSetup::load(&self.home, &names).unwrap();
        setup.resolver = Some(Arc::new(TestResolver));
        setup.extra_roots_pem = vec![self.upstream.ca_pem.clone()];
        let egress = Egress::start(
            setup,
            &self.home,
            &session,
            self.gate.clone(),
            self.audit.clone(),
            65534,
        )
        .unwrap();
        let mut profile = SandboxProfile::new(&self.ws);
        egress.configure(&mut profile).unwrap();
        let out = sandbox()
            .run(&token, &profile, OutputMode::Capture)
            .unwrap_or_else(|e| panic!("sandbox run failed: {e}"));
        assert!(
            egress.finish(),
            "the proxy's audit records were not all written"
        );
        out
    }

    /// curl inside the sandbox with the environment the run gets (no proxy or CA flags).
    /// Prints the body, then `\nHTTP <code>`.
    pub fn curl(&self, args: &str, secrets: &[&str]) -> (String, RunOutcome) {
        let out = self.run(
            &format!("curl -sS --max-time 30 -w '\\nHTTP %{{http_code}}' {args}"),
            secrets,
        );
        (String::from_utf8_lossy(&out.stdout).into_owned(), out)
    }

    pub fn audit_text(&self) -> String {
        std::fs::read_to_string(self.home.audit_dir().join(airlock_audit::LOG_FILE)).unwrap()
    }

    pub fn audit_records(&self) -> Vec<serde_json::Value> {
        self.audit_text()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The hash chain and checkpoints verify with the operator's key.
    pub fn assert_audit_verifies(&self) {
        let key = CheckpointSigner::load_or_create(&self.home.audit_key())
            .unwrap()
            .verifying_key();
        let report = airlock_audit::verify(&self.home.audit_dir(), &key).unwrap();
        assert!(report.is_ok(), "audit log problem: {:?}", report.problem);
        assert!(report.records > 0);
    }
}

/// Every file below `dir` whose bytes contain `needle`.
pub fn files_containing(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if std::fs::read(&p)
                .map(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes()))
                .unwrap_or(false)
            {
                hits.push(p);
            }
        }
    }
    hits
}
