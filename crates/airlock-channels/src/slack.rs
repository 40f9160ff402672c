//! Slack: Socket Mode for what arrives
//! (<https://docs.slack.dev/apis/events-api/using-socket-mode>), the Web API
//! (`chat.postMessage`, `chat.update`, `chat.postEphemeral`) for what goes out, and Block
//! Kit sections and buttons for cards.
//!
//! Two tokens: the app-level token (`xapp-…`) opens Socket Mode connections and does
//! nothing else; the bot token (`xoxb-…`) calls the Web API. Both travel only in
//! `Authorization` headers, and no error or log line of this module carries either.
//!
//! A thread is a chat of its own: `ChatId("C123/1700000000.000100")` is the thread under
//! that message of channel `C123`, and what is sent to it goes into the thread.
//!
//! Text goes out plain: `&`, `<` and `>` escaped as Slack requires and `mrkdwn` off in
//! `text`, and a `plain_text` section for what is shown, so `*bold*`, `<!channel>` or
//! `<https://evil|click>` in a payload are shown as the characters they are.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::{SinkExt, StreamExt};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

use crate::seen::Seen;
use crate::{split_text, Card, Channel, ChannelError, ChatId, Inbound, Sender};

const PLATFORM: &str = "slack";
/// The most characters of one message's `text` once escaped, and so of its `plain_text`
/// section: Block Kit takes 3,000 in a section, and Slack asks `text` to stay under 4,000.
pub const PART_LIMIT: usize = 3000;
/// Block Kit's limits on buttons: a value, a label, and buttons in one actions block.
const VALUE_LIMIT: usize = 2000;
const LABEL_LIMIT: usize = 75;
const BUTTONS_LIMIT: usize = 25;
/// Envelopes read and not yet handed out. When it is full the reader waits, so a flood
/// holds the socket back instead of growing memory.
const QUEUE: usize = 1024;
/// Ids remembered to recognize a redelivery.
const SEEN: usize = 4096;
const MIN_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How long a new connection may take to open and say `hello`.
const OPEN_WAIT: Duration = Duration::from_secs(15);
/// A quiet connection is pinged; one silent for `SILENCE_LIMIT` is taken for dead.
const PING_EVERY: Duration = Duration::from_secs(30);
const SILENCE_LIMIT: Duration = Duration::from_secs(120);
const DEFAULT_POLL: Duration = Duration::from_secs(25);

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The Slack adapter. It connects lazily, on the first [`Channel::next_events`].
pub struct Slack {
    api: Arc<Api>,
    poll: Duration,
    link: tokio::sync::Mutex<Option<Link>>,
    /// `<@U…>`, the bot user's mention, from `auth.test` before the first connection.
    mention: Mutex<Option<String>>,
}

impl Slack {
    /// `api_base` is the Web API's root (`https://slack.com/api`, or a local fake in
    /// tests); `extra_roots_pem` certificates to trust besides the webpki roots.
    pub fn new(
        api_base: &str,
        app_token: SecretString,
        bot_token: SecretString,
        extra_roots_pem: &[String],
    ) -> Result<Slack, ChannelError> {
        // The tokens go to this address: never over plain HTTP.
        let base = url::Url::parse(api_base)
            .ok()
            .filter(|u| u.scheme() == "https");
        if base.is_none() {
            return Err(unreachable(format!(
                "the API base `{api_base}` is not an https:// URL"
            )));
        }
        let http = crate::tls::http_client(PLATFORM, extra_roots_pem, Duration::from_secs(30))?;
        let tls = crate::tls::client_config(PLATFORM, extra_roots_pem)?;
        Ok(Slack {
            api: Arc::new(Api {
                base: api_base.trim_end_matches('/').to_string(),
                app_token,
                bot_token,
                http,
                tls,
                down: Mutex::new(None),
            }),
            poll: DEFAULT_POLL,
            link: tokio::sync::Mutex::new(None),
            mention: Mutex::new(None),
        })
    }

    /// How long [`Channel::next_events`] waits for a first event (25 s unless set).
    pub fn with_poll(mut self, poll: Duration) -> Slack {
        self.poll = poll;
        self
    }

    async fn post(
        &self,
        chat: &ChatId,
        part: &str,
        actions: Option<Vec<Value>>,
    ) -> Result<String, ChannelError> {
        let (channel, thread) = split_chat(chat);
        let mut blocks = section(part);
        // Block Kit refuses an actions block without elements.
        if let Some(elements) = actions.filter(|e| !e.is_empty()) {
            blocks.push(json!({"type": "actions", "elements": elements}));
        }
        let mut body = json!({
            "channel": channel, "text": escape(part), "mrkdwn": false, "blocks": blocks,
        });
        if let Some(ts) = thread {
            body["thread_ts"] = ts.into();
        }
        let answer = self
            .api
            .call(Token::Bot, "chat.postMessage", Some(&body))
            .await?;
        Ok(str_at(&answer, "/ts").unwrap_or_default().to_string())
    }
}

/// What the Web API calls and the Socket Mode task share.
struct Api {
    base: String,
    app_token: SecretString,
    bot_token: SecretString,
    http: reqwest::Client,
    tls: Arc<rustls::ClientConfig>,
    /// Why the last attempt to connect failed, until one succeeds.
    down: Mutex<Option<Down>>,
}

#[derive(Clone, Copy)]
enum Token {
    App,
    Bot,
}

/// A failed connection attempt, kept for `next_events` to report.
#[derive(Clone)]
enum Down {
    Refused(&'static str, String),
    Unreachable(String),
}

impl From<ChannelError> for Down {
    fn from(e: ChannelError) -> Down {
        match e {
            ChannelError::Refused { method, why, .. } => Down::Refused(method, why),
            ChannelError::Unreachable { why, .. } => Down::Unreachable(why),
            // Opening a connection was rate limited: the reader's backoff waits anyway.
            e @ ChannelError::RateLimited { .. } => Down::Unreachable(e.to_string()),
        }
    }
}

impl From<Down> for ChannelError {
    fn from(d: Down) -> ChannelError {
        match d {
            Down::Refused(method, why) => ChannelError::Refused {
                platform: PLATFORM,
                method,
                why,
            },
            Down::Unreachable(why) => unreachable(why),
        }
    }
}

fn unreachable(why: String) -> ChannelError {
    ChannelError::Unreachable {
        platform: PLATFORM,
        why,
    }
}

impl Api {
    /// Call a Web API method with a JSON body (a form with no fields when `None`).
    async fn call(
        &self,
        token: Token,
        method: &'static str,
        body: Option<&Value>,
    ) -> Result<Value, ChannelError> {
        self.call_with(token, method, |request| match body {
            Some(b) => request.json(b),
            None => request.header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            ),
        })
        .await
    }

    /// Call a Web API method whose body `build` sets (some methods take only a form).
    async fn call_with(
        &self,
        token: Token,
        method: &'static str,
        build: impl FnOnce(reqwest::RequestBuilder) -> reqwest::RequestBuilder,
    ) -> Result<Value, ChannelError> {
        let token = match token {
            Token::App => &self.app_token,
            Token::Bot => &self.bot_token,
        };
        // `bearer_auth` marks the header sensitive; the URL carries no secret.
        let request = build(
            self.http
                .post(format!("{}/{method}", self.base))
                .bearer_auth(token.expose_secret()),
        );
        let resp = request
            .send()
            .await
            .map_err(|e| unreachable(format!("{method}: {}", e.without_url())))?;
        let status = resp.status();
        if status == reqwest::StatusCode::TOO_MANY_REQUESTS {
            let after = resp
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok());
            return Err(ChannelError::RateLimited {
                platform: PLATFORM,
                method: method.to_string(),
                retry_after: after.map(std::time::Duration::from_secs),
            });
        }
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| unreachable(format!("{method}: {}", e.without_url())))?;
        let answer = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .filter(Value::is_object)
            .ok_or_else(|| {
                unreachable(format!(
                    "an answer to {method} that is not the Web API's JSON ({status})"
                ))
            })?;
        if answer.get("ok") != Some(&Value::Bool(true)) {
            let why = str_at(&answer, "/error").unwrap_or("no error given");
            return Err(ChannelError::Refused {
                platform: PLATFORM,
                method,
                why: why.chars().take(200).collect(),
            });
        }
        if let Some(warnings) = answer.pointer("/response_metadata/warnings") {
            tracing::warn!(method, warnings = %warnings, "Slack warned about a call");
        }
        Ok(answer)
    }

    fn set_down(&self, down: Option<Down>) {
        *self.down.lock().unwrap_or_else(|p| p.into_inner()) = down;
    }

    fn down(&self) -> Option<Down> {
        self.down.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// An envelope read from the socket, with what it carries for the host.
struct Delivered {
    envelope_id: String,
    event: Inbound,
}

/// The Socket Mode task and the two queues between it and `next_events`.
struct Link {
    events: mpsc::Receiver<Delivered>,
    /// Envelope ids to acknowledge, sent on whichever connection is up.
    acks: mpsc::UnboundedSender<String>,
    /// What the last `next_events` handed out: acknowledged by the next one.
    handed_out: Vec<String>,
    task: tokio::task::JoinHandle<()>,
}

impl Link {
    fn start(api: Arc<Api>) -> Link {
        let (events_tx, events) = mpsc::channel(QUEUE);
        let (acks, acks_rx) = mpsc::unbounded_channel();
        let reader = Reader {
            events: events_tx,
            acks: acks_rx,
            seen: Seen::new(SEEN),
        };
        Link {
            events,
            acks,
            handed_out: Vec::new(),
            task: tokio::spawn(run(api, reader)),
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Acknowledgements and duplicates.
///
/// Slack wants each envelope acknowledged within 3 s and redelivers the ones that are not
/// (with `retry_attempt`), also on a new connection after a drop. The `Channel` contract is
/// that what `next_events` returns is acknowledged at the next call, so a crash before the
/// host has handled an event makes Slack deliver it again. So: an event's envelope is
/// acknowledged when the next `next_events` begins; an envelope that carries nothing for
/// the host (a bot's message, an edit, something unreadable) is acknowledged at once.
///
/// When the host takes longer than 3 s between calls, Slack redelivers what is waiting.
/// The reader remembers the last ids it saw (envelope ids, events' `event_id`, presses'
/// `trigger_id`) and acknowledges a redelivery at once without handing it out again: the
/// original is already queued or with the host. The cost is that an event redelivered
/// this way and then lost in a crash before the next call is not asked for again; the
/// gain is that nothing is ever handed out twice.
struct Reader {
    events: mpsc::Sender<Delivered>,
    acks: mpsc::UnboundedReceiver<String>,
    seen: Seen,
}

/// Why a connection ended.
enum End {
    /// Slack asked for a new connection: open it before leaving this one.
    Disconnect,
    Dropped(String),
    /// The adapter is gone.
    Closed,
}

/// Keep a Socket Mode connection up for as long as the adapter lives.
async fn run(api: Arc<Api>, mut reader: Reader) {
    let mut backoff = MIN_BACKOFF;
    // A connection Slack asked us to leave, kept until the new one is up.
    let mut leaving: Option<Ws> = None;
    loop {
        let mut ws = match open(&api).await {
            Ok(ws) => ws,
            Err(down) => {
                if let Some(old) = leaving.take() {
                    close(old).await;
                }
                let why = match &down {
                    Down::Refused(method, why) => format!("{method}: {why}"),
                    Down::Unreachable(why) => why.clone(),
                };
                tracing::warn!(error = %why, retry_in = ?backoff, "Slack Socket Mode: cannot connect");
                api.set_down(Some(down));
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        api.set_down(None);
        backoff = MIN_BACKOFF;
        tracing::debug!("Slack Socket Mode: connected");
        if let Some(old) = leaving.take() {
            close(old).await;
        }
        match reader.serve(&mut ws).await {
            End::Closed => return,
            End::Disconnect => {
                tracing::debug!("Slack Socket Mode: Slack asked for a new connection");
                leaving = Some(ws);
            }
            End::Dropped(why) => {
                tracing::warn!(error = %why, retry_in = ?backoff, "Slack Socket Mode: the connection dropped");
                drop(ws);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

async fn close(mut ws: Ws) {
    let _ = tokio::time::timeout(Duration::from_secs(2), ws.close(None)).await;
}

/// Ask for a connection URL with the app token, connect, and wait for `hello`.
async fn open(api: &Api) -> Result<Ws, Down> {
    let answer = api.call(Token::App, "apps.connections.open", None).await?;
    let url = str_at(&answer, "/url").unwrap_or_default();
    // The ticket in the URL lets anyone read the app's events: never over plain text.
    if url::Url::parse(url)
        .ok()
        .is_none_or(|u| u.scheme() != "wss")
    {
        return Err(Down::Unreachable(
            "apps.connections.open answered without a wss:// URL".into(),
        ));
    }
    let connector = tokio_tungstenite::Connector::Rustls(api.tls.clone());
    let handshake = async {
        let (mut ws, _) =
            tokio_tungstenite::connect_async_tls_with_config(url, None, false, Some(connector))
                .await
                .map_err(|e| format!("the Socket Mode connection failed: {e}"))?;
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(t)))
                    if frame_type(t.as_str()).as_deref() == Some("hello") =>
                {
                    return Ok(ws)
                }
                // Slack says hello first; anything else before it is not ours to read.
                Some(Ok(Message::Close(_))) | None => {
                    return Err("the Socket Mode connection closed before hello".to_string())
                }
                Some(Err(e)) => return Err(format!("the Socket Mode connection failed: {e}")),
                Some(Ok(_)) => {}
            }
        }
    };
    match tokio::time::timeout(OPEN_WAIT, handshake).await {
        Ok(Ok(ws)) => Ok(ws),
        Ok(Err(why)) => Err(Down::Unreachable(why)),
        Err(_) => Err(Down::Unreachable(
            "the Socket Mode connection did not say hello in time".into(),
        )),
    }
}

fn frame_type(text: &str) -> Option<String> {
    let v: Value = serde_json::from_str(text).ok()?;
    Some(v.get("type")?.as_str()?.to_string())
}

impl Reader {
    /// Read envelopes and send acknowledgements until the connection ends.
    async fn serve(&mut self, ws: &mut Ws) -> End {
        let mut heard = Instant::now();
        let mut tick = tokio::time::interval(PING_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                ack = self.acks.recv() => {
                    let Some(id) = ack else { return End::Closed };
                    if let Err(e) = send_ack(ws, &id).await {
                        return End::Dropped(format!("acknowledging: {e}"));
                    }
                }
                frame = ws.next() => {
                    heard = Instant::now();
                    match frame {
                        Some(Ok(Message::Text(t))) => {
                            if let Some(end) = self.on_text(t.as_str(), ws).await {
                                return end;
                            }
                        }
                        // tungstenite queues the pong; flushing sends it now.
                        Some(Ok(Message::Ping(_))) => {
                            if let Err(e) = ws.flush().await {
                                return End::Dropped(format!("answering a ping: {e}"));
                            }
                        }
                        Some(Ok(Message::Close(_))) | None => {
                            return End::Dropped("Slack closed the connection".into())
                        }
                        Some(Err(e)) => return End::Dropped(e.to_string()),
                        Some(Ok(_)) => {}
                    }
                }
                _ = tick.tick() => {
                    if heard.elapsed() >= SILENCE_LIMIT {
                        return End::Dropped(format!("nothing heard for {} s", SILENCE_LIMIT.as_secs()));
                    }
                    if heard.elapsed() >= PING_EVERY {
                        if let Err(e) = ws.send(Message::Ping(Default::default())).await {
                            return End::Dropped(format!("pinging: {e}"));
                        }
                    }
                }
            }
        }
    }

    /// One text frame: `None` to go on reading.
    async fn on_text(&mut self, text: &str, ws: &mut Ws) -> Option<End> {
        let Ok(frame) = serde_json::from_str::<Value>(text) else {
            tracing::debug!("Slack Socket Mode: a frame that is not JSON");
            return None;
        };
        if str_at(&frame, "/type") == Some("disconnect") {
            return Some(End::Disconnect);
        }
        let envelope_id = str_at(&frame, "/envelope_id")?.to_string();
        let mut keys = vec![format!("envelope:{envelope_id}")];
        if let Some(id) = str_at(&frame, "/payload/event_id") {
            keys.push(format!("event:{id}"));
        }
        if let Some(id) = str_at(&frame, "/payload/trigger_id") {
            keys.push(format!("trigger:{id}"));
        }
        let event = if self.seen.contains_any(&keys) {
            None
        } else {
            keys.into_iter().for_each(|k| {
                self.seen.insert(k);
            });
            read_envelope(&frame)
        };
        match event {
            Some(event) => {
                // Waits while the queue is full: backpressure onto the socket.
                let delivered = Delivered { envelope_id, event };
                if self.events.send(delivered).await.is_err() {
                    return Some(End::Closed);
                }
            }
            None => {
                if let Err(e) = send_ack(ws, &envelope_id).await {
                    return Some(End::Dropped(format!("acknowledging: {e}")));
                }
            }
        }
        None
    }
}

async fn send_ack(ws: &mut Ws, envelope_id: &str) -> Result<(), String> {
    let ack = json!({"envelope_id": envelope_id}).to_string();
    ws.send(Message::text(ack)).await.map_err(|e| e.to_string())
}

/// What an envelope carries for the host, if anything.
fn read_envelope(frame: &Value) -> Option<Inbound> {
    let payload = frame.get("payload")?;
    match str_at(frame, "/type")? {
        "events_api" => read_message(payload.get("event")?),
        "interactive" => read_press(payload),
        _ => None,
    }
}

/// A person's plain message. Bots' messages and every subtype (edits, deletions, joins,
/// files, the adapter's own posts) are not for the host.
fn read_message(event: &Value) -> Option<Inbound> {
    let present = |k: &str| event.get(k).is_some_and(|v| !v.is_null());
    if str_at(event, "/type") != Some("message")
        || present("subtype")
        || present("bot_id")
        || event.get("hidden") == Some(&Value::Bool(true))
    {
        return None;
    }
    let channel = str_at(event, "/channel").filter(|c| valid_id(c))?;
    let user = str_at(event, "/user")?;
    let text = str_at(event, "/text")?;
    let ts = str_at(event, "/ts");
    // A reply in a thread; the thread's parent itself has thread_ts == ts.
    let thread = str_at(event, "/thread_ts").filter(|t| Some(*t) != ts);
    Some(Inbound::Message {
        chat: chat_id(channel, thread),
        private: str_at(event, "/channel_type") == Some("im"),
        from: sender(user),
        // Slack escapes &, < and >; the host gets the characters that were typed.
        text: unescape(text),
        // A shared message's words are in its attachments, which are not read: `text`
        // is what the sender wrote.
        passed_on_from: None,
    })
}

/// A press of a card's button (a `block_actions` payload).
fn read_press(payload: &Value) -> Option<Inbound> {
    if str_at(payload, "/type") != Some("block_actions") {
        return None;
    }
    let user = str_at(payload, "/user/id")?;
    let channel = str_at(payload, "/channel/id")
        .or_else(|| str_at(payload, "/container/channel_id"))
        .filter(|c| valid_id(c))?;
    let message_ts =
        str_at(payload, "/message/ts").or_else(|| str_at(payload, "/container/message_ts"))?;
    let thread = str_at(payload, "/message/thread_ts")
        .or_else(|| str_at(payload, "/container/thread_ts"))
        .filter(|t| *t != message_ts);
    let action = payload
        .get("actions")?
        .as_array()?
        .iter()
        .find(|a| str_at(a, "/type") == Some("button"))?;
    // What answer_press needs to reach the presser where they pressed.
    let press_id = json!([channel, thread.unwrap_or(""), user]).to_string();
    Some(Inbound::Press {
        press_id,
        chat: chat_id(channel, thread),
        message_id: message_ts.to_string(),
        from: sender(user),
        data: str_at(action, "/value").unwrap_or_default().to_string(),
    })
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

/// A channel id as a chat's first half: the `/` is the thread's separator.
fn valid_id(id: &str) -> bool {
    !id.is_empty() && !id.contains('/')
}

fn sender(user: &str) -> Sender {
    // Events carry no names; the id is what the host decides by anyway.
    Sender {
        id: user.to_string(),
        display: user.to_string(),
    }
}

fn chat_id(channel: &str, thread: Option<&str>) -> ChatId {
    match thread {
        Some(ts) => ChatId(format!("{channel}/{ts}")),
        None => ChatId(channel.to_string()),
    }
}

/// The channel, and the thread's `ts` when the chat is a thread.
fn split_chat(chat: &ChatId) -> (&str, Option<&str>) {
    match chat.0.split_once('/') {
        Some((channel, ts)) => (channel, Some(ts)),
        None => (&chat.0, None),
    }
}

/// `&`, `<` and `>` as Slack wants them in `text`, so nothing in it is markup.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let (c, len) = if rest.starts_with("&amp;") {
            ('&', 5)
        } else if rest.starts_with("&lt;") {
            ('<', 4)
        } else if rest.starts_with("&gt;") {
            ('>', 4)
        } else {
            ('&', 1)
        };
        out.push(c);
        rest = &rest[len..];
    }
    out.push_str(rest);
    out
}

/// `text` in numbered parts each of which, escaped, is at most `PART_LIMIT` characters.
/// Escaping can make a part up to five times longer (`&` is `&amp;`), so the parts shrink
/// until the longest fits; a fifth of the limit always does.
fn parts(text: &str) -> Vec<String> {
    let floor = PART_LIMIT / 5;
    let mut limit = PART_LIMIT;
    loop {
        let parts = split_text(text, limit);
        let longest = parts
            .iter()
            .map(|p| escape(p).chars().count())
            .max()
            .unwrap_or(0);
        if longest <= PART_LIMIT || limit <= floor {
            return parts;
        }
        limit = (limit * PART_LIMIT / longest).clamp(floor, limit - 1);
    }
}

/// The section that shows `part` as the characters it is (none for an empty part, which
/// Block Kit refuses).
fn section(part: &str) -> Vec<Value> {
    if part.trim().is_empty() {
        return Vec::new();
    }
    vec![json!({"type": "section", "text": {"type": "plain_text", "text": part, "emoji": false}})]
}

/// A card's buttons, refused rather than cut when Block Kit would not take them.
fn buttons(card: &Card) -> Result<Vec<Value>, ChannelError> {
    let refuse = |why: String| ChannelError::Refused {
        platform: PLATFORM,
        method: "chat.postMessage",
        why,
    };
    if card.buttons.len() > BUTTONS_LIMIT {
        return Err(refuse(format!(
            "a card has {} buttons; a Slack message takes at most {BUTTONS_LIMIT}",
            card.buttons.len()
        )));
    }
    card.buttons
        .iter()
        .enumerate()
        .map(|(k, (label, data))| {
            let chars = label.chars().count();
            if label.trim().is_empty() || chars > LABEL_LIMIT {
                return Err(refuse(format!(
                    "a button's label is {chars} characters; Slack takes 1 to {LABEL_LIMIT}"
                )));
            }
            let chars = data.chars().count();
            if chars > VALUE_LIMIT {
                return Err(refuse(format!(
                    "a button's data is {chars} characters; Slack takes at most {VALUE_LIMIT}"
                )));
            }
            let mut button = json!({
                "type": "button", "action_id": format!("airlock-{k}"),
                "text": {"type": "plain_text", "text": label, "emoji": false},
            });
            if !data.is_empty() {
                button["value"] = data.as_str().into();
            }
            Ok(button)
        })
        .collect()
}

#[async_trait]
impl Channel for Slack {
    fn name(&self) -> &'static str {
        PLATFORM
    }

    fn mention_forms(&self) -> Vec<String> {
        let known = self.mention.lock().unwrap_or_else(|p| p.into_inner());
        known.iter().filter(|m| m.len() > 3).cloned().collect()
    }

    fn thread_parent(&self, chat: &ChatId) -> Option<ChatId> {
        match split_chat(chat) {
            (channel, Some(_)) => Some(ChatId(channel.to_string())),
            (_, None) => None,
        }
    }

    async fn next_events(&self) -> Result<Vec<Inbound>, ChannelError> {
        // Who the bot is, for mentions in channels: asked once, with the bot token.
        if self
            .mention
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
        {
            let me = self.api.call(Token::Bot, "auth.test", None).await?;
            let id = str_at(&me, "/user_id")
                .filter(|id| valid_id(id))
                .unwrap_or_default();
            *self.mention.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!("<@{id}>"));
        }
        let mut guard = self.link.lock().await;
        let link = guard.get_or_insert_with(|| Link::start(self.api.clone()));
        // The host has had the last batch: Slack may forget it now (see `Reader`).
        for id in link.handed_out.drain(..) {
            let _ = link.acks.send(id);
        }
        let mut events = Vec::new();
        match tokio::time::timeout(self.poll, link.events.recv()).await {
            Err(_) => {}
            Ok(None) => {
                // The task is gone (its runtime stopped): start afresh next time.
                *guard = None;
                return Err(unreachable("the Socket Mode connection stopped".into()));
            }
            Ok(Some(first)) => {
                let mut next = Some(first);
                while let Some(d) = next {
                    link.handed_out.push(d.envelope_id);
                    events.push(d.event);
                    next = link.events.try_recv().ok();
                }
            }
        }
        if events.is_empty() {
            if let Some(down) = self.api.down() {
                return Err(down.into());
            }
        }
        Ok(events)
    }

    async fn send(&self, chat: &ChatId, text: &str) -> Result<String, ChannelError> {
        let mut last = String::new();
        for part in parts(text) {
            last = self.post(chat, &part, None).await?;
        }
        Ok(last)
    }

    /// Slack's upload in three steps: ask for an upload URL for this name and length,
    /// send the bytes there, and complete the upload into the chat (its thread too).
    async fn send_file(
        &self,
        chat: &ChatId,
        name: &str,
        bytes: &[u8],
    ) -> Result<String, ChannelError> {
        let length = bytes.len().to_string();
        let form = [("filename", name), ("length", length.as_str())];
        let ticket = self
            .api
            .call_with(Token::Bot, "files.getUploadURLExternal", |r| r.form(&form))
            .await?;
        let (Some(url), Some(file_id)) =
            (str_at(&ticket, "/upload_url"), str_at(&ticket, "/file_id"))
        else {
            return Err(unreachable(
                "files.getUploadURLExternal answered without an upload_url and file_id".into(),
            ));
        };
        // The file goes only over TLS, to the address Slack gave for it.
        if !url.starts_with("https://") {
            return Err(unreachable("the upload URL Slack gave is not https".into()));
        }
        let part = reqwest::multipart::Part::bytes(bytes.to_vec()).file_name(name.to_string());
        let upload = self
            .api
            .http
            .post(url)
            .multipart(reqwest::multipart::Form::new().part("file", part))
            .send()
            .await
            .map_err(|e| unreachable(format!("uploading a file: {}", e.without_url())))?;
        if !upload.status().is_success() {
            return Err(ChannelError::Refused {
                platform: PLATFORM,
                method: "file upload",
                why: format!("the upload URL answered {}", upload.status()),
            });
        }
        let (channel, thread) = split_chat(chat);
        let mut body = json!({"files": [{"id": file_id, "title": name}], "channel_id": channel});
        if let Some(ts) = thread {
            body["thread_ts"] = ts.into();
        }
        self.api
            .call(Token::Bot, "files.completeUploadExternal", Some(&body))
            .await?;
        Ok(file_id.to_string())
    }

    async fn send_card(&self, chat: &ChatId, card: &Card) -> Result<String, ChannelError> {
        // Checked before anything is posted, so a refused card leaves no stray parts.
        let buttons = buttons(card)?;
        let mut parts = parts(&card.text);
        let last = parts.pop().unwrap_or_default();
        for part in parts {
            self.post(chat, &part, None).await?;
        }
        self.post(chat, &last, Some(buttons)).await
    }

    async fn close_card(
        &self,
        chat: &ChatId,
        message_id: &str,
        text: &str,
    ) -> Result<(), ChannelError> {
        let (channel, _) = split_chat(chat);
        let mut parts = parts(text).into_iter();
        let first = parts.next().unwrap_or_default();
        // Blocks without an actions block: the buttons go.
        let body = json!({
            "channel": channel, "ts": message_id, "text": escape(&first), "blocks": section(&first),
        });
        self.api
            .call(Token::Bot, "chat.update", Some(&body))
            .await?;
        // An update cannot grow into several messages: the rest follows the card.
        for part in parts {
            self.post(chat, &part, None).await?;
        }
        Ok(())
    }

    async fn answer_press(&self, press_id: &str, text: &str) -> Result<(), ChannelError> {
        let Ok((channel, thread, user)) =
            serde_json::from_str::<(String, String, String)>(press_id)
        else {
            return Err(ChannelError::Refused {
                platform: PLATFORM,
                method: "chat.postEphemeral",
                why: "the press id was not made by this adapter".into(),
            });
        };
        // Slack has no answer to a press: a message only the presser sees stands in.
        for part in parts(text) {
            let mut body = json!({
                "channel": channel, "user": user, "text": escape(&part), "blocks": section(&part),
            });
            if !thread.is_empty() {
                body["thread_ts"] = thread.as_str().into();
            }
            self.api
                .call(Token::Bot, "chat.postEphemeral", Some(&body))
                .await?;
        }
        Ok(())
    }
}
