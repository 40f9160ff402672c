//! The host's chat channels: it polls each configured platform (`crate::channels`), and
//! decides, for every message and button press, whether it counts.
//!
//! - **Who is the owner.** Only the platform user id bound by pairing: before pairing, a
//!   message is either the pending one-time code (which binds its sender) or dropped,
//!   wrong codes counted per sender and drops recorded a log of times
//!   (`channels::pairing`).
//! - **Admins and members** (`airlock channel members`): an admin's message is trusted
//!   input, as the owner's; a member's is untrusted content, which taints the chat's
//!   session like a fetched page, and the model is told who sent it.
//! - **Everyone else** is dropped (`unknown_senders = "drop"`), each drop recorded with
//!   who sent it and why (`channel-message-dropped`, as `system:channel`), or, with
//!   `unknown_senders = "untrusted"`, answered as a member is. Before pairing, everyone is
//!   dropped.
//! - **Each chat is a session** unless `sessions` says otherwise (`chat`: a thread
//!   shares its chat's; `channel`: one for all). The owner's message in a private chat
//!   (or, with a `group_trigger` or a mention, one of theirs in a group; the group's
//!   other talk is not for the assistant) is a turn of that chat's session (made at its
//!   first message and kept in the channel's state), run in the host's process like a
//!   chat through the host; the reply goes to the chat the message came from: what the
//!   turn said to its own channel and its final text. To a third party (any chat but the
//!   owner's own, and every webhook conversation) each reply is a `message.send` the
//!   Gate decides.
//! - **Floods.** Each sender in each chat may send `messages_per_minute` (default 20);
//!   the rest are dropped, their count recorded in a handful of records
//!   (`host::chat_limits`). Each session's turns wait in a short queue and run one at a
//!   time (a message that finds it full is dropped with a record), and at most
//!   [`MAX_CHAT_WORKERS`] sessions have a turn worker at once; an idle worker ends. So nothing a platform sends grows the host's
//!   memory or threads without bound.
//! - **Where a card goes.** To the owner's private chat with the assistant, whatever
//!   chat held the action: a member's or stranger's chat never sees a card (it is told
//!   that an action waits for the owner), and a group sees one only with
//!   `approve_in_groups`. A press counts only on the card's own message in the card's
//!   own chat: a press on an older card (a stale message) is refused.
//! - **Approvals in chat.** An ask of the turn becomes a card: what the action does
//!   (the same lines `airlock approvals show` gives), why it is held and the first
//!   characters of the payload hash, with Approve and Deny buttons whose data names the
//!   request and that hash. A press counts only when the presser's platform id is the
//!   owner's; anyone else's press is refused, told so, and recorded
//!   (`approval-press-refused`); a press on a card whose hash is not the request's is
//!   refused too. The answer is recorded as any inline answer is (`approval-granted` or
//!   `approval-denied`, via `telegram`). An unanswered card leaves the request in the
//!   queue, where any client may answer it.

use std::collections::HashMap;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender as MpscSender, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use airlock_agent::agent::TurnInput;
use airlock_channels::discord::Discord;
use airlock_channels::slack::Slack;
use airlock_channels::telegram::Telegram;
use airlock_channels::{Card, Channel, ChannelError, ChatId, Inbound, Sender};
use airlock_core::action::ChannelAdmitAction;
use airlock_core::gate::{AskTicket, Verdict};
use airlock_core::{Authorized, IntoAction, Principal};
use airlock_store::{ApprovalRequest, Timestamp};
use secrecy::SecretString;
use serde_json::json;

use super::chat_limits::{Admit, InboundLimiter, OutboundPacer};
use super::Host;
use crate::agent_host::{provider_config, AgentHost, HostOptions};
use crate::channels::{
    self, code_in, decisions, Judged, PairingTries, Refusal, Role, UnknownSenders, Unpaired,
};
use crate::home::Home;
use crate::inline_approvals::{describe, Answer, Approver, InlineApprovals};
use crate::service::caller::{Attachable, Notices};

/// The longest wait between two polls after failures.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How many characters of the payload hash a card shows and its buttons carry.
const HASH_SHOWN: usize = 12;
/// Messages of one chat waiting for its turn worker; one more is dropped with a record.
const CHAT_QUEUE: usize = 4;
/// Strangers the owner is being asked about at once, per channel.
const MAX_SENDER_ASKS: usize = 8;
/// How long the owner has to answer about a stranger.
const SENDER_ASK_SECS: u64 = 600;
/// How much of a stranger's message the owner's card shows.
const SENDER_PREVIEW: usize = 500;
/// The longest pause a platform's 429 is waited out before the send is given up.
const MAX_RATE_PAUSE: Duration = Duration::from_secs(30);
/// Chats with a turn worker (a thread) at once, per channel.
pub const MAX_CHAT_WORKERS: usize = 32;
/// A turn worker with nothing to do for this long ends (the next message starts one).
const WORKER_IDLE: Duration = Duration::from_secs(300);

/// The bot token stored as `secret`, if it is bound to `base_url`'s scheme, host and port:
/// the host sends it to no other place.
pub fn token_for(home: &Home, secret: &str, base_url: &str) -> anyhow::Result<SecretString> {
    let url = url::Url::parse(base_url)
        .map_err(|e| anyhow::anyhow!("the channel's base_url {base_url:?}: {e}"))?;
    let s = find_secret(home, secret)?.ok_or_else(|| {
        anyhow::anyhow!(
            "no stored secret `{secret}` holds the bot token\nhelp: printf %s \"$TOKEN\" | airlock secret set {secret} --host {}",
            url.host_str().unwrap_or("api.telegram.org")
        )
    })?;
    let host = url.host_str().unwrap_or("");
    let port = url.port_or_known_default().unwrap_or(443);
    anyhow::ensure!(
        s.bound_to(url.scheme(), host, port, "/"),
        "secret `{secret}` is bound to {}://{}:{}, not to the channel's {}://{host}:{port}\nhelp: store the token bound to the API's host, or set base_url to it",
        s.info.binding.scheme,
        s.info.binding.host,
        s.info.binding.port,
        url.scheme()
    );
    Ok(s.value)
}

fn find_secret(
    home: &Home,
    name: &str,
) -> anyhow::Result<Option<airlock_proxy::secrets::LoadedSecret>> {
    let all = airlock_proxy::SecretStore::new(&home.config)
        .load_all()
        .map_err(|e| anyhow::anyhow!("cannot read the secrets store: {e}"))?;
    Ok(all.into_iter().find(|s| s.info.name == name))
}

/// A webhook's signing key, stored as `name` (it signs; it is never sent).
pub fn secret_named(home: &Home, name: &str) -> anyhow::Result<SecretString> {
    find_secret(home, name)?.map(|s| s.value).ok_or_else(|| {
        anyhow::anyhow!(
            "no stored secret `{name}` holds the webhook's signing key\nhelp: head -c 32 /dev/urandom | base64 | airlock secret set {name} --host localhost"
        )
    })
}

/// Presses waiting for their card's request, by request id.
#[derive(Default)]
struct Presses(Mutex<HashMap<String, MpscSender<Press>>>);

#[derive(Debug, Clone)]
struct Press {
    press_id: String,
    chat: ChatId,
    message_id: String,
    from: Sender,
    data: String,
}

impl Presses {
    fn register(&self, request: &str) -> Receiver<Press> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(request.to_string(), tx);
        rx
    }

    fn forget(&self, request: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(request);
    }

    /// Hand `press` to the card it belongs to; `false` when none waits.
    fn route(&self, press: Press) -> bool {
        let Some(request) = press.data.split(':').nth(1).map(str::to_string) else {
            return false;
        };
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&request).is_some_and(|tx| tx.send(press).is_ok())
    }
}

/// What a message says, and whose words they are when the sender passed them on (see
/// [`Inbound::Message`]).
struct Words {
    text: String,
    passed_on_from: Option<String>,
}

/// A message the host takes, by whom it counts as.
enum Said {
    /// The owner's, or an admin's: trusted input.
    Trusted(String),
    /// A member's, or (with `unknown_senders = "untrusted"`) a stranger's: untrusted
    /// content that taints the chat's session.
    Untrusted { source: String, text: String },
}

/// A session's turn worker: its number and its queue.
#[derive(Clone)]
struct Worker {
    number: u64,
    tx: SyncSender<Queued>,
}

/// A message for a session's turn worker: the chat it came from, and whether that chat
/// is a private one.
struct Queued {
    chat: ChatId,
    /// The sender's platform user id.
    from: String,
    said: Said,
    private: bool,
}

/// One channel as the host runs it.
struct Running {
    host: Arc<Host>,
    name: &'static str,
    channel: Arc<dyn Channel>,
    rt: tokio::runtime::Handle,
    presses: Presses,
    kind: Kind,
    /// Each session's turn worker, by the session's key
    /// ([`channels::SessionScope::session_key`]), serving its queue one turn at a time:
    /// chats that share a session never run two turns of it at once.
    workers: Mutex<HashMap<String, Worker>>,
    /// Which chats share a session.
    sessions: channels::SessionScope,
    /// Spaces what the host sends to each chat.
    pacer: OutboundPacer,
    /// The strangers the owner is being asked about, by ticket.
    asking: Mutex<std::collections::HashSet<String>>,
    /// The next worker's number (to tell a worker from the one that took its place).
    next_worker: std::sync::atomic::AtomicU64,
    limiter: InboundLimiter,
    /// Tries at the pending pairing code, per sender (counted in memory: a wrong try
    /// writes neither the state nor a record of its own).
    pairing: Mutex<PairingTries>,
}

/// Who counts on a channel.
enum Kind {
    /// An owner bound by pairing; admins, members and strangers as configured.
    Paired {
        group_trigger: Option<String>,
        unknown_senders: UnknownSenders,
        approve_in_groups: bool,
    },
    /// Everything is untrusted content from the named sender; nobody approves through
    /// it, and each reply is a message to a third party that the Gate decides.
    Webhook,
}

/// The chat channels running in this host, by name, for what the host says on its own
/// (a scheduled task's result): only ever to the channel's paired owner chat.
#[derive(Default)]
pub struct Outbox {
    running: Mutex<HashMap<&'static str, std::sync::Weak<Running>>>,
}

impl Outbox {
    fn register(&self, running: &Arc<Running>) {
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(running.name, Arc::downgrade(running));
    }

    /// The running `channel` and the owner's chat on it; `chat`, when given, must be that
    /// chat (or a thread of it).
    fn owner_chat(
        &self,
        channel: &str,
        chat: Option<&str>,
    ) -> anyhow::Result<(Arc<Running>, ChatId, channels::ChannelState)> {
        let running = self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(channel)
            .and_then(std::sync::Weak::upgrade)
            .ok_or_else(|| {
                anyhow::anyhow!("the {channel} channel is not running in this host\nhelp: add it with `airlock channel add {channel}` and restart the host")
            })?;
        let state = channels::read_state(&running.host.home, running.name)?;
        let Some(own) = state.owner_chat.clone() else {
            anyhow::bail!("the {channel} channel has no paired owner chat\nhelp: pair it with `airlock channel pair {channel}`");
        };
        let to = ChatId(chat.unwrap_or(&own).to_string());
        if !is_owner_chat(&to, &state) {
            anyhow::bail!(
                "{channel}:{} is not the owner's chat; a task's result only goes to the owner",
                to.0
            );
        }
        Ok((running, to, state))
    }

    /// Send `text` to the owner's chat on `channel`; `chat`, when given, must be that chat
    /// (or a thread of it). The chat it went to (`telegram:<chat>`).
    pub fn send_to_owner(
        &self,
        channel: &str,
        chat: Option<&str>,
        text: &str,
    ) -> anyhow::Result<String> {
        let (running, to, _) = self.owner_chat(channel, chat)?;
        running
            .paced(&to, || running.channel.send(&to, text))
            .map_err(|e| anyhow::anyhow!("{channel}: {e}"))?;
        Ok(format!("{channel}:{}", to.0))
    }

    /// An approver that puts each held action to the owner as a card in their chat on
    /// `channel`, and takes only the owner's press (as a chat turn's cards do): how a
    /// scheduled run, which nobody watches, reaches its owner.
    pub fn owner_approver(
        &self,
        channel: &str,
        chat: Option<&str>,
    ) -> anyhow::Result<Box<dyn Approver>> {
        let (running, to, state) = self.owner_chat(channel, chat)?;
        Ok(Box::new(CardApprover {
            running,
            turn_chat: to.clone(),
            chat: Some(to),
            owner: state.owner,
        }))
    }
}

/// Start every configured channel (called once the host serves). A channel whose token
/// or config is wrong is logged and left out; the host runs without it.
pub fn start(host: &Arc<Host>) {
    let file = match channels::load_config(&host.home) {
        Ok(f) => f,
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "the channels file does not load; no channel runs");
            return;
        }
    };
    if let Some(w) = file.webhook.clone() {
        tokio::spawn(start_webhook(host.clone(), w));
    }
    for (kind, c) in file.chats() {
        start_chat(host, kind, c.clone());
    }
}

/// What one webhook sender may post in a minute.
const WEBHOOK_PER_MINUTE: u32 = 60;

async fn start_webhook(host: Arc<Host>, w: channels::WebhookConfig) {
    let set_up = async {
        let addr = w.listen_addr()?;
        let key = secret_named(&host.home, &w.secret)?;
        airlock_channels::webhook::Webhook::bind(
            addr,
            key,
            w.outbound_url.clone(),
            Duration::from_secs(25),
        )
        .await
        .map_err(anyhow::Error::from)
    };
    let hook = match set_up.await {
        Ok(h) => Arc::new(h),
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "the webhook channel does not run");
            return;
        }
    };
    tracing::info!(listen = %hook.local_addr(), "taking signed webhooks");
    let running = Arc::new(Running {
        host,
        name: "webhook",
        channel: hook.clone(),
        rt: tokio::runtime::Handle::current(),
        presses: Presses::default(),
        kind: Kind::Webhook,
        workers: Mutex::new(HashMap::new()),
        sessions: channels::SessionScope::Thread,
        next_worker: Default::default(),
        limiter: InboundLimiter::new(WEBHOOK_PER_MINUTE),
        // The operator's own endpoint: no pacing of ours.
        pacer: OutboundPacer::new(Duration::ZERO),
        asking: Default::default(),
        pairing: Default::default(),
    });
    poll(running, move |r| {
        // Only a log of each reason's refusals comes here (1st, 2nd, 4th …): anyone who
        // can reach the port can send unsigned posts, and a record is written and synced.
        for (why, count) in hook.take_rejected() {
            tracing::warn!(?why, count, "refused a webhook request");
            r.record(
                "channel-message-dropped",
                json!({"channel": "webhook", "reason": format!("{why:?}"), "count": count}),
            );
        }
    })
    .await;
}

/// Take `running`'s events until the host ends, backing off while the platform fails;
/// `after` runs after each batch, off the runtime's threads.
async fn poll(running: Arc<Running>, after: impl Fn(&Running) + Send + Sync + 'static) {
    let after = Arc::new(after);
    let mut backoff = Duration::from_secs(1);
    loop {
        match running.channel.next_events().await {
            Ok(events) => {
                backoff = Duration::from_secs(1);
                let r = running.clone();
                let after = after.clone();
                // Handling writes records and state: off the runtime's threads.
                let _ = tokio::task::spawn_blocking(move || {
                    for e in events {
                        r.handle(e);
                    }
                    after(&r);
                })
                .await;
            }
            Err(e) => {
                tracing::warn!(channel = running.name, error = %e, retry_in = ?backoff, "polling a channel");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// Roots the adapters trust beside the webpki ones: in debug builds, those of
/// `AIRLOCK_DEBUG_UPSTREAM_ROOTS` (tests stand a platform's fake up on loopback with a
/// test CA); none in a release build.
fn extra_roots() -> Vec<String> {
    match crate::agent_executors::debug_upstream_roots() {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "extra roots for the channels");
            Vec::new()
        }
    }
}

/// The adapter for a chat platform's section, with its tokens from the secrets store.
fn chat_adapter(
    home: &Home,
    kind: &'static str,
    c: &channels::ChatConfig,
) -> anyhow::Result<Arc<dyn Channel>> {
    let base = c.base_url(kind);
    let token = token_for(home, &c.token_secret, &base)?;
    let poll = Duration::from_secs(c.poll_secs);
    let roots = extra_roots();
    Ok(match kind {
        "telegram" => {
            let offset = channels::read_state(home, kind).ok().and_then(|s| s.offset);
            Arc::new(Telegram::new(&base, token, poll, offset, &roots)?)
        }
        "slack" => {
            let app = c
                .app_token_secret
                .as_deref()
                .ok_or_else(|| anyhow::anyhow!("[slack] app_token_secret is missing"))?;
            let app = token_for(home, app, &base)?;
            Arc::new(Slack::new(&base, app, token, &roots)?.with_poll(poll))
        }
        "discord" => Arc::new(Discord::new(&base, token, &roots)?.with_poll(poll)),
        other => anyhow::bail!("no chat platform `{other}`"),
    })
}

fn start_chat(host: &Arc<Host>, kind: &'static str, c: channels::ChatConfig) {
    let adapter = match chat_adapter(&host.home, kind, &c) {
        Ok(a) => a,
        Err(e) => {
            tracing::error!(channel = kind, error = %format!("{e:#}"), "the channel does not run");
            return;
        }
    };
    let running = Arc::new(Running {
        host: host.clone(),
        name: kind,
        channel: adapter.clone(),
        rt: tokio::runtime::Handle::current(),
        presses: Presses::default(),
        kind: Kind::Paired {
            group_trigger: c.group_trigger.clone(),
            unknown_senders: c.unknown_senders,
            approve_in_groups: c.approve_in_groups,
        },
        workers: Mutex::new(HashMap::new()),
        sessions: c.sessions,
        next_worker: Default::default(),
        limiter: InboundLimiter::new(c.messages_per_minute),
        pacer: OutboundPacer::new(Duration::from_millis(c.send_interval_ms)),
        asking: Default::default(),
        pairing: Default::default(),
    });
    host.outbox.register(&running);
    tracing::info!(channel = kind, base_url = %c.base_url(kind), "listening");
    tokio::spawn(poll(running, move |r| {
        // Where Telegram's update stream stopped, kept for the next host (the socket
        // platforms have nothing to keep: they redeliver or replay on their own).
        let Some(offset) = adapter.resume_offset() else {
            return;
        };
        if let Err(e) = channels::update_state(&r.host.home, r.name, |s| {
            s.offset = Some(offset);
            Ok(())
        }) {
            tracing::error!(error = %format!("{e:#}"), "keeping the channel's offset");
        }
    }));
}

impl Running {
    fn record(&self, kind: &str, detail: serde_json::Value) {
        let cfg = self.host.warm.current_config();
        if let Err(e) = self.host.audit.record_system(&cfg, "channel", kind, detail) {
            tracing::error!(error = %format!("{e:#}"), kind, "a channel record failed");
        }
    }

    fn say(&self, chat: &ChatId, text: &str) {
        if let Err(e) = self.paced(chat, || self.channel.send(chat, text)) {
            tracing::warn!(error = %e, "sending to a chat");
        }
    }

    /// Send to `chat` through `op` in the chat's next slot, and again (twice at most)
    /// after the pause the platform asks for when it answers 429.
    fn paced<T, F, Fut>(&self, chat: &ChatId, op: F) -> Result<T, ChannelError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, ChannelError>>,
    {
        let mut tries = 0;
        loop {
            let wait = self.pacer.reserve(&chat.0, Instant::now());
            if !wait.is_zero() {
                std::thread::sleep(wait);
            }
            match self.rt.block_on(op()) {
                Err(ChannelError::RateLimited { retry_after, .. }) if tries < 2 => {
                    tries += 1;
                    let pause = retry_after
                        .unwrap_or(Duration::from_secs(1))
                        .min(MAX_RATE_PAUSE);
                    tracing::info!(
                        channel = self.name,
                        ?pause,
                        "the platform asked for a pause"
                    );
                    self.pacer.hold_until(&chat.0, Instant::now() + pause);
                }
                other => return other,
            }
        }
    }

    fn handle(self: &Arc<Self>, event: Inbound) {
        match event {
            Inbound::Message {
                chat,
                private,
                from,
                text,
                passed_on_from,
            } => self.message(chat, private, from, text, passed_on_from),
            Inbound::Press {
                press_id,
                chat,
                message_id,
                from,
                data,
            } => {
                let press = Press {
                    press_id: press_id.clone(),
                    chat,
                    message_id,
                    from,
                    data,
                };
                if !self.presses.route(press) {
                    let _ = self.rt.block_on(
                        self.channel
                            .answer_press(&press_id, "this request is no longer waiting"),
                    );
                }
            }
        }
    }

    fn drop_message(&self, chat: &ChatId, from: &Sender, reason: &str) {
        tracing::info!(channel = self.name, from = %from.id, reason, "dropped a message");
        self.record(
            "channel-message-dropped",
            json!({"channel": self.name, "chat": chat.0, "from": from.id, "reason": reason}),
        );
    }

    fn message(
        self: &Arc<Self>,
        chat: ChatId,
        private: bool,
        from: Sender,
        text: String,
        passed_on_from: Option<String>,
    ) {
        let (group_trigger, unknown_senders) = match &self.kind {
            Kind::Paired {
                group_trigger,
                unknown_senders,
                ..
            } => (group_trigger, *unknown_senders),
            // A webhook's post is an event from its sender, never an order.
            Kind::Webhook => {
                if !self.admitted(&chat, &from) {
                    return;
                }
                let said = Said::Untrusted {
                    source: format!("{}:{}", self.name, from.id),
                    text,
                };
                return self.queue(chat, private, &from.id, said);
            }
        };
        // In a group, only what mentions the bot or starts with the trigger is for the
        // assistant; the rest is the group's own talk, neither served nor a drop.
        let text = if private {
            text
        } else {
            let mentions = self.channel.mention_forms();
            match channels::addressed(&text, group_trigger.as_deref(), &mentions) {
                Some(t) => t,
                None => return,
            }
        };
        // The owner's kill switch works from any chat they write in, before the rate
        // limit and before anything is decided or queued: stopping must always be
        // possible, even while the chat's own turn is under way. Only their own words
        // are a command: a forwarded "/kill" is someone else's.
        if let Some(target) = kill_command(&text).filter(|_| passed_on_from.is_none()) {
            let is_owner = channels::read_state(&self.host.home, self.name)
                .is_ok_and(|s| s.owner.as_deref() == Some(from.id.as_str()));
            if is_owner {
                return self.kill_switch(&chat, &from, target);
            }
        }
        if !self.admitted(&chat, &from) {
            return;
        }
        let state = match channels::read_state(&self.host.home, self.name) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "reading the channel's state");
                return;
            }
        };
        let Some(owner) = state.owner.as_deref() else {
            // Before pairing there is nobody to answer to: the code, or a drop.
            if private && passed_on_from.is_none() {
                if let Some(code) = code_in(&text) {
                    return self.pair(&chat, &from, code, &state);
                }
            }
            let now = crate::runtime::now_unix();
            let refused = self
                .pairing
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .not_a_code(&state, now);
            return self.refuse_unpaired(&chat, &from, refused);
        };
        if from.id == owner && private && !is_owner_chat(&chat, &state) {
            // The owner wrote privately from a chat the host did not know as theirs (on
            // Slack and Discord a private chat has an id of its own): cards go there now.
            if let Err(e) = channels::update_state(&self.host.home, self.name, |s| {
                if s.owner.as_deref() == Some(from.id.as_str()) {
                    s.owner_chat = Some(chat.0.clone());
                }
                Ok(())
            }) {
                tracing::error!(error = %format!("{e:#}"), "keeping the owner's chat");
            }
        }
        let role = if from.id == owner {
            "owner"
        } else {
            match state.members.get(&from.id) {
                Some(Role::Admin) => "admin",
                Some(Role::Member) => "member",
                None => "unknown",
            }
        };
        let action = ChannelAdmitAction {
            channel: self.name.into(),
            chat: chat.0.clone(),
            sender: from.id.clone(),
            role: role.into(),
            private,
            unknown_senders: unknown_senders.as_str().into(),
        };
        match self.decide(action) {
            Ok(Verdict::Allow(token)) => self.admit(
                chat,
                private,
                &from,
                Words {
                    text,
                    passed_on_from,
                },
                token,
            ),
            Ok(Verdict::Ask(ticket)) => {
                let words = Words {
                    text,
                    passed_on_from,
                };
                self.ask_about_sender(chat, private, from, words, &state, ticket)
            }
            // The decision record is the drop's record.
            Ok(Verdict::Deny(d)) => tracing::info!(
                channel = self.name,
                from = %from.id,
                reasons = %decisions::refusal_text(&d.reasons),
                "the Gate refused a message"
            ),
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "deciding on a message; it is dropped")
            }
        }
    }

    /// `/kill` (everything: every session, every task paused, every standing grant
    /// revoked, as `airlock kill --all`) or `/kill <session>`, from the owner; the owner
    /// is told what was stopped. Recorded by the kill itself, as the owner via this
    /// channel.
    fn kill_switch(&self, chat: &ChatId, from: &Sender, target: KillTarget) {
        let input = match &target {
            KillTarget::All => crate::service::kill::KillInput {
                session: None,
                all: true,
            },
            KillTarget::Session(id) => crate::service::kill::KillInput {
                session: Some(id.clone()),
                all: false,
            },
        };
        tracing::warn!(channel = self.name, ?target, "chat: kill switch");
        let who = crate::service::decider::Decider::chat(self.name, &from.id);
        let said = match self.host.kill(&input, &who) {
            Ok(r) => {
                let mut m = String::new();
                if let Some(n) = r.tasks_paused {
                    m.push_str(&format!(
                        "Stopped everything: {n} task(s) paused until you resume them, "
                    ));
                }
                if let Some(n) = r.grants_revoked {
                    m.push_str(&format!("{n} standing grant(s) revoked.\n"));
                }
                if r.killed.is_empty() {
                    m.push_str("No session was running.");
                }
                for k in &r.killed {
                    m.push_str(&format!(
                        "Killed session {} ({} sandbox(es) stopped{}).\n",
                        k.id,
                        k.helpers_killed.len(),
                        if k.helpers_left.is_empty() {
                            String::new()
                        } else {
                            format!("; WARNING: {} outlived the kill", k.helpers_left.len())
                        }
                    ));
                }
                m
            }
            Err(e) => format!("The kill failed: {e:#}"),
        };
        self.say(chat, &said);
    }

    /// Decide `action` about this channel as `system:channel`, recorded first.
    fn decide<A: IntoAction>(&self, action: A) -> anyhow::Result<Verdict<A>> {
        let (cfg, gate) = self.gate()?;
        let log = self.host.audit.log(&cfg)?;
        let mut log = crate::service::exec::lock(&log);
        Ok(decisions::decide(
            &mut log,
            &gate,
            self.name,
            decisions::channel_actor(),
            decisions::via_of(self.name),
            action,
        ))
    }

    /// The config in force and the warm Gate of its profile, for the channel's decisions.
    fn gate(
        &self,
    ) -> anyhow::Result<(
        std::sync::Arc<crate::config::Config>,
        std::sync::Arc<airlock_core::gate::Gate>,
    )> {
        let cfg = self.host.warm.current_config();
        let profile = crate::policies::pick_profile(None, &cfg.policy.profile)?;
        let (gate, _) = self.host.warm.gate(profile)?;
        Ok((cfg, gate))
    }

    /// Give an admitted message to its chat's session: the owner's and an admin's own
    /// words as trusted input; anyone else's, and words anyone passed on (a forward), as
    /// untrusted content. Who it is comes from the admission the Gate let through, not
    /// from anything decided beside it.
    fn admit(
        self: &Arc<Self>,
        chat: ChatId,
        private: bool,
        from: &Sender,
        words: Words,
        token: Authorized<ChannelAdmitAction>,
    ) {
        let Words {
            text,
            passed_on_from,
        } = words;
        let said = match (token.action().role.as_str(), passed_on_from) {
            ("owner" | "admin", None) => Said::Trusted(text),
            (_, Some(origin)) => Said::Untrusted {
                source: format!("{}:{origin}, passed on by {}", self.name, from.id),
                text,
            },
            _ => Said::Untrusted {
                source: format!("{}:{}", self.name, from.id),
                text,
            },
        };
        self.queue(chat, private, &from.id, said);
    }

    /// Put a stranger's message to the owner: a card in the owner's chat with who wrote,
    /// where and what, and Answer and Ignore buttons. It waits on a thread of its own
    /// (at most [`MAX_SENDER_ASKS`] at once, one per sender) for the owner's press on that
    /// card, up to [`SENDER_ASK_SECS`]; "Answer" queues the message as untrusted content.
    fn ask_about_sender(
        self: &Arc<Self>,
        chat: ChatId,
        private: bool,
        from: Sender,
        words: Words,
        state: &channels::ChannelState,
        ticket: AskTicket<ChannelAdmitAction>,
    ) {
        let Some(owner_chat) = state.owner_chat.clone().map(ChatId) else {
            return self.refuse_sender(&ticket, None, "the owner's chat is not known to ask them");
        };
        let owner = state.owner.clone();
        let held = ticket;
        let ticket = format!("sender-{}", from.id);
        {
            let mut asking = self.asking.lock().unwrap_or_else(|p| p.into_inner());
            if asking.len() >= MAX_SENDER_ASKS || !asking.insert(ticket.clone()) {
                drop(asking);
                return self.refuse_sender(
                    &held,
                    None,
                    "the owner is already being asked about this sender, or about too many",
                );
            }
        }
        let presses = self.presses.register(&ticket);
        let me = self.clone();
        let spawned = std::thread::Builder::new()
            .name("airlock-sender-ask".into())
            .spawn(move || {
                let answer = me.wait_for_sender_answer(
                    &owner_chat,
                    owner.as_deref(),
                    &ticket,
                    &chat,
                    &from,
                    &words.text,
                    presses,
                );
                me.presses.forget(&ticket);
                me.asking
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&ticket);
                match answer {
                    Some(true) => match me.let_sender_in(held) {
                        Ok(token) => me.admit(chat, private, &from, words, token),
                        Err(e) => tracing::error!(error = %format!("{e:#}"), "letting a sender in"),
                    },
                    Some(false) => me.refuse_sender(
                        &held,
                        Some(Principal::Owner),
                        "the owner chose to ignore the sender",
                    ),
                    None => me.refuse_sender(&held, None, "the owner did not answer in time"),
                }
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "asking the owner about a sender");
        }
    }

    /// The owner's "Answer" to a held sender: the approval of the held admission,
    /// recorded, and the admission it releases.
    fn let_sender_in(
        &self,
        held: AskTicket<ChannelAdmitAction>,
    ) -> anyhow::Result<Authorized<ChannelAdmitAction>> {
        let (cfg, gate) = self.gate()?;
        let log = self.host.audit.log(&cfg)?;
        let mut log = crate::service::exec::lock(&log);
        decisions::approve_admission(
            &mut log,
            &gate,
            held,
            Principal::Owner,
            decisions::via_of(self.name),
        )
    }

    /// A held sender stays out: recorded against the held admission, as the owner's
    /// choice (`by`) or the host's (`None`: no answer, or nobody to ask).
    fn refuse_sender(
        &self,
        held: &AskTicket<ChannelAdmitAction>,
        by: Option<Principal>,
        reason: &str,
    ) {
        let via = decisions::via_of(self.name);
        let who = match by {
            Some(p) => airlock_core::Attribution {
                principal: p.clone(),
                on_behalf_of: p,
                via,
            },
            None => airlock_core::Attribution::system("channel", Principal::Owner, via),
        };
        let cfg = self.host.warm.current_config();
        let refused = self.host.audit.log(&cfg).and_then(|log| {
            decisions::refuse_admission(&mut crate::service::exec::lock(&log), held, &who, reason)
        });
        if let Err(e) = refused {
            tracing::error!(error = %format!("{e:#}"), "recording a refused sender");
        }
    }

    /// The owner's answer about a sender: `Some(true)` answer them, `Some(false)` ignore,
    /// `None` no answer in time (or the card could not be sent).
    #[allow(clippy::too_many_arguments)]
    fn wait_for_sender_answer(
        &self,
        owner_chat: &ChatId,
        owner: Option<&str>,
        ticket: &str,
        chat: &ChatId,
        from: &Sender,
        text: &str,
        presses: Receiver<Press>,
    ) -> Option<bool> {
        let preview: String = text.chars().take(SENDER_PREVIEW).collect();
        let more = if text.chars().count() > SENDER_PREVIEW {
            format!(" (first {SENDER_PREVIEW} characters)")
        } else {
            String::new()
        };
        let card = Card {
            text: format!(
                "someone who is not a member wrote to the assistant\n  from:  {} (id {})\n  chat:  {}{}\n  text{more}:\n{preview}\nanswer them? their message would be untrusted content",
                from.display,
                from.id,
                chat.0,
                if chat == owner_chat { " (yours)" } else { "" }
            ),
            buttons: vec![
                ("Answer".into(), format!("s:{ticket}:y")),
                ("Ignore".into(), format!("s:{ticket}:n")),
            ],
        };
        let message_id = match self.paced(owner_chat, || self.channel.send_card(owner_chat, &card))
        {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, "asking the owner about a sender");
                return None;
            }
        };
        let deadline = Instant::now() + Duration::from_secs(SENDER_ASK_SECS);
        let answer = loop {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                break None;
            };
            let Ok(press) = presses.recv_timeout(left) else {
                break None;
            };
            let refusal = if owner != Some(press.from.id.as_str()) {
                Some((
                    "the presser is not the owner",
                    "only the owner can answer this",
                ))
            } else if press.chat != *owner_chat || press.message_id != message_id {
                Some((
                    "the press is not on the request's current card",
                    "this card is stale; answer the newest one",
                ))
            } else {
                None
            };
            if let Some((reason, told)) = refusal {
                // A refused press counts against its presser's messages per minute, as in
                // `CardApprover::refuse`.
                if !self.admitted(&press.chat, &press.from) {
                    continue;
                }
                self.record(
                    "approval-press-refused",
                    json!({"channel": self.name, "sender_ask": from.id, "from": press.from.id,
                           "reason": reason}),
                );
                let _ = self
                    .rt
                    .block_on(self.channel.answer_press(&press.press_id, told));
                continue;
            }
            match press.data.rsplit(':').next() {
                Some("y") => break Some(true),
                Some("n") => break Some(false),
                _ => {
                    let _ = self.rt.block_on(
                        self.channel
                            .answer_press(&press.press_id, "not a button of this card"),
                    );
                }
            }
        };
        let outcome = match answer {
            Some(true) => "answered, as untrusted content, by the owner's choice",
            Some(false) => "ignored by the owner's choice",
            None => "not answered in time: ignored",
        };
        let closed = format!("{} (id {}): {outcome}", from.display, from.id);
        let _ = self.paced(owner_chat, || {
            self.channel.close_card(owner_chat, &message_id, &closed)
        });
        answer
    }

    /// Whether `from`'s message in `chat` is within their rate; a drop is recorded now
    /// and then (see `host::chat_limits`).
    fn admitted(&self, chat: &ChatId, from: &Sender) -> bool {
        // Read only when the limiter's table is full: a flood is cut without file I/O.
        let is_owner = || {
            matches!(self.kind, Kind::Paired { .. })
                && channels::read_state(&self.host.home, self.name)
                    .is_ok_and(|s| s.owner.as_deref() == Some(from.id.as_str()))
        };
        match self
            .limiter
            .admit_as(&chat.0, &from.id, Instant::now(), is_owner)
        {
            Admit::Take => true,
            Admit::Drop { record, dropped } => {
                if record {
                    self.record(
                        "channel-message-dropped",
                        json!({"channel": self.name, "chat": chat.0, "from": from.id,
                               "reason": "the sender is over the chat's messages_per_minute",
                               "dropped_this_minute": dropped}),
                    );
                }
                false
            }
        }
    }

    /// The key of `chat`'s session in the channel's state and the worker table.
    fn session_key(&self, chat: &ChatId) -> String {
        let parent = self.channel.thread_parent(chat);
        self.sessions
            .session_key(&chat.0, parent.as_ref().map(|p| p.0.as_str()))
    }

    /// Give `said` to the turn worker of `chat`'s session (started at the session's
    /// first message, ended when idle). A full queue, or too many sessions at once,
    /// drops it with a record.
    fn queue(self: &Arc<Self>, chat: ChatId, private: bool, from: &str, said: Said) {
        let key = self.session_key(&chat);
        let mut item = Queued {
            chat: chat.clone(),
            from: from.to_string(),
            said,
            private,
        };
        // Twice at most: a worker that ended since its sender was cloned is started anew.
        for _ in 0..2 {
            let worker = {
                let mut workers = self.workers.lock().unwrap_or_else(|p| p.into_inner());
                match workers.get(&key) {
                    Some(w) => w.clone(),
                    None => {
                        if workers.len() >= MAX_CHAT_WORKERS {
                            drop(workers);
                            return self.drop_queued(
                                &chat,
                                from,
                                "too many chats are being served at once",
                            );
                        }
                        let w = self.start_worker(&key);
                        workers.insert(key.clone(), w.clone());
                        w
                    }
                }
            };
            match worker.tx.try_send(item) {
                Ok(()) => return,
                Err(TrySendError::Full(_)) => {
                    return self.drop_queued(&chat, from, "the chat's queue of turns is full")
                }
                Err(TrySendError::Disconnected(back)) => {
                    item = back;
                    self.forget_worker(&key, worker.number);
                }
            }
        }
        self.drop_queued(&chat, from, "no turn worker could be started for the chat");
    }

    /// Take session `key`'s worker out of the table, if it is still worker `number`.
    fn forget_worker(&self, key: &str, number: u64) {
        let mut workers = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        if workers.get(key).is_some_and(|w| w.number == number) {
            workers.remove(key);
        }
    }

    fn drop_queued(&self, chat: &ChatId, from: &str, reason: &str) {
        tracing::warn!(channel = self.name, chat = %chat.0, reason, "dropped a message");
        self.record(
            "channel-message-dropped",
            json!({"channel": self.name, "chat": chat.0, "from": from, "reason": reason}),
        );
    }

    /// A thread that runs the turns of session `key` one at a time, whichever of its
    /// chats they come from, and ends after [`WORKER_IDLE`] with nothing to do.
    fn start_worker(self: &Arc<Self>, key: &str) -> Worker {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Queued>(CHAT_QUEUE);
        let number = self
            .next_worker
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let me = self.clone();
        let serve = move |q: Queued| {
            let c = &q.chat;
            if let Err(e) = me.turn(c, &q.from, &q.said, q.private) {
                tracing::error!(error = %format!("{e:#}"), "a channel turn");
                // The host's own error may name its paths and settings: said in full only
                // in the owner's own chat.
                let own = channels::read_state(&me.host.home, me.name)
                    .is_ok_and(|s| is_owner_chat(c, &s));
                let text = if own {
                    format!("airlock: the turn failed: {e:#}")
                } else {
                    "airlock: the turn failed; the owner can see why in the host's log".into()
                };
                me.say(c, &text);
            }
        };
        let me = self.clone();
        let key = key.to_string();
        let spawned = std::thread::Builder::new()
            .name("airlock-chat-turns".into())
            .spawn(move || loop {
                match rx.recv_timeout(WORKER_IDLE) {
                    Ok(q) => serve(q),
                    Err(RecvTimeoutError::Timeout) => {
                        // Under the table's lock nobody can take this worker's sender, so
                        // what is not queued now will find it gone and start another.
                        let mut workers = me.workers.lock().unwrap_or_else(|p| p.into_inner());
                        if let Ok(q) = rx.try_recv() {
                            drop(workers);
                            serve(q);
                            continue;
                        }
                        if workers.get(&key).is_some_and(|w| w.number == number) {
                            workers.remove(&key);
                        }
                        return;
                    }
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "starting a chat's turn worker");
        }
        Worker { number, tx }
    }

    /// A pairing code from `from`, judged against the pending one in `state` (wrong
    /// tries counted per sender, see `channels::pairing`): the right one binds them as
    /// the owner if the Gate lets it (`channel.bind`, decided and recorded while the
    /// state is held, so no binding is made without its record).
    fn pair(&self, chat: &ChatId, from: &Sender, code: &str, state: &channels::ChannelState) {
        let now = crate::runtime::now_unix();
        let judged = self
            .pairing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .judge(state, code, &from.id, now);
        match judged {
            Judged::Right { code_hash } => self.bind_owner(chat, from, &code_hash, now),
            Judged::Refused(r) => self.refuse_unpaired(chat, from, r),
        }
    }

    /// A message before pairing that binds nobody: recorded only at the 1st, 2nd, 4th …
    /// of its kind for the pending code (anyone can send them, and each record is
    /// synced), with the count so far; a code void by too many wrong tries is cleared.
    fn refuse_unpaired(&self, chat: &ChatId, from: &Sender, r: Refusal) {
        tracing::info!(channel = self.name, from = %from.id, reason = r.why.reason(), "dropped a message");
        let (hash, wrong) = (r.code_hash.as_str(), r.wrong);
        if let Some(count) = r.record {
            self.record(
                "channel-message-dropped",
                json!({"channel": self.name, "chat": chat.0, "from": from.id,
                       "reason": r.why.reason(), "count": count}),
            );
            if r.why == Unpaired::Wrong && !r.voids {
                // Kept as often as recorded, so a restarted host goes on from it.
                if let Err(e) = channels::update_state(&self.host.home, self.name, |s| {
                    channels::keep_wrong(s, hash, wrong);
                    Ok(())
                }) {
                    tracing::error!(error = %format!("{e:#}"), "keeping the pairing code's wrong tries");
                }
            }
        }
        if r.voids {
            tracing::warn!(
                channel = self.name,
                wrong,
                "too many wrong pairing codes; the code is void"
            );
            if let Err(e) = channels::update_state(&self.host.home, self.name, |s| {
                channels::void_code(s, hash);
                Ok(())
            }) {
                tracing::error!(error = %format!("{e:#}"), "voiding the pairing code");
            }
            self.record(
                "channel-pairing-voided",
                json!({"channel": self.name, "code_hash": hash, "wrong_tries": wrong}),
            );
        }
    }

    /// Bind `from` as the owner by the pending code `code_hash`, which they sent, if the
    /// code is still pending and the Gate lets it.
    fn bind_owner(&self, chat: &ChatId, from: &Sender, code_hash: &str, now: u64) {
        let outcome = channels::update_state(&self.host.home, self.name, |s| {
            if !channels::spend_code(s, code_hash, &from.id, now) {
                return Ok(Err(None));
            }
            let bind = decisions::bind_action(self.name, &from.id, "owner", "pairing");
            let refused = match self.decide(bind)? {
                Verdict::Allow(_) => {
                    s.owner_chat = Some(chat.0.clone());
                    return Ok(Ok(()));
                }
                Verdict::Ask(t) => t.reasons,
                Verdict::Deny(d) => d.reasons,
            };
            // The code is spent either way: the owner makes a new one after changing
            // the policy.
            s.owner = None;
            Ok(Err(Some(decisions::refusal_text(&refused))))
        });
        match outcome {
            Ok(Ok(())) => {
                self.record(
                    "channel-paired",
                    json!({"channel": self.name, "owner": from.id}),
                );
                self.say(chat, "paired: this account is the assistant's owner here");
            }
            // Taken or replaced since it was judged.
            Ok(Err(None)) => self.drop_message(chat, from, Unpaired::NoCode.reason()),
            Ok(Err(Some(why))) => {
                tracing::warn!(channel = self.name, reasons = %why, "the policy refused a pairing");
                self.say(chat, "pairing refused by the host's policy");
            }
            Err(e) => tracing::error!(error = %format!("{e:#}"), "pairing"),
        }
    }

    /// One turn of `chat`'s session for the owner's `text`, and its reply.
    fn turn(
        self: &Arc<Self>,
        chat: &ChatId,
        from: &str,
        said: &Said,
        private: bool,
    ) -> anyhow::Result<()> {
        // A turn is a session the host serves, counted with the others under
        // `[host] max_sessions`: past it the message is dropped and the chat told.
        let Some(_slot) = self.host.sessions.enter() else {
            let reason = format!(
                "the host serves its most sessions at once (host.max_sessions = {})",
                self.host.sessions.max
            );
            self.drop_queued(chat, from, &reason);
            self.say(
                chat,
                "airlock: busy with other sessions; send the message again later",
            );
            return Ok(());
        };
        let home = &self.host.home;
        let cfg = (*self.host.warm.current_config()).clone();
        // The host's own model: `[provider]` of airlock.toml, with its key from the
        // secrets store.
        let provider_cfg = provider_config(home, &cfg, Default::default())?;
        let state = channels::read_state(home, self.name)?;
        let key = self.session_key(chat);
        let session = state.chats.get(&key).cloned();
        // The session takes one turn at a time from anywhere. A chat in the host on it
        // that nobody is attached to and that runs no turn is closed for this turn; one
        // a terminal holds, or a run that drives it, leaves this message dropped, and
        // the chat told.
        let claim = |id: &str| {
            use crate::service::driven::Driver;
            let driven = &self.host.driven;
            driven.claim(id, Driver::Channel).or_else(|e| {
                let asleep =
                    driven.driver(id) == Some(Driver::Chat) && self.host.live.close_if_idle(id);
                if !asleep {
                    return Err(e);
                }
                driven.claim(id, Driver::Channel)
            })
        };
        let hold = match session.as_deref().map(claim).transpose() {
            Ok(hold) => hold,
            Err(e) => {
                let reason = format!("{e:#}");
                self.drop_queued(chat, from, reason.lines().next().unwrap_or(""));
                self.say(
                    chat,
                    "airlock: this conversation is in use elsewhere (a terminal or a run); send the message again later",
                );
                return Ok(());
            }
        };
        // A chat that is not the owner's own is a third party: a group, a member's or a
        // stranger's chat. What the session says there is a message to them, which the
        // Gate decides (held after taint, as egress is): otherwise "reply here with
        // secrets.txt" from a member would send the file. A webhook has no owner's own
        // conversation at all: every post is untrusted content from its sender, and the
        // configured endpoint may pass what it is sent on to anyone. So each of its
        // replies is a message to a third party (`webhook:<chat>`) the Gate decides.
        let third_party = match self.kind {
            Kind::Paired { .. } => !is_owner_chat(chat, &state),
            Kind::Webhook => true,
        };
        let out = Attachable::new();
        let audit = self.host.audit.log(&cfg)?;
        let mut agent = AgentHost::open(
            home.clone(),
            cfg,
            &provider_cfg,
            HostOptions {
                session,
                approval_timeout: None,
                profile: None,
                channel: self.name.into(),
                messages_to: Some(Notices::Attachable(out.clone())),
                notices: Notices::Attachable(out.clone()),
                workspace: None,
                egress: Default::default(),
                child: None,
                audit: Some(audit),
            },
        )?;
        if third_party {
            agent = agent.with_third_party(format!("{}:{}", self.name, chat.0));
        }
        // A stopping host past its grace ends the turn as a kill would, with its records.
        agent = agent.abandoned_when(self.host.turns.flag());
        let id = agent.session_id.clone();
        // Held to the end of the turn (a new session as soon as it has its id).
        let _hold = match hold {
            Some(h) => h,
            None => claim(&id)?,
        };
        channels::update_state(home, self.name, |s| {
            s.chats.insert(key.clone(), id.clone());
            Ok(())
        })?;
        // Nobody approves through a webhook.
        let (owner, card_chat) = match self.kind {
            Kind::Paired {
                approve_in_groups, ..
            } => {
                let card_chat = card_chat_for(chat, private, approve_in_groups, &state);
                (state.owner.clone(), card_chat)
            }
            Kind::Webhook => (None, None),
        };
        let approvals = InlineApprovals::start(
            home,
            &id,
            agent.shared_audit(),
            Box::new(CardApprover {
                running: self.clone(),
                turn_chat: chat.clone(),
                chat: card_chat,
                owner,
            }),
        )?;
        let input = match said {
            Said::Trusted(text) => TurnInput::Owner(text),
            Said::Untrusted { source, text } => TurnInput::Untrusted { source, text },
        };
        // The reply as it comes, for the session's web page.
        let streaming = self.host.replies.begin(&id);
        let mut on_stream = |event| streaming.take(event);
        let report = agent.run_turn_from(input, Some(&mut on_stream));
        drop(streaming);
        approvals.stop();
        let delivered = agent.delivered();
        let files = agent.take_files();
        agent.close()?;
        let report = report?;
        if matches!(report.outcome, airlock_agent::agent::Outcome::Killed) {
            // A killed session takes no more turns: the owner's next message starts anew.
            channels::update_state(home, self.name, |s| {
                s.chats.remove(&key);
                Ok(())
            })?;
        }
        let reply = if third_party {
            // Only what the Gate let through reaches a third party: the messages it
            // allowed (the final text among them), never the owner's notices.
            let _ = out.take();
            match &report.outcome {
                airlock_agent::agent::Outcome::Completed { text }
                    if delivered.is_empty() && !text.trim().is_empty() =>
                {
                    "(the reply was held for the owner's approval and was not sent)".to_string()
                }
                airlock_agent::agent::Outcome::Completed { .. } => delivered.join("\n\n"),
                other => {
                    let mut r = delivered.join("\n\n");
                    if !r.is_empty() {
                        r.push_str("\n\n");
                    }
                    r.push_str(other.summary_for_others());
                    r
                }
            }
        } else {
            let mut reply = out.take();
            match &report.outcome {
                airlock_agent::agent::Outcome::Completed { text } => reply.push_str(text),
                other => reply.push_str(&other.summary()),
            }
            reply
        };
        let reply = if reply.trim().is_empty() {
            "(no reply)".to_string()
        } else {
            reply
        };
        self.say(chat, &reply);
        self.send_files(chat, files);
        Ok(())
    }

    /// Send the files the turn's messages carried (each one's `message.send` was decided
    /// and recorded by then), each with a record of what left.
    fn send_files(&self, chat: &ChatId, files: Vec<crate::agent_executors::SentFile>) {
        for f in files {
            let sha256 = airlock_core::canonical::sha256_hex(&f.bytes);
            match self.paced(chat, || self.channel.send_file(chat, &f.name, &f.bytes)) {
                Ok(_) => self.record(
                    "channel-file-sent",
                    json!({"channel": self.name, "chat": chat.0, "name": f.name,
                           "bytes": f.bytes.len(), "sha256": sha256}),
                ),
                Err(e) => {
                    tracing::warn!(error = %e, "sending a file to a chat");
                    self.say(
                        chat,
                        &format!("(the file {} could not be sent: {e})", f.name),
                    );
                }
            }
        }
    }
}

/// What the owner's `/kill` stops.
#[derive(Debug, Clone, PartialEq, Eq)]
enum KillTarget {
    All,
    Session(String),
}

/// `/kill` or `/kill <session-id>` (also `/stop`), and nothing else.
fn kill_command(text: &str) -> Option<KillTarget> {
    let mut words = text.split_whitespace();
    if !matches!(words.next(), Some("/kill" | "/stop")) {
        return None;
    }
    match (words.next(), words.next()) {
        (None, _) | (Some("all"), None) => Some(KillTarget::All),
        (Some(id), None) => Some(KillTarget::Session(id.to_string())),
        _ => None,
    }
}

/// Whether `chat` is the owner's private chat with the assistant, or a thread in it
/// (Slack's thread chats are `<channel>/<thread>`).
fn is_owner_chat(chat: &ChatId, state: &channels::ChannelState) -> bool {
    state.owner_chat.as_deref().is_some_and(|own| {
        chat.0 == own
            || chat
                .0
                .strip_prefix(own)
                .is_some_and(|rest| rest.starts_with('/'))
    })
}

/// Where the cards of a turn in `chat` go: the chat itself when it is the owner's
/// private chat, or a group that allows approvals; otherwise the owner's private chat,
/// never a member's or a stranger's chat (whoever asked for the action must not be who
/// is asked to approve it). `None` when the owner's chat is not known: the request then
/// waits in the approvals queue.
fn card_chat_for(
    chat: &ChatId,
    private: bool,
    approve_in_groups: bool,
    state: &channels::ChannelState,
) -> Option<ChatId> {
    if is_owner_chat(chat, state) || (!private && approve_in_groups) {
        return Some(chat.clone());
    }
    state.owner_chat.as_deref().map(|c| ChatId(c.to_string()))
}

/// Puts an ask to the owner as a card, and takes the owner's press on it.
struct CardApprover {
    running: Arc<Running>,
    /// The chat whose turn held the action.
    turn_chat: ChatId,
    /// Where the card goes; `None`: nowhere (the request waits in the approvals queue).
    chat: Option<ChatId>,
    /// Whose press counts; `None`: nobody's.
    owner: Option<String>,
}

fn hash_shown(req: &ApprovalRequest) -> String {
    let h = req
        .payload_hash
        .strip_prefix("sha256:")
        .unwrap_or(&req.payload_hash);
    h.chars().take(HASH_SHOWN).collect()
}

impl CardApprover {
    fn close(&self, chat: &ChatId, message_id: &str, text: &str) {
        let _ = self.running.paced(chat, || {
            self.running.channel.close_card(chat, message_id, text)
        });
    }

    /// Who `press` is from, if they may answer `req`: the owner; an admin of the channel
    /// where every policy that held it says `@approvers("admin")` (the Gate checks that
    /// again when the approval is used). Anyone else's press is refused and recorded.
    fn presser(&self, req: &ApprovalRequest, press: &Press) -> Option<Principal> {
        let r = &self.running;
        let Some(owner) = self.owner.as_deref() else {
            self.refuse(
                req,
                press,
                "nobody approves through this channel",
                "only the owner can answer this",
            );
            return None;
        };
        if press.from.id == owner {
            return Some(Principal::Owner);
        }
        let admin = channels::read_state(&r.host.home, r.name)
            .is_ok_and(|s| s.members.get(&press.from.id) == Some(&Role::Admin));
        if !admin {
            self.refuse(
                req,
                press,
                "the presser is not the owner",
                "only the owner can answer this",
            );
            return None;
        }
        let principal = Principal::Admin {
            channel: r.name.to_string(),
            platform_id: press.from.id.clone(),
        };
        let cfg = r.host.warm.current_config();
        let may = crate::policies::pick_profile(None, &cfg.policy.profile)
            .and_then(|p| r.host.warm.gate(p))
            .is_ok_and(|(gate, _)| gate.may_approve(&principal, &req.policies));
        if !may {
            self.refuse(
                req,
                press,
                "no policy names admins as approvers of this action",
                "only the owner can answer this",
            );
            return None;
        }
        Some(principal)
    }

    fn refuse(&self, req: &ApprovalRequest, press: &Press, reason: &str, told: &str) {
        // A refused press counts against its presser's messages per minute: past it, it
        // is dropped as a message would be (recorded a log of times), so pressing a card
        // over and over cannot write a synced record each time.
        if !self.running.admitted(&press.chat, &press.from) {
            return;
        }
        self.running.record(
            "approval-press-refused",
            json!({"channel": self.running.name, "approval_id": req.id,
                   "from": press.from.id, "reason": reason}),
        );
        self.tell(press, told);
    }

    fn tell(&self, press: &Press, text: &str) {
        let _ = self
            .running
            .rt
            .block_on(self.running.channel.answer_press(&press.press_id, text));
    }
}

impl Approver for CardApprover {
    fn answer(&mut self, req: &ApprovalRequest, waiting: &dyn Fn() -> bool) -> Answer {
        let r = self.running.clone();
        let Some(chat) = self.chat.clone() else {
            r.say(
                &self.turn_chat,
                "an action is held; it waits for the owner in the approvals queue",
            );
            return Answer::Withdrawn;
        };
        if chat != self.turn_chat {
            r.say(
                &self.turn_chat,
                "an action is held; the owner has been asked to approve it",
            );
        }
        let hash = hash_shown(req);
        let mut text = describe(req).join("\n");
        text.push_str(&format!(
            "\npayload hash: sha256:{hash}…\nthe whole payload: airlock approvals show {}",
            req.id
        ));
        let card = Card {
            text,
            buttons: vec![
                ("Approve".into(), format!("a:{}:{hash}", req.id)),
                ("Deny".into(), format!("d:{}:{hash}", req.id)),
            ],
        };
        let presses = r.presses.register(&req.id);
        let message_id = match r.paced(&chat, || r.channel.send_card(&chat, &card)) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, "sending an approval card; the request waits in the queue");
                r.presses.forget(&req.id);
                return Answer::Withdrawn;
            }
        };
        let deadline = Instant::now()
            + Duration::from_millis(
                (req.expires_at.as_unix_ms() - Timestamp::now().as_unix_ms()).max(0) as u64,
            );
        let answer = loop {
            let press = match presses.recv_timeout(Duration::from_millis(200)) {
                Ok(p) => p,
                Err(RecvTimeoutError::Timeout) => {
                    if Instant::now() >= deadline || !waiting() {
                        self.close(&chat, &message_id, "no longer waiting for an answer");
                        break Answer::Withdrawn;
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break Answer::Withdrawn,
            };
            // Recorded before the presser is told, so what they see is on the record.
            let Some(presser) = self.presser(req, &press) else {
                continue;
            };
            let mut parts = press.data.splitn(3, ':');
            let (verb, _, shown) = (parts.next(), parts.next(), parts.next());
            if shown != Some(hash.as_str()) {
                self.refuse(
                    req,
                    &press,
                    "the card's payload hash is not the request's",
                    "this card does not show the request as it is now",
                );
                continue;
            }
            // The press must be on this very card: a button of an older card for the same
            // request (a stale message), or of one in another chat, does not count.
            if press.chat != chat || press.message_id != message_id {
                self.refuse(
                    req,
                    &press,
                    "the press is not on the request's current card",
                    "this card is stale; answer the newest one",
                );
                continue;
            }
            let by = match &presser {
                Principal::Owner => "the owner".to_string(),
                other => format!("{other} ({})", press.from.display),
            };
            match verb {
                Some("a") => {
                    self.tell(&press, "approved");
                    self.close(
                        &chat,
                        &message_id,
                        &format!("approved by {by} (sha256:{hash}…)"),
                    );
                    break match presser {
                        Principal::Owner => Answer::Approve,
                        admin => Answer::ApproveAs(admin),
                    };
                }
                Some("d") => {
                    self.tell(&press, "denied");
                    self.close(
                        &chat,
                        &message_id,
                        &format!("denied by {by} (sha256:{hash}…)"),
                    );
                    let reason = format!("denied on {}", r.name);
                    break match presser {
                        Principal::Owner => Answer::Deny { reason },
                        admin => Answer::DenyAs(admin, reason),
                    };
                }
                _ => self.tell(&press, "not a button of this card"),
            }
        };
        r.presses.forget(&req.id);
        answer
    }

    fn via(&self) -> &'static str {
        self.running.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(owner_chat: Option<&str>) -> channels::ChannelState {
        channels::ChannelState {
            owner: Some("U1".into()),
            owner_chat: owner_chat.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    fn kill_is_one_command_with_at_most_a_session() {
        assert_eq!(kill_command("/kill"), Some(KillTarget::All));
        assert_eq!(kill_command(" /stop  all "), Some(KillTarget::All));
        assert_eq!(
            kill_command("/kill s-1"),
            Some(KillTarget::Session("s-1".into()))
        );
        assert_eq!(kill_command("/kill s-1 s-2"), None);
        assert_eq!(kill_command("please /kill"), None);
        assert_eq!(kill_command("/killer"), None);
    }

    #[test]
    fn a_card_goes_to_the_owners_chat_whatever_chat_held_the_action() {
        let s = state(Some("D1"));
        let own = ChatId("D1".into());
        let own_thread = ChatId("D1/1700.1".into());
        let group = ChatId("C9".into());
        let member = ChatId("D7".into());
        let lookalike = ChatId("D1x".into());
        assert!(is_owner_chat(&own, &s) && is_owner_chat(&own_thread, &s));
        assert!(!is_owner_chat(&lookalike, &s) && !is_owner_chat(&group, &s));
        assert_eq!(card_chat_for(&own, true, false, &s), Some(own.clone()));
        assert_eq!(
            card_chat_for(&own_thread, true, false, &s),
            Some(own_thread)
        );
        assert_eq!(card_chat_for(&member, true, false, &s), Some(own.clone()));
        assert_eq!(card_chat_for(&lookalike, true, true, &s), Some(own.clone()));
        assert_eq!(card_chat_for(&group, false, false, &s), Some(own));
        // Only a group that allows it shows its own cards.
        assert_eq!(card_chat_for(&group, false, true, &s), Some(group.clone()));
        // No known chat of the owner's: nowhere (the request waits in the queue).
        assert_eq!(card_chat_for(&group, false, false, &state(None)), None);
        assert!(!is_owner_chat(&group, &state(None)));
    }
}
