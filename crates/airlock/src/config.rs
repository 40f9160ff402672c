//! `airlock.toml`: the operator's configuration. Unknown keys are errors, so a typo never
//! silently weakens a setting.

use serde::{Deserialize, Serialize};
use std::path::Path;

use airlock_agent::agent::PriceTable;
use airlock_agent::provider::ProviderSection;
use airlock_store::{ApprovalLimits, Limits};

use crate::operator_file::{self, OperatorFileError};

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub policy: PolicyConfig,
    #[serde(default)]
    pub audit: AuditConfig,
    #[serde(default)]
    pub sandbox: SandboxConfig,
    /// The model (`airlock run`, `airlock chat`); absent until the operator configures one.
    #[serde(default)]
    pub provider: Option<ProviderSection>,
    /// Budgets per session and per day, and the price table for the cost budget.
    #[serde(default)]
    pub budget: BudgetConfig,
    /// Limits of the agent loop.
    #[serde(default)]
    pub agent: AgentSection,
    /// Rate limits on approval requests, per session.
    #[serde(default)]
    pub approvals: ApprovalLimits,
    /// How long memory records live.
    #[serde(default)]
    pub memory: MemorySection,
    /// Workspace transactions: sensitive paths and per-run limits.
    #[serde(default)]
    pub workspace: WorkspaceSection,
    /// Limits of `airlock serve`.
    #[serde(default)]
    pub host: HostSection,
    /// The web page `airlock serve` serves (`docs/web.md`); off unless `listen` is set.
    #[serde(default)]
    pub web: WebSection,
    /// Scheduled tasks (`docs/tasks.md`).
    #[serde(default)]
    pub tasks: TasksSection,
}

/// `[tasks]`: the scheduler's limits and defaults (`docs/tasks.md`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TasksSection {
    /// The shortest time between two runs of a recurring task; a schedule that fires
    /// more often is refused, whoever proposes it.
    #[serde(default = "default_min_interval_secs")]
    pub min_interval_secs: u64,
    /// Failed runs in a row after which a task pauses itself and the owner is told.
    #[serde(default = "default_max_failures")]
    pub max_failures: u32,
    /// The wait after a first failure, doubled with each further one.
    #[serde(default = "default_backoff_base_secs")]
    pub backoff_base_secs: u64,
    /// The longest wait after failures.
    #[serde(default = "default_backoff_max_secs")]
    pub backoff_max_secs: u64,
    /// Runs missed while no host ran: `run_once` at the start, or `skip`.
    #[serde(default)]
    pub missed: crate::tasks::plan::Missed,
    /// How long an action held during a run waits for the owner before it is denied,
    /// unless the task says otherwise.
    #[serde(default = "default_task_approval_timeout_secs")]
    pub approval_timeout_secs: u64,
    /// The time zone of a task that names none (an IANA name).
    #[serde(default = "default_task_zone")]
    pub time_zone: String,
}

impl Default for TasksSection {
    fn default() -> Self {
        TasksSection {
            min_interval_secs: default_min_interval_secs(),
            max_failures: default_max_failures(),
            backoff_base_secs: default_backoff_base_secs(),
            backoff_max_secs: default_backoff_max_secs(),
            missed: Default::default(),
            approval_timeout_secs: default_task_approval_timeout_secs(),
            time_zone: default_task_zone(),
        }
    }
}

impl TasksSection {
    /// The scheduler's rules.
    pub fn rules(&self) -> crate::tasks::plan::Rules {
        use std::time::Duration;
        crate::tasks::plan::Rules {
            min_interval: Duration::from_secs(self.min_interval_secs),
            max_failures: self.max_failures.max(1),
            backoff_base: Duration::from_secs(self.backoff_base_secs.max(1)),
            backoff_max: Duration::from_secs(self.backoff_max_secs.max(1)),
        }
    }
}

fn default_min_interval_secs() -> u64 {
    300
}
fn default_max_failures() -> u32 {
    3
}
fn default_backoff_base_secs() -> u64 {
    60
}
fn default_backoff_max_secs() -> u64 {
    6 * 3600
}
fn default_task_approval_timeout_secs() -> u64 {
    600
}
fn default_task_zone() -> String {
    "UTC".into()
}

/// `[web]`: where `airlock serve` serves the web page. Without `listen` there is no web
/// page. The host checks the rest when it starts ([`crate::web::settings`]): with
/// `public_name` the page is served remotely (TLS for that name, passkeys), on any
/// address; an address other than loopback needs it, with its TLS certificate and key, and
/// the host refuses to start rather than serve it without them.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebSection {
    /// `127.0.0.1:7464`, `[::1]:7464`; port 0 picks a free one (the login link names it).
    #[serde(default)]
    pub listen: Option<String>,
    /// The DNS name the page is reached by when served remotely (never an IP); setting it
    /// serves the page over TLS with passkeys.
    #[serde(default)]
    pub public_name: Option<String>,
    /// PEM certificate chain for `public_name`.
    #[serde(default)]
    pub tls_cert: Option<std::path::PathBuf>,
    /// PEM private key of `tls_cert`.
    #[serde(default)]
    pub tls_key: Option<std::path::PathBuf>,
    /// Minutes a login lasts (default 720, at most a week).
    #[serde(default)]
    pub session_minutes: Option<u64>,
    /// The port the page is reached at when served remotely, when a router forwards it to
    /// another `listen` port (default: the listening port). It is in the page's origin.
    #[serde(default)]
    pub public_port: Option<u16>,
    /// Pages read a minute per login (per address before a login); default 600.
    #[serde(default)]
    pub reads_per_minute: Option<u32>,
    /// Connections the page holds at once (16 at most from one address); default 128.
    #[serde(default)]
    pub max_connections: Option<usize>,
}

/// `[host]`: what `airlock serve` takes on at once. A sandbox beyond `max_sandboxes` waits
/// in a queue of `max_queued`; past the queue it is refused with the limit's name.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSection {
    /// Sandboxes at once, of every kind the host starts (execs, tasks' pre-checks, the
    /// shell calls of its sessions and their sub-agents; see `host::sandbox_slots`). The
    /// default suits a 2-core machine.
    #[serde(default = "default_max_sandboxes")]
    pub max_sandboxes: usize,
    /// Sandboxes that may wait for a slot before the next is refused.
    #[serde(default = "default_max_queued")]
    pub max_queued: usize,
    /// Agent sessions (`airlock run`, `airlock chat`) through the host at once; one more
    /// is refused with this limit's name.
    #[serde(default = "default_max_sessions")]
    pub max_sessions: usize,
    /// Requests one principal may make a minute (API and exec together), as a burst and
    /// then spread out; past it they are refused at once.
    #[serde(default = "default_requests_per_minute")]
    pub requests_per_minute: u32,
    /// Seconds a chat session stays live in the host with no client attached and no turn
    /// running; then it is closed (it stays in the store, and `airlock chat --session`
    /// opens it again).
    #[serde(default = "default_session_idle_secs")]
    pub session_idle_secs: u64,
    /// Sandboxes the host keeps built ahead of runs, each used by one run and never
    /// again (see `host::pool`). 0 turns the pool off: every run builds its own. Two
    /// suit a 2-core machine: one is being taken while the next is built.
    #[serde(default = "default_sandbox_pool")]
    pub sandbox_pool: usize,
    /// Seconds a stopping host (`SIGTERM`) lets the turns and runs in flight go on; then
    /// it ends them (each turn with its records, as a kill would) and stops.
    #[serde(default = "default_stop_grace_secs")]
    pub stop_grace_secs: u64,
}

impl Default for HostSection {
    fn default() -> Self {
        HostSection {
            max_sandboxes: default_max_sandboxes(),
            max_queued: default_max_queued(),
            max_sessions: default_max_sessions(),
            requests_per_minute: default_requests_per_minute(),
            session_idle_secs: default_session_idle_secs(),
            sandbox_pool: default_sandbox_pool(),
            stop_grace_secs: default_stop_grace_secs(),
        }
    }
}

fn default_max_sandboxes() -> usize {
    4
}

fn default_max_queued() -> usize {
    64
}

fn default_max_sessions() -> usize {
    16
}

fn default_requests_per_minute() -> u32 {
    1200
}

fn default_sandbox_pool() -> usize {
    2
}

fn default_stop_grace_secs() -> u64 {
    30
}

/// The most sandboxes `[host] sandbox_pool` may keep built: each holds a helper, a PID 1
/// and their namespaces.
pub const MAX_SANDBOX_POOL: usize = 64;

fn default_session_idle_secs() -> u64 {
    30 * 60
}

/// `[workspace]`: what a run's change set is judged against. Every run's writes land in
/// its own upper layer and reach the workspace only as a commit the Gate allowed
/// (`workspace.commit`); these settings feed the commit's facts.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceSection {
    /// Paths whose change is held for review, beside the built-in list (`.git`, `.envrc`,
    /// `.vscode`, `.idea`, build entry points, …) and `[policy] protected_paths`. `**`
    /// matches any number of components, `*` part of one.
    #[serde(default)]
    pub sensitive_paths: Vec<String>,
    /// Most content bytes one run may write before its change is held whole.
    #[serde(default = "default_max_bytes_written")]
    pub max_bytes_written: u64,
    /// Most files one run may change before its change is held whole.
    #[serde(default = "default_max_files_changed")]
    pub max_files_changed: usize,
    /// Most files one run may delete before its change is held whole.
    #[serde(default = "default_max_files_deleted")]
    pub max_files_deleted: usize,
}

impl Default for WorkspaceSection {
    fn default() -> Self {
        WorkspaceSection {
            sensitive_paths: Vec::new(),
            max_bytes_written: default_max_bytes_written(),
            max_files_changed: default_max_files_changed(),
            max_files_deleted: default_max_files_deleted(),
        }
    }
}

fn default_max_bytes_written() -> u64 {
    airlock_workspace::Limits::default().max_bytes_written
}

fn default_max_files_changed() -> usize {
    airlock_workspace::Limits::default().max_files_changed
}

fn default_max_files_deleted() -> usize {
    airlock_workspace::Limits::default().max_files_deleted
}

/// `[memory]`: `[memory.retention]`, days each kind of record lives after its last write.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemorySection {
    #[serde(default)]
    pub retention: airlock_store::MemoryRetention,
}

/// `[budget]`: `[budget.per_session]`, `[budget.per_day]` and `[budget.prices]`.
///
/// Budgets are on by default: every counter the config does not set, per session and per
/// day, has the limit `airlock init` writes, so a config written before budgets were on (its
/// limits commented out) or without `[budget]` at all is limited too. An operator lifts a
/// limit by setting it high, never by leaving it out.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(from = "BudgetSection")]
pub struct BudgetConfig {
    pub per_session: Limits,
    pub per_day: Limits,
    /// Overrides the shipped price of the configured model; absent: the shipped table
    /// (`airlock_agent::provider::shipped_price`), and for a model it does not list, no
    /// cost is counted and the token limits stop the run.
    pub prices: Option<PriceTable>,
}

/// `[budget]` as written: only the keys present.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BudgetSection {
    #[serde(default)]
    per_session: Limits,
    #[serde(default)]
    per_day: Limits,
    #[serde(default)]
    prices: Option<PriceTable>,
}

impl From<BudgetSection> for BudgetConfig {
    fn from(b: BudgetSection) -> Self {
        BudgetConfig {
            per_session: over_default(b.per_session, default_per_session()),
            per_day: over_default(b.per_day, default_per_day()),
            prices: b.prices,
        }
    }
}

/// The limits written, and the default for each counter not written.
fn over_default(set: Limits, default: Limits) -> Limits {
    Limits {
        turns: set.turns.or(default.turns),
        input_tokens: set.input_tokens.or(default.input_tokens),
        output_tokens: set.output_tokens.or(default.output_tokens),
        cost_micros: set.cost_micros.or(default.cost_micros),
        wall_ms: set.wall_ms.or(default.wall_ms),
        tool_calls: set.tool_calls.or(default.tool_calls),
    }
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig {
            per_session: default_per_session(),
            per_day: default_per_day(),
            prices: None,
        }
    }
}

impl BudgetConfig {
    /// The prices the cost budget counts with for `model`, and whether they are known.
    pub fn prices_for(&self, model: &str) -> Option<PriceTable> {
        self.prices
            .or_else(|| airlock_agent::provider::shipped_price(model))
    }
}

/// One session: a long task, but not an unattended night of spending.
fn default_per_session() -> Limits {
    Limits {
        turns: Some(50),
        input_tokens: Some(2_000_000),
        output_tokens: Some(100_000),
        cost_micros: Some(5_000_000),
        wall_ms: Some(3_600_000),
        tool_calls: Some(200),
    }
}

/// One UTC day, over all sessions.
fn default_per_day() -> Limits {
    Limits {
        turns: Some(500),
        input_tokens: Some(20_000_000),
        output_tokens: Some(1_000_000),
        cost_micros: Some(20_000_000),
        wall_ms: Some(8 * 3_600_000),
        tool_calls: Some(2_000),
    }
}

/// `[agent]`: limits of the agent loop the model cannot change.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSection {
    /// Replaces the built-in system prompt.
    #[serde(default)]
    pub system_prompt: Option<String>,
    /// How long one tool call may run, in seconds. A shell command or file write whose
    /// commit is held for the owner may wait `approval_timeout_secs` more for the answer.
    #[serde(default = "default_call_timeout")]
    pub call_timeout_secs: u64,
    /// Most calls of one tool per minute in one run; 0 for no limit.
    #[serde(default = "default_tool_calls_per_minute")]
    pub tool_calls_per_minute: u32,
    /// Stop after the same action this many times in a row.
    #[serde(default = "default_max_identical_actions")]
    pub max_identical_actions: u32,
    /// How long `airlock run` waits for an approval before treating it as denied, in seconds.
    #[serde(default = "default_approval_timeout")]
    pub approval_timeout_secs: u64,
    /// Limits on sub-agents (`[agent.subagents]`).
    #[serde(default)]
    pub subagents: SubAgentLimits,
}

/// How far sessions may split work across sub-agents (`[agent.subagents]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubAgentLimits {
    /// Deepest sub-agent: 1 lets a session start children, 2 lets them start their own,
    /// 0 turns sub-agents off.
    #[serde(default = "default_subagent_depth")]
    pub max_depth: usize,
    /// Most children of one session running at once.
    #[serde(default = "default_subagent_concurrency")]
    pub max_concurrent: usize,
    /// Each child's budget cap, as a percentage of its parent's per-session limit for
    /// each counter (never more than the parent has left); 1 to 100.
    #[serde(default = "default_subagent_budget_percent")]
    pub budget_percent: u8,
}

fn default_subagent_depth() -> usize {
    2
}
fn default_subagent_concurrency() -> usize {
    3
}
fn default_subagent_budget_percent() -> u8 {
    25
}

impl Default for SubAgentLimits {
    fn default() -> Self {
        SubAgentLimits {
            max_depth: default_subagent_depth(),
            max_concurrent: default_subagent_concurrency(),
            budget_percent: default_subagent_budget_percent(),
        }
    }
}

impl Default for AgentSection {
    fn default() -> Self {
        AgentSection {
            system_prompt: None,
            call_timeout_secs: default_call_timeout(),
            tool_calls_per_minute: default_tool_calls_per_minute(),
            max_identical_actions: default_max_identical_actions(),
            approval_timeout_secs: default_approval_timeout(),
            subagents: SubAgentLimits::default(),
        }
    }
}

fn default_call_timeout() -> u64 {
    120
}

fn default_tool_calls_per_minute() -> u32 {
    60
}

fn default_max_identical_actions() -> u32 {
    5
}

fn default_approval_timeout() -> u64 {
    300
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxConfig {
    /// The unprivileged uid (and gid) the sandbox runs as when Airlock runs as root.
    #[serde(default = "default_sandbox_uid")]
    pub uid: u32,
    /// Default wall-clock limit of one command, in seconds.
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
    /// Bytes of output kept per command before the rest is cut.
    #[serde(default = "default_output_cap")]
    pub output_cap_bytes: u64,
    /// An explicit weaker mode, for kernels without full Landlock support:
    /// "without_landlock" or "without_landlock_scopes". Shown by `airlock doctor` and
    /// written into every audit record of runs made under it. Absent: full confinement.
    #[serde(default)]
    pub weakened: Option<airlock_sandbox::WeakenedMode>,
    /// Where `airlock-sandbox-init` is, when not beside the `airlock` binary (an absolute
    /// path). Its hash is pinned in the config dir (`airlock sandbox pin-helper`).
    #[serde(default)]
    pub helper: Option<std::path::PathBuf>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            uid: default_sandbox_uid(),
            timeout_secs: default_timeout(),
            output_cap_bytes: default_output_cap(),
            weakened: None,
            helper: None,
        }
    }
}

fn default_sandbox_uid() -> u32 {
    65534
}

fn default_timeout() -> u64 {
    600
}

fn default_output_cap() -> u64 {
    16 * 1024 * 1024
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// `default` or `strict`.
    #[serde(default = "default_profile")]
    pub profile: String,
    /// Workspace-relative paths whose change (or creation) holds a run's commit for review.
    #[serde(default)]
    pub protected_paths: Vec<String>,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            profile: default_profile(),
            protected_paths: Vec::new(),
        }
    }
}

fn default_profile() -> String {
    "default".into()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditConfig {
    /// Sign a checkpoint every this many records.
    #[serde(default = "default_checkpoint_every")]
    pub checkpoint_every: u64,
    /// The OpenTelemetry collector `airlock audit export --format otlp --post` sends to
    /// (its `/v1/logs` path is added).
    #[serde(default)]
    pub otlp_endpoint: Option<String>,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            checkpoint_every: default_checkpoint_every(),
            otlp_endpoint: None,
        }
    }
}

fn default_checkpoint_every() -> u64 {
    256
}

/// The config file `airlock init` writes.
pub const DEFAULT_CONFIG: &str = r#"# Airlock configuration. Unknown keys are errors.

[policy]
# "default": the sandbox is the boundary; the network is closed unless allowlisted;
#            after untrusted content, untraced destinations are asked.
# "strict":  only curated read-only commands run unattended; everything else is asked.
profile = "default"
# Workspace-relative paths you keep yourself: a run that changes or creates one has its
# whole change held for your review (as are .git, .envrc and the [workspace] list).
protected_paths = []

[workspace]
# Every run writes into its own layer; its change set reaches the workspace only as a
# commit the Gate allowed (a checkpoint: `airlock checkpoints list`, `airlock undo`).
# Paths held for review beside the built-in list (.git, .envrc, .vscode, .idea, Makefile,
# package.json, CI definitions, ...):
sensitive_paths = []
# Per-run limits; a run over one is held whole, never committed in part.
max_bytes_written = 268435456
max_files_changed = 2000
max_files_deleted = 500

[sandbox]
# The unprivileged uid (and gid) the sandbox runs as when Airlock runs as root.
uid = 65534
# Wall-clock limit of one command, and output kept before the rest is cut.
timeout_secs = 600
output_cap_bytes = 16777216
# weakened = "without_landlock_scopes"   # only for kernels older than Linux 6.12
# The sandbox helper, when not beside the airlock binary. It must be owned by root or you,
# writable by no one else, and match the SHA-256 pinned in sandbox-helper.pin here
# (`airlock sandbox pin-helper` pins a new one, on the audit record).
# helper = "/usr/local/libexec/airlock-sandbox-init"

[audit]
# Sign a checkpoint every N records (and at every clean shutdown).
checkpoint_every = 256
# The OpenTelemetry collector `airlock audit export --format otlp --post` sends to.
# otlp_endpoint = "https://collector.example:4318"

# The model `airlock run` talks to. Environment overrides: AIRLOCK_PROVIDER, AIRLOCK_MODEL,
# AIRLOCK_BASE_URL, AIRLOCK_API_KEY.
# [provider]
# kind = "anthropic"                 # or "openai" (also Ollama, vLLM, llama.cpp, LM Studio)
# model = "claude-sonnet-4-5"
# base_url = "https://api.anthropic.com"
# api_key_secret = "anthropic"       # a name in `airlock secret list`, never the key itself
# max_tokens = 4096

# The web page `airlock serve` serves (docs/web.md); off while `listen` is unset.
# `airlock web` prints a one-time login link. Only loopback is served.
# [web]
# listen = "127.0.0.1:7464"
# session_minutes = 720
# reads_per_minute = 600             # per login (per address before a login); 429 past it
# max_connections = 128              # open at once, 16 at most from one address; 503 past it
# public_port = 443                  # served remotely behind a port forward (default: listen's)

[agent]
# Limits of the agent loop; the model can change none of them.
call_timeout_secs = 120
tool_calls_per_minute = 60
max_identical_actions = 5
approval_timeout_secs = 300

[agent.subagents]
# Sub-agents a session starts with spawn_agent (docs/subagents.md): how deep they may go
# (0 turns them off), how many of one session's run at once, and each one's budget cap as
# a percentage of its parent's per-session limits, drawn from the parent.
max_depth = 2
max_concurrent = 3
budget_percent = 25

# Budgets, on by default; the model can change none of them. A run stops at the first
# limit it reaches and names it.
# The cost limit (in micro-dollars) is counted with the shipped price table of the
# configured model; a model the table does not list has no known cost, and the token
# limits stop it instead. [budget.prices] gives any model a price. A key left out keeps
# the default shown here; to lift a limit, set it high.
[budget.per_session]
turns = 50
input_tokens = 2000000
output_tokens = 100000
cost_micros = 5000000                # 5 US dollars
wall_ms = 3600000                    # 1 hour
tool_calls = 200

[budget.per_day]
turns = 500
input_tokens = 20000000
output_tokens = 1000000
cost_micros = 20000000               # 20 US dollars
wall_ms = 28800000                   # 8 hours
tool_calls = 2000

# [budget.prices]                    # overrides the shipped price of the configured model
# input_per_million = 3.0            # US dollars per million input tokens
# output_per_million = 15.0
"#;

/// The highest uid (and gid) accepted for the sandbox. Above it, ids stop being ordinary
/// accounts: `(uid_t)-1` means "leave unchanged" to `setresuid`, so a drop to it keeps
/// root; `(uid_t)-2` is the legacy "nobody"; and ids past `i32::MAX` read as negative in
/// every tool that stores them in a signed int.
pub const MAX_SANDBOX_UID: u32 = i32::MAX as u32 - 1;

/// `sandbox.uid` must name an ordinary unprivileged id: not root, not the 16-bit
/// `(uid16_t)-1` the kernel treats as invalid, not above [`MAX_SANDBOX_UID`].
fn check_sandbox_uid(path: &Path, uid: u32) -> anyhow::Result<()> {
    let why = match uid {
        0 => Some("is root; the sandbox never runs as root"),
        65535 => Some("is the 16-bit (uid_t)-1, which the kernel treats as no id"),
        u if u > MAX_SANDBOX_UID => Some("is above the range of ordinary ids"),
        _ => None,
    };
    match why {
        None => Ok(()),
        Some(why) => anyhow::bail!(
            "{}: sandbox.uid = {uid} {why}\nhelp: use an unprivileged id between 1 and {MAX_SANDBOX_UID}, such as 65534 (nobody)",
            path.display()
        ),
    }
}

/// Load the config, or defaults if the file does not exist.
pub fn load(path: &Path) -> anyhow::Result<Config> {
    let text = match operator_file::read_text(path, operator_file::CONFIG_FILE) {
        Ok(t) => t,
        Err(OperatorFileError::NotFound { .. }) => return Ok(Config::default()),
        Err(e) => return Err(e.into()),
    };
    let cfg: Config = toml::from_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "{}: {}\nhelp: see the comments in the file `airlock init` writes for valid keys",
            path.display(),
            e.to_string().trim()
        )
    })?;
    if airlock_core::policy::Profile::parse(&cfg.policy.profile).is_none() {
        anyhow::bail!(
            "{}: policy.profile = {:?} is not a known profile\nhelp: use \"default\" or \"strict\"",
            path.display(),
            cfg.policy.profile
        );
    }
    if cfg.agent.call_timeout_secs == 0 || cfg.agent.max_identical_actions == 0 {
        anyhow::bail!(
            "{}: agent.call_timeout_secs and agent.max_identical_actions must be at least 1",
            path.display()
        );
    }
    let pct = cfg.agent.subagents.budget_percent;
    if !(1..=100).contains(&pct) {
        anyhow::bail!(
            "{}: agent.subagents.budget_percent = {pct} is out of range\nhelp: give each sub-agent 1 to 100 percent of its parent's per-session budget",
            path.display()
        );
    }
    check_sandbox_uid(path, cfg.sandbox.uid)?;
    cfg.memory
        .retention
        .validate()
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    if let Some(h) = &cfg.sandbox.helper {
        if !h.is_absolute() {
            anyhow::bail!(
                "{}: sandbox.helper = {:?} is not an absolute path\nhelp: give the full path of airlock-sandbox-init",
                path.display(),
                h
            );
        }
    }
    if cfg.audit.checkpoint_every == 0 {
        anyhow::bail!(
            "{}: audit.checkpoint_every must be at least 1",
            path.display()
        );
    }
    if cfg.host.max_sandboxes == 0 {
        anyhow::bail!("{}: host.max_sandboxes must be at least 1", path.display());
    }
    if cfg.host.sandbox_pool > MAX_SANDBOX_POOL {
        anyhow::bail!(
            "{}: host.sandbox_pool is {}; the most is {MAX_SANDBOX_POOL}\nhelp: a few suit most machines (2 on 2 cores); 0 turns the pool off",
            path.display(),
            cfg.host.sandbox_pool
        );
    }
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// I7: the limits `airlock init` writes are the limits a home without a config gets,
    /// and every counter has one.
    #[test]
    fn i7_init_writes_the_default_budgets_and_every_counter_is_limited() {
        let written: Config = toml::from_str(DEFAULT_CONFIG).unwrap();
        assert_eq!(written.budget, BudgetConfig::default());
        for limits in [&written.budget.per_session, &written.budget.per_day] {
            for c in airlock_store::Counter::ALL {
                assert!(
                    limits.get(c).is_some_and(|l| l > 0),
                    "{} unlimited",
                    c.as_str()
                );
            }
        }
        let absent: Config = toml::from_str("[policy]\nprofile = \"default\"\n").unwrap();
        assert_eq!(absent.budget, BudgetConfig::default());
    }

    /// I7: the sub-agent limits `airlock init` writes are the defaults, and a budget share
    /// outside 1–100 percent is refused by its key.
    #[test]
    fn i7_subagent_limits_default_and_a_bad_share_is_refused() {
        let written: Config = toml::from_str(DEFAULT_CONFIG).unwrap();
        assert_eq!(written.agent.subagents, SubAgentLimits::default());
        assert_eq!(
            (
                written.agent.subagents.max_depth,
                written.agent.subagents.max_concurrent
            ),
            (2, 3)
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("airlock.toml");
        std::fs::write(
            &path,
            "[agent.subagents]
budget_percent = 0
",
        )
        .unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(e.contains("agent.subagents.budget_percent = 0"), "{e}");
    }

    /// I7: a config written before budgets were on (every limit commented out, prices 0)
    /// is limited all the same, and a key the operator sets changes only that counter.
    #[test]
    fn i7_limits_left_out_take_the_defaults_never_no_limit() {
        let old: Config = toml::from_str(
            "[budget.per_session]\n# turns = 50\n\n[budget.per_day]\n# cost_micros = 1\n",
        )
        .unwrap();
        assert_eq!(old.budget, BudgetConfig::default());
        let one: Config =
            toml::from_str("[budget.per_session]\nturns = 7\n[budget.per_day]\nwall_ms = 9\n")
                .unwrap();
        let d = BudgetConfig::default();
        assert_eq!(one.budget.per_session.turns, Some(7));
        assert_eq!(one.budget.per_session.tool_calls, d.per_session.tool_calls);
        assert_eq!(one.budget.per_day.wall_ms, Some(9));
        assert_eq!(one.budget.per_day.cost_micros, d.per_day.cost_micros);
        let typo = toml::from_str::<Config>("[budget]\nper_sesion = {}\n");
        assert!(typo.is_err(), "an unknown [budget] key must be an error");
    }

    #[test]
    fn i7_an_unknown_model_has_no_price_and_an_operator_price_wins() {
        let b = BudgetConfig::default();
        assert!(b.prices_for("claude-sonnet-4-5").is_some());
        assert!(b.prices_for("llama3.1:8b").is_none());
        let own: Config =
            toml::from_str("[budget.prices]\ninput_per_million = 1.0\noutput_per_million = 2.0\n")
                .unwrap();
        assert_eq!(
            own.budget
                .prices_for("llama3.1:8b")
                .unwrap()
                .output_per_million,
            2.0
        );
        // A priced model with an operator price uses the operator's.
        assert_eq!(
            own.budget
                .prices_for("claude-sonnet-4-5")
                .unwrap()
                .input_per_million,
            1.0
        );
    }
}
