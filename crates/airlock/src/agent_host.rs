//! The wiring every front end of the agent loop shares (`airlock run`, `airlock chat`,
//! `airlock demo`): a stored session, the Gate for its workspace, the audit log, this
//! host's executors (sandbox, per-call egress proxy, terminal channel), the model, and the
//! loop's limits from `airlock.toml`.
//!
//! [`AgentHost::open`] builds it; [`AgentHost::run_turn`] runs one turn of the loop;
//! [`AgentHost::close`] flushes the audit log. One audit writer serves the whole session:
//! opened here for a command with no host, the host's own one in the host. A front end adds only how it talks to the
//! person in front of it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use secrecy::SecretString;

use airlock_agent::agent::{Agent, AgentConfig, TurnInput, TurnReport};
use airlock_agent::provider::{connect, EnvOverrides, Provider, ProviderConfig, StreamEvent};
use airlock_audit::AuditLog;
use airlock_store::{
    BudgetLimits, BudgetState, BudgetStore, NewSession, SessionStore, SqliteStore, Timestamp,
};

use crate::agent_executors::{EgressExtras, HostExecutors};
use crate::config::Config;
use crate::home::Home;
use crate::service::approvals::open_store;
use crate::service::caller::Notices;
use crate::{policies, runtime};

/// How to set up a model, shown when none is configured.
pub const PROVIDER_HELP: &str = "help: add a [provider] table to airlock.toml, for example\n\n  [provider]\n  kind = \"anthropic\"            # or \"openai\" (also Ollama, vLLM, llama.cpp, LM Studio, OpenRouter)\n  model = \"claude-sonnet-4-5\"\n  base_url = \"https://api.anthropic.com\"\n  api_key_secret = \"anthropic\"  # stored with `airlock secret set anthropic --host api.anthropic.com`\n\nor set AIRLOCK_PROVIDER, AIRLOCK_MODEL, AIRLOCK_BASE_URL and AIRLOCK_API_KEY\n(`airlock demo` needs none of this: it plays a scripted model)";

/// What a front end chooses.
pub struct HostOptions {
    /// Continue this session instead of starting a new one.
    pub session: Option<String>,
    /// Seconds to wait for each approval (default: `[agent] approval_timeout_secs`).
    pub approval_timeout: Option<u64>,
    /// Policy profile (default: `[policy] profile`).
    pub profile: Option<String>,
    /// The conversation's own channel (`terminal`).
    pub channel: String,
    /// Where messages to the conversation's channel are shown as they are delivered
    /// (`None`: not shown, as for `--json`).
    pub messages_to: Option<Notices>,
    /// Where what Airlock says to the person goes (a recovered commit, a held commit, a
    /// cost warning): stderr embedded, the attached client in the host.
    pub notices: Notices,
    /// Work on this directory instead of a fresh session workspace (`--workspace DIR`).
    pub workspace: Option<PathBuf>,
    /// Additions to every egress proxy of the session (in-process callers only).
    pub egress: EgressExtras,
    /// The session is a sub-agent's: its tools and budget ([`crate::subagents`]).
    pub child: Option<crate::subagents::ChildSetup>,
    /// The audit writer to append through. In the host it is the host's one writer
    /// ([`crate::host::audit_writer::HostAudit`]), whose checkpoints follow the host's
    /// policy; `None` (a command with no host) opens the log for this session and closes it
    /// with a signed checkpoint.
    pub audit: Option<Arc<Mutex<AuditLog>>>,
}

/// The owner's directory `dir` as a session workspace: canonical, and refused where the
/// sandbox would refuse it (the config and state dirs, `/`, `/tmp`, system trees, …).
fn owner_workspace(home: &Home, dir: &std::path::Path) -> anyhow::Result<PathBuf> {
    let dir = std::path::absolute(dir)
        .and_then(|d| d.canonicalize())
        .map_err(|e| {
            anyhow::anyhow!(
                "workspace {}: {e}\nhelp: pass an existing directory",
                dir.display()
            )
        })?;
    airlock_sandbox::workspace_check::check_workspace(&dir, &home.operator_dirs())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(dir)
}

/// One session wired to the real Gate, sandbox, proxy, store and audit log.
pub struct AgentHost {
    pub home: Home,
    pub cfg: Config,
    pub session_id: String,
    pub workspace: PathBuf,
    store: SqliteStore,
    gate: Arc<crate::live_gate::LiveGate>,
    /// The one log the loop, the executors, the sub-agents and the approval listener
    /// append through.
    audit: Arc<Mutex<AuditLog>>,
    /// Opened here (not handed in): closed here, with a signed checkpoint.
    opened_audit: bool,
    executors: HostExecutors,
    agent_cfg: AgentConfig,
    provider: Box<dyn Provider>,
    rt: tokio::runtime::Runtime,
}

impl AgentHost {
    /// Open (or, with `opts.session`, resume) a session and wire everything to it.
    pub fn open(
        home: Home,
        cfg: Config,
        provider_cfg: &ProviderConfig,
        opts: HostOptions,
    ) -> anyhow::Result<AgentHost> {
        let profile = policies::pick_profile(opts.profile.as_deref(), &cfg.policy.profile)?;
        let store = open_store(&home)?;
        let record = match &opts.session {
            Some(id) => store.get_session(id).map_err(|e| {
                anyhow::anyhow!(
                    "cannot resume session `{id}`: {e}\nhelp: leave out --session to start a new one"
                )
            })?,
            None => {
                let mut new = NewSession::owner();
                new.workspace = match &opts.workspace {
                    Some(dir) => Some(owner_workspace(&home, dir)?),
                    None => None,
                };
                new.agent_workspace = new.workspace.is_some();
                store
                    .create_session(&new, Timestamp::now())
                    .map_err(|e| anyhow::anyhow!("cannot create a session: {e}"))?
            }
        };
        let session_id = record.id().to_string();
        let workspace = record.workspace.clone();
        // A commit a crash interrupted is finished or rolled back before the session
        // sees the workspace, and the outcome is said and recorded.
        let (_, recovered) = crate::transaction::open_workspace(&home, &workspace, &opts.notices)?;
        let gate = Arc::new(crate::live_gate::LiveGate::open(
            &home, &cfg, profile, &workspace,
        )?);
        let (audit, opened_audit) = match &opts.audit {
            Some(log) => (log.clone(), false),
            None => (
                Arc::new(Mutex::new(runtime::open_audit(&home, &cfg)?)),
                true,
            ),
        };
        crate::transaction::record_recovery(&audit, &workspace, recovered.as_deref());
        let executors = HostExecutors::new(
            home.clone(),
            cfg.clone(),
            gate.clone(),
            audit.clone(),
            open_store(&home)?,
            session_id.clone(),
            workspace.clone(),
            opts.channel.clone(),
            opts.messages_to.clone(),
            opts.notices.clone(),
        )
        .with_egress_extras(opts.egress.clone())
        .with_commit_approval_timeout(Duration::from_secs(
            opts.approval_timeout
                .unwrap_or(cfg.agent.approval_timeout_secs),
        ))
        .with_memory(crate::memory_executor::HostMemory::open(
            &home,
            &record,
            cfg.memory.retention,
        )?);
        let mut agent_cfg = agent_config(&cfg, provider_cfg, opts.approval_timeout, &opts.channel);
        if let Some(child) = &opts.child {
            agent_cfg.tools = Some(child.tools.clone());
            agent_cfg.budget = child.budget;
        }
        // The session may start sub-agents like itself, with at most its own tools and a
        // share of its own budget.
        let spawn = crate::subagents::SpawnContext {
            home: home.clone(),
            cfg: cfg.clone(),
            provider: provider_cfg.clone(),
            profile: opts.profile.clone(),
            channel: opts.channel.clone(),
            notices: opts.notices.clone(),
            egress: opts.egress.clone(),
            approval_timeout: opts.approval_timeout,
            limits: agent_cfg.budget.per_session,
            audit: opts.audit.clone(),
        };
        let executors = executors.with_subagents(crate::subagents::SubAgents::new(
            spawn,
            session_id.clone(),
            open_store(&home)?,
            audit.clone(),
        ));
        let provider = connect(provider_cfg).map_err(|e| anyhow::anyhow!("{e}"))?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("airlock-agent")
            .enable_all()
            .build()?;
        Ok(AgentHost {
            home,
            cfg,
            session_id,
            workspace,
            store,
            gate,
            audit,
            opened_audit,
            executors,
            agent_cfg,
            provider,
            rt,
        })
    }

    /// Run one turn for the owner's `prompt`; `on_stream` sees the model's output as it
    /// arrives.
    pub fn run_turn<'a>(
        &'a mut self,
        prompt: &str,
        on_stream: Option<&'a mut (dyn FnMut(StreamEvent) + Send + 'a)>,
    ) -> anyhow::Result<TurnReport> {
        self.run_turn_from(TurnInput::Owner(prompt), on_stream)
    }

    /// Run one turn for a message from whoever `input` says.
    pub fn run_turn_from<'a>(
        &'a mut self,
        input: TurnInput<'_>,
        on_stream: Option<&'a mut (dyn FnMut(StreamEvent) + Send + 'a)>,
    ) -> anyhow::Result<TurnReport> {
        let AgentHost {
            session_id,
            store,
            gate,
            audit,
            executors,
            agent_cfg,
            provider,
            rt,
            ..
        } = self;
        let report = rt.block_on(async {
            let mut agent = Agent {
                config: agent_cfg,
                provider: &**provider,
                gate: &**gate,
                audit,
                store,
                executors,
                on_stream,
            };
            agent.run_turn_from(session_id, input).await
        });
        // No child outlives the turn that started it.
        executors.end_subagents();
        report.map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// The session store this host uses.
    pub fn store(&self) -> &SqliteStore {
        &self.store
    }

    /// The session's handle on the audit log (executions, proxy, operator answers).
    pub fn shared_audit(&self) -> Arc<Mutex<AuditLog>> {
        self.audit.clone()
    }

    /// The configured limits and what the session and the day have used so far.
    pub fn budget(&self) -> anyhow::Result<(BudgetLimits, BudgetState)> {
        let state = self
            .store
            .budget_state(&self.session_id, Timestamp::now())
            .map_err(|e| anyhow::anyhow!("cannot read the budget: {e}"))?;
        Ok((self.agent_cfg.budget, state))
    }

    /// The conversation is with `destination`, a third party (a group chat, a member's
    /// chat), not the owner: what the session says there, its final text included, is a
    /// message to them that the Gate decides (see `AgentConfig::conversation_with`).
    pub fn with_third_party(mut self, destination: String) -> AgentHost {
        // A third party does not get to fan out sub-agents on the owner's budget: the
        // model of such a conversation is not offered them, and a call is refused.
        let tools: Vec<String> = match self.agent_cfg.tools.take() {
            Some(t) => t,
            None => airlock_agent::agent::known_tools()
                .into_iter()
                .map(String::from)
                .collect(),
        };
        self.agent_cfg.tools = Some(
            tools
                .into_iter()
                .filter(|t| !airlock_agent::agent::SUBAGENT_TOOL_NAMES.contains(&t.as_str()))
                .collect(),
        );
        self.agent_cfg.conversation_with = Some(destination.clone());
        self.executors = self.executors.with_conversation(destination);
        self
    }

    /// End a turn at its first held action that is not approved, rather than go on
    /// without it (a scheduled task's `--on-held end`).
    pub fn ending_on_unapproved(mut self) -> AgentHost {
        self.agent_cfg.end_on_unapproved = true;
        self
    }

    /// End the turn (as a kill would, without marking the session killed) once `flag`
    /// is set: the host's client that waits for the turn went away.
    pub fn abandoned_when(mut self, flag: Arc<std::sync::atomic::AtomicBool>) -> AgentHost {
        self.agent_cfg.abandoned = Some(flag);
        self
    }

    /// Messages delivered to the conversation's own channel so far.
    pub fn delivered(&self) -> Vec<String> {
        self.executors.delivered()
    }

    /// Workspace files the Gate let this conversation's messages carry, not yet taken.
    pub fn take_files(&self) -> Vec<crate::agent_executors::SentFile> {
        self.executors.take_files()
    }

    /// Stop the runtime and, if this session opened the audit log, close it with a signed
    /// checkpoint. A log handed in (the host's writer) stays open for the host's other runs.
    pub fn close(self) -> anyhow::Result<()> {
        let AgentHost {
            audit,
            opened_audit,
            executors,
            rt,
            ..
        } = self;
        executors.finish_egress();
        drop(executors);
        rt.shutdown_timeout(Duration::from_secs(5));
        if opened_audit {
            // A holder still running (an approval listener not yet stopped) signs the
            // checkpoint when it lets go.
            if let Ok(m) = Arc::try_unwrap(audit) {
                m.into_inner()
                    .unwrap_or_else(|p| p.into_inner())
                    .close()
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
            }
        }
        Ok(())
    }
}

/// The model's configuration: `[provider]` with its key from the secrets store, then the
/// environment overrides on top.
pub fn provider_config(
    home: &Home,
    cfg: &Config,
    env: EnvOverrides,
) -> anyhow::Result<ProviderConfig> {
    let base = match cfg.provider.clone() {
        Some(section) => {
            let key = match (&section.api_key_secret, &env.api_key) {
                (Some(name), None) => Some(secret_value(home, name)?),
                _ => None,
            };
            Some(section.into_config(key).map_err(|e| {
                anyhow::anyhow!("{}: [provider]: {e}", home.config_file().display())
            })?)
        }
        None if env.provider.is_none() && env.model.is_none() => {
            anyhow::bail!("no model is configured\n{PROVIDER_HELP}")
        }
        None => None,
    };
    ProviderConfig::from_env_overrides(base, env).map_err(|e| anyhow::anyhow!("{e}"))
}

/// The API key stored under `name`. The value never reaches a log or an error message.
fn secret_value(home: &Home, name: &str) -> anyhow::Result<SecretString> {
    let all = airlock_proxy::SecretStore::new(&home.config)
        .load_all()
        .map_err(|e| anyhow::anyhow!("cannot read the secrets store: {e}"))?;
    all.into_iter()
        .find(|s| s.info.name == name)
        .map(|s| s.value)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "[provider] api_key_secret = {name:?} names no stored secret\nhelp: store the key with `airlock secret set {name} --host <the provider's host>`, or set AIRLOCK_API_KEY"
            )
        })
}

/// A cost limit is set but the model has no price: say so (once per session: each front
/// end calls this as it opens one), so the operator knows the token limits are what will
/// stop the run.
pub fn warn_if_cost_is_not_counted(cfg: &Config, model: &str, notices: &Notices) {
    let cost_limited =
        cfg.budget.per_session.cost_micros.is_some() || cfg.budget.per_day.cost_micros.is_some();
    if cost_limited && cfg.budget.prices_for(model).is_none() {
        notices.line(&format!(
            "note: no price is known for model {}; the cost budget is not counted and the token budgets apply\nhelp: give it a price with input_per_million and output_per_million under [budget.prices] in airlock.toml",
            airlock_core::terminal_text::escape_line(model)
        ));
    }
}

/// The loop's limits from `[agent]`, `[budget]` and `[approvals]`.
fn agent_config(
    cfg: &Config,
    provider: &ProviderConfig,
    approval_timeout: Option<u64>,
    channel: &str,
) -> AgentConfig {
    let mut c = AgentConfig::new(provider.model.clone());
    if let Some(p) = &cfg.agent.system_prompt {
        c.system_prompt = p.clone();
    }
    c.max_tokens = provider.max_tokens;
    c.budget = BudgetLimits {
        per_session: cfg.budget.per_session,
        per_day: cfg.budget.per_day,
    };
    c.prices = cfg.budget.prices_for(&provider.model).unwrap_or_default();
    c.call_timeout = Duration::from_secs(cfg.agent.call_timeout_secs);
    c.tool_calls_per_minute = Some(cfg.agent.tool_calls_per_minute).filter(|&n| n > 0);
    c.max_identical_actions = cfg.agent.max_identical_actions;
    c.approval_timeout =
        Duration::from_secs(approval_timeout.unwrap_or(cfg.agent.approval_timeout_secs));
    c.approval_limits = cfg.approvals;
    c.channel = channel.into();
    c.task_time_zone = cfg.tasks.time_zone.clone();
    c
}
