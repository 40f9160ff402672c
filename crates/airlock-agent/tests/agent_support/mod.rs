//! Shared harness for the agent loop tests: a real Gate (built-in default policy plus one
//! operator allowlist rule for `news.test`), a real audit log and SQLite store in temp
//! dirs, real file tools, and the scripted model over loopback. Only shell, fetch and
//! send_message are stand-ins here: they record what they were asked to run and return
//! scripted output, because the sandbox and proxy are wired in by the binary.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use airlock_agent::agent::{Agent, AgentConfig, Executors, ToolOutput, TurnReport};
use airlock_agent::provider::{connect, ProviderKind};
use airlock_agent::scripted::ScriptedModel;
use airlock_audit::{verify, AuditLog, AuditOptions, CheckpointSigner, VerifyingKey};
use airlock_core::action::{ExecAction, MessageSendAction, NetRequestAction};
use airlock_core::facts::GateConfig;
use airlock_core::gate::Gate;
use airlock_core::policy::{builtin_sources, PolicyEngine, PolicySource, Profile};
use airlock_core::{Authorized, IntoAction};
use airlock_store::{NewSession, SessionStore, SqliteStore, Timestamp};

/// The operator's one allowlist rule: GET requests to `news.test`.
pub const NEWS_RULE: &str = "@id(\"operator.news\")\n@reason(\"the operator allows reading news.test\")\npermit (principal, action == Airlock::Action::\"net.request\", resource)\nwhen { context.net.host == \"news.test\" && context.net.method == \"GET\" };\n";

/// One action an executor was asked to run, with the token's recorded hash.
#[derive(Debug, Clone, PartialEq)]
pub struct Executed {
    pub tool: &'static str,
    pub action: Value,
    pub action_hash: String,
    pub body: Option<String>,
}

/// Records every authorized action and answers from a script.
#[derive(Default)]
pub struct RecordingExecutors {
    pub calls: Mutex<Vec<Executed>>,
    /// Response bodies by URL for `fetch`.
    pub pages: Mutex<HashMap<String, String>>,
    /// How long `shell` takes.
    pub shell_delay: Mutex<Duration>,
    /// Set when a shell command starts.
    pub shell_started: Arc<std::sync::atomic::AtomicBool>,
    /// Set when a shell future was dropped before it finished.
    pub shell_abandoned: Arc<Mutex<bool>>,
}

impl RecordingExecutors {
    pub fn calls(&self) -> Vec<Executed> {
        self.calls.lock().unwrap().clone()
    }

    pub fn calls_of(&self, tool: &str) -> Vec<Executed> {
        self.calls()
            .into_iter()
            .filter(|c| c.tool == tool)
            .collect()
    }

    fn record<A: IntoAction>(
        &self,
        tool: &'static str,
        auth: &Authorized<A>,
        body: Option<String>,
    ) {
        self.calls.lock().unwrap().push(Executed {
            tool,
            action: serde_json::to_value(auth.action().to_action()).unwrap(),
            action_hash: auth.action_hash().to_string(),
            body,
        });
    }
}

/// Marks the shell call abandoned if dropped before completion.
struct DropFlag(Arc<Mutex<bool>>, bool);
impl Drop for DropFlag {
    fn drop(&mut self) {
        if !self.1 {
            *self.0.lock().unwrap() = true;
        }
    }
}

#[async_trait]
impl Executors for RecordingExecutors {
    async fn shell(&self, auth: Authorized<ExecAction>, _timeout: Duration) -> ToolOutput {
        self.record("shell", &auth, None);
        self.shell_started
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let delay = *self.shell_delay.lock().unwrap();
        let mut flag = DropFlag(self.shell_abandoned.clone(), false);
        tokio::time::sleep(delay).await;
        flag.1 = true;
        ToolOutput::ok(format!("ran: {}", auth.action().command))
    }

    async fn fetch(
        &self,
        auth: Authorized<NetRequestAction>,
        body: Option<String>,
        _timeout: Duration,
    ) -> ToolOutput {
        self.record("fetch", &auth, body);
        match self.pages.lock().unwrap().get(&auth.action().url) {
            Some(page) => ToolOutput::ok(page.clone()),
            None => ToolOutput::error("404 not found"),
        }
    }

    async fn send_message(
        &self,
        auth: Authorized<MessageSendAction>,
        _timeout: Duration,
    ) -> ToolOutput {
        self.record("send_message", &auth, None);
        ToolOutput::ok(format!("delivered to {}", auth.action().destination))
    }
}

/// Everything one test needs, on disk in temp dirs.
pub struct Harness {
    pub state: tempfile::TempDir,
    pub config_dir: tempfile::TempDir,
    pub store: SqliteStore,
    pub audit: std::sync::Mutex<AuditLog>,
    pub key: VerifyingKey,
    pub gate: Gate,
    pub session_id: String,
    pub workspace: PathBuf,
    pub exec: RecordingExecutors,
    pub config: AgentConfig,
}

pub fn engine() -> PolicyEngine {
    let mut sources = builtin_sources(Profile::Default);
    sources.push(PolicySource {
        name: "operator/news.cedar".into(),
        text: NEWS_RULE.into(),
    });
    PolicyEngine::load(&sources).expect("policy loads")
}

pub fn agent_config() -> AgentConfig {
    let mut c = AgentConfig::new(airlock_agent::scripted::SCRIPTED_MODEL_NAME);
    c.approval_poll = Duration::from_millis(20);
    c.kill_poll = Duration::from_millis(20);
    c.approval_timeout = Duration::from_secs(20);
    c
}

impl Harness {
    pub fn new() -> Harness {
        let state = tempfile::tempdir().unwrap();
        let config_dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(state.path()).unwrap();
        let session = store
            .create_session(&NewSession::owner(), Timestamp::now())
            .unwrap();
        let (audit, key) = open_audit(&config_dir, &state);
        let workspace = session.workspace.clone();
        Harness {
            gate: Gate::new(engine(), GateConfig::new(&workspace)),
            session_id: session.id().to_string(),
            workspace,
            store,
            audit: std::sync::Mutex::new(audit),
            key,
            exec: RecordingExecutors::default(),
            config: agent_config(),
            state,
            config_dir,
        }
    }

    /// Run one turn against `model` speaking `kind`.
    pub async fn run(
        &mut self,
        model: &ScriptedModel,
        kind: ProviderKind,
        stream: bool,
        text: &str,
    ) -> TurnReport {
        let provider = connect(&model.config(kind, stream)).unwrap();
        let mut agent = Agent {
            config: &self.config,
            provider: provider.as_ref(),
            gate: &self.gate,
            audit: &self.audit,
            store: &self.store,
            executors: &self.exec,
            on_stream: None,
        };
        agent
            .run_turn(&self.session_id, text)
            .await
            .expect("turn runs")
    }

    /// Simulate a restart of the host: close the store and audit log and open them again
    /// from disk, with a fresh Gate.
    pub fn restart(&mut self) {
        let store = SqliteStore::open(self.state.path()).unwrap();
        drop(std::mem::replace(&mut self.store, store));
        let (audit, key) = open_audit(&self.config_dir, &self.state);
        drop(std::mem::replace(
            &mut self.audit,
            std::sync::Mutex::new(audit),
        ));
        self.key = key;
        self.gate = Gate::new(engine(), GateConfig::new(&self.workspace));
    }

    /// A second handle on the same database, as the CLI in another process would hold.
    pub fn operator_store(&self) -> SqliteStore {
        SqliteStore::open(self.state.path()).unwrap()
    }

    /// The audit chain and its checkpoints verify.
    pub fn assert_audit_verifies(&self) {
        let report = verify(&self.state.path().join("audit"), &self.key).unwrap();
        assert!(report.is_ok(), "audit chain broken: {report:?}");
    }

    /// Kinds of every audit record so far, in order.
    pub fn audit_kinds(&self) -> Vec<String> {
        let text = std::fs::read_to_string(
            self.state
                .path()
                .join("audit")
                .join(airlock_audit::LOG_FILE),
        )
        .unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|v| v["kind"].as_str().map(str::to_string))
            .collect()
    }

    pub fn write(&self, rel: &str, text: &str) {
        std::fs::write(self.workspace.join(rel), text).unwrap();
    }
}

pub fn open_audit(
    config: &tempfile::TempDir,
    state: &tempfile::TempDir,
) -> (AuditLog, VerifyingKey) {
    let signer = CheckpointSigner::load_or_create(&config.path().join("audit.key")).unwrap();
    let key = signer.verifying_key();
    let log = AuditLog::open(&state.path().join("audit"), signer, AuditOptions::default()).unwrap();
    (log, key)
}

/// Arguments JSON for a tool call.
pub fn args(v: Value) -> String {
    v.to_string()
}

/// Every tool-result text the model was sent, across all recorded requests.
pub fn tool_results_sent(model: &ScriptedModel) -> Vec<String> {
    let mut out = Vec::new();
    for req in model.requests() {
        let body = req.json().unwrap_or(Value::Null);
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        for m in messages {
            // OpenAI: role "tool" with string content.
            if m["role"] == "tool" {
                out.push(m["content"].as_str().unwrap_or_default().to_string());
            }
            // Anthropic: user content blocks of type tool_result.
            if let Some(blocks) = m["content"].as_array() {
                for b in blocks {
                    if b["type"] == "tool_result" {
                        match &b["content"] {
                            Value::String(s) => out.push(s.clone()),
                            Value::Array(parts) => {
                                for p in parts {
                                    out.push(p["text"].as_str().unwrap_or_default().to_string())
                                }
                            }
                            _ => {}
                        }
                    }
                }
            }
        }
    }
    out
}
