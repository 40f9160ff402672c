//! Egress for sandboxed runs: a session's own proxy on a fresh UNIX socket, and the
//! sandbox settings that make it the payload's only way out.
//!
//! * [`EgressSetup::load`] reads what the run needs from the config dir before anything is
//!   decided: the interception CA (`ca.pem`/`ca.key`, made by `airlock init`, or here on
//!   first use) and the secrets named with `--secret`.
//! * [`EgressBinding::bind`] binds the proxy's socket `<state>/run/<session>/proxy.sock`
//!   (directory 0700, socket 0600 and owned by the sandbox uid, so only the relay the
//!   sandbox is handed can use it) before anything is decided, so that `airlock exec` can
//!   build the sandbox around it while the Gate decides; [`EgressBinding::serve`] then
//!   starts the proxy on it with the run's Gate, audit log and session.
//!   [`Egress::start`] does both at once.
//! * [`EgressBinding::configure`] and [`Egress::configure`] point the profile's relay at
//!   that socket and write the payload's environment: the proxy variables and the CA
//!   variables common tools read.
//! * [`Egress::finish`] stops the proxy and waits until its audit records are written.
//! * An agent session keeps one proxy for all its calls (`agent_executors`): between
//!   calls [`Egress::drain`] waits for its records without stopping it, and
//!   [`Egress::renew`] readies it for the next call as a fresh one would start (the net
//!   rules and secrets as they are now, the call's own approval hook, the session's
//!   taint as it is now). `airlock exec` is one call, and its proxy ends with it.
//!
//! Only the secrets named with `--secret` are loaded into the proxy: the payload gets each
//! one's placeholder as an environment variable whose name is the secret's name in upper
//! case with `-` and `.` turned into `_` (`--secret github-token` gives `GITHUB_TOKEN`).
//! A placeholder from another run (left in the workspace, say) is never swapped for its
//! value unless this run named the secret too.
//!
//! A rule marked *ask* is denied by the proxy unless an approval hook is given
//! ([`EgressSetup::approvals`]). `airlock exec` gives [`QueueApprovals`]: the request waits
//! in the store's approvals queue for `airlock approvals approve|deny`, and a timeout or
//! `airlock kill` denies it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use airlock_audit::AuditLog;
use airlock_core::gate::Session;
use airlock_core::gate_source::GateSource;
use airlock_proxy::secrets::LoadedSecret;
use airlock_proxy::{
    ApprovalHook, CertificateAuthority, Connector, Limits, NetRules, Proxy, ProxyConfig,
    ProxyHandle, Resolver, SecretStore, CA_CERT_FILE,
};
use airlock_sandbox::profile::{NetworkPolicy, ProxyRelay, DEFAULT_RELAY_PORT, RELAY_CA_CERT};
use airlock_sandbox::SandboxProfile;

use crate::home::{create_private_dir, Home};

mod approvals;
pub use approvals::QueueApprovals;

/// Variables that name the proxy. Both cases, because clients differ: Python's urllib
/// and npm need `https_proxy` or `HTTPS_PROXY`, while libcurl (curl, git, cargo) and
/// requests (pip) also fall back to `ALL_PROXY`/`all_proxy`.
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
/// Variables through which common tools find the CA certificate. Each client reads its
/// own: OpenSSL and Python's `ssl`/urllib `SSL_CERT_FILE`; curl `CURL_CA_BUNDLE`; requests
/// and pip `REQUESTS_CA_BUNDLE` (pip also `PIP_CERT`); Node `NODE_EXTRA_CA_CERTS`; git
/// `GIT_SSL_CAINFO`; cargo `CARGO_HTTP_CAINFO`; npm its `cafile` setting, which a global
/// npmrc may set (Debian's `/etc/npmrc` names the system bundle, replacing Node's roots
/// and `NODE_EXTRA_CA_CERTS`) and `npm_config_cafile` overrides.
/// `crates/airlock/tests/i4_clients_in_the_sandbox.rs` runs these clients in the sandbox.
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
    /// How the proxy opens upstream connections (default: plain TCP). Tests inject one
    /// that records every attempt.
    pub connector: Option<Arc<dyn Connector>>,
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
        let rules = load_rules(home)?;
        let (secrets, placeholders) = load_secrets(home, secret_names)?;
        Ok(EgressSetup {
            ca: Arc::new(ca),
            ca_cert: home.config.join(CA_CERT_FILE),
            rules,
            secrets,
            placeholders,
            relay_port: DEFAULT_RELAY_PORT,
            resolver: None,
            connector: None,
            extra_roots_pem: Vec::new(),
            approvals: None,
            limits: Limits::default(),
        })
    }

    /// The proxy CA's certificate, which the sandbox is given to trust.
    pub fn ca_pem(&self) -> &str {
        self.ca.cert_pem()
    }
}

fn load_rules(home: &Home) -> Result<NetRules, EgressError> {
    NetRules::load(&home.config).map_err(|e| EgressError::Start(e.to_string()))
}

/// The secrets named in `names`, and the placeholder each is exposed to the payload as.
fn load_secrets(
    home: &Home,
    names: &[String],
) -> Result<(Vec<LoadedSecret>, BTreeMap<String, String>), EgressError> {
    let mut secrets = Vec::new();
    let mut placeholders = BTreeMap::new();
    if names.is_empty() {
        return Ok((secrets, placeholders));
    }
    let all = SecretStore::new(&home.config)
        .load_all()
        .map_err(|e| EgressError::Secrets(e.to_string()))?;
    for name in names {
        let Some(s) = all.iter().find(|s| &s.info.name == name) else {
            return Err(EgressError::UnknownSecret(name.clone()));
        };
        if !secrets.iter().any(|l: &LoadedSecret| &l.info.name == name) {
            placeholders.insert(secret_env_name(name), s.info.placeholder.clone());
            secrets.push(s.clone());
        }
    }
    Ok((secrets, placeholders))
}

/// A run's proxy socket, bound (with the run dir and the sandbox's CA bundle) before the
/// Gate decides, so the sandbox can be built around it meanwhile.
/// Connections wait in the socket's backlog until [`EgressBinding::serve`] starts the
/// proxy; dropping the binding instead removes the run dir.
pub struct EgressBinding {
    /// These three are taken by [`EgressBinding::serve`].
    setup: Option<EgressSetup>,
    runtime: Option<RuntimeBuild>,
    listener: Option<std::os::unix::net::UnixListener>,
    dir: PathBuf,
    relay: ProxyRelay,
    placeholders: BTreeMap<String, String>,
    secret_names: Vec<String>,
}

impl EgressBinding {
    /// Bind the proxy socket for session `session_id` under `<state>/run/`. `sandbox_uid`
    /// is the uid the sandbox runs as when Airlock runs as root (the socket is given to it).
    pub fn bind(
        setup: EgressSetup,
        home: &Home,
        session_id: &str,
        sandbox_uid: u32,
    ) -> Result<EgressBinding, EgressError> {
        let dir = home.state.join("run").join(session_id);
        create_private_dir(&home.state.join("run")).map_err(|e| start_err("run dir", &e))?;
        // A fresh directory per run (creating it fails if anything is already there).
        std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700)
            .create(&dir)
            .map_err(|e| start_err(&dir.display().to_string(), &e))?;
        let bound = Self::bind_in(setup, home, &dir, sandbox_uid);
        if bound.is_err() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        bound
    }

    fn bind_in(
        setup: EgressSetup,
        home: &Home,
        dir: &Path,
        sandbox_uid: u32,
    ) -> Result<EgressBinding, EgressError> {
        let socket = dir.join("proxy.sock");
        // The sandbox's CA file: Airlock's CA plus the trusted roots, so pass-through hosts
        // verify too; Airlock's CA alone while the bundle is over the sandbox's size limit.
        let bundle = airlock_proxy::ensure_ca_bundle(&home.config, &setup.extra_roots_pem)
            .map_err(|e| start_err("sandbox CA bundle", &e))?;
        let sandbox_ca = match std::fs::metadata(&bundle) {
            Ok(m) if m.len() <= airlock_sandbox::profile::MAX_CA_CERT_BYTES => bundle,
            _ => setup.ca_cert.clone(),
        };
        let listener = airlock_proxy::bind_unix_socket(&socket).map_err(|e| {
            start_err(
                "listen",
                &format!("{e} (a UNIX socket path is limited to 107 bytes; set AIRLOCK_HOME to a shorter directory)"),
            )
        })?;
        // The socket belongs to whoever runs airlock. As root, the sandbox runs as
        // `sandbox_uid` and must be allowed to connect; the 0700 directory keeps every
        // other process of that uid on the host away from it.
        use std::os::unix::fs::MetadataExt;
        let owner = std::fs::metadata(&socket)
            .map_err(|e| start_err("proxy socket", &e))?
            .uid();
        if owner == 0 {
            std::os::unix::fs::chown(&socket, Some(sandbox_uid), Some(sandbox_uid))
                .map_err(|e| start_err("chown proxy socket", &e))?;
        }
        let secret_names = setup.secrets.iter().map(|s| s.info.name.clone()).collect();
        Ok(EgressBinding {
            relay: ProxyRelay {
                port: setup.relay_port,
                socket,
                ca_cert: Some(sandbox_ca),
            },
            placeholders: setup.placeholders.clone(),
            setup: Some(setup),
            runtime: None,
            listener: Some(listener),
            dir: dir.to_path_buf(),
            secret_names,
        })
    }

    /// Route `profile` through this run's proxy: the relay, and the payload's environment.
    pub fn configure(&self, profile: &mut SandboxProfile) -> Result<(), EgressError> {
        route_through(&self.relay, &self.placeholders, &self.secret_names, profile)
    }

    /// Serve with `setup` instead of what the binding was made with: a run staged ahead
    /// of its request takes the net rules and the CA as they are at the request. Refused
    /// when `setup` would expose other secrets than the sandbox was configured for, or
    /// after the binding was served.
    pub fn renew_setup(&mut self, setup: EgressSetup) -> Result<(), EgressError> {
        if setup.placeholders != self.placeholders {
            return Err(start_err(
                "proxy",
                &"the run's secrets are not those its sandbox was prepared with",
            ));
        }
        match self.setup.as_mut() {
            Some(current) => {
                *current = setup;
                Ok(())
            }
            None => Err(start_err("proxy", &"the binding was already served")),
        }
    }

    /// Start building the proxy's runtime (its worker threads) on a thread of its own,
    /// for [`EgressBinding::serve`] to take (it otherwise builds it then): `airlock exec`
    /// does so once the sandbox is being built, so that neither the sandbox's build nor
    /// the Gate's decision waits for the threads.
    pub fn start_runtime(&mut self) -> Result<(), EgressError> {
        if self.runtime.is_none() {
            let building = std::thread::Builder::new()
                .name("airlock-egress-start".into())
                .spawn(proxy_runtime)
                .map_err(|e| start_err("tokio runtime", &e))?;
            self.runtime = Some(building);
        }
        Ok(())
    }

    /// Hold the proxy's *ask* requests in the store's approvals queue (see
    /// [`QueueApprovals`]) for up to `timeout`, after which they are denied.
    pub fn queue_approvals(
        &mut self,
        home: &Home,
        audit: &Arc<Mutex<AuditLog>>,
        limits: airlock_store::ApprovalLimits,
        timeout: Duration,
        gate_config: airlock_core::facts::GateConfig,
    ) -> Result<(), EgressError> {
        let setup = self
            .setup
            .as_mut()
            .ok_or_else(|| start_err("proxy", &"the binding was already served"))?;
        let hook = QueueApprovals::new(&home.state, audit, limits, timeout, gate_config);
        setup.approvals = Some(Arc::new(hook));
        setup.limits.ask_timeout = timeout;
        Ok(())
    }

    /// The run dir (the kill switch registers the run there).
    pub fn run_dir(&self) -> &Path {
        &self.dir
    }

    /// Start the proxy on the bound socket, deciding with `gate` for `session` and
    /// recording into `audit`.
    pub fn serve(
        mut self,
        session: &Session,
        gate: Arc<dyn GateSource>,
        audit: Arc<Mutex<AuditLog>>,
    ) -> Result<Egress, EgressError> {
        // Before the listener is taken: a binding that fails here still removes its dir.
        let runtime = match self.runtime.take() {
            Some(building) => building
                .join()
                .map_err(|_| start_err("tokio runtime", &"its build panicked"))??,
            None => proxy_runtime()?,
        };
        let (Some(setup), Some(listener)) = (self.setup.take(), self.listener.take()) else {
            return Err(start_err("proxy", &"the binding was already served"));
        };
        let mut cfg = ProxyConfig::new(session.clone(), gate, audit, setup.rules, setup.ca);
        cfg.secrets = setup.secrets;
        cfg.extra_roots_pem = setup.extra_roots_pem;
        if let Some(r) = setup.resolver {
            cfg.resolver = r;
        }
        if let Some(c) = setup.connector {
            cfg.connector = c;
        }
        if let Some(a) = setup.approvals {
            cfg.approvals = a;
        }
        cfg.limits = setup.limits;
        // From here the Egress owns the run dir and the runtime: its drop cleans both.
        let mut egress = Egress {
            runtime: Some(runtime),
            proxy: None,
            handle: None,
            records: None,
            dir: self.dir.clone(),
            relay: self.relay.clone(),
            placeholders: std::mem::take(&mut self.placeholders),
            secret_names: std::mem::take(&mut self.secret_names),
            bytes_before_call: 0,
            call: 1,
        };
        let proxy = Proxy::new(cfg).map_err(|e| start_err("proxy", &e));
        let handle = proxy.as_ref().ok().map(|proxy| {
            let _in_runtime = egress.runtime.as_ref().map(|rt| rt.enter());
            proxy.serve_unix(listener, &self.relay.socket)
        });
        match (proxy, handle) {
            (Ok(proxy), Some(Ok(handle))) => {
                egress.records = Some(proxy.records_token());
                egress.proxy = Some(proxy);
                egress.handle = Some(handle);
                Ok(egress)
            }
            (Err(e), _) => Err(e),
            (_, Some(Err(e))) => Err(start_err("listen", &e)),
            (Ok(_), None) => Err(start_err("proxy", &"not started")),
        }
    }
}

impl Drop for EgressBinding {
    fn drop(&mut self) {
        // Never served: nothing else owns the run dir. (Once served, the Egress does.)
        if self.listener.is_some() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A proxy runtime being built on a thread of its own ([`EgressBinding::start_runtime`]).
type RuntimeBuild = std::thread::JoinHandle<Result<tokio::runtime::Runtime, EgressError>>;

/// The runtime one run's proxy serves on.
fn proxy_runtime() -> Result<tokio::runtime::Runtime, EgressError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("airlock-egress")
        .enable_all()
        .build()
        .map_err(|e| start_err("tokio runtime", &e))
}

fn start_err(what: &str, e: &dyn std::fmt::Display) -> EgressError {
    EgressError::Start(format!("{what}: {e}"))
}

/// A run's running egress proxy.
pub struct Egress {
    runtime: Option<tokio::runtime::Runtime>,
    proxy: Option<Proxy>,
    handle: Option<ProxyHandle>,
    /// The proxy's records token ([`Proxy::records_token`]): its records are all written
    /// when this is the last share. (The log may be the host's one writer, shared with
    /// other runs, so its own count says nothing about this run.)
    records: Option<Arc<()>>,
    dir: PathBuf,
    relay: ProxyRelay,
    placeholders: BTreeMap<String, String>,
    secret_names: Vec<String>,
    /// The proxy's request bytes when the current call began ([`Egress::renew`]).
    bytes_before_call: u64,
    /// Which call of its session this proxy serves now: 1 when started, one more at
    /// each [`Egress::renew`].
    call: u64,
}

impl Egress {
    /// Start the proxy for `session` on a fresh socket under `<state>/run/`. `sandbox_uid`
    /// is the uid the sandbox runs as when Airlock runs as root (the socket is given to it).
    pub fn start(
        setup: EgressSetup,
        home: &Home,
        session: &Session,
        gate: Arc<dyn GateSource>,
        audit: Arc<Mutex<AuditLog>>,
        sandbox_uid: u32,
    ) -> Result<Egress, EgressError> {
        EgressBinding::bind(setup, home, &session.id, sandbox_uid)?.serve(session, gate, audit)
    }

    /// Route `profile` through this proxy: the relay, and the payload's environment.
    pub fn configure(&self, profile: &mut SandboxProfile) -> Result<(), EgressError> {
        route_through(&self.relay, &self.placeholders, &self.secret_names, profile)
    }

    /// The proxy's socket on the host.
    pub fn socket_path(&self) -> &Path {
        &self.relay.socket
    }

    /// The proxy URL the payload uses.
    pub fn proxy_url(&self) -> String {
        self.relay.proxy_url()
    }

    /// Request bytes sent out through the proxy in the current call (since it started,
    /// or since [`Egress::renew`]).
    pub fn egress_bytes(&self) -> u64 {
        self.proxy
            .as_ref()
            .map(|p| p.egress_used().saturating_sub(self.bytes_before_call))
            .unwrap_or(0)
    }

    /// Ready a session's proxy for the session's next call, as a fresh one would start:
    /// the operator's net rules and this proxy's secrets as they are now (a `net revoke`
    /// or `secret rm` since the last call holds from this one on), the call's own answer
    /// to asks (`None` denies them), the session as it is now (its taint), and the
    /// call's request bytes counted from zero. The session's egress budget goes on.
    pub fn renew(
        &mut self,
        home: &Home,
        approvals: Option<Arc<dyn ApprovalHook>>,
        session: &Session,
    ) -> Result<(), EgressError> {
        let Some(proxy) = self.proxy.as_ref() else {
            return Err(start_err("proxy", &"it was stopped"));
        };
        let rules = load_rules(home)?;
        let (secrets, _) = load_secrets(home, &self.secret_names)?;
        let approvals = approvals.unwrap_or_else(|| Arc::new(airlock_proxy::approval::NoApprovals));
        proxy
            .set_terms(rules, secrets, approvals)
            .map_err(|e| start_err("proxy", &e))?;
        proxy.set_session(session.clone());
        self.bytes_before_call = proxy.egress_used();
        self.call += 1;
        Ok(())
    }

    /// Wait (bounded) until the proxy has nothing under way and every audit record it
    /// queued is written, without stopping it: what a call did through it is in the log
    /// before the call's result is. `false` when something was still under way at the
    /// timeout.
    pub fn drain(&self) -> bool {
        let deadline = Instant::now() + DRAIN_TIMEOUT;
        loop {
            // Ours and the proxy's own share of the records token: no write is queued.
            let written = self
                .records
                .as_ref()
                .is_none_or(|t| Arc::strong_count(t) <= 2);
            if self.proxy.as_ref().is_none_or(|p| p.is_quiet()) && written {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Which call of its session this proxy serves now (1: it was started for it).
    pub fn call(&self) -> u64 {
        self.call
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
        // Every queued audit write of the proxy holds a share of its records token (and the
        // proxy's tasks hold the proxy, which holds one); when only ours is left,
        // everything is written.
        let deadline = Instant::now() + DRAIN_TIMEOUT;
        let mut drained = true;
        while self
            .records
            .as_ref()
            .is_some_and(|t| Arc::strong_count(t) > 1)
        {
            if Instant::now() > deadline {
                drained = false;
                break;
            }
            // Short: this wait ends every sandboxed run, and the runtime's workers usually
            // drop the aborted accept task within microseconds.
            std::thread::sleep(Duration::from_micros(50));
        }
        // Every record written: the worker threads are told to stop and left to end on
        // their own, off the run's path (joining them took a millisecond beside the
        // execution record). Records still pending get the bounded wait.
        if let Some(rt) = self.runtime.take() {
            match drained {
                true => rt.shutdown_background(),
                false => rt.shutdown_timeout(Duration::from_secs(2)),
            }
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

/// Point `profile`'s relay at `relay` and write the payload's environment: the proxy
/// variables, the CA variables and the secrets' placeholders.
fn route_through(
    relay: &ProxyRelay,
    placeholders: &BTreeMap<String, String>,
    secret_names: &[String],
    profile: &mut SandboxProfile,
) -> Result<(), EgressError> {
    profile.network = NetworkPolicy::ProxyRelay(relay.clone());
    let url = relay.proxy_url();
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
    for (var, placeholder) in placeholders {
        if profile.env.contains_key(var) {
            let name = secret_names
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
