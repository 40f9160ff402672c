//! Egress for one sandboxed run: the run's own proxy on a fresh UNIX socket, and the
//! sandbox settings that make it the payload's only way out.
//!
//! * [`EgressSetup::load`] reads what the run needs from the config dir before anything is
//!   decided: the interception CA (`ca.pem`/`ca.key`, made by `airlock init`, or here on
//!   first use) and the secrets named with `--secret`.
//! * [`Egress::start`] starts the proxy in `<state>/run/<session>/proxy.sock` (directory
//!   0700, socket 0600 and owned by the sandbox uid, so only the relay the sandbox is
//!   handed can use it), with the run's Gate, audit log and session.
//! * [`Egress::configure`] points the profile's relay at that socket and writes the
//!   payload's environment: the proxy variables and the CA variables common tools read.
//! * [`Egress::finish`] stops the proxy and waits until its audit records are written.
//!
//! Only the secrets named with `--secret` are loaded into the proxy: the payload gets each
//! one's placeholder as an environment variable whose name is the secret's name in upper
//! case with `-` and `.` turned into `_` (`--secret github-token` gives `GITHUB_TOKEN`).
//! A placeholder from another run (left in the workspace, say) is never swapped for its
//! value unless this run named the secret too.
//!
//! A rule marked *ask* is denied by the proxy unless an approval hook is given
//! ([`EgressSetup::approvals`]); `airlock exec` has none until the approvals queue exists.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use airlock_audit::AuditLog;
use airlock_core::gate::{Gate, Session};
use airlock_proxy::secrets::LoadedSecret;
use airlock_proxy::{
    ApprovalHook, CertificateAuthority, Limits, NetRules, Proxy, ProxyConfig, ProxyHandle,
    Resolver, SecretStore, CA_CERT_FILE,
};
use airlock_sandbox::profile::{NetworkPolicy, ProxyRelay, DEFAULT_RELAY_PORT, RELAY_CA_CERT};
use airlock_sandbox::SandboxProfile;

use crate::home::{create_private_dir, Home};

/// Variables that name the proxy.
pub const PROXY_VARS: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
];
/// Variables that exempt hosts from the proxy; set empty so nothing is exempt.
pub const NO_PROXY_VARS: &[&str] = &["NO_PROXY", "no_proxy"];
/// Variables through which common tools (OpenSSL, curl, Python requests, Node, git, pip,
/// cargo, npm) find the CA certificate.
pub const CA_VARS: &[&str] = &[
    "SSL_CERT_FILE",
    "CURL_CA_BUNDLE",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
    "CARGO_HTTP_CAINFO",
    "npm_config_cafile",
];
/// How long [`Egress::finish`] waits for the proxy's last audit records.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Why egress could not be set up. Each names what to fix.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    #[error("cannot load the egress proxy's CA: {0}\nhelp: run `airlock init` again, or restore ca.pem and ca.key in the config dir")]
    Ca(String),
    #[error("cannot read the secrets store: {0}")]
    Secrets(String),
    #[error("no secret named {0:?}\nhelp: `airlock secret list` shows the stored secrets; add one with `airlock secret set {0} --host HOST`")]
    UnknownSecret(String),
    #[error("secret {name:?} would become environment variable {var}, which the sandbox already sets\nhelp: rename the secret (`airlock secret rm` then `airlock secret set`)")]
    EnvClash { name: String, var: String },
    #[error("cannot start the egress proxy: {0}")]
    Start(String),
}

/// What a run's egress needs, loaded before the Gate decides (so a bad `--secret` or a
/// missing CA stops the run before anything is recorded as allowed).
pub struct EgressSetup {
    ca: Arc<CertificateAuthority>,
    ca_cert: PathBuf,
    rules: NetRules,
    secrets: Vec<LoadedSecret>,
    /// Environment variable -> placeholder, for the payload.
    placeholders: BTreeMap<String, String>,
    /// Port of the relay inside the sandbox.
    pub relay_port: u16,
    /// The proxy's name resolver (default: the system's). Tests inject their own.
    pub resolver: Option<Arc<dyn Resolver>>,
    /// Extra PEM roots the proxy trusts upstream, beside the webpki roots.
    pub extra_roots_pem: Vec<String>,
    /// Who answers *ask* decisions; `None` denies them.
    pub approvals: Option<Arc<dyn ApprovalHook>>,
    pub limits: Limits,
}

/// The environment variable a secret's placeholder is exposed as.
pub fn secret_env_name(secret: &str) -> String {
    secret
        .chars()
        .map(|c| match c {
            '-' | '.' => '_',
            c => c.to_ascii_uppercase(),
        })
        .collect()
}

impl EgressSetup {
    /// Load the CA, the net rules and the secrets named in `secret_names` from `home`.
    pub fn load(home: &Home, secret_names: &[String]) -> Result<EgressSetup, EgressError> {
        // Never initialised: make the CA now, as `airlock init` would (safe when many
        // runs start at once).
        create_private_dir(&home.config).map_err(|e| EgressError::Ca(e.to_string()))?;
        airlock_proxy::ensure_ca(&home.config).map_err(|e| EgressError::Ca(e.to_string()))?;
        let ca =
            CertificateAuthority::load(&home.config).map_err(|e| EgressError::Ca(e.to_string()))?;
        let rules = NetRules::load(&home.config).map_err(|e| EgressError::Start(e.to_string()))?;
        let store = SecretStore::new(&home.config);
        let mut secrets = Vec::new();
        let mut placeholders = BTreeMap::new();
        if !secret_names.is_empty() {
            let all = store
                .load_all()
                .map_err(|e| EgressError::Secrets(e.to_string()))?;
            for name in secret_names {
                let Some(s) = all.iter().find(|s| &s.info.name == name) else {
                    return Err(EgressError::UnknownSecret(name.clone()));
                };
                if !secrets.iter().any(|l: &LoadedSecret| &l.info.name == name) {
                    placeholders.insert(secret_env_name(name), s.info.placeholder.clone());
                    secrets.push(s.clone());
                }
            }
        }
        Ok(EgressSetup {
            ca: Arc::new(ca),
            ca_cert: home.config.join(CA_CERT_FILE),
            rules,
            secrets,
            placeholders,
            relay_port: DEFAULT_RELAY_PORT,
            resolver: None,
            extra_roots_pem: Vec::new(),
            approvals: None,
            limits: Limits::default(),
        })
    }
}

/// A run's running egress proxy.
pub struct Egress {
    runtime: Option<tokio::runtime::Runtime>,
    proxy: Option<Proxy>,
    handle: Option<ProxyHandle>,
    audit: Arc<Mutex<AuditLog>>,
    /// Holders of the audit log before the proxy took its share.
    audit_holders: usize,
    dir: PathBuf,
    relay: ProxyRelay,
    placeholders: BTreeMap<String, String>,
    secret_names: Vec<String>,
}

impl Egress {
    /// Start the proxy for `session` on a fresh socket under `<state>/run/`. `sandbox_uid`
    /// is the uid the sandbox runs as when Airlock runs as root (the socket is given to it).
    pub fn start(
        setup: EgressSetup,
        home: &Home,
        session: &Session,
        gate: Arc<Gate>,
        audit: Arc<Mutex<AuditLog>>,
        sandbox_uid: u32,
    ) -> Result<Egress, EgressError> {
        let start_err =
            |what: &str, e: &dyn std::fmt::Display| EgressError::Start(format!("{what}: {e}"));
        let dir = home.state.join("run").join(&session.id);
        create_private_dir(&home.state.join("run")).map_err(|e| start_err("run dir", &e))?;
        // A fresh directory per run (creating it fails if anything is already there).
        std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
            .create(&dir)
            .map_err(|e| start_err(&dir.display().to_string(), &e))?;
        let socket = dir.join("proxy.sock");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("airlock-egress")
            .enable_all()
            .build()
            .map_err(|e| start_err("tokio runtime", &e))?;
        let audit_holders = Arc::strong_count(&audit);
        let mut cfg = ProxyConfig::new(session.clone(), gate, audit.clone(), setup.rules, setup.ca);
        cfg.secrets = setup.secrets;
        cfg.extra_roots_pem = setup.extra_roots_pem;
        if let Some(r) = setup.resolver {
            cfg.resolver = r;
        }
        if let Some(a) = setup.approvals {
            cfg.approvals = a;
        }
        cfg.limits = setup.limits;
        let secret_names = cfg.secrets.iter().map(|s| s.info.name.clone()).collect();
        let proxy = Proxy::new(cfg).map_err(|e| start_err("proxy", &e))?;
        let handle = {
            let _in_runtime = runtime.enter();
            proxy.listen_unix(&socket).map_err(|e| {
                start_err(
                    "listen",
                    &format!("{e} (a UNIX socket path is limited to 107 bytes; set AIRLOCK_HOME to a shorter directory)"),
                )
            })?
        };
        let mut egress = Egress {
            runtime: Some(runtime),
            proxy: Some(proxy),
            handle: Some(handle),
            audit,
            audit_holders,
            dir,
            relay: ProxyRelay {
                port: setup.relay_port,
                socket: socket.clone(),
                ca_cert: Some(setup.ca_cert),
            },
            placeholders: setup.placeholders,
            secret_names,
        };
        // The socket belongs to whoever runs airlock. As root, the sandbox runs as
        // `sandbox_uid` and must be allowed to connect; the 0700 directory keeps every
        // other process of that uid on the host away from it.
        use std::os::unix::fs::MetadataExt;
        let owner = std::fs::metadata(&socket)
            .map_err(|e| start_err("proxy socket", &e))?
            .uid();
        if owner == 0 {
            if let Err(e) = std::os::unix::fs::chown(&socket, Some(sandbox_uid), Some(sandbox_uid))
            {
                egress.stop();
                return Err(start_err("chown proxy socket", &e));
            }
        }
        Ok(egress)
    }

    /// Route `profile` through this proxy: the relay, and the payload's environment.
    pub fn configure(&self, profile: &mut SandboxProfile) -> Result<(), EgressError> {
        profile.network = NetworkPolicy::ProxyRelay(self.relay.clone());
        let url = self.relay.proxy_url();
        for var in PROXY_VARS {
            profile.env.insert(var.to_string(), url.clone());
        }
        for var in NO_PROXY_VARS {
            profile.env.insert(var.to_string(), String::new());
        }
        for var in CA_VARS {
            profile
                .env
                .insert(var.to_string(), RELAY_CA_CERT.to_string());
        }
        for (var, placeholder) in &self.placeholders {
            if profile.env.contains_key(var) {
                let name = self
                    .secret_names
                    .iter()
                    .find(|n| &secret_env_name(n) == var)
                    .cloned()
                    .unwrap_or_default();
                return Err(EgressError::EnvClash {
                    name,
                    var: var.clone(),
                });
            }
            profile.env.insert(var.clone(), placeholder.clone());
        }
        Ok(())
    }

    /// The proxy's socket on the host.
    pub fn socket_path(&self) -> &Path {
        &self.relay.socket
    }

    /// The proxy URL the payload uses.
    pub fn proxy_url(&self) -> String {
        self.relay.proxy_url()
    }

    /// Request bytes sent out through the proxy so far.
    pub fn egress_bytes(&self) -> u64 {
        self.proxy.as_ref().map(|p| p.egress_used()).unwrap_or(0)
    }

    /// Names of the secrets this run may use.
    pub fn secret_names(&self) -> &[String] {
        &self.secret_names
    }

    /// Stop the proxy, wait (bounded) until every audit record it queued is written, and
    /// remove the socket directory. Returns `false` if records were still pending at the
    /// timeout.
    pub fn finish(mut self) -> bool {
        self.stop()
    }

    fn stop(&mut self) -> bool {
        drop(self.handle.take());
        drop(self.proxy.take());
        // Every connection task and queued audit write holds a share of the log; when only
        // the holders from before the proxy remain, everything is written.
        let deadline = Instant::now() + DRAIN_TIMEOUT;
        let mut drained = true;
        while Arc::strong_count(&self.audit) > self.audit_holders {
            if Instant::now() > deadline {
                drained = false;
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_timeout(Duration::from_secs(2));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        drained
    }
}

impl Drop for Egress {
    fn drop(&mut self) {
        if self.runtime.is_some() {
            self.stop();
        }
    }
}
