//! Discord: the Gateway (v10, JSON over a WebSocket) for what arrives, the REST API for
//! what goes out (<https://discord.com/developers/docs/events/gateway>,
//! <https://discord.com/developers/docs/resources/message>,
//! <https://discord.com/developers/docs/interactions/receiving-and-responding>).
//!
//! The Gateway runs in a background task that the first [`Channel::next_events`] starts:
//! it identifies, heartbeats, notices a connection that stopped answering (a "zombie"),
//! resumes the session after a drop so that Discord replays what was missed, and feeds a
//! bounded queue. Discord does not take acknowledgements the way a long poll does: what
//! the host had not taken yet when the process stopped is gone, as with any Gateway bot.
//!
//! The bot token goes in the `Authorization` header and in Identify and Resume, never in
//! a URL, and no error this module returns carries it. An interaction's token (in
//! [`Inbound::Press`]'s `press_id`) is part of its callback's URL, so no error carries a
//! URL either.
//!
//! Discord renders Markdown, mentions and links in message content, so every text that
//! goes out is escaped ([`escape_markdown`]) and sent with no mention allowed.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::{SinkExt, StreamExt};
use reqwest::header::{HeaderValue, AUTHORIZATION, USER_AGENT};
use reqwest::Method;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::time::{sleep, sleep_until, timeout, Instant};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;

use crate::seen::Seen;
use crate::{split_text, Card, Channel, ChannelError, ChatId, Inbound, Sender};

const PLATFORM: &str = "discord";
/// The most characters a message's `content` takes.
pub const MESSAGE_LIMIT: usize = 2000;
/// The most characters a button's `custom_id` takes.
pub const CUSTOM_ID_LIMIT: usize = 100;
const LABEL_LIMIT: usize = 80;
const BUTTONS_PER_ROW: usize = 5;
const ROWS_PER_MESSAGE: usize = 5;
/// GUILD_MESSAGES (1 << 9) | DIRECT_MESSAGES (1 << 12) | MESSAGE_CONTENT (1 << 15).
pub const INTENTS: u64 = (1 << 9) | (1 << 12) | (1 << 15);
/// Events waiting for the host. When it is full the Gateway reader stops reading, so a
/// flood waits in Discord's buffers, not in this process's memory.
const QUEUE: usize = 1024;
/// How many handed-out message and interaction ids are remembered, so that a dispatch
/// delivered twice (a resume replays from the last sequence number it was told) is
/// handed out once.
const SEEN: usize = 4096;
const DEFAULT_POLL: Duration = Duration::from_secs(25);
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
const MIN_HEARTBEAT: Duration = Duration::from_millis(100);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// Failed connection attempts in a row after which `next_events` says Discord is
/// unreachable (the host then backs off); the task keeps trying regardless.
const FAILURES_TO_REPORT: u32 = 2;
/// Failed attempts to resume after which the session is given up and a new one
/// identified: the resume address may be gone for good.
const FAILURES_TO_FORGET_SESSION: u32 = 3;
/// The close code this client closes with when it means to resume: Discord invalidates
/// the session of a connection closed with 1000 or 1001.
const CLOSE_TO_RESUME: u16 = 4000;

/// A Discord bot: a Gateway connection for events, the REST API for messages.
pub struct Discord {
    rest: Arc<Rest>,
    tls: Arc<rustls::ClientConfig>,
    poll: Duration,
    gateway: OnceLock<Gateway>,
}

impl Discord {
    /// `api_base` is the REST API's root (`https://discord.com/api/v10`, or a local fake
    /// in tests) and must be HTTPS; `extra_roots_pem` adds trusted roots (see
    /// [`crate::tls`]). Nothing connects until the first [`Channel::next_events`], so this
    /// needs no runtime.
    pub fn new(
        api_base: &str,
        token: SecretString,
        extra_roots_pem: &[String],
    ) -> Result<Discord, ChannelError> {
        let base = url::Url::parse(api_base).map_err(|e| ChannelError::Refused {
            platform: PLATFORM,
            method: "configuration",
            why: format!("the API base `{api_base}` is not a URL: {e}"),
        })?;
        if base.scheme() != "https" {
            return Err(ChannelError::Refused {
                platform: PLATFORM,
                method: "configuration",
                why: format!(
                    "the API base `{api_base}` is not https: the bot token would travel in \
                     the clear\nhelp: use https://discord.com/api/v10"
                ),
            });
        }
        let http = crate::tls::http_client(PLATFORM, extra_roots_pem, Duration::from_secs(30))?;
        let tls = crate::tls::client_config(PLATFORM, extra_roots_pem)?;
        Ok(Discord {
            rest: Arc::new(Rest {
                base: api_base.trim_end_matches('/').to_string(),
                token,
                http,
            }),
            tls,
            poll: DEFAULT_POLL,
            gateway: OnceLock::new(),
        })
    }

    /// How long [`Channel::next_events`] waits for a first event (25 s unless set).
    pub fn with_poll(mut self, poll: Duration) -> Discord {
        self.poll = poll;
        self
    }

    fn gateway(&self) -> &Gateway {
        self.gateway.get_or_init(|| {
            let (tx, rx) = mpsc::channel(QUEUE);
            let health = Arc::new(Mutex::new(Health::default()));
            let runner = Runner {
                rest: self.rest.clone(),
                tls: self.tls.clone(),
                health: health.clone(),
                events: tx,
                session: None,
                seq: None,
                seen: Seen::new(SEEN),
                pending: None,
            };
            Gateway {
                events: tokio::sync::Mutex::new(rx),
                health,
                task: tokio::spawn(runner.run()),
            }
        })
    }

    /// Send one part (already escaped and within the limit), with `components` if any.
    async fn post_message(
        &self,
        chat: &ChatId,
        content: String,
        components: Option<Value>,
    ) -> Result<String, ChannelError> {
        let mut body = json!({"content": content, "allowed_mentions": {"parse": []}});
        if let Some(c) = components {
            body["components"] = c;
        }
        let path = format!("/channels/{}/messages", snowflake(&chat.0, "a chat id")?);
        let m = self
            .rest
            .call(
                Method::POST,
                "create message",
                &path,
                Some(RestBody::Json(&body)),
                true,
            )
            .await?;
        Ok(m["id"].as_str().unwrap_or_default().to_string())
    }
}

struct Gateway {
    events: tokio::sync::Mutex<mpsc::Receiver<Inbound>>,
    health: Arc<Mutex<Health>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        // The adapter is gone: so is its connection.
        self.task.abort();
    }
}

/// A REST request's body: JSON, or a multipart form (a message with a file).
enum RestBody<'a> {
    Json(&'a Value),
    Form(reqwest::multipart::Form),
}

/// What the Gateway task tells `next_events` besides events.
#[derive(Default)]
struct Health {
    /// Why the task stopped for good (a bad token, intents not enabled).
    refused: Option<String>,
    /// Connection attempts that failed in a row, and why the last one did.
    failures: u32,
    last_failure: String,
    /// The bot's own user id, from `READY`: a message mentions it as `<@id>`.
    bot_id: Option<String>,
}

fn lock(health: &Mutex<Health>) -> std::sync::MutexGuard<'_, Health> {
    health.lock().unwrap_or_else(|p| p.into_inner())
}

#[async_trait]
impl Channel for Discord {
    fn name(&self) -> &'static str {
        PLATFORM
    }

    fn mention_forms(&self) -> Vec<String> {
        let Some(gateway) = self.gateway.get() else {
            return Vec::new();
        };
        let id = lock(&gateway.health).bot_id.clone();
        // `<@!id>` is the older nickname form, still sent by some clients.
        id.map(|id| vec![format!("<@{id}>"), format!("<@!{id}>")])
            .unwrap_or_default()
    }

    async fn next_events(&self) -> Result<Vec<Inbound>, ChannelError> {
        let gateway = self.gateway();
        let mut rx = gateway.events.lock().await;
        let mut events = Vec::new();
        match timeout(self.poll, rx.recv()).await {
            Ok(Some(event)) => events.push(event),
            // The task ended: only a refusal ends it (or a panic, which it should not).
            Ok(None) => {
                let why = lock(&gateway.health)
                    .refused
                    .clone()
                    .unwrap_or_else(|| "the Gateway task stopped".to_string());
                return Err(ChannelError::Refused {
                    platform: PLATFORM,
                    method: "gateway",
                    why,
                });
            }
            Err(_) => {}
        }
        while let Ok(event) = rx.try_recv() {
            events.push(event);
        }
        if events.is_empty() {
            let health = lock(&gateway.health);
            if health.failures >= FAILURES_TO_REPORT {
                return Err(ChannelError::Unreachable {
                    platform: PLATFORM,
                    why: format!(
                        "{} attempts in a row to reach the Gateway failed; the last: {}",
                        health.failures, health.last_failure
                    ),
                });
            }
        }
        Ok(events)
    }

    async fn send(&self, chat: &ChatId, text: &str) -> Result<String, ChannelError> {
        let mut last = String::new();
        for part in escaped_parts(text) {
            last = self.post_message(chat, part, None).await?;
        }
        Ok(last)
    }

    async fn send_file(
        &self,
        chat: &ChatId,
        name: &str,
        bytes: &[u8],
    ) -> Result<String, ChannelError> {
        // A message with one attachment: `payload_json` names it, `files[0]` carries it.
        let payload = json!({"allowed_mentions": {"parse": []},
                             "attachments": [{"id": 0, "filename": name}]});
        let form = reqwest::multipart::Form::new()
            .text("payload_json", payload.to_string())
            .part(
                "files[0]",
                reqwest::multipart::Part::bytes(bytes.to_vec()).file_name(name.to_string()),
            );
        let path = format!("/channels/{}/messages", snowflake(&chat.0, "a chat id")?);
        let m = self
            .rest
            .call(
                Method::POST,
                "create message",
                &path,
                Some(RestBody::Form(form)),
                true,
            )
            .await?;
        Ok(m["id"].as_str().unwrap_or_default().to_string())
    }

    async fn send_card(&self, chat: &ChatId, card: &Card) -> Result<String, ChannelError> {
        // Check every button before anything is sent: half a card is worse than none.
        let components = buttons(&card.buttons)?;
        let mut parts = escaped_parts(&card.text);
        let last = parts.pop().unwrap_or_default();
        for part in parts {
            self.post_message(chat, part, None).await?;
        }
        self.post_message(chat, last, components).await
    }

    async fn close_card(
        &self,
        chat: &ChatId,
        message_id: &str,
        text: &str,
    ) -> Result<(), ChannelError> {
        let path = format!(
            "/channels/{}/messages/{}",
            snowflake(&chat.0, "a chat id")?,
            snowflake(message_id, "a message id")?
        );
        // An empty components list takes the buttons away.
        let body = json!({
            "content": escape_within(text, MESSAGE_LIMIT),
            "components": [],
            "allowed_mentions": {"parse": []},
        });
        self.rest
            .call(
                Method::PATCH,
                "edit message",
                &path,
                Some(RestBody::Json(&body)),
                true,
            )
            .await
            .map(|_| ())
    }

    async fn answer_press(&self, press_id: &str, text: &str) -> Result<(), ChannelError> {
        let refused = |why: &str| ChannelError::Refused {
            platform: PLATFORM,
            method: "interaction callback",
            why: why.to_string(),
        };
        // Never echo the press id: it holds the interaction's token.
        let (id, token) = press_id
            .split_once(':')
            .ok_or_else(|| refused("the press id is not `interaction id:token`"))?;
        let id = snowflake(id, "an interaction id")?;
        // Characters a path segment takes as they are, and not a dot segment (`..`).
        let token_ok = token.chars().any(|c| c.is_ascii_alphanumeric())
            && token
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.~=+".contains(c));
        if !token_ok {
            return Err(refused("the press id's token is not an interaction token"));
        }
        // Type 4 answers with a message; flag 64 (EPHEMERAL) shows it to the presser only.
        let body = json!({"type": 4, "data": {
            "content": escape_within(text, MESSAGE_LIMIT),
            "flags": 64,
            "allowed_mentions": {"parse": []},
        }});
        // Discord authenticates a callback by the interaction's token in its URL; the bot
        // token need not go along.
        let path = format!("/interactions/{id}/{token}/callback");
        self.rest
            .call(
                Method::POST,
                "interaction callback",
                &path,
                Some(RestBody::Json(&body)),
                false,
            )
            .await
            .map(|_| ())
    }
}

/// `s` if it is a snowflake (a decimal id), which is all Discord's ids are; anything else
/// could turn a path into another endpoint's.
fn snowflake<'a>(s: &'a str, what: &str) -> Result<&'a str, ChannelError> {
    if !s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit()) {
        Ok(s)
    } else {
        Err(ChannelError::Refused {
            platform: PLATFORM,
            method: "request",
            why: format!("{what} that is not a Discord id"),
        })
    }
}

/// The action rows of a card's buttons: the first green (success), the others red
/// (danger), five to a row.
fn buttons(buttons: &[(String, String)]) -> Result<Option<Value>, ChannelError> {
    let refused = |why: String| ChannelError::Refused {
        platform: PLATFORM,
        method: "create message",
        why,
    };
    if buttons.is_empty() {
        return Ok(None);
    }
    if buttons.len() > BUTTONS_PER_ROW * ROWS_PER_MESSAGE {
        return Err(refused(format!(
            "a card with {} buttons: a message holds at most {}",
            buttons.len(),
            BUTTONS_PER_ROW * ROWS_PER_MESSAGE
        )));
    }
    let mut rendered = Vec::new();
    for (k, (label, data)) in buttons.iter().enumerate() {
        // Cutting a button's data would make its press mean something else.
        let n = data.chars().count();
        if n == 0 || n > CUSTOM_ID_LIMIT {
            return Err(refused(format!(
                "a button's data of {n} characters: Discord takes 1 to {CUSTOM_ID_LIMIT}"
            )));
        }
        let n = label.chars().count();
        if n > LABEL_LIMIT {
            return Err(refused(format!(
                "a button's label of {n} characters: Discord takes at most {LABEL_LIMIT}"
            )));
        }
        rendered.push(json!({
            "type": 2,
            "style": if k == 0 { 3 } else { 4 },
            "label": label,
            "custom_id": data,
        }));
    }
    let rows: Vec<Value> = rendered
        .chunks(BUTTONS_PER_ROW)
        .map(|row| json!({"type": 1, "components": row}))
        .collect();
    Ok(Some(Value::Array(rows)))
}

/// Whether `c` (after `prev`) must be escaped to show as itself: Markdown (emphasis,
/// strike, spoilers, code, quotes, headings, subtext, lists, masked links), mentions,
/// channel links, custom emoji and timestamps (`<…>`), `@everyone`, `:emoji:`, and the
/// `://` that makes a URL a link. Discord takes a backslash before any punctuation as
/// an escape, so escaping more than needed shows no backslash.
fn needs_escape(c: char, prev: Option<char>) -> bool {
    const MARKUP: &[char] = &[
        '\\', '*', '_', '~', '`', '|', '>', '<', '#', '-', '+', '[', ']', '(', ')', '@', ':', '!',
    ];
    // A dot after a digit makes `1.` a numbered list.
    MARKUP.contains(&c) || (c == '.' && prev.is_some_and(|p| p.is_ascii_digit()))
}

/// `text` with a backslash before every character Discord would read as markup, so it is
/// shown as the characters it is.
pub fn escape_markdown(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    let mut prev = None;
    for c in text.chars() {
        if needs_escape(c, prev) {
            out.push('\\');
        }
        out.push(c);
        prev = Some(c);
    }
    out
}

/// `text` escaped, cut to at most `limit` characters without splitting an escape, with
/// an ellipsis where it was cut: for an edit or an answer, which are one message each.
fn escape_within(text: &str, limit: usize) -> String {
    let escaped = escape_markdown(text);
    if escaped.chars().count() <= limit {
        return escaped;
    }
    let mut out = String::new();
    let mut count = 0;
    let mut prev = None;
    for c in text.chars() {
        let width = if needs_escape(c, prev) { 2 } else { 1 };
        // Room for the ellipsis.
        if count + width > limit - 1 {
            break;
        }
        if width == 2 {
            out.push('\\');
        }
        out.push(c);
        count += width;
        prev = Some(c);
    }
    out.push('…');
    out
}

/// `text` split into numbered parts ([`split_text`]) whose escaped form fits a message.
/// Splitting comes first so that no escape is cut in two; escaping at most doubles a
/// part, so a raw limit of half the message limit always fits, and a text with little
/// markup gets parts near the full size.
fn escaped_parts(text: &str) -> Vec<String> {
    let mut limit = MESSAGE_LIMIT;
    loop {
        let parts: Vec<String> = split_text(text, limit)
            .iter()
            .map(|p| escape_markdown(p))
            .collect();
        let longest = parts.iter().map(|p| p.chars().count()).max().unwrap_or(0);
        if longest <= MESSAGE_LIMIT || limit <= 1 {
            return parts;
        }
        // Shrink by the overflow, and by at least a tenth so this takes a few rounds.
        limit = (limit - (longest - MESSAGE_LIMIT).min(limit - 1))
            .min(limit * 9 / 10)
            .max(1);
    }
}

/// The REST API, shared by the adapter and its Gateway task.
struct Rest {
    base: String,
    token: SecretString,
    http: reqwest::Client,
}

#[derive(Deserialize)]
struct ApiError {
    code: Option<i64>,
    message: Option<String>,
    errors: Option<Value>,
}

impl Rest {
    /// Call `method path`; the answer's JSON (`Null` for an empty answer). `what` names
    /// the call in errors; `bot_auth` sends the bot token.
    async fn call(
        &self,
        method: Method,
        what: &'static str,
        path: &str,
        body: Option<RestBody<'_>>,
        bot_auth: bool,
    ) -> Result<Value, ChannelError> {
        let unreachable = |why: String| ChannelError::Unreachable {
            platform: PLATFORM,
            why: self.redact(why),
        };
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header(
                USER_AGENT,
                concat!("DiscordBot (airlock, ", env!("CARGO_PKG_VERSION"), ")"),
            );
        if bot_auth {
            let mut auth = HeaderValue::from_str(&format!("Bot {}", self.token.expose_secret()))
                .map_err(|_| ChannelError::Refused {
                    platform: PLATFORM,
                    method: what,
                    why: "the bot token has characters a header cannot carry".to_string(),
                })?;
            auth.set_sensitive(true);
            req = req.header(AUTHORIZATION, auth);
        }
        match body {
            Some(RestBody::Json(body)) => req = req.json(body),
            Some(RestBody::Form(form)) => req = req.multipart(form),
            None => {}
        }
        // `without_url`: an interaction's token is part of its callback's URL.
        let resp = req
            .send()
            .await
            .map_err(|e| unreachable(format!("{what}: {}", e.without_url())))?;
        let status = resp.status();
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| unreachable(format!("{what}: {}", e.without_url())))?;
        if status == reqwest::StatusCode::TOO_MANY_REQUESTS {
            let retry_after = serde_json::from_slice::<Value>(&bytes)
                .ok()
                .and_then(|v| v["retry_after"].as_f64())
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map(|s| std::time::Duration::from_secs_f64(s.min(3600.0)));
            return Err(ChannelError::RateLimited {
                platform: PLATFORM,
                method: what.to_string(),
                retry_after,
            });
        }
        if status.is_success() {
            if bytes.is_empty() {
                return Ok(Value::Null);
            }
            return serde_json::from_slice(&bytes).map_err(|_| {
                unreachable(format!(
                    "{what} answered {status} with something that is not the API's JSON"
                ))
            });
        }
        match serde_json::from_slice::<ApiError>(&bytes) {
            Ok(e) if e.code.is_some() || e.message.is_some() => {
                let mut why = format!(
                    "{status}: {} {}",
                    e.code.unwrap_or_default(),
                    e.message.unwrap_or_default()
                );
                if let Some(errors) = e.errors {
                    // Which field was wrong, shortened: it may be long.
                    let detail: String = errors.to_string().chars().take(300).collect();
                    why.push_str(&format!(" ({detail})"));
                }
                Err(ChannelError::Refused {
                    platform: PLATFORM,
                    method: what,
                    why: self.redact(why),
                })
            }
            _ => Err(unreachable(format!(
                "{what} answered {status} with something that is not the API's JSON"
            ))),
        }
    }

    /// `why` with the bot token blotted out, should anything ever echo it.
    fn redact(&self, why: String) -> String {
        let token = self.token.expose_secret();
        if token.is_empty() {
            why
        } else {
            why.replace(token, "[token]")
        }
    }
}

/// A Gateway session that can be resumed.
struct Session {
    id: String,
    resume_url: String,
}

/// How one connection ended, and so what the next one does.
enum End {
    /// Lost or left: resume the session (or identify, if there is none). `asked`: Discord
    /// asked for it (op 7), so without waiting.
    Resume { asked: bool },
    /// The session is gone (op 9 `false`, 4007, 4009): identify a new one after 1–5 s.
    Fresh,
    /// No connection, or no handshake.
    Failed(String),
    /// Discord will not take this bot as it is: stop.
    Refused(String),
    /// The adapter was dropped.
    Gone,
}

/// What one Gateway payload asks of the connection loop.
enum Step {
    Go,
    HeartbeatNow,
    Acked,
    End(End),
}

#[derive(Deserialize)]
struct Payload {
    op: u8,
    #[serde(default)]
    d: Value,
    s: Option<u64>,
    t: Option<String>,
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The Gateway task's state, kept across connections.
struct Runner {
    rest: Arc<Rest>,
    tls: Arc<rustls::ClientConfig>,
    health: Arc<Mutex<Health>>,
    events: mpsc::Sender<Inbound>,
    session: Option<Session>,
    /// The last sequence number received: heartbeats carry it, a resume starts after it.
    seq: Option<u64>,
    seen: Seen,
    /// An event read but not yet queued (the queue was full). The reader reads nothing
    /// more until it is queued, and it outlives a reconnect.
    pending: Option<Inbound>,
}

impl Runner {
    async fn run(mut self) {
        let mut backoff = FIRST_BACKOFF;
        loop {
            let mut good = false;
            let end = self.connection(&mut good).await;
            if good {
                backoff = FIRST_BACKOFF;
                lock(&self.health).failures = 0;
            }
            let wait = match end {
                End::Gone => return,
                End::Refused(why) => {
                    tracing::warn!(
                        platform = PLATFORM, %why,
                        "the Gateway refused the bot; not reconnecting"
                    );
                    lock(&self.health).refused = Some(why);
                    return;
                }
                End::Resume { asked: true } if good => Duration::ZERO,
                End::Resume { .. } => backoff,
                End::Fresh => {
                    self.session = None;
                    // Discord asks for a random 1–5 s before identifying again.
                    Duration::from_millis(1000 + (jitter() * 4000.0) as u64)
                }
                End::Failed(why) => {
                    let mut health = lock(&self.health);
                    health.failures += 1;
                    if health.failures >= FAILURES_TO_FORGET_SESSION {
                        self.session = None;
                    }
                    tracing::info!(
                        platform = PLATFORM, failures = health.failures, %why,
                        "the Gateway could not be reached"
                    );
                    health.last_failure = why;
                    backoff
                }
            };
            if !good {
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            if self.events.is_closed() {
                return;
            }
            sleep(wait).await;
        }
    }

    /// One connection, from the address to its end; `good` once READY or RESUMED came.
    async fn connection(&mut self, good: &mut bool) -> End {
        let resuming = self.session.is_some();
        let url = match &self.session {
            Some(s) => s.resume_url.clone(),
            None => match self.gateway_url().await {
                Ok(u) => u,
                Err(end) => return end,
            },
        };
        let address = match gateway_address(&url) {
            Ok(a) => a,
            Err(why) => return End::Failed(why),
        };
        let connector = tokio_tungstenite::Connector::Rustls(self.tls.clone());
        let connect = tokio_tungstenite::connect_async_tls_with_config(
            address.as_str(),
            None,
            false,
            Some(connector),
        );
        let mut ws = match timeout(CONNECT_TIMEOUT, connect).await {
            Ok(Ok((ws, _))) => ws,
            Ok(Err(e)) => return End::Failed(format!("connecting to the Gateway: {e}")),
            Err(_) => return End::Failed("connecting to the Gateway timed out".to_string()),
        };
        let interval = match timeout(CONNECT_TIMEOUT, hello(&mut ws)).await {
            Ok(Ok(i)) => i,
            Ok(Err(end)) => return end,
            Err(_) => return End::Failed("the Gateway sent no Hello".to_string()),
        };
        let token = self.rest.token.expose_secret();
        let opening = match &self.session {
            Some(s) => json!({"op": 6, "d": {"token": token, "session_id": s.id, "seq": self.seq}}),
            None => {
                // A new session numbers its dispatches from the start.
                self.seq = None;
                json!({"op": 2, "d": {
                    "token": token,
                    "intents": INTENTS,
                    "properties": {"os": std::env::consts::OS, "browser": "airlock", "device": "airlock"},
                }})
            }
        };
        if ws.send(Message::text(opening.to_string())).await.is_err() {
            return End::Failed(format!(
                "the Gateway connection dropped before {}",
                if resuming { "Resume" } else { "Identify" }
            ));
        }

        // The first heartbeat after a random part of the interval, so that many clients
        // that reconnect together do not beat together.
        let mut next_beat = Instant::now() + interval.mul_f64(jitter());
        let mut awaiting_ack = false;
        // Whether the reader stopped reading since the last heartbeat (the queue was
        // full): then an ACK may be sitting unread, and a missing one proves nothing.
        let mut stalled = self.pending.is_some();
        loop {
            let frame = tokio::select! {
                _ = sleep_until(next_beat) => None,
                permit = self.events.reserve(), if self.pending.is_some() => {
                    let Ok(permit) = permit else { return End::Gone };
                    if let Some(event) = self.pending.take() {
                        permit.send(event);
                    }
                    continue;
                }
                frame = ws.next(), if self.pending.is_none() => Some(frame),
            };
            // `None`: a heartbeat is due.
            if let Some(frame) = frame {
                let step = match frame {
                    Some(Ok(Message::Text(text))) => self.on_payload(&text, good),
                    Some(Ok(Message::Close(frame))) => Step::End(after_close(frame, &self.rest)),
                    // Pings are answered by tungstenite; JSON comes as text.
                    Some(Ok(_)) => Step::Go,
                    Some(Err(e)) => {
                        tracing::info!(
                            platform = PLATFORM, error = %e,
                            "the Gateway connection failed; resuming"
                        );
                        Step::End(End::Resume { asked: false })
                    }
                    None => Step::End(End::Resume { asked: false }),
                };
                if self.pending.is_some() {
                    stalled = true;
                }
                match step {
                    Step::Go => continue,
                    Step::Acked => {
                        awaiting_ack = false;
                        continue;
                    }
                    Step::HeartbeatNow => {}
                    Step::End(end) => {
                        let code = match end {
                            End::Fresh => 1000,
                            _ => CLOSE_TO_RESUME,
                        };
                        close(&mut ws, code).await;
                        return end;
                    }
                }
            }
            if awaiting_ack && !stalled && Instant::now() >= next_beat {
                // A beat went unanswered for a whole interval: the connection is a zombie.
                tracing::info!(
                    platform = PLATFORM,
                    "no heartbeat ACK from the Gateway; reconnecting to resume"
                );
                close(&mut ws, CLOSE_TO_RESUME).await;
                return End::Resume { asked: false };
            }
            let heartbeat = json!({"op": 1, "d": self.seq}).to_string();
            if ws.send(Message::text(heartbeat)).await.is_err() {
                return End::Resume { asked: false };
            }
            awaiting_ack = true;
            stalled = self.pending.is_some();
            // A beat the Gateway asked for (op 1) does not move the schedule.
            if Instant::now() >= next_beat {
                next_beat = Instant::now() + interval;
            }
        }
    }

    /// The Gateway's address from `GET /gateway/bot` (which also proves the token).
    async fn gateway_url(&self) -> Result<String, End> {
        match self
            .rest
            .call(Method::GET, "get gateway", "/gateway/bot", None, true)
            .await
        {
            Ok(v) => v["url"]
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| End::Failed("GET /gateway/bot gave no url".to_string())),
            Err(ChannelError::Refused { why, .. }) => Err(End::Refused(format!(
                "GET /gateway/bot: {why}\nhelp: check the bot token (Developer Portal → \
                 the application → Bot → Reset Token) and the API base"
            ))),
            Err(e) => Err(End::Failed(e.to_string())),
        }
    }

    fn on_payload(&mut self, text: &str, good: &mut bool) -> Step {
        // A payload this client cannot read is skipped, not fatal.
        let Ok(p) = serde_json::from_str::<Payload>(text) else {
            return Step::Go;
        };
        match p.op {
            0 => {
                if let Some(s) = p.s {
                    self.seq = Some(s);
                }
                match p.t.as_deref() {
                    Some("READY") => {
                        if let Some(me) = p.d["user"]["id"]
                            .as_str()
                            .filter(|id| snowflake(id, "the bot id").is_ok())
                        {
                            lock(&self.health).bot_id = Some(me.to_string());
                        }
                        let id = p.d["session_id"].as_str();
                        let url = p.d["resume_gateway_url"].as_str();
                        if let (Some(id), Some(url)) = (id, url) {
                            self.session = Some(Session {
                                id: id.to_string(),
                                resume_url: url.to_string(),
                            });
                        }
                        *good = true;
                    }
                    Some("RESUMED") => *good = true,
                    Some("MESSAGE_CREATE") => self.hand_out(message_event(p.d)),
                    Some("INTERACTION_CREATE") => self.hand_out(press_event(p.d)),
                    _ => {}
                }
                Step::Go
            }
            1 => Step::HeartbeatNow,
            7 => Step::End(End::Resume { asked: true }),
            // `d` says whether the session can be resumed.
            9 if p.d.as_bool() == Some(true) => Step::End(End::Resume { asked: false }),
            9 => Step::End(End::Fresh),
            11 => Step::Acked,
            _ => Step::Go,
        }
    }

    fn hand_out(&mut self, event: Option<(String, Inbound)>) {
        if let Some((key, event)) = event {
            if self.seen.insert(key) {
                self.pending = Some(event);
            }
        }
    }
}

/// Wait for Hello (op 10); its heartbeat interval.
async fn hello(ws: &mut Socket) -> Result<Duration, End> {
    while let Some(frame) = ws.next().await {
        match frame {
            Ok(Message::Text(text)) => {
                let Ok(p) = serde_json::from_str::<Payload>(&text) else {
                    continue;
                };
                if p.op == 10 {
                    let ms = p.d["heartbeat_interval"].as_u64().unwrap_or(0);
                    if ms == 0 {
                        return Err(End::Failed(
                            "the Gateway's Hello has no heartbeat interval".to_string(),
                        ));
                    }
                    // A floor, so that a bad Hello cannot make this a busy loop.
                    return Ok(Duration::from_millis(ms).max(MIN_HEARTBEAT));
                }
            }
            Ok(Message::Close(frame)) => return Err(after_close_before_hello(frame)),
            Ok(_) => {}
            Err(e) => return Err(End::Failed(format!("the Gateway before Hello: {e}"))),
        }
    }
    Err(End::Failed(
        "the Gateway closed the connection before Hello".to_string(),
    ))
}

fn after_close_before_hello(frame: Option<CloseFrame>) -> End {
    match frame.as_ref().map(|f| u16::from(f.code)) {
        Some(c @ (4004 | 4010..=4014)) => End::Refused(refusal(c)),
        c => End::Failed(format!(
            "the Gateway closed the connection before Hello ({})",
            c.map_or("no code".to_string(), |c| c.to_string())
        )),
    }
}

/// What a close from the Gateway means for the next connection.
fn after_close(frame: Option<CloseFrame>, rest: &Rest) -> End {
    let Some(frame) = frame else {
        return End::Resume { asked: false };
    };
    let code = u16::from(frame.code);
    match code {
        4004 | 4010..=4014 => End::Refused(refusal(code)),
        // An invalid sequence number, or a session that timed out: start a new one.
        4007 | 4009 => End::Fresh,
        _ => {
            let reason: String = rest
                .redact(frame.reason.to_string())
                .chars()
                .take(200)
                .collect();
            tracing::info!(
                platform = PLATFORM, code, %reason,
                "the Gateway closed the connection; resuming"
            );
            End::Resume { asked: false }
        }
    }
}

/// Why a close code that says "do not reconnect" was given, and what to do about it.
fn refusal(code: u16) -> String {
    let (what, help) = match code {
        4004 => (
            "the bot token was refused (4004 Authentication failed)",
            "check the bot token (Developer Portal → the application → Bot → Reset Token)",
        ),
        4010 | 4011 => (
            "the shard was refused (4010 Invalid shard / 4011 Sharding required)",
            "this adapter runs one shard: a bot in that many servers needs sharding",
        ),
        4012 => (
            "the API version was refused (4012 Invalid API version)",
            "this adapter speaks Gateway v10",
        ),
        4013 => (
            "the intents were refused (4013 Invalid intents)",
            "this adapter asks for GUILD_MESSAGES, DIRECT_MESSAGES and MESSAGE_CONTENT",
        ),
        _ => (
            "an intent is not enabled for the bot (4014 Disallowed intents)",
            "turn on Message Content Intent (Developer Portal → the application → Bot → \
             Privileged Gateway Intents)",
        ),
    };
    format!("{what}\nhelp: {help}")
}

/// Close the connection, with `code`, without waiting long for a peer that may be gone.
async fn close(ws: &mut Socket, code: u16) {
    let frame = CloseFrame {
        code: CloseCode::from(code),
        reason: "".into(),
    };
    let _ = timeout(Duration::from_secs(1), ws.close(Some(frame))).await;
}

/// `url` with the version and encoding, and only over TLS: the token goes through it.
fn gateway_address(url: &str) -> Result<String, String> {
    let mut u = url::Url::parse(url).map_err(|e| format!("the Gateway URL is not a URL: {e}"))?;
    if u.scheme() != "wss" {
        return Err(format!(
            "the Gateway URL has scheme `{}`, not wss: the token would travel in the clear",
            u.scheme()
        ));
    }
    u.set_query(Some("v=10&encoding=json"));
    Ok(u.to_string())
}

/// A number in [0, 1), random enough to spread heartbeats and reconnects.
fn jitter() -> f64 {
    use std::hash::BuildHasher;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let bits = std::collections::hash_map::RandomState::new().hash_one(nanos);
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

#[derive(Deserialize)]
struct User {
    id: String,
    #[serde(default)]
    username: String,
    #[serde(default)]
    bot: bool,
}

fn sender(u: &User) -> Sender {
    Sender {
        id: u.id.clone(),
        display: u.username.clone(),
    }
}

#[derive(Deserialize)]
struct MessageCreate {
    id: String,
    channel_id: String,
    guild_id: Option<String>,
    author: User,
    #[serde(default)]
    content: String,
    #[serde(rename = "type", default)]
    kind: u64,
    webhook_id: Option<String>,
}

/// A person's message: its dedup key and the event.
fn message_event(d: Value) -> Option<(String, Inbound)> {
    let m: MessageCreate = serde_json::from_value(d).ok()?;
    // Bots (this one included) and webhooks are not people; only default messages (0) and
    // replies (19) are someone talking, not a join, a pin or a call.
    if m.author.bot || m.webhook_id.is_some() || !matches!(m.kind, 0 | 19) {
        return None;
    }
    if m.content.is_empty() {
        return None;
    }
    Some((
        format!("m:{}", m.id),
        Inbound::Message {
            chat: ChatId(m.channel_id),
            private: m.guild_id.is_none(),
            from: sender(&m.author),
            text: m.content,
            // A forward's words are in its snapshots, which are not read (its own content
            // is empty, and skipped above): `content` is what the author wrote.
            passed_on_from: None,
        },
    ))
}

#[derive(Deserialize)]
struct Interaction {
    id: String,
    token: String,
    #[serde(rename = "type")]
    kind: u64,
    channel_id: Option<String>,
    data: Option<ComponentData>,
    message: Option<MessageRef>,
    member: Option<Member>,
    user: Option<User>,
}

#[derive(Deserialize)]
struct ComponentData {
    custom_id: String,
}

#[derive(Deserialize)]
struct MessageRef {
    id: String,
    channel_id: Option<String>,
}

#[derive(Deserialize)]
struct Member {
    user: Option<User>,
}

/// A button press (an interaction of type 3, MESSAGE_COMPONENT): its dedup key and the
/// event. The press id carries the interaction's id and token, which answering needs.
fn press_event(d: Value) -> Option<(String, Inbound)> {
    let i: Interaction = serde_json::from_value(d).ok()?;
    if i.kind != 3 {
        return None;
    }
    // In a server the presser is `member.user`, in a DM `user`.
    let user = i.member.and_then(|m| m.user).or(i.user)?;
    let message = i.message?;
    let chat = i.channel_id.or(message.channel_id)?;
    if user.bot {
        return None;
    }
    Some((
        format!("i:{}", i.id),
        Inbound::Press {
            press_id: format!("{}:{}", i.id, i.token),
            chat: ChatId(chat),
            message_id: message.id,
            from: sender(&user),
            data: i.data?.custom_id,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unescape(s: &str) -> String {
        let mut out = String::new();
        let mut chars = s.chars();
        while let Some(c) = chars.next() {
            if c == '\\' {
                out.extend(chars.next());
            } else {
                out.push(c);
            }
        }
        out
    }

    #[test]
    fn markup_mentions_and_links_are_escaped_and_come_back_unescaped() {
        let raw =
            "**b** __u__ ~~s~~ ||x|| `c` > q # h -# t [t](http://e) <@1> <t:1> @everyone :e: 1. \\";
        let e = escape_markdown(raw);
        for bad in ["**", "||", "](", "<@", "@everyone", "://", "# h", "`c`"] {
            let bare = e.match_indices(bad).any(|(i, _)| !e[..i].ends_with('\\'));
            assert!(!bare, "{bad} survived in {e}");
        }
        assert_eq!(unescape(&e), raw);
        assert_eq!(
            escape_markdown("plain words, 3 of them"),
            "plain words, 3 of them"
        );
    }

    #[test]
    fn parts_fit_after_escaping_even_when_every_character_doubles() {
        for text in ["*".repeat(5000), "a".repeat(5000), "ab*\n".repeat(2000)] {
            let parts = escaped_parts(&text);
            let n = parts.len();
            let mut joined = String::new();
            for (k, p) in parts.iter().enumerate() {
                assert!(p.chars().count() <= MESSAGE_LIMIT, "{}", p.chars().count());
                let plain = unescape(p);
                let marker = format!("({}/{n}) ", k + 1);
                joined.push_str(plain.strip_prefix(&marker).expect("numbered"));
            }
            assert_eq!(joined, text);
        }
        assert_eq!(escaped_parts("a").len(), 1);
        // Plain text is not split more than it must be.
        assert_eq!(escaped_parts(&"a".repeat(3900)).len(), 2);
    }

    #[test]
    fn a_cut_text_keeps_whole_escapes() {
        let e = escape_within(&"*".repeat(3000), MESSAGE_LIMIT);
        assert!(e.chars().count() <= MESSAGE_LIMIT);
        assert!(e.ends_with("\\*…"), "{}", &e[e.len() - 10..]);
    }

    #[test]
    fn gateway_dispatches_that_are_not_people_talking_are_skipped() {
        let msg = |extra: Value| {
            let mut d = json!({"id": "1", "channel_id": "2", "type": 0, "content": "hi",
                               "author": {"id": "3", "username": "u"}});
            for (k, v) in extra.as_object().unwrap() {
                d[k] = v.clone();
            }
            message_event(d)
        };
        assert!(msg(json!({})).is_some());
        assert!(msg(json!({"type": 19})).is_some());
        assert!(msg(json!({"type": 7})).is_none());
        assert!(msg(json!({"author": {"id": "3", "username": "u", "bot": true}})).is_none());
        assert!(msg(json!({"webhook_id": "9"})).is_none());
        assert!(msg(json!({"content": 5})).is_none());
        assert!(message_event(json!("not an object")).is_none());
        assert!(press_event(json!({"id": "1", "token": "t", "type": 2})).is_none());
    }

    #[test]
    fn ids_that_are_not_snowflakes_are_refused() {
        assert!(snowflake("123", "x").is_ok());
        for bad in ["", "12/../34", "1 2", "abc", &"9".repeat(21)] {
            assert!(snowflake(bad, "x").is_err(), "{bad}");
        }
    }

    #[test]
    fn the_gateway_address_is_versioned_and_tls_only() {
        assert_eq!(
            gateway_address("wss://gateway.discord.gg").unwrap(),
            "wss://gateway.discord.gg/?v=10&encoding=json"
        );
        assert!(gateway_address("ws://gateway.discord.gg").is_err());
        assert!(gateway_address("not a url").is_err());
    }
}
