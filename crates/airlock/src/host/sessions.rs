//! Chat sessions that live in the host (`airlock chat` through `airlock serve`).
//!
//! A session the host opens for a chat lives in the host's own process, not in its
//! client's: the conversation ([`Conversation`], the same code as embedded) stays open
//! when the client leaves. A client *attaches* to it with its standard streams (sent on
//! the exec socket, as for `exec`) and *detaches* with `/quit`, at the end of its input, or
//! by going away (Ctrl-C, a closed terminal, a dropped connection):
//!
//! - a turn in flight when its client leaves runs on to its end; what it says meanwhile is
//!   kept (bounded) and shown to the next client to attach ([`Attachable`]);
//! - an ask put to a client that left is withdrawn from that client, not denied: the
//!   request waits in the approvals queue for any client (`airlock approvals approve`, the
//!   next chat to attach) until it is answered or expires, and an answer releases the
//!   waiting call at once;
//! - `airlock chat --session ID` attaches to the live session again; one client at a time
//!   (a second is refused while the first is attached);
//! - a session that no client has attached to, and that runs no turn, for
//!   `[host] session_idle_secs` is closed (it stays in the store; `--session` opens it
//!   again). Each live session holds one of `[host] max_sessions` places until then;
//! - `airlock kill` of a live session (or `--all`) ends it: its turn stops as a killed
//!   turn does, its client is told and let go, and the host closes it;
//! - a stopping host lets its clients go (telling them how to continue), lets the turns in
//!   flight finish, and closes every session;
//! - the web page *watches* a live session ([`LiveSessions::watch`]: what it said lately,
//!   then what it says as it says it), attached client or not, and sends it its next
//!   message ([`LiveSessions::say`]) only while no client is attached: the attached
//!   terminal owns the session's input. A session never runs two turns at once: a message
//!   sent while a turn runs is refused, saying so.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::exec::{finish, refuse, while_connected, SessionSlot};
use super::exec_wire::AgentRequest;
use super::Host;
use crate::agent_host::{AgentHost, HostOptions};
use crate::service::caller::{Attachable, ClientLines, HangUp, Line, Notices};
use crate::service::conversation::{
    said, AfterTurn, Conversation, Said, CHANNEL, EXIT_KILLED, HELP,
};

/// How often the host looks for sessions idle past their limit.
pub const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// One live session, as `airlock status` shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LiveSessionStatus {
    pub id: String,
    /// A client is attached now.
    pub attached: bool,
    /// A turn is running.
    pub busy: bool,
    /// Seconds since a client was last attached or a turn last ran (0 while either is).
    pub idle_secs: u64,
}

/// The host's live sessions.
pub struct LiveSessions {
    live: Mutex<HashMap<String, Arc<LiveSession>>>,
    /// Held while a session is opened, so that two clients resuming the same stored
    /// session get one live session between them.
    opening: Mutex<()>,
    idle_limit: Duration,
    next_attachment: AtomicU64,
}

/// A chat session in the host.
pub struct LiveSession {
    pub id: String,
    model: String,
    workspace: std::path::PathBuf,
    /// Open only while a turn runs (see [`Held`]).
    conversation: Mutex<Held>,
    reopen: Reopen,
    out: Arc<Attachable>,
    err: Arc<Attachable>,
    /// The attached client: its attachment number and its hang-up switch.
    attached: Mutex<Option<(u64, Arc<HangUp>)>>,
    busy: AtomicBool,
    killed: AtomicBool,
    idle_since: Mutex<Instant>,
    /// The session's place under `[host] max_sessions`, freed when it is closed.
    _slot: SessionSlot,
    /// The session held as this chat's while it lives (no run drives it meanwhile).
    _claim: crate::service::driven::Claim,
}

/// A live session's conversation. It is open (its store connections, audit handles,
/// compiled policy and runtime) only while a turn runs: between turns it sleeps, and the
/// next turn opens it again from the store, as `--session` would, with the config then
/// in force. So a session waiting for its person costs the host a few kilobytes, not a
/// loop's worth of resources, and a hundred idle ones fit in a small host.
enum Held {
    Awake(Box<Conversation>),
    Asleep,
    Closed,
}

/// What opening the session again needs: the model its first client chose, and that
/// client's options.
struct Reopen {
    provider_cfg: airlock_agent::provider::ProviderConfig,
    approval_timeout: Option<u64>,
    profile: Option<String>,
    egress: crate::agent_executors::EgressExtras,
}

impl Reopen {
    fn options(
        &self,
        session: Option<String>,
        workspace: Option<std::path::PathBuf>,
        out: &Arc<Attachable>,
        err: &Arc<Attachable>,
        audit: Arc<Mutex<airlock_audit::AuditLog>>,
    ) -> HostOptions {
        HostOptions {
            session,
            approval_timeout: self.approval_timeout,
            profile: self.profile.clone(),
            channel: CHANNEL.into(),
            messages_to: Some(Notices::Attachable(out.clone())),
            notices: Notices::Attachable(err.clone()),
            workspace,
            egress: self.egress.clone(),
            child: None,
            audit: Some(audit),
        }
    }
}

impl LiveSession {
    /// The conversation for a turn: open already, or opened again now; `None` once the
    /// session was closed.
    fn wake<'a>(
        &self,
        host: &Host,
        held: &'a mut Held,
    ) -> anyhow::Result<Option<&'a mut Conversation>> {
        if let Held::Asleep = held {
            let cfg = (*host.warm.current_config()).clone();
            let audit = host.audit.log(&cfg)?;
            let agent = AgentHost::open(
                host.home.clone(),
                cfg,
                &self.reopen.provider_cfg,
                self.reopen
                    .options(Some(self.id.clone()), None, &self.out, &self.err, audit),
            )?
            // A stopping host past its grace ends the turn as a kill would.
            .abandoned_when(host.turns.flag());
            *held = Held::Awake(Box::new(Conversation::new(
                agent,
                &self.model,
                Notices::Attachable(self.out.clone()),
            )));
        }
        Ok(match held {
            Held::Awake(c) => Some(c),
            Held::Asleep | Held::Closed => None,
        })
    }

    /// Put an open conversation to sleep (its records flushed).
    fn doze(&self, held: &mut Held) {
        if let Held::Awake(_) = held {
            if let Held::Awake(c) = std::mem::replace(held, Held::Asleep) {
                if let Err(e) = c.close() {
                    tracing::error!(session = %self.id, error = %format!("{e:#}"), "closing a session's turn");
                }
            }
        }
    }

    fn say(&self, text: &str) {
        Notices::Attachable(self.out.clone()).line(text);
    }

    /// Let client `me` go, if it is still the one attached (a client that attached after
    /// it keeps the session's streams).
    fn let_go(&self, me: u64) {
        let mut attached = self.attached.lock().unwrap_or_else(|p| p.into_inner());
        if attached.as_ref().is_some_and(|(id, _)| *id == me) {
            *attached = None;
            self.out.detach();
            self.err.detach();
            *self.idle_since.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        }
    }

    /// Tell the attached client `text` and let it go.
    fn send_away(&self, text: &str) {
        let attached = self.attached.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, hang_up)) = &*attached {
            self.say(text);
            hang_up.fire();
        }
    }

    fn is_attached(&self) -> bool {
        self.attached
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    fn idle_for(&self, now: Instant) -> Option<Duration> {
        let attached = self.attached.lock().unwrap_or_else(|p| p.into_inner());
        if attached.is_some() || self.busy.load(Ordering::Acquire) {
            return None;
        }
        Some(
            now.saturating_duration_since(
                *self.idle_since.lock().unwrap_or_else(|p| p.into_inner()),
            ),
        )
    }

    /// Close the session for good (an open conversation's records flushed), once.
    fn close(&self) {
        let mut held = self.conversation.lock().unwrap_or_else(|p| p.into_inner());
        if !matches!(*held, Held::Closed) {
            self.doze(&mut held);
            *held = Held::Closed;
            tracing::info!(session = %self.id, "closed a live session");
        }
    }
}

impl LiveSessions {
    pub fn new(idle_limit: Duration) -> LiveSessions {
        LiveSessions {
            live: Mutex::new(HashMap::new()),
            opening: Mutex::new(()),
            idle_limit,
            next_attachment: AtomicU64::new(1),
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<LiveSession>>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn status(&self) -> Vec<LiveSessionStatus> {
        let now = Instant::now();
        let mut out: Vec<_> = self
            .map()
            .values()
            .map(|s| {
                let attached = s
                    .attached
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .is_some();
                LiveSessionStatus {
                    id: s.id.clone(),
                    attached,
                    busy: s.busy.load(Ordering::Acquire),
                    idle_secs: s.idle_for(now).map_or(0, |d| d.as_secs()),
                }
            })
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out
    }

    /// Attach `client` to live session `id`: its number, or `Err` when another client is
    /// attached. `None` when no such session lives here.
    fn attach(&self, id: &str, client: &Client) -> Option<Result<(Arc<LiveSession>, u64), String>> {
        self.attach_in(self.map(), id, client)
    }

    /// Add the session just opened, with `client` attached to it (in one step: the
    /// sweeper never sees it unattached).
    fn add_attached(&self, session: Arc<LiveSession>, client: &Client) -> (Arc<LiveSession>, u64) {
        let id = session.id.clone();
        let mut map = self.map();
        map.insert(id.clone(), session.clone());
        match self.attach_in(map, &id, client) {
            Some(Ok(attached)) => attached,
            // Nobody else can have it yet.
            _ => (session, 0),
        }
    }

    fn attach_in(
        &self,
        map: std::sync::MutexGuard<'_, HashMap<String, Arc<LiveSession>>>,
        id: &str,
        client: &Client,
    ) -> Option<Result<(Arc<LiveSession>, u64), String>> {
        let session = map.get(id)?.clone();
        let mut attached = session.attached.lock().unwrap_or_else(|p| p.into_inner());
        if attached.is_some() {
            return Some(Err(format!(
                "session {id} is attached to another client\nhelp: leave it there (/quit) first; it goes on in the host either way"
            )));
        }
        let me = self.next_attachment.fetch_add(1, Ordering::Relaxed);
        *attached = Some((me, client.hang_up.clone()));
        // What the session said while nobody was attached comes first.
        let earlier_out = session.out.attach(client.stdout.clone());
        let earlier_err = session.err.attach(client.stderr.clone());
        drop(attached);
        drop(map);
        use std::io::Write;
        let _ = (&*client.stderr).write_all(earlier_err.as_bytes());
        let _ = (&*client.stdout).write_all(earlier_out.as_bytes());
        Some(Ok((session, me)))
    }

    /// Close the sessions no client has used for the idle limit (every unused one with
    /// `all`, as a stopping host does).
    pub fn close_idle(&self, all: bool) {
        let now = Instant::now();
        let closing: Vec<Arc<LiveSession>> = {
            let mut map = self.map();
            let ids: Vec<String> = map
                .values()
                .filter(|s| s.idle_for(now).is_some_and(|d| all || d >= self.idle_limit))
                .map(|s| s.id.clone())
                .collect();
            ids.iter().filter_map(|id| map.remove(id)).collect()
        };
        for s in closing {
            s.close();
        }
    }

    /// Close live session `id` now if no client is attached to it and no turn runs in it
    /// (a chat channel's turn of the same session needs it: the chat sleeps between
    /// turns, and `--session` opens it again later). Whether it is no longer live.
    pub fn close_if_idle(&self, id: &str) -> bool {
        // No client attaches while this looks.
        let _opening = self.opening.lock().unwrap_or_else(|p| p.into_inner());
        let closing = {
            let mut map = self.map();
            match map.get(id) {
                None => return true,
                Some(s) if s.idle_for(Instant::now()).is_some() => map.remove(id),
                Some(_) => return false,
            }
        };
        if let Some(s) = closing {
            s.close();
        }
        true
    }

    /// The host is stopping: every client is let go, told how to continue.
    pub fn send_everyone_away(&self) {
        let sessions: Vec<_> = self.map().values().cloned().collect();
        for s in sessions {
            s.send_away(&format!(
                "\nthe host is stopping; session {0} is kept: continue it with `airlock chat --session {0}`",
                s.id
            ));
        }
    }

    /// `airlock kill` marked these sessions killed: end the live ones. A turn in flight
    /// stops as a killed turn does; its client is told and let go.
    pub fn killed(&self, ids: &[String]) {
        for id in ids {
            let Some(s) = self.map().get(id).cloned() else {
                continue;
            };
            s.killed.store(true, Ordering::Release);
            s.send_away(&format!("\nsession {id} was killed"));
        }
        // Those that run no turn close now; one in flight closes when its turn ends.
        let now = Instant::now();
        let closing: Vec<_> = {
            let mut map = self.map();
            let unused: Vec<&String> = ids
                .iter()
                .filter(|id| {
                    map.get(*id).is_some_and(|s| {
                        s.killed.load(Ordering::Acquire) && s.idle_for(now).is_some()
                    })
                })
                .collect();
            unused.into_iter().filter_map(|id| map.remove(id)).collect()
        };
        for s in closing {
            s.close();
        }
    }

    /// Watch live session `id`'s output (its stdout side, where the conversation
    /// speaks): what it said lately, then each piece as it comes. `None` when it does not
    /// live here.
    pub fn watch(&self, id: &str) -> Option<(String, tokio::sync::broadcast::Receiver<String>)> {
        let session = self.map().get(id).cloned()?;
        Some(session.out.watch())
    }

    /// Run `text` as the next turn of live session `id`, for the web page, in a thread of
    /// its own; `Ok` once the turn has started. Refused (with what to do) when the session
    /// does not live here, was killed, has a client attached, or runs a turn already.
    /// Nobody answers its approvals inline: what it holds waits in the approvals queue.
    pub fn say(&self, host: &Arc<Host>, id: &str, text: &str) -> Result<(), String> {
        let text = text.trim().to_string();
        if text.is_empty() {
            return Err("the message is empty".into());
        }
        let Some(session) = self.map().get(id).cloned() else {
            return Err(format!(
                "session {id} is not live in the host\nhelp: send it a message as a new run (the form on its page when it is not live)"
            ));
        };
        if session.killed.load(Ordering::Acquire) {
            return Err(format!("session {id} was killed"));
        }
        // An attached terminal holds the input, whether or not its turn is still running.
        if session.is_attached() {
            return Err(held_by_terminal(id));
        }
        let (started_tx, started) = std::sync::mpsc::channel::<Result<(), String>>();
        let host = host.clone();
        let spawned = std::thread::Builder::new()
            .name("web-turn".into())
            .spawn(move || {
                let held = match session.conversation.try_lock() {
                    Ok(held) => held,
                    Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                    Err(std::sync::TryLockError::WouldBlock) => {
                        let _ = started_tx.send(Err(format!(
                            "a turn is running in session {}: it takes one message at a time\nhelp: send this one when the turn has ended",
                            session.id
                        )));
                        return;
                    }
                };
                // Checked under the conversation's lock: a client that attaches now waits
                // for this turn before its own.
                if session.is_attached() {
                    let _ = started_tx.send(Err(held_by_terminal(&session.id)));
                    return;
                }
                session.busy.store(true, Ordering::Release);
                let _ = started_tx.send(Ok(()));
                web_turn(&host, &session, held, &text);
            });
        if let Err(e) = spawned {
            return Err(format!("cannot start the turn: {e}"));
        }
        started
            .recv()
            .unwrap_or_else(|_| Err("the turn could not start".into()))
    }

    fn forget(&self, session: &LiveSession) {
        if let Some(s) = self.map().remove(&session.id) {
            s.close();
        }
    }
}

/// Why the page cannot send session `id` a message while a terminal is attached.
fn held_by_terminal(id: &str) -> String {
    format!(
        "session {id} is attached to a terminal (`airlock chat`), which holds its input\nhelp: type the message there, or leave it there (/quit) and send it from here; the page shows the session either way"
    )
}

/// A client's side of an attachment: its streams and its hang-up switch.
struct Client {
    stdout: Arc<File>,
    stderr: Arc<File>,
    hang_up: Arc<HangUp>,
}

/// Serve `airlock chat` through the host: attach the client to its live session, or open
/// one (new, or resumed from the store) under the session limit.
pub fn serve_chat(host: &Host, req: &AgentRequest, fds: [OwnedFd; 3], stream: &UnixStream) {
    let [stdin, stdout, stderr] = fds;
    let client = match HangUp::new() {
        Ok(hang_up) => Client {
            stdout: Arc::new(File::from(stdout)),
            stderr: Arc::new(File::from(stderr)),
            hang_up,
        },
        Err(e) => return finish(stream, Err(e.into())),
    };
    let attached = {
        let _opening = host.live.opening.lock().unwrap_or_else(|p| p.into_inner());
        let found = req
            .session
            .as_deref()
            .and_then(|id| host.live.attach(id, &client));
        match found {
            Some(found) => found.map(|s| (s, "attached to")),
            None => {
                let Some(slot) = host.sessions.enter() else {
                    refuse(
                        stream,
                        format!(
                            "too many sessions: {} are open (host.max_sessions = {})",
                            host.sessions.running(),
                            host.sessions.max
                        ),
                        "try again when a session has ended (`airlock status` lists the live ones), or raise the limit in [host] of airlock.toml",
                        Some("host.max_sessions"),
                    );
                    return;
                };
                match open(host, req, slot) {
                    Ok(session) => {
                        let how = if req.session.is_some() {
                            "resumed"
                        } else {
                            "new"
                        };
                        Ok((host.live.add_attached(session, &client), how))
                    }
                    Err(e) => return finish(stream, Err(e)),
                }
            }
        }
    };
    let (session, me, how) = match attached {
        Ok(((session, me), how)) => (session, me, how),
        Err(e) => return finish(stream, Err(anyhow::anyhow!(e))),
    };
    tracing::info!(session = %session.id, how, "a chat client attached");
    let lines = Arc::new(ClientLines::new(
        File::from(stdin),
        client.hang_up.clone(),
        Notices::Attachable(session.out.clone()),
    ));
    let result = while_connected(
        stream,
        || {
            client.hang_up.fire();
            session.let_go(me);
        },
        |_| converse(host, &session, me, how, &lines, &client.hang_up),
    );
    session.let_go(me);
    tracing::info!(session = %session.id, "a chat client left");
    finish(stream, result.map_err(anyhow::Error::from).and_then(|r| r));
}

/// Open a session for `req` in the host's process, speaking to nobody yet.
fn open(host: &Host, req: &AgentRequest, slot: SessionSlot) -> anyhow::Result<Arc<LiveSession>> {
    if req.prompt.is_some() {
        anyhow::bail!("a chat request takes no prompt");
    }
    if let Some(id) = &req.session {
        host.driven.check(id)?;
    }
    let super::run::ClientSetup {
        cfg,
        provider_cfg,
        egress,
    } = super::run::ClientSetup::of(host, req)?;
    // A session resumed is held before it is opened; a new one once it has its id.
    let claim = |id: &str| host.driven.claim(id, crate::service::driven::Driver::Chat);
    let mut hold = req.session.as_deref().map(claim).transpose()?;
    let out = Attachable::new();
    let err = Attachable::new();
    crate::agent_host::warn_if_cost_is_not_counted(
        &cfg,
        &provider_cfg.model,
        &Notices::Attachable(err.clone()),
    );
    let reopen = Reopen {
        provider_cfg,
        approval_timeout: req.approval_timeout,
        profile: req.profile.clone(),
        egress,
    };
    let audit = host.audit.log(&cfg)?;
    let agent = AgentHost::open(
        host.home.clone(),
        cfg,
        &reopen.provider_cfg,
        reopen.options(
            req.session.clone(),
            req.workspace.clone(),
            &out,
            &err,
            audit,
        ),
    )?;
    let (id, workspace) = (agent.session_id.clone(), agent.workspace.clone());
    let hold = match hold.take() {
        Some(h) => h,
        None => claim(&id)?,
    };
    // Opened to make (or find) the session in the store and check that it opens; each
    // turn opens it again.
    agent.close()?;
    Ok(Arc::new(LiveSession {
        id,
        model: reopen.provider_cfg.model.clone(),
        workspace,
        conversation: Mutex::new(Held::Asleep),
        reopen,
        out,
        err,
        attached: Mutex::new(None),
        busy: AtomicBool::new(false),
        killed: AtomicBool::new(false),
        idle_since: Mutex::new(Instant::now()),
        _slot: slot,
        _claim: hold,
    }))
}

/// A turn the web page sent: said on the session's output like a terminal's, its approvals
/// left in the queue (nobody answers inline), then the session is let sleep again.
fn web_turn(
    host: &Host,
    session: &Arc<LiveSession>,
    mut held: std::sync::MutexGuard<'_, Held>,
    text: &str,
) {
    session.say(&format!(
        "page> {}",
        airlock_core::terminal_text::escape_line(text)
    ));
    let after = match session.wake(host, &mut held) {
        Ok(Some(c)) => c.turn(&host.home, text, Arc::new(NobodyInline)),
        Ok(None) => {
            // Closed (idle, or the host stopping) just before this turn took it.
            session.say(&format!(
                "session {} was closed before this message ran; send it again from the session's page, or `airlock chat --session {}`",
                session.id, session.id
            ));
            Ok(AfterTurn::Goes(0))
        }
        Err(e) => Err(e.context("the session could not be opened for this turn")),
    };
    session.doze(&mut held);
    session.busy.store(false, Ordering::Release);
    *session.idle_since.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    drop(held);
    match after {
        Ok(AfterTurn::Goes(_)) => {}
        Ok(AfterTurn::Killed) => session.killed.store(true, Ordering::Release),
        Err(e) => {
            tracing::error!(session = %session.id, error = %format!("{e:#}"), "a turn sent from the web page");
            session.say(&format!("error: {e:#}"));
        }
    }
    // Killed during the turn (here or by `airlock kill`): it closes now that it ended.
    if session.killed.load(Ordering::Acquire) {
        host.live.forget(session);
    }
}

/// The input of a turn the web page sent: there is no one to type an inline answer, so an
/// approval is withdrawn to the queue (the page's approvals, `airlock approvals`).
struct NobodyInline;

impl crate::inline_approvals::Lines for NobodyInline {
    fn next_line_before(&self, _deadline: Option<Instant>) -> Line {
        Line::Gone
    }
}

/// The attached client's side of the conversation, until it leaves.
fn converse(
    host: &Host,
    session: &Arc<LiveSession>,
    me: u64,
    how: &str,
    lines: &Arc<ClientLines>,
    hang_up: &HangUp,
) -> anyhow::Result<i32> {
    let id = &session.id;
    session.say(&format!(
        "{how} session {id} with model {} (workspace {}) in the host",
        airlock_core::terminal_text::escape_line(&session.model),
        session.workspace.display()
    ));
    if session.busy.load(Ordering::Acquire) {
        session.say("a turn is running: its text follows here, and what it holds waits in `airlock approvals list`");
    }
    session.say(HELP);
    let mut code = 0;
    loop {
        if hang_up.fired() {
            break;
        }
        Notices::Attachable(session.out.clone()).write("you> ");
        let text = match lines.next_line_before(None) {
            Line::Text(l) => l,
            Line::End | Line::Gone | Line::TimedOut => break,
        };
        let text = match said(&text) {
            Said::Nothing => continue,
            Said::Leave => break,
            Said::Help => {
                session.say(HELP);
                continue;
            }
            Said::Prompt(t) => t.to_string(),
        };
        let mut held = session
            .conversation
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        session.busy.store(true, Ordering::Release);
        let after = match session.wake(host, &mut held) {
            Ok(Some(c)) => c.turn(&host.home, &text, lines.clone()),
            Ok(None) => {
                session.busy.store(false, Ordering::Release);
                break;
            }
            Err(e) => Err(e.context("the session could not be opened for this turn")),
        };
        session.doze(&mut held);
        session.busy.store(false, Ordering::Release);
        *session.idle_since.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        drop(held);
        match after? {
            AfterTurn::Goes(c) => code = c,
            AfterTurn::Killed => {
                session.killed.store(true, Ordering::Release);
                break;
            }
        }
    }
    if session.killed.load(Ordering::Acquire) {
        session.let_go(me);
        host.live.forget(session);
        return Ok(EXIT_KILLED);
    }
    if !hang_up.fired() {
        session.say(&format!(
            "detached: session {id} goes on in the host; attach to it again with `airlock chat --session {id}`"
        ));
    }
    Ok(code)
}
