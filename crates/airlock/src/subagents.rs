//! Sub-agents on this host: the children one session starts with `spawn_agent`, after the
//! Gate allowed the `agent.spawn` action.
//!
//! A child is a session of its own, created in the store under its parent, so every record
//! it makes names `agent:<child>;parent=<parent>` and killing the parent (or `airlock kill
//! --all`) kills it in the same transaction. It
//! - starts with its parent's taint, and with instructions that count as untrusted when
//!   the parent was tainted;
//! - runs on a budget cap drawn from the parent's per-session budget when it starts
//!   ([`airlock_store::BudgetStore::draw_for_child`]), so the family never spends more than
//!   the parent was allowed;
//! - has only the tools the action names, which the loop checked are a subset of its
//!   parent's, under the same policy and the same secrets (none reach the sandbox);
//! - with a subfolder, has only that folder as its workspace: one judged from the family's
//!   top workspace, never a protected or sensitive place (`.git`) nor reached through a
//!   link, and made beneath the workspace's descriptor;
//! - runs on a thread of its own with its own [`AgentHost`], which is the same wiring
//!   `airlock run` and the host's sessions use, so it works the same in both.
//!
//! Depth and concurrency limits come from `[agent.subagents]`. When the parent's turn ends,
//! any child still running is killed and joined: no child outlives the turn that started
//! it.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::json;

use airlock_agent::agent::{Outcome, ToolOutput, TurnInput};
use airlock_agent::provider::ProviderConfig;
use airlock_audit::{AuditEvent, AuditLog};
use airlock_core::action::AgentSpawnAction;
use airlock_core::Authorized;
use airlock_store::{
    BudgetLimits, BudgetStore, ChargeError, Counter, Limits, NewSession, SessionRecord,
    SessionStatus, SessionStore, SqliteStore, Timestamp, TurnUpdate, Usage,
};
use airlock_workspace::{RelPath, WorkspaceError};

use crate::agent_executors::EgressExtras;
use crate::agent_host::{AgentHost, HostOptions};
use crate::config::Config;
use crate::home::Home;
use crate::service::caller::Notices;

/// The principal that ends children their parent left running.
const REAPER: &str = "system:subagents";
/// How often `wait_agent` looks whether a child has ended.
const WAIT_POLL: Duration = Duration::from_millis(50);

/// What a child is set up with, beyond what its parent's session has.
#[derive(Debug, Clone)]
pub struct ChildSetup {
    /// The only tools it may call.
    pub tools: Vec<String>,
    /// Its budget: the cap drawn from the parent per session, the day's limits as they are.
    pub budget: BudgetLimits,
}

/// Everything a session needs to start children like itself.
#[derive(Clone)]
pub struct SpawnContext {
    pub home: Home,
    pub cfg: Config,
    pub provider: ProviderConfig,
    pub profile: Option<String>,
    pub channel: String,
    pub notices: Notices,
    pub egress: EgressExtras,
    pub approval_timeout: Option<u64>,
    /// The spawning session's per-session limits, which its children's caps are drawn
    /// from. (Its tools need no copy here: the loop checks a child's against them.)
    pub limits: Limits,
    /// The host's audit writer, which children append through too (`None`: no host; each
    /// child opens the log, as its parent did).
    pub audit: Option<Arc<Mutex<AuditLog>>>,
}

/// How a child ended, once it has.
type Answer = Arc<Mutex<Option<String>>>;

struct Child {
    name: String,
    answer: Answer,
    thread: Option<JoinHandle<()>>,
}

/// The children of one session.
pub struct SubAgents {
    ctx: SpawnContext,
    parent: String,
    store: SqliteStore,
    audit: Arc<Mutex<AuditLog>>,
    children: Mutex<BTreeMap<String, Child>>,
}

impl SubAgents {
    pub fn new(
        ctx: SpawnContext,
        parent: String,
        store: SqliteStore,
        audit: Arc<Mutex<AuditLog>>,
    ) -> SubAgents {
        SubAgents {
            ctx,
            parent,
            store,
            audit,
            children: Mutex::new(BTreeMap::new()),
        }
    }

    /// Start the child `auth` allows; the text says its id, or why it did not start.
    pub fn spawn(&self, auth: Authorized<AgentSpawnAction>) -> ToolOutput {
        match self.try_spawn(auth.action()) {
            Ok(id) => ToolOutput::ok(format!(
                "started sub-agent {id} ({}); call wait_agent with id {id} for its answer",
                auth.action().name
            )),
            Err(e) => ToolOutput::not_run(format!("{e:#}")),
        }
    }

    fn try_spawn(&self, action: &AgentSpawnAction) -> anyhow::Result<String> {
        let limits = self.ctx.cfg.agent.subagents;
        let depth = self.store.family_depth(&self.parent)?;
        if depth + 1 > limits.max_depth {
            anyhow::bail!(
                "refused: a sub-agent here would be at depth {}, and the limit is {} (max_depth)\nhelp: do this part yourself, or the operator can raise `max_depth` under `[agent.subagents]` in airlock.toml",
                depth + 1,
                limits.max_depth
            );
        }
        let mut children = lock(&self.children);
        let running = children
            .values()
            .filter(|c| lock(&c.answer).is_none())
            .count();
        if running >= limits.max_concurrent {
            anyhow::bail!(
                "refused: {running} sub-agents of this session are still running, and the limit is {} at once (max_concurrent)\nhelp: call wait_agent for one of them first, or the operator can raise `max_concurrent` under `[agent.subagents]` in airlock.toml",
                limits.max_concurrent
            );
        }
        let parent = self.store.get_session(&self.parent)?;
        let workspace = match action.workspace.as_deref() {
            None => parent.workspace.clone(),
            Some(sub) => {
                let (top, parent_rel) = self.family_place(&parent, depth)?;
                child_workspace(&self.ctx.cfg, &top, parent_rel.as_ref(), sub)?
            }
        };
        let budget = self.draw_budget(limits.budget_percent)?;
        let new = NewSession {
            id: None,
            principal: parent.gate.principal.clone(),
            role: parent.gate.role.clone(),
            workspace: Some(workspace.clone()),
            agent_workspace: true,
        };
        let child = self
            .store
            .create_child_session(&self.parent, &new, Timestamp::now())?;
        let id = child.id().to_string();
        // The child knows what its parent knew: it starts with the parent's taint.
        let taint = parent.gate.taint.clone();
        self.store.record_turn(
            &id,
            &TurnUpdate {
                events: &[],
                taint: Some(&taint),
            },
            Timestamp::now(),
        )?;
        let mut who = child.gate.clone();
        who.taint = taint;
        let attribution = who.attribution()?;
        self.record(
            AuditEvent::by("subagent-started", id.as_str(), &attribution).with_detail(json!({
                "parent": self.parent,
                "name": action.name,
                "tools": action.tools,
                "workspace": workspace,
                "tainted": who.taint.is_tainted(),
                "budget_per_session": budget.per_session,
            })),
        );
        let setup = ChildSetup {
            tools: action.tools.clone(),
            budget,
        };
        let answer: Answer = Arc::new(Mutex::new(None));
        let thread = {
            let ctx = self.ctx.clone();
            let answer = answer.clone();
            let id = id.clone();
            let parent_id = self.parent.clone();
            let prompt = action.prompt.clone();
            let tainted = who.taint.is_tainted();
            let audit = self.audit.clone();
            std::thread::Builder::new()
                .name(format!("subagent-{id}"))
                .spawn(move || {
                    let text = run_child(ctx, &id, &parent_id, &prompt, tainted, setup);
                    let ev = AuditEvent::by("subagent-ended", id.as_str(), &attribution)
                        .with_detail(json!({"parent": parent_id, "answer_bytes": text.len()}));
                    let _ = lock(&audit).append(ev);
                    *lock(&answer) = Some(text);
                })?
        };
        children.insert(
            id.clone(),
            Child {
                name: action.name.clone(),
                answer,
                thread: Some(thread),
            },
        );
        Ok(id)
    }

    /// Where `parent` (this session, `depth` below its family's first session) works: the
    /// top workspace, the one the family's first session works in (canonical), and its
    /// subfolder of it (`None`: the top itself). A child's folder is judged and resolved
    /// from the top, so that a grandchild cannot pick `hooks` inside a child rooted at
    /// `.git`-like places, nor reach one through a link in its parent's folder.
    fn family_place(
        &self,
        parent: &SessionRecord,
        depth: usize,
    ) -> anyhow::Result<(PathBuf, Option<RelPath>)> {
        if depth == 0 {
            return Ok((parent.workspace.canonicalize()?, None));
        }
        // The family's first session is running the turn this one runs in, so it is active.
        let unknown = || {
            anyhow::anyhow!(
                "refused: the workspace of this sub-agent's family cannot be found, so a subfolder for another sub-agent cannot be checked\nhelp: start this sub-agent without `workspace`"
            )
        };
        let active = self.store.list_sessions(Some(SessionStatus::Active))?;
        let top = active
            .items
            .iter()
            .filter(|s| s.id != self.parent)
            .find(|s| {
                self.store.family_depth(&s.id).is_ok_and(|d| d == 0)
                    && self
                        .store
                        .descendants(&s.id)
                        .is_ok_and(|d| d.contains(&self.parent))
            })
            .ok_or_else(unknown)?;
        let recorded = self.store.get_session(&top.id)?.workspace;
        let top = recorded.canonicalize()?;
        // A child's workspace is recorded as the top joined with its subfolder (see
        // `child_workspace`), or as its parent's when it has none, so the subfolder is read
        // back lexically, never through the filesystem.
        let rel = parent
            .workspace
            .strip_prefix(&top)
            .or_else(|_| parent.workspace.strip_prefix(&recorded))
            .map_err(|_| unknown())?;
        if rel.as_os_str().is_empty() {
            return Ok((top, None));
        }
        let rel = RelPath::new(rel).map_err(|_| unknown())?;
        Ok((top, Some(rel)))
    }

    /// The child's cap: `percent` of each per-session limit of the parent, never more than
    /// the parent has left, drawn from the parent now. Wall time is shared, not drawn: the
    /// parent's clock runs while its children do, so the child gets what the parent has
    /// left of it.
    fn draw_budget(&self, percent: u8) -> anyhow::Result<BudgetLimits> {
        let parent_limits = self.ctx.limits;
        let state = self.store.budget_state(&self.parent, Timestamp::now())?;
        let percent = u64::from(percent.clamp(1, 100));
        let mut cap = Usage::default();
        let mut child = Limits::default();
        for c in Counter::ALL {
            let Some(limit) = parent_limits.get(c) else {
                continue;
            };
            let left = limit.saturating_sub(state.session.get(c));
            let share = (limit.saturating_mul(percent)).div_ceil(100).min(left);
            if c == Counter::WallMs {
                child.set(c, Some(left));
                continue;
            }
            if share == 0 {
                anyhow::bail!(
                    "refused: this session has none of its {} budget left to give a sub-agent ({} of {limit} used)\nhelp: the operator can raise `{}` under `[budget.per_session]` in airlock.toml",
                    c.as_str(),
                    state.session.get(c),
                    c.as_str()
                );
            }
            cap.set(c, share);
            child.set(c, Some(share));
        }
        match self
            .store
            .draw_for_child(&self.parent, &cap, &parent_limits, Timestamp::now())
        {
            Ok(_) => {}
            Err(ChargeError::Exhausted(e)) => anyhow::bail!(
                "refused: the sub-agent's budget cannot be drawn from this session: {e}"
            ),
            Err(ChargeError::Store(e)) => return Err(e.into()),
        }
        Ok(BudgetLimits {
            per_session: child,
            per_day: self.ctx.cfg.budget.per_day,
        })
    }

    /// The id of the child `key` names: its id, or a name only one child has.
    fn find(&self, key: &str) -> Result<(String, Answer), String> {
        let children = lock(&self.children);
        if let Some(c) = children.get(key) {
            return Ok((key.to_string(), c.answer.clone()));
        }
        let named: Vec<_> = children.iter().filter(|(_, c)| c.name == key).collect();
        match named.as_slice() {
            [(id, c)] => Ok(((*id).clone(), c.answer.clone())),
            [] => Err(format!(
                "there is no sub-agent `{key}` of this session\nhelp: use the id spawn_agent returned"
            )),
            _ => Err(format!(
                "{} sub-agents of this session are named `{key}`\nhelp: use the id spawn_agent returned",
                named.len()
            )),
        }
    }

    /// Wait up to `timeout` for child `key` (its id or name): its answer, or how it ended.
    pub async fn wait(&self, key: &str, timeout: Duration) -> ToolOutput {
        let (id, answer) = match self.find(key) {
            Ok(found) => found,
            Err(e) => return ToolOutput::error(e),
        };
        let id = id.as_str();
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(text) = lock(&answer).clone() {
                self.join(id);
                return ToolOutput::ok(text);
            }
            if Instant::now() >= deadline {
                return ToolOutput::error(format!(
                    "sub-agent {id} is still working after {}s\nhelp: call wait_agent again",
                    timeout.as_secs()
                ));
            }
            tokio::time::sleep(WAIT_POLL).await;
        }
    }

    fn join(&self, id: &str) {
        let thread = lock(&self.children)
            .get_mut(id)
            .and_then(|c| c.thread.take());
        if let Some(t) = thread {
            let _ = t.join();
        }
    }

    /// End the turn's family: kill every child still running (and, in the store, all
    /// below it), and wait for their threads, whose sandboxes end with them.
    pub fn end_all(&self) {
        let ids: Vec<String> = lock(&self.children).keys().cloned().collect();
        for id in &ids {
            let running = lock(&self.children)
                .get(id)
                .is_some_and(|c| lock(&c.answer).is_none());
            if running {
                if let Ok(report) = self.store.kill_session(id, REAPER, Timestamp::now()) {
                    if !report.already_killed {
                        if let Ok(p) = airlock_core::Principal::system("subagents") {
                            let who = airlock_core::principal::Attribution {
                                principal: p,
                                on_behalf_of: airlock_core::Principal::Owner,
                                via: airlock_core::Via::cli(),
                            };
                            self.record(
                                AuditEvent::by("session-killed", id.as_str(), &who).with_detail(
                                    json!({"reason": "its parent's turn ended", "parent": self.parent}),
                                ),
                            );
                        }
                    }
                }
            }
            self.join(id);
        }
        lock(&self.children).clear();
    }

    fn record(&self, ev: AuditEvent) {
        if let Err(e) = lock(&self.audit).append(ev) {
            self.ctx
                .notices
                .line(&format!("airlock: a sub-agent record was not written: {e}"));
        }
    }
}

impl Drop for SubAgents {
    fn drop(&mut self) {
        self.end_all();
    }
}

/// Run child `id` to the end of its one turn; its final answer, or how it ended.
fn run_child(
    ctx: SpawnContext,
    id: &str,
    parent: &str,
    prompt: &str,
    tainted: bool,
    setup: ChildSetup,
) -> String {
    let opts = HostOptions {
        session: Some(id.to_string()),
        approval_timeout: ctx.approval_timeout,
        profile: ctx.profile.clone(),
        channel: ctx.channel.clone(),
        messages_to: None,
        notices: ctx.notices.clone(),
        workspace: None,
        egress: ctx.egress.clone(),
        child: Some(setup),
        audit: ctx.audit.clone(),
    };
    let mut host = match AgentHost::open(ctx.home.clone(), ctx.cfg.clone(), &ctx.provider, opts) {
        Ok(h) => h,
        Err(e) => return format!("the sub-agent could not start: {e:#}"),
    };
    let source = format!("agent:{parent}");
    // A tainted parent's words may carry an injection: the child takes them as untrusted
    // content, so provenance does not credit them to the owner.
    let input = if tainted {
        TurnInput::Untrusted {
            source: &source,
            text: prompt,
        }
    } else {
        TurnInput::Owner(prompt)
    };
    let text = match host.run_turn_from(input, None) {
        Ok(report) => match report.outcome {
            Outcome::Completed { text } => text,
            other => format!(
                "[the sub-agent ended without an answer: {}]",
                other.summary()
            ),
        },
        Err(e) => format!("[the sub-agent failed: {e:#}]"),
    };
    let _ = host.close();
    if let Ok(store) = crate::service::approvals::open_store(&ctx.home) {
        if store
            .get_session(id)
            .is_ok_and(|s| s.status == SessionStatus::Active)
        {
            let _ = store.finish_session(id, Timestamp::now());
        }
    }
    text
}

/// The child's workspace when it is given the subfolder `sub` of its parent's (`top`
/// joined with `parent_rel`), created if need be. The folder is judged and resolved by its
/// path from the top workspace (`top`, canonical): refused when it is, lies in or holds a protected or
/// sensitive place (inside it, the child's commits would judge paths from the folder and
/// miss them: `hooks/pre-commit` in a child rooted at `.git`), and when any component of it
/// is a link (one could lead into `.git`, or out of the workspace). Each missing component
/// is made beneath the one above it, after these checks and never through a link, so a
/// refused folder leaves nothing behind, inside the workspace or out.
fn child_workspace(
    cfg: &Config,
    top: &Path,
    parent_rel: Option<&RelPath>,
    sub: &str,
) -> anyhow::Result<PathBuf> {
    let bad = |e: WorkspaceError| {
        anyhow::anyhow!(
            "refused: the sub-agent workspace {sub:?} is not a plain subfolder: {e}\nhelp: give a relative path such as `reports/q3`"
        )
    };
    let sub_rel = RelPath::new(sub).map_err(bad)?;
    let rel = match parent_rel {
        Some(p) => RelPath::new(p.as_path().join(sub_rel.as_path())).map_err(bad)?,
        None => sub_rel,
    };
    let shown = if parent_rel.is_some() {
        format!("{sub:?} (`{}` in the top workspace)", rel.display())
    } else {
        format!("{sub:?}")
    };
    if let Some(why) = subfolder_refusal(cfg, &rel) {
        anyhow::bail!(
            "refused: the sub-agent workspace {shown} cannot be a sub-agent's whole workspace: {why}; inside it, nothing would protect those files\nhelp: give an ordinary subfolder such as `reports/q3`"
        );
    }
    let dir = airlock_workspace::open_subdir(top, &rel).map_err(|e| match e {
        WorkspaceError::ThroughLink { path } => anyhow::anyhow!(
            "refused: the sub-agent workspace {shown} goes through the symbolic link `{path}`; a sub-agent's folder is never reached through a link, which could lead into `.git` or out of the workspace\nhelp: name an ordinary subfolder, not a link"
        ),
        e => anyhow::anyhow!("refused: the sub-agent workspace {shown} cannot be made: {e}"),
    })?;
    // The child is given a path, not the descriptor: the path must name the directory just
    // resolved, or something was swapped in between.
    let path = top.join(rel.as_path());
    let resolved = std::fs::File::from(dir).metadata()?;
    let named = std::fs::metadata(&path)?;
    if (resolved.dev(), resolved.ino()) != (named.dev(), named.ino()) {
        anyhow::bail!(
            "refused: the sub-agent workspace {shown} changed while it was being opened\nhelp: try again"
        );
    }
    Ok(path)
}

/// Why `rel` (a path from the top workspace) cannot be a sub-agent's workspace, or `None`:
/// the check the tool made before the Gate ([`airlock_core::paths::subworkspace_refusal`],
/// here with the operator's `protected_paths` and from the top), and then whether a
/// sensitive or protected pattern of the change sets ([`crate::transaction::change_set_options`])
/// would match files in it by naming part of its path, which a commit judged from the
/// folder could not see.
fn subfolder_refusal(cfg: &Config, rel: &RelPath) -> Option<String> {
    if let Some(why) =
        airlock_core::paths::subworkspace_refusal(rel.as_path(), &cfg.policy.protected_paths)
    {
        return Some(why);
    }
    let opts = crate::transaction::change_set_options(cfg, None);
    if opts.sensitive.reaches_into(rel) || opts.protected.reaches_into(rel) {
        return Some(
            "files in it are sensitive paths (the built-in list, `[workspace] sensitive_paths` or `[policy] protected_paths`) by a part of its own path, which a commit judged from the folder would not see"
                .into(),
        );
    }
    None
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
