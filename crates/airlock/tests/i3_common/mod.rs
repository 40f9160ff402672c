//! Shared fixture of the I3 tests: a real config dir (CA, net rules, an encrypted secret),
//! the real Gate and audit log, a real HTTPS upstream on 127.0.0.1 with its own test CA,
//! and runs of real commands (curl) in the real sandbox routed through a real per-run
//! proxy by `airlock::egress`. Only the proxy's view of the network is replaced: a name
//! resolver that answers `*.test` names with 127.0.0.1 (or scripted answers) and never
//! touches DNS, and a connector that records every connection attempt and never connects
//! beyond loopback.
#![allow(dead_code)]

pub mod clients;
pub mod git_http;
pub mod net;
pub mod packages;
pub mod upstream;

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
use airlock_proxy::secrets::HeaderTemplate;
use airlock_proxy::{ApprovalHook, Limits, NetRule, NetRules, SecretStore};
use airlock_sandbox::{OutputMode, RunOutcome, Sandbox, SandboxProfile};

#[allow(unused_imports)]
pub use net::{RecordingConnector, ScriptedResolver, REFUSED_NON_LOOPBACK};
#[allow(unused_imports)]
pub use upstream::{start_plain_upstream, start_upstream, Seen, Upstream, BIG_BODY_BYTES};

/// The real value of the test secret. It must never reach the sandbox.
pub const SECRET_VALUE: &str = "s3cr3t-REAL-VALUE-7f3a9c";
pub const SECRET_NAME: &str = "api-token";
pub const SECRET_VAR: &str = "API_TOKEN";

pub struct Fixture {
    pub tmp: tempfile::TempDir,
    pub home: Home,
    pub ws: PathBuf,
    pub upstream: Upstream,
    pub gate: Arc<Gate>,
    pub audit: Arc<Mutex<AuditLog>>,
    /// The proxy's resolver and connector, shared by every run of the fixture.
    pub resolver: Arc<ScriptedResolver>,
    pub connector: Arc<RecordingConnector>,
}

/// What one run changes from the defaults.
#[derive(Default, Clone)]
pub struct RunOptions {
    pub limits: Option<Limits>,
    pub approvals: Option<Arc<dyn ApprovalHook>>,
    /// Extra environment for the payload (on top of what egress sets).
    pub env: Vec<(String, String)>,
    pub timeout_secs: Option<u64>,
}

pub fn rule(host: &str, port: u16, methods: &[&str]) -> NetRule {
    let mut r = NetRule::for_host(host);
    r.port = Some(port);
    r.methods = methods.iter().map(|m| m.to_string()).collect();
    r
}

/// The operator allows `api.test` for GET only and `other.test` for any method, both on
/// the upstream's port (and that exact loopback address past the SSRF guard), and stores
/// one secret bound to `api.test` under `/v1`.
pub fn fixture() -> Fixture {
    fixture_with(|_, _| {})
}

/// [`fixture`], with more rules added by `more(rules, upstream_port)` before they are
/// saved and the Gate is loaded.
pub fn fixture_with(more: impl FnOnce(&mut NetRules, u16)) -> Fixture {
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
    more(&mut rules, upstream.port);
    rules.save(&home.config).unwrap();
    SecretStore::new(&home.config)
        .set(
            SECRET_NAME,
            &airlock_proxy::secrets::Binding::parse(
                "api.test",
                None,
                Some(upstream.port),
                Some("/v1"),
            )
            .unwrap(),
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
        resolver: Arc::default(),
        connector: Arc::default(),
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
        self.upstream.seen()
    }

    /// Every connection attempt the proxy made.
    pub fn connects(&self) -> Vec<std::net::SocketAddr> {
        self.connector.attempts()
    }

    /// The proxy's `net.exchange` records for `path`.
    pub fn exchanges(&self, path: &str) -> Vec<serde_json::Value> {
        self.audit_records()
            .into_iter()
            .filter(|r| r["kind"] == "net.exchange" && r["detail"]["path"] == path)
            .collect()
    }

    /// Decide `command` at the Gate (recorded in the audit log), then run it in the
    /// sandbox with a fresh egress proxy, exactly as `airlock exec` wires them.
    pub fn run(&self, command: &str, secrets: &[&str]) -> RunOutcome {
        self.run_with(command, secrets, &RunOptions::default())
    }

    /// [`Fixture::run`] with the changes in `opts`.
    pub fn run_with(&self, command: &str, secrets: &[&str], opts: &RunOptions) -> RunOutcome {
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
        setup.resolver = Some(self.resolver.clone());
        setup.connector = Some(self.connector.clone());
        if let Some(l) = &opts.limits {
            setup.limits = l.clone();
        }
        setup.approvals = opts.approvals.clone();
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
        profile.env.extend(opts.env.iter().cloned());
        if let Some(t) = opts.timeout_secs {
            profile.timeout_secs = t;
        }
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
        self.curl_with(args, secrets, &RunOptions::default())
    }

    /// [`Fixture::curl`] with the changes in `opts`.
    pub fn curl_with(
        &self,
        args: &str,
        secrets: &[&str],
        opts: &RunOptions,
    ) -> (String, RunOutcome) {
        let out = self.run_with(
            &format!("curl -sS --max-time 30 -w '\\nHTTP %{{http_code}}' {args}"),
            secrets,
            opts,
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
