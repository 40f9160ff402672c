//! `airlock run "<prompt>"`: one task, start to finish, without interaction.
//!
//! The run creates (or, with `--session`, resumes) a session in the store, builds the Gate
//! for its workspace and the model from `[provider]` plus the environment overrides, and
//! runs one turn of the agent loop with this host's executors: shell in the sandbox behind
//! the run's egress proxy, fetch through that proxy, messages to the terminal. Approvals go
//! to the queue (`airlock approvals`); an unanswered one is denied at the timeout.
//!
//! Exit status: [`EXIT_COMPLETED`], [`EXIT_BUDGET_EXHAUSTED`], [`EXIT_KILLED`] (as for a
//! killed `airlock exec`), [`EXIT_PROVIDER_FAILED`], and 1 when the host itself failed.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use secrecy::SecretString;
use serde_json::json;

use airlock_agent::agent::{Agent, AgentConfig, Outcome, TurnReport};
use airlock_agent::provider::{connect, EnvOverrides, ProviderConfig, StreamEvent};
use airlock_store::{BudgetLimits, NewSession, SessionStore, Timestamp};

use crate::agent_executors::HostExecutors;
use crate::cmd::approvals::open_store;
pub use crate::cmd::kill::EXIT_KILLED;
use crate::config::Config;
use crate::home::Home;
use crate::{config, policies, runtime};

/// The model finished the task.
pub const EXIT_COMPLETED: i32 = 0;
/// A budget or loop limit ended the run; the output names the key that raises it.
pub const EXIT_BUDGET_EXHAUSTED: i32 = 3;
/// The model could not be reached or answered badly; the session keeps what was done.
pub const EXIT_PROVIDER_FAILED: i32 = 4;

/// The conversation's own channel for `airlock run`.
const CHANNEL: &str = "terminal";

/// `airlock run`'s arguments.
pub struct RunArgs {
    pub session: Option<String>,
    pub approval_timeout: Option<u64>,
    pub profile: Option<String>,
    pub json: bool,
    pub prompt: String,
}

const PROVIDER_HELP: &str = "help: add a [provider] table to airlock.toml, for example\n\n  [provider]\n  kind = \"anthropic\"            # or \"openai\" (also Ollama, vLLM, llama.cpp, LM Studio, OpenRouter)\n  model = \"claude-sonnet-4-5\"\n  base_url = \"https://api.anthropic.com\"\n  api_key_secret = \"anthropic\"  # stored with `airlock secret set anthropic --host api.anthropic.com`\n\nor set AIRLOCK_PROVIDER, AIRLOCK_MODEL, AIRLOCK_BASE_URL and AIRLOCK_API_KEY";

pub fn run(args: RunArgs) -> anyhow::Result<i32> {
    // Read once, before any thread starts; the key leaves the environment here.
    let env = EnvOverrides::take_from_process();
    if args.prompt.trim().is_empty() {
        anyhow::bail!("the prompt is empty\nhelp: airlock run \"<what to do>\"");
    }
    let home = Home::from_env()?;
    let cfg = config::load(&home.config_file())?;
    let provider_cfg = provider_config(&home, &cfg, env)?;
    let profile = policies::pick_profile(args.profile.as_deref(), &cfg.policy.profile)?;

    let store = open_store(&home)?;
    let record = match &args.session {
        Some(id) => store.get_session(id).map_err(|e| {
            anyhow::anyhow!(
                "cannot resume session `{id}`: {e}\nhelp: run without --session to start a new one"
            )
        })?,
        None => store
            .create_session(&NewSession::owner(), Timestamp::now())
            .map_err(|e| anyhow::anyhow!("cannot create a session: {e}"))?,
    };
    let session_id = record.id().to_string();
    let workspace = record.workspace.clone();
    let gate = Arc::new(runtime::gate_for(&home, &cfg, profile, &workspace)?);
    let mut audit = runtime::open_audit(&home, &cfg)?;
    let exec_audit = Arc::new(Mutex::new(runtime::open_audit(&home, &cfg)?));
    let executors = HostExecutors::new(
        home.clone(),
        cfg.clone(),
        gate.clone(),
        exec_audit.clone(),
        open_store(&home)?,
        session_id.clone(),
        workspace.clone(),
        CHANNEL.into(),
        !args.json,
    );
    let agent_cfg = agent_config(&cfg, &provider_cfg, args.approval_timeout);
    let provider = connect(&provider_cfg).map_err(|e| anyhow::anyhow!("{e}"))?;

    if !args.json {
        println!("session {session_id} (workspace {})", workspace.display());
        println!("> {}", args.prompt);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("airlock-run")
        .enable_all()
        .build()?;
    let mut print_stream = |event: StreamEvent| {
        if let StreamEvent::TextDelta(t) = event {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(t.as_bytes());
            let _ = out.flush();
        }
    };
    let report = rt.block_on(async {
        let mut agent = Agent {
            config: &agent_cfg,
            provider: provider.as_ref(),
            gate: &gate,
            audit: &mut audit,
            store: &store,
            executors: &executors,
            on_stream: if args.json {
                None
            } else {
                Some(&mut print_stream)
            },
        };
        agent.run_turn(&session_id, &args.prompt).await
    });
    let messages = executors.delivered();
    drop(executors);
    rt.shutdown_timeout(Duration::from_secs(5));
    audit.close().map_err(|e| anyhow::anyhow!("{e}"))?;
    if let Ok(m) = Arc::try_unwrap(exec_audit) {
        m.into_inner()
            .unwrap_or_else(|p| p.into_inner())
            .close()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let report = report.map_err(|e| anyhow::anyhow!("{e}"))?;
    if args.json {
        crate::out!(
            "{}",
            serde_json::to_string(&report_json(&session_id, &report, &messages))?
        );
    } else {
        print_transcript(&report)?;
    }
    Ok(exit_code(&report.outcome))
}

/// The exit status for an outcome.
pub fn exit_code(outcome: &Outcome) -> i32 {
    match outcome {
        Outcome::Completed { .. } => EXIT_COMPLETED,
        Outcome::BudgetExhausted { .. } => EXIT_BUDGET_EXHAUSTED,
        Outcome::Killed => EXIT_KILLED,
        Outcome::ProviderFailed(_) => EXIT_PROVIDER_FAILED,
    }
}

/// The model's configuration: `[provider]` with its key from the secrets store, then the
/// environment overrides on top.
fn provider_config(home: &Home, cfg: &Config, env: EnvOverrides) -> anyhow::Result<ProviderConfig> {
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

/// The loop's limits from `[agent]`, `[budget]` and `[approvals]`.
fn agent_config(
    cfg: &Config,
    provider: &ProviderConfig,
    approval_timeout: Option<u64>,
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
    c.prices = cfg.budget.prices;
    c.call_timeout = Duration::from_secs(cfg.agent.call_timeout_secs);
    c.tool_calls_per_minute = Some(cfg.agent.tool_calls_per_minute).filter(|&n| n > 0);
    c.max_identical_actions = cfg.agent.max_identical_actions;
    c.approval_timeout =
        Duration::from_secs(approval_timeout.unwrap_or(cfg.agent.approval_timeout_secs));
    c.approval_limits = cfg.approvals;
    c.channel = CHANNEL.into();
    c
}

fn outcome_name(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Completed { .. } => "completed",
        Outcome::BudgetExhausted { .. } => "budget_exhausted",
        Outcome::Killed => "killed",
        Outcome::ProviderFailed(_) => "provider_failed",
    }
}

/// The machine-readable form of a run (`--json`).
fn report_json(session: &str, report: &TurnReport, messages: &[String]) -> serde_json::Value {
    let calls: Vec<_> = report
        .tool_calls
        .iter()
        .map(|c| {
            json!({
                "call_id": c.call_id, "tool": c.tool,
                "decision": c.decision.map(|d| d.as_str()),
                "approval_id": c.approval_id, "executed": c.executed,
                "result": c.result, "is_error": c.is_error,
            })
        })
        .collect();
    let mut v = json!({
        "session": session,
        "outcome": outcome_name(&report.outcome),
        "summary": report.outcome.summary(),
        "tool_calls": calls,
        "model_calls": report.model_calls,
        "messages": messages,
        "exit_code": exit_code(&report.outcome),
    });
    if let Outcome::Completed { text } = &report.outcome {
        v["text"] = json!(text);
    }
    v
}

/// The human transcript: each tool call with its decision and result, then the outcome.
fn print_transcript(report: &TurnReport) -> anyhow::Result<()> {
    crate::out!("");
    for c in &report.tool_calls {
        let decision = c.decision.map_or("refused before the Gate", |d| d.as_str());
        let ran = if c.executed { "ran" } else { "did not run" };
        crate::out!("[{}] {decision}, {ran}", c.tool);
        if let Some(id) = &c.approval_id {
            crate::out!("  approval request: {id}");
        }
        let marker = if c.is_error { "error" } else { "result" };
        for line in c.result.lines().take(20) {
            crate::out!("  {marker}: {line}");
        }
    }
    match &report.outcome {
        Outcome::Completed { .. } => crate::out!("completed ({} model calls)", report.model_calls),
        other => crate::out!("{}", other.summary()),
    }
    Ok(())
}
