//! `exec`: decide a command at the Gate, record the decision, run it in the verified
//! sandbox, and record the result with the run's attestation. One implementation for
//! `airlock exec` embedded and for the host, which runs it in its own process with its
//! warm config and Gate ([`Loaded::Warm`]) for a client ([`Caller::client`]).
//!
//! Every run gets its own egress proxy ([`crate::egress`]) sharing the command's Gate,
//! audit log and session; the sandbox reaches it through the relay on
//! `127.0.0.1:3128` and reaches nothing else.
//!
//! The sandbox is built while the Gate loads and decides: the proxy's socket is bound, and
//! a thread prepares and attests the sandbox ([`airlock_sandbox::Sandbox::prepare`]), which then waits,
//! confined and empty, for the command. Only an authorized command is handed to it; a
//! refusal drops it unused. This takes the sandbox's start-up off the critical path.

pub(crate) mod ahead;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::json;

use crate::egress::{Egress, EgressBinding, EgressSetup};
use crate::home::Home;
use crate::live_gate::LiveGate;
use crate::service::caller::{Caller, Notices};
use crate::service::kill::{RunGuard, EXIT_KILLED};
use crate::{config, policies, runtime, transaction};
use airlock_audit::AuditEvent;
use airlock_core::action::ExecAction;
use airlock_core::gate::{Approval, Session, Verdict};
use airlock_core::terminal_text::escape_line;
use airlock_core::{Attribution, Authorized, Principal, Via};
use airlock_sandbox::{OutputMode, PreparedRun, SandboxProfile};
use airlock_store::{
    NewSession, SessionStatus, SessionStore, SqliteStore, StoreOptions, SyncMode, Timestamp,
};

/// Exit status when the Gate refuses the command (as a shell does for "cannot execute").
pub const EXIT_REFUSED: i32 = 126;
/// How long an inline terminal approval stays valid.
const APPROVAL_TTL_SECS: u64 = 60;

/// One command to run (the wire's request, which embedded `exec` uses too).
pub use airlock_client::wire::ExecRequest;

/// What the run may take already loaded: nothing (embedded), or the host's warm config and
/// Gates (brought up to date with the files first), its open store for runs' sessions
/// ([`open_run_store`]), its one audit writer and its pool of prepared sandboxes.
#[derive(Clone, Copy)]
pub enum Loaded<'a> {
    Cold,
    Warm {
        warm: &'a crate::host::warm::Warm,
        store: &'a SqliteStore,
        audit: &'a crate::host::audit_writer::HostAudit,
        pool: Option<&'a Arc<crate::host::pool::SandboxPool>>,
    },
}

/// `p` must be absolute: a path from a client means nothing relative to the host.
pub(crate) fn absolute(what: &str, p: &Path) -> anyhow::Result<()> {
    anyhow::ensure!(
        p.is_absolute(),
        "{what} {} is not an absolute path",
        p.display()
    );
    Ok(())
}

pub(crate) fn lock(
    log: &Mutex<airlock_audit::AuditLog>,
) -> MutexGuard<'_, airlock_audit::AuditLog> {
    log.lock().unwrap_or_else(|p| p.into_inner())
}

/// The run's handle on the audit log: its own (embedded), closed with a signed checkpoint
/// when the run ends, or the host's one writer, which stays open (see
/// [`crate::host::audit_writer`]).
struct RunLog {
    log: Arc<Mutex<airlock_audit::AuditLog>>,
    shared: bool,
    /// Appends the writer had refused before this run.
    failed_before: u64,
}

impl RunLog {
    fn open(home: &Home, cfg: &config::Config, loaded: Loaded<'_>) -> anyhow::Result<RunLog> {
        Ok(match loaded {
            Loaded::Cold => RunLog {
                log: Arc::new(Mutex::new(runtime::open_audit(home, cfg)?)),
                shared: false,
                failed_before: 0,
            },
            Loaded::Warm { audit, .. } => {
                let log = audit.log(cfg)?;
                let failed_before = crate::host::audit_writer::failures(&log);
                RunLog {
                    log,
                    shared: true,
                    failed_before,
                }
            }
        })
    }

    /// Appends the log refused during this run, and the last one's error.
    fn refused(&self) -> Option<(u64, String)> {
        lock(&self.log)
            .failed_appends()
            .map(|(n, last)| (n.saturating_sub(self.failed_before), last.to_string()))
            .filter(|(n, _)| *n > 0)
    }

    /// Let go of the log: an own one is closed with a signed checkpoint.
    fn close(self) -> anyhow::Result<()> {
        match self.shared {
            true => Ok(()),
            false => close_log(self.log),
        }
    }
}

/// Close the shared log once every other holder is gone.
fn close_log(log: Arc<Mutex<airlock_audit::AuditLog>>) -> anyhow::Result<()> {
    match Arc::try_unwrap(log) {
        Ok(m) => m
            .into_inner()
            .unwrap_or_else(|p| p.into_inner())
            .close()
            .map_err(|e| anyhow::anyhow!("{e}")),
        // Still shared (a proxy record pending past its timeout): dropping the last handle
        // signs the final checkpoint.
        Err(_) => Ok(()),
    }
}

/// Run `req` for `caller`; the exit status is the command's (or [`EXIT_REFUSED`],
/// [`EXIT_KILLED`]).
///
/// `answer` is called once with the result, as soon as it is known: after the execution
/// record, the proxy's records and the commit, and after `caller` (with its descriptors) is
/// let go, but before the run's layers are removed and its session ended, which nobody
/// needs to wait for. The host answers its client there; embedded, nobody is waiting.
pub fn exec(
    home: &Home,
    loaded: Loaded<'_>,
    req: &ExecRequest,
    caller: Caller,
    answer: impl FnOnce(&anyhow::Result<i32>),
) -> anyhow::Result<i32> {
    let mut answer = Some(answer);
    let result = run_exec(home, loaded, req, caller, &mut |result| {
        if let Some(answer) = answer.take() {
            answer(result)
        }
    });
    if let Some(answer) = answer.take() {
        answer(&result)
    }
    result
}

fn run_exec(
    home: &Home,
    loaded: Loaded<'_>,
    req: &ExecRequest,
    caller: Caller,
    answer: &mut dyn FnMut(&anyhow::Result<i32>),
) -> anyhow::Result<i32> {
    let home = home.clone();
    // In the host, the run's sandbox takes a slot of `[host] max_sandboxes` before
    // anything is built for it (it is prepared beside the decision), and keeps it to the
    // run's end. It waits in the host's queue while its client stays.
    let hung_up = || caller.hang_up.as_ref().is_some_and(|h| h.fired());
    let _slot = crate::host::sandbox_slots::enter_for(&home, &hung_up)?;
    let notices = &caller.notices;
    // Where a run's time goes, for `RUST_LOG=airlock=debug` (the host logs with tracing).
    let started_at = std::time::Instant::now();
    let phase = |name: &str| {
        tracing::debug!(
            phase = name,
            us = started_at.elapsed().as_micros() as u64,
            "exec"
        )
    };
    absolute("cwd", &req.cwd)?;
    let cfg = match loaded {
        Loaded::Cold => Arc::new(config::load(&home.config_file())?),
        // A config edit made just before this request decides it, as it would embedded:
        // the file is looked at now, not at the next reload tick. (The policy files are
        // looked at by the run's live Gate before each decision.)
        Loaded::Warm { warm, .. } => warm.current_config(),
    };
    let profile = policies::pick_profile(req.profile.as_deref(), &cfg.policy.profile)?;
    let explicit_workspace = req.workspace.is_some();
    let workspace = req.workspace.clone().unwrap_or_else(|| req.cwd.clone());
    absolute("workspace", &workspace)?;
    let workspace = workspace
        .canonicalize()
        .map_err(|e| anyhow::anyhow!("workspace {}: {e}", workspace.display()))?;
    let cwd = Some(req.cwd.clone())
        .filter(|c| c.starts_with(&workspace))
        .unwrap_or_else(|| workspace.clone());
    let command = req.command.clone();

    // A commit a crash interrupted is finished or rolled back before the run sees the
    // workspace (and said; recorded once the log is open).
    let (_, recovered) = transaction::open_workspace(&home, &workspace, notices)?;
    // Loaded before deciding: a missing CA or an unknown secret stops the run here.
    phase("workspace opened");
    let egress_setup = EgressSetup::load(&home, &req.secrets)?;
    let mut profile_sb = sandbox_profile(
        &home,
        &cfg,
        workspace.clone(),
        cwd.clone(),
        req.timeout.unwrap_or(cfg.sandbox.timeout_secs),
    );
    profile_sb.allow_broad_workspace = explicit_workspace;
    phase("egress setup loaded");
    // In the host, the pool refills after the run, not beside it, while it has a sandbox
    // left (see `crate::host::pool`).
    let pool = match loaded {
        Loaded::Warm {
            pool: Some(pool), ..
        } if cfg.host.sandbox_pool > 0 => Some(pool),
        _ => None,
    };
    let _in_flight = pool.map(|pool| pool.run_in_flight());
    // What a run staged ahead must have been staged for to serve this one, and what the
    // host stages next once this run is over (see `ahead`). A run with secrets is never
    // staged: its proxy holds them.
    let shape = pool
        .filter(|_| req.secrets.is_empty())
        .map(|_| ahead::AheadShape {
            policy_profile: profile.name().to_string(),
            profile: profile_sb.clone(),
            cwd: cwd.clone(),
        });
    // A run staged ahead serves only when nothing was recovered: it has seen the
    // workspace since before the recovery.
    let staged = match (pool, &shape) {
        (Some(pool), Some(shape)) if recovered.is_none() => {
            pool.take_ahead(shape, &egress_setup, &cfg)
        }
        _ => None,
    };
    let (run, mut preparing, spawned) = match staged {
        Some(staged) => {
            phase("staged run taken");
            staged.into_run(egress_setup, caller.output.clone())?
        }
        None => {
            let run = RunSetup::new(&home, &cfg, egress_setup, profile_sb)?;
            phase("overlay created");
            // In the host, a sandbox built ahead for this profile's base takes the run's
            // own parts (see `crate::host::pool`); otherwise one is built for the run from
            // nothing.
            let pooled = pool.and_then(|pool| {
                pool.take(profile.name(), &run.profile, &cfg)
                    .map(|sandbox| (sandbox, pool.clone()))
            });
            let spawned = SpawnedPids::default();
            let mut run = run;
            let preparing = Preparing::start(
                &run.profile,
                &cwd,
                caller.output.clone(),
                spawned.hook(),
                pooled,
            )?;
            run.binding.start_runtime()?;
            (run, preparing, spawned)
        }
    };
    let RunSetup {
        session_id,
        layers,
        mut binding,
        profile: profile_sb,
    } = run;
    // The Gate loads once the helper process has started, not beside its start (see
    // `Preparing::wait_started`).
    preparing.wait_started();
    phase("helper started");
    // Beside the Gate's load and decision, on a thread of their own: the run's
    // registration (`airlock kill` finds its helpers through it) and its session in the
    // store (`airlock kill <id>` and `--all` find it there). Embedded, the store is opened
    // there too; the host has it open.
    let run_dir = binding.run_dir().to_path_buf();
    let host_store = match loaded {
        Loaded::Warm { store, .. } => Some(store),
        Loaded::Cold => None,
    };
    let (registered, decided) = std::thread::scope(|s| {
        let registering = std::thread::Builder::new()
            .name("airlock-session".into())
            .spawn_scoped(s, || {
                register_run_session(&home, &run_dir, host_store, &session_id, &workspace)
            });
        let decided = decide_run(
            &home,
            &cfg,
            loaded,
            profile,
            &workspace,
            &mut binding,
            recovered.as_deref(),
            DecideWhat {
                session_id: &session_id,
                command,
                cwd: &cwd,
            },
            &phase,
        );
        let registered = match registering {
            Ok(thread) => thread.join().unwrap_or_else(|_| {
                Err(anyhow::anyhow!("registering the run failed unexpectedly"))
            }),
            Err(e) => Err(anyhow::anyhow!("cannot start a thread: {e}")),
        };
        (registered, decided)
    });
    let (guard, own_store) = match registered {
        Ok(done) => done,
        Err(e) => {
            // A command already allowed says, in its record, why it did not run.
            if let Ok(d) = &decided {
                if let Verdict::Allow(token) = &d.verdict {
                    record_execution(token, &d.session, &d.log, json!({"refused": e.to_string()}));
                }
            }
            return Err(e);
        }
    };
    // `airlock kill` reaches the sandbox's helper from here on, started or not.
    spawned.send_to(guard.spawn_hook());
    // A client that goes away takes its run with it, as a killed `airlock exec` would.
    if let Some(h) = &caller.hang_up {
        h.arm(guard.hang_up_switch());
    }
    let store: &SqliteStore = match (&own_store, host_store) {
        (Some(own), _) => own,
        (None, Some(store)) => store,
        (None, None) => anyhow::bail!("the run's session was not recorded"),
    };
    let Decided {
        gate,
        run_log,
        log,
        session,
        verdict,
    } = match decided {
        Ok(d) => d,
        Err(e) => {
            end_session(store, &session_id);
            return Err(e);
        }
    };
    let token = match verdict {
        Verdict::Allow(token) => token,
        Verdict::Deny(d) => {
            // A reason may quote the command: each of its lines is shown escaped.
            let reasons: Vec<String> = d
                .reasons
                .iter()
                .flat_map(|r| r.split('\n'))
                .map(escape_line)
                .collect();
            notices.line(&format!("airlock: refused: {}", reasons.join("\n  ")));
            if !d.policies.is_empty() {
                notices.line(&format!(
                    "  decided by: {}",
                    escape_line(&d.policies.join(", "))
                ));
            }
            drop(preparing.finish());
            drop(log);
            run_log.close().ok();
            end_session(store, &session.id);
            return Ok(EXIT_REFUSED);
        }
        Verdict::Ask(ticket) => {
            let approved = prompt_on_terminal(
                &caller,
                &ticket.action().command,
                &ticket.action_hash,
                &ticket.reasons,
            )
            .inspect_err(|_| end_session(store, &session.id))?;
            if !approved {
                let _ = lock(&log).append(
                    AuditEvent::by("approval-denied", &session.id, &Attribution::owner_cli())
                        .with_action(
                            json!({"command": ticket.action().command}),
                            ticket.action_hash.clone(),
                        ),
                );
                notices.line("airlock: not approved; the command did not run");
                drop(preparing.finish());
                drop(log);
                run_log.close().ok();
                end_session(store, &session.id);
                return Ok(EXIT_REFUSED);
            }
            let approval = Approval {
                approver: Principal::Owner,
                via: Via::cli(),
                payload_hash: ticket.action_hash.clone(),
                expires_at: runtime::now_unix() + APPROVAL_TTL_SECS,
            };
            // The prompt may have waited while the operator tightened the policy.
            let current = gate.gate();
            let held = airlock_core::Action::Exec(ticket.action().clone());
            if let Err(why) = current.still_permits(&session, &held) {
                let _ = lock(&log).append(
                    AuditEvent::by("approval-refused", &session.id, &Attribution::owner_cli())
                        .with_action(
                            json!({"command": ticket.action().command}),
                            ticket.action_hash.clone(),
                        )
                        .with_detail(json!({"reason": why})),
                );
                notices.line(&format!(
                    "airlock: approved, but {why}; the command did not run"
                ));
                drop(preparing.finish());
                drop(log);
                run_log.close().ok();
                end_session(store, &session.id);
                return Ok(EXIT_REFUSED);
            }
            current
                .approve(ticket, &approval, runtime::now_unix(), &mut *lock(&log))
                .map_err(|e| {
                    end_session(store, &session.id);
                    anyhow::anyhow!("{e}")
                })?
        }
    };
    phase("decided");
    let egress = match binding.serve(&session, gate.clone(), log.clone()) {
        Ok(e) => e,
        Err(e) => {
            drop(preparing.finish());
            record_execution(&token, &session, &log, json!({"refused": e.to_string()}));
            drop(log);
            run_log.close().ok();
            end_session(store, &session.id);
            return Err(e.into());
        }
    };
    // A kill that came before the session was in the store found no run to stop.
    if let Err(e) = check_killed(&guard, store, &session.id) {
        drop(preparing.finish());
        record_execution(&token, &session, &log, json!({"refused": e.to_string()}));
        drop(egress);
        drop(log);
        run_log.close().ok();
        end_session(store, &session.id);
        return Err(e);
    }
    let started = std::time::SystemTime::now();
    phase("proxy serving");
    let prepared = preparing.finish();
    phase("sandbox ready");
    let run = run_sandboxed(
        &token,
        &profile_sb,
        prepared,
        &session,
        &egress,
        &guard,
        notices,
    );
    drop(guard);
    // The process tree is gone, so nothing more can reach the proxy: it stops while the
    // execution record is written and synced. The session ends once its commit is settled
    // (a held commit can still be killed).
    phase("ran");
    let drained = std::thread::scope(|s| {
        let finishing = s.spawn(move || egress.finish());
        record_execution(&token, &session, &log, run.detail);
        finishing.join().unwrap_or(false)
    });
    if !drained {
        notices.line("airlock: warning: some egress records were still pending when the run ended");
    }
    phase("recorded");
    // What the run wrote is decided as one commit. A run that was killed or refused
    // leaves nothing: its layer is discarded unseen.
    if let Ok(RunEnd::Finished(_)) = &run.end {
        let txn = transaction::Transaction {
            home: &home,
            cfg: &cfg,
            gate: &*gate,
            log: &log,
            approval_timeout: std::time::Duration::from_secs(cfg.agent.approval_timeout_secs),
            cancelled: None,
            notices,
        };
        let settled = txn.settle(
            &session,
            &workspace,
            &layers.upper(),
            Some(started),
            &token.action().command,
        );
        if settled != transaction::Settled::Unchanged {
            notices.line(&format!("airlock: {}", settled.note()));
        }
    }
    phase("recorded and settled");
    // A record the log refused during the run (a request's decision in the proxy, or the
    // commit's) fails the run even when the command itself succeeded: the operator must hear of it.
    let result = match run_log.refused() {
        Some((n, last)) => Err(anyhow::anyhow!(
            "the audit log refused {n} record(s) during this run; an action whose decision it refused did not run: {last}"
        )),
        None => run.end.map(|end| match end {
            RunEnd::Killed => EXIT_KILLED,
            RunEnd::Finished(o) => o.status,
        }),
    };
    // Everything the caller is to hear has been said and recorded: let go of its streams
    // (a reader of the command's output waits for every copy to close) and answer.
    drop(caller);
    answer(&result);
    phase("answered");
    // The next run in this workspace is likely to look like this one: the host stages
    // one for it once no run is in flight.
    if let (Some(pool), Some(shape)) = (pool, shape) {
        pool.want_ahead(shape, &profile_sb.base());
    }
    drop(layers);
    phase("layers removed");
    end_session(store, &session.id);
    phase("session ended");
    drop(log);
    run_log.close()?;
    phase("done");
    result
}

/// What the Gate decides for a run: the command the operator typed, for the run's
/// session, from its working directory.
struct DecideWhat<'a> {
    session_id: &'a str,
    command: String,
    cwd: &'a Path,
}

/// A run's Gate, log and session, and the Gate's verdict on its command.
struct Decided {
    gate: Arc<LiveGate>,
    run_log: RunLog,
    log: Arc<Mutex<airlock_audit::AuditLog>>,
    session: Session,
    verdict: Verdict<ExecAction>,
}

/// Load the run's live Gate and its log, and decide its command (the decision is
/// recorded before this returns). The proxy's *ask* requests are bound to the approvals
/// queue on the way.
#[allow(clippy::too_many_arguments)]
fn decide_run(
    home: &Home,
    cfg: &Arc<config::Config>,
    loaded: Loaded<'_>,
    profile: airlock_core::policy::Profile,
    workspace: &Path,
    binding: &mut EgressBinding,
    recovered: Option<&str>,
    what: DecideWhat<'_>,
    phase: &dyn Fn(&str),
) -> anyhow::Result<Decided> {
    // The run's Gate stays live: a policy edit or `net revoke` while it runs reaches its
    // proxy's next request and its commit (see `crate::live_gate`).
    let gate = match loaded {
        Loaded::Cold => LiveGate::open(home, cfg, profile, workspace)?,
        Loaded::Warm { warm, .. } => {
            let (gate, _, fingerprint) = warm.gate_as_of(profile)?;
            let gate = gate.with_config(crate::service::check::gate_config(
                cfg,
                workspace.to_path_buf(),
            ));
            LiveGate::from_loaded(home, cfg, profile, workspace, gate, fingerprint)
        }
    };
    phase("gate ready");
    let run_log = RunLog::open(home, cfg, loaded)?;
    phase("gate and audit log loaded");
    let gate = Arc::new(gate);
    let log = run_log.log.clone();
    transaction::record_recovery(&log, workspace, recovered);
    // The proxy's *ask* requests wait in the approvals queue (`airlock approvals`).
    binding.queue_approvals(
        home,
        &log,
        cfg.approvals,
        std::time::Duration::from_secs(cfg.agent.approval_timeout_secs),
        gate.gate().config().clone(),
    )?;
    let mut session = Session::new(what.session_id.to_string(), "owner");
    // The operator typed this command: it is trusted input of the session, and the
    // operator (not a model) proposes it.
    session.observe_trusted(&what.command);
    session.actor = Some(Principal::Owner);
    let action = ExecAction {
        command: what.command,
        cwd: what.cwd.display().to_string(),
        env: vec![],
    };
    phase("session recorded");
    // The policy in force now (a policy edited since the Gate was loaded is loaded here).
    let current = gate.gate();
    phase("policy in force");
    let verdict = current.decide(&session, action, &mut *lock(&log));
    Ok(Decided {
        gate,
        run_log,
        log,
        session,
        verdict,
    })
}

/// Register the run in `run_dir` for `airlock kill`, and record its session in the
/// store: the host's (`store`), or one opened here (embedded), which is returned.
fn register_run_session(
    home: &Home,
    run_dir: &Path,
    store: Option<&SqliteStore>,
    session_id: &str,
    workspace: &Path,
) -> anyhow::Result<(RunGuard, Option<SqliteStore>)> {
    let guard = RunGuard::register(run_dir)
        .map_err(|e| anyhow::anyhow!("cannot register the run in {}: {e}", run_dir.display()))?;
    let own = match store {
        Some(_) => None,
        None => Some(open_run_store(home)?),
    };
    let store = own
        .as_ref()
        .or(store)
        .ok_or_else(|| anyhow::anyhow!("no store"))?;
    record_run_session(store, session_id.to_string(), workspace.to_path_buf())?;
    Ok((guard, own))
}

/// What a run sets up before a sandbox can take it: its session id, its workspace
/// layers, its proxy's socket, and the sandbox profile with both in it.
pub(crate) struct RunSetup {
    session_id: String,
    layers: transaction::RunLayers,
    binding: EgressBinding,
    profile: SandboxProfile,
}

impl RunSetup {
    /// Set up a new run of `profile` (its workspace, working directory and limits set),
    /// whose proxy serves with `egress`.
    fn new(
        home: &Home,
        cfg: &config::Config,
        egress: EgressSetup,
        mut profile: SandboxProfile,
    ) -> anyhow::Result<RunSetup> {
        let session_id = runtime::session_id("exec");
        // The run writes into its own layer; only a commit the Gate allows reaches the
        // workspace (see `crate::transaction`). Removed whichever way the run ends.
        let overlay = transaction::create_overlay(home, cfg, &session_id)?;
        profile.workspace_overlay = Some(overlay.clone());
        let layers = transaction::RunLayers::new(overlay);
        // The proxy's socket and the sandbox around it are built while the Gate loads and
        // decides: the sandbox is attested and then waits, confined and empty, for the
        // authorized command (see `Sandbox::prepare`). A refusal tears it down unused.
        let binding = EgressBinding::bind(egress, home, &session_id, cfg.sandbox.uid)?;
        binding.configure(&mut profile)?;
        Ok(RunSetup {
            session_id,
            layers,
            binding,
            profile,
        })
    }
}

/// The pids of a run's sandbox helpers, kept until the run's [`RunGuard`] is there to
/// take them (a run staged ahead starts its sandbox before it has one).
#[derive(Clone, Default)]
pub(crate) struct SpawnedPids(Arc<Mutex<SpawnedState>>);

#[derive(Default)]
struct SpawnedState {
    pids: Vec<u32>,
    to: Option<Arc<dyn Fn(u32) + Send + Sync>>,
}

impl SpawnedPids {
    /// What the sandbox's start calls with each helper's pid.
    fn hook(&self) -> impl Fn(u32) + Send + Sync + 'static {
        let state = self.0.clone();
        move |pid| {
            let mut s = state.lock().unwrap_or_else(|p| p.into_inner());
            match &s.to {
                Some(to) => to(pid),
                None => s.pids.push(pid),
            }
        }
    }

    /// Hand every pid so far, and every later one, to `to`.
    fn send_to(&self, to: impl Fn(u32) + Send + Sync + 'static) {
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for pid in s.pids.drain(..) {
            to(pid);
        }
        s.to = Some(Arc::new(to));
    }
}

/// The sandbox being built on its own thread while the Gate decides. Whichever way the run
/// ends (an early error included), the thread is joined and an unused sandbox is torn
/// down before the run's registration and proxy go away.
pub(crate) struct Preparing {
    thread: Option<std::thread::JoinHandle<anyhow::Result<PreparedRun>>>,
    /// The thread's result, once [`Preparing::is_alive`] found the thread done.
    done: Option<anyhow::Result<PreparedRun>>,
    started: Arc<Started>,
}

/// Whether the sandbox's helper process was started (or the attempt is over).
#[derive(Default)]
struct Started {
    done: Mutex<bool>,
    changed: std::sync::Condvar,
}

impl Started {
    fn set(&self) {
        *self.done.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.changed.notify_all();
    }

    fn wait(&self) {
        let mut done = self.done.lock().unwrap_or_else(|p| p.into_inner());
        while !*done {
            done = self.changed.wait(done).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Marks [`Started`] when dropped: the thread's attempt is over, however it ended.
struct StartedOnExit(Arc<Started>);

impl Drop for StartedOnExit {
    fn drop(&mut self) {
        self.0.set();
    }
}

impl Preparing {
    /// Build the run's sandbox on its own thread: `pooled` (a sandbox built ahead, see
    /// `crate::host::pool`) given the run's parts, or one built from nothing when there is
    /// none or it turns out not to fit (another base, or it died since it was taken).
    fn start(
        profile: &SandboxProfile,
        cwd: &std::path::Path,
        output: OutputMode,
        hook: impl Fn(u32) + Send + Sync + 'static,
        pooled: Option<(
            airlock_sandbox::PooledSandbox,
            Arc<crate::host::pool::SandboxPool>,
        )>,
    ) -> std::io::Result<Preparing> {
        let (profile, cwd) = (profile.clone(), cwd.display().to_string());
        let started = Arc::new(Started::default());
        let on_exit = StartedOnExit(started.clone());
        let hook = Arc::new(hook);
        let thread = std::thread::Builder::new()
            .name("airlock-sandbox-prepare".into())
            .spawn({
                let started = started.clone();
                move || -> anyhow::Result<PreparedRun> {
                    let _on_exit = on_exit;
                    let spawned = move |pid: u32| {
                        hook(pid);
                        started.set();
                    };
                    if let Some((pooled, pool)) = pooled {
                        match pooled.attach(&profile, &cwd, output.clone(), &spawned) {
                            Ok(prepared) => return Ok(prepared),
                            Err(e @ airlock_sandbox::SandboxError::PoolMismatch(_)) => {
                                tracing::warn!(error = %e, "the pooled sandbox does not fit the run; building one for it");
                                pool.mismatched();
                            }
                            Err(e @ airlock_sandbox::SandboxError::Protocol(_)) => {
                                tracing::warn!(error = %e, "the pooled sandbox could not take the run; building one for it");
                            }
                            Err(e) => return Err(e.into()),
                        }
                    }
                    let sandbox = crate::sandbox_helper::locate()?.on_spawn(spawned);
                    Ok(sandbox.prepare(&profile, &cwd, output)?)
                }
            })?;
        Ok(Preparing {
            thread: Some(thread),
            done: None,
            started,
        })
    }

    /// Wait until the helper process was started (or could not be). Starting it is the
    /// step of the sandbox's build that suffers most from sharing the CPU: a process
    /// created while both cores are busy can wait a whole time slice for one.
    fn wait_started(&self) {
        self.started.wait();
    }

    /// Wait for the sandbox. A thread that panicked is an error, never a run.
    fn finish(&mut self) -> anyhow::Result<PreparedRun> {
        if let Some(done) = self.done.take() {
            return done;
        }
        self.thread
            .take()
            .ok_or_else(|| anyhow::anyhow!("the sandbox was already taken"))?
            .join()
            .map_err(|_| anyhow::anyhow!("building the sandbox failed unexpectedly"))?
    }

    /// Whether the sandbox is still being prepared, or was and still waits for its
    /// command. A sandbox whose preparation failed, or which died since, is not.
    fn is_alive(&mut self) -> bool {
        if self.thread.as_ref().is_some_and(|t| t.is_finished()) {
            self.done = Some(self.finish());
        }
        match &self.done {
            None => self.thread.is_some(),
            Some(Ok(prepared)) => prepared.is_alive(),
            Some(Err(_)) => false,
        }
    }
}

impl Drop for Preparing {
    fn drop(&mut self) {
        drop(self.finish());
    }
}

/// The sandbox profile for a command in `workspace`, run from `cwd`, under the operator's
/// `[sandbox]` and `[policy]` settings. Every sandboxed run of the binary gets its profile
/// here, so every one carries the operator's config and state dirs, which the sandbox
/// refuses as (or around) a workspace.
pub(crate) fn sandbox_profile(
    home: &Home,
    cfg: &config::Config,
    workspace: PathBuf,
    cwd: PathBuf,
    timeout_secs: u64,
) -> SandboxProfile {
    let mut profile = SandboxProfile::new(workspace);
    profile.operator_dirs = home.operator_dirs();
    profile.cwd = Some(cwd);
    profile.sandbox_uid = cfg.sandbox.uid;
    profile.sandbox_gid = cfg.sandbox.uid;
    profile.timeout_secs = timeout_secs;
    profile.output_cap_bytes = cfg.sandbox.output_cap_bytes;
    profile.weakened = cfg.sandbox.weakened;
    profile
        .protected_paths
        .extend(cfg.policy.protected_paths.iter().map(PathBuf::from));
    profile
}

/// Register the run in its run dir for the kill switch. A session killed before this
/// point (the kill found no run dir yet) is seen here, through the store.
pub(crate) fn register_run(
    egress: &Egress,
    store: &SqliteStore,
    id: &str,
) -> anyhow::Result<RunGuard> {
    let dir = egress
        .socket_path()
        .parent()
        .ok_or_else(|| anyhow::anyhow!("the proxy socket has no run dir"))?;
    let guard = RunGuard::register(dir)
        .map_err(|e| anyhow::anyhow!("cannot register the run in {}: {e}", dir.display()))?;
    check_killed(&guard, store, id)?;
    Ok(guard)
}

/// Mark the run killed when the store says its session was (a kill that came before the
/// run dir existed).
fn check_killed(guard: &RunGuard, store: &SqliteStore, id: &str) -> anyhow::Result<()> {
    let record = store
        .get_session(id)
        .map_err(|e| anyhow::anyhow!("cannot read session `{id}`: {e}"))?;
    if record.status == SessionStatus::Killed {
        guard.mark_killed();
    }
    Ok(())
}

/// Record the run's session in `store`, working in the operator's `workspace`.
fn record_run_session(store: &SqliteStore, id: String, workspace: PathBuf) -> anyhow::Result<()> {
    let new = NewSession {
        id: Some(id),
        principal: "owner".into(),
        role: "owner".into(),
        // The run works in the operator's workspace; it needs no directory of its own.
        workspace: Some(workspace),
        // The operator typed the command; no agent is given the directory.
        agent_workspace: false,
    };
    store.create_session(&new, Timestamp::now()).map_err(|e| {
        anyhow::anyhow!(
            "cannot record session `{}`: {e}",
            new.id.as_deref().unwrap_or("")
        )
    })?;
    Ok(())
}

/// The store for runs' session records. Such a record lives no longer than the process
/// running it (`airlock exec`, or the host; it is how `airlock kill` finds the run, and a
/// host that starts after a crash finds the run interrupted), so its commits need not each
/// wait for the disk: see [`SyncMode::ProcessLifetime`].
pub fn open_run_store(home: &Home) -> anyhow::Result<SqliteStore> {
    let mut options = StoreOptions::new(&home.state);
    options.sync = SyncMode::ProcessLifetime;
    SqliteStore::open_with(options).map_err(|e| {
        anyhow::anyhow!(
            "cannot open the session database {}: {e}",
            home.state.join(airlock_store::DATABASE_FILE).display()
        )
    })
}

/// Mark the run's session finished (a killed one stays killed).
pub(crate) fn end_session(store: &SqliteStore, id: &str) {
    match store.finish_session(id, Timestamp::now()) {
        Err(e) if !matches!(e, airlock_store::StoreError::SessionKilled { .. }) => {
            eprintln!("airlock: warning: session `{id}` could not be marked finished: {e}");
        }
        _ => {}
    }
}

/// How a sandboxed run ended.
pub(crate) enum RunEnd {
    /// The operator killed the session (before or during the run).
    Killed,
    /// The command ran (its status may be a timeout's 137).
    Finished(Box<airlock_sandbox::RunOutcome>),
}

/// Run an authorized command and append its execution record (attestation, status).
/// `helper_home` is the home whose config and pin choose the sandbox helper (the demo's
/// own home, not the operator's).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_authorized(
    helper_home: (&crate::home::Home, &crate::config::Config),
    token: &Authorized<ExecAction>,
    profile: &SandboxProfile,
    session: &Session,
    log: &Mutex<airlock_audit::AuditLog>,
    egress: &Egress,
    guard: &RunGuard,
    mode: OutputMode,
) -> anyhow::Result<RunEnd> {
    let prepared = if guard.was_killed() {
        Err(anyhow::anyhow!("the session was killed"))
    } else {
        crate::sandbox_helper::locate_for(helper_home.0, helper_home.1).and_then(|s| {
            Ok(s.on_spawn(guard.spawn_hook())
                .prepare(profile, &token.action().cwd, mode)?)
        })
    };
    run_prepared(token, profile, prepared, session, log, egress, guard)
}

/// Run an authorized command in its prepared sandbox (built from `profile`) and append
/// its execution record (attestation, status). A failure to prepare is recorded as the
/// run's refusal; a kill, as its outcome.
pub(crate) fn run_prepared(
    token: &Authorized<ExecAction>,
    profile: &SandboxProfile,
    prepared: anyhow::Result<PreparedRun>,
    session: &Session,
    log: &Mutex<airlock_audit::AuditLog>,
    egress: &Egress,
    guard: &RunGuard,
) -> anyhow::Result<RunEnd> {
    let run = run_sandboxed(
        token,
        profile,
        prepared,
        session,
        egress,
        guard,
        &Notices::Stderr,
    );
    record_execution(token, session, log, run.detail);
    run.end
}

/// A sandboxed run that ended, with the detail of its execution record (not yet written).
pub(crate) struct SandboxedRun {
    pub detail: serde_json::Value,
    pub end: anyhow::Result<RunEnd>,
}

/// Run an authorized command in its prepared sandbox (built from `profile`) and describe
/// how it ended for its execution record, which the caller appends.
pub(crate) fn run_sandboxed(
    token: &Authorized<ExecAction>,
    profile: &SandboxProfile,
    prepared: anyhow::Result<PreparedRun>,
    session: &Session,
    egress: &Egress,
    guard: &RunGuard,
    notices: &Notices,
) -> SandboxedRun {
    let egress_detail = || {
        json!({"proxy": egress.proxy_url(), "socket": egress.socket_path(),
        "secrets": egress.secret_names(), "request_bytes": egress.egress_bytes(),
        "proxy_call": egress.call()})
    };
    if guard.was_killed() {
        drop(prepared);
        notices.line(&format!(
            "airlock: session {} was killed; the command did not run",
            session.id
        ));
        return SandboxedRun {
            detail: json!({"outcome": "killed", "ran": false, "egress": egress_detail()}),
            end: Ok(RunEnd::Killed),
        };
    }
    let outcome = prepared.and_then(|p| Ok(p.run(token)?));
    guard.run_ended();
    if guard.was_killed() {
        // The helper was SIGKILLed, so the launcher may report a broken protocol rather
        // than a status: the kill is the outcome either way.
        let status = outcome.as_ref().ok().map(|o| o.status);
        let by = guard.killed_by();
        notices.line(&format!(
            "airlock: session {} was killed by the {by}; its whole process tree was killed",
            session.id
        ));
        return SandboxedRun {
            detail: json!({"outcome": "killed", "killed_by": by, "status": status,
                "egress": egress_detail()}),
            end: Ok(RunEnd::Killed),
        };
    }
    match outcome {
        Ok(o) => {
            if o.timed_out {
                notices.line(&format!(
                    "airlock: timed out after {} s; the whole process tree was killed",
                    profile.timeout_secs
                ));
            }
            SandboxedRun {
                detail: json!({
                    "status": o.status, "timed_out": o.timed_out, "truncated": o.truncated,
                    "elapsed_ms": o.elapsed.as_millis() as u64, "attestation": o.attestation,
                    "weakened": profile.weakened.map(|w| w.name()), "egress": egress_detail(),
                }),
                end: Ok(RunEnd::Finished(Box::new(o))),
            }
        }
        Err(e) => SandboxedRun {
            detail: json!({"refused": e.to_string(), "egress": egress_detail()}),
            end: Err(anyhow::anyhow!("{e}")),
        },
    }
}

/// Append the execution record of an authorized command.
pub(crate) fn record_execution(
    token: &Authorized<ExecAction>,
    session: &Session,
    log: &Mutex<airlock_audit::AuditLog>,
    detail: serde_json::Value,
) {
    let who = match session.attribution() {
        Ok(who) => who,
        Err(e) => {
            eprintln!("airlock: warning: the execution record could not be written: {e}");
            return;
        }
    };
    let ev = AuditEvent::by("execution", &session.id, &who)
        .with_action(
            json!({"command": token.action().command}),
            token.action_hash().to_string(),
        )
        .with_detail(detail);
    if let Err(e) = lock(log).append(ev) {
        eprintln!("airlock: warning: the execution record could not be written: {e}");
    }
}

/// Ask on the caller's terminal. No terminal means no approver: deny.
fn prompt_on_terminal(
    caller: &Caller,
    command: &str,
    hash: &str,
    reasons: &[String],
) -> anyhow::Result<bool> {
    let say = &caller.notices;
    if !caller.stdin_is_terminal() {
        say.line(&format!(
            "airlock: this command needs approval ({}) and there is no terminal to ask on",
            escape_line(&reasons.join("; "))
        ));
        return Ok(false);
    }
    let mut text = String::from("airlock: approval needed\n");
    for r in reasons {
        text.push_str(&format!("  why:     {}\n", escape_line(r)));
    }
    // Escaped on one line: an ESC, CR or newline in the command cannot hide part of it.
    text.push_str(&format!("  command: {}\n", escape_line(command)));
    text.push_str(&format!("  payload: {}\n", escape_line(hash)));
    text.push_str("  run it? [y/N] ");
    say.write(&text);
    let line = caller.read_line()?.unwrap_or_default();
    Ok(matches!(line.trim(), "y" | "Y" | "yes"))
}
