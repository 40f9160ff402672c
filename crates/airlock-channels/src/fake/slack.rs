//! A local stand-in for Slack, for tests: the Web API methods the adapter calls and
//! Socket Mode (`apps.connections.open`, `hello`, envelopes, acknowledgements, redelivery,
//! `disconnect`) over HTTPS and WSS on a loopback port, with a log of what the adapter did.
//!
//! Like Slack, it keeps an envelope until it is acknowledged: one not acknowledged within
//! the ack timeout (3 s) is sent again, up to three times, and one whose connection drops
//! is sent again on the next connection, each time with `retry_attempt` one higher.
//! Blocks and texts that break Block Kit's documented limits are refused
//! (`invalid_blocks`, `msg_too_long`), so the adapter's limits are tested for real.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use super::tls::{serve, TestTls};

/// Timed redeliveries of one envelope before the fake stops (a new connection still
/// gets it).
const MAX_RETRIES: u64 = 3;
/// How long a connection asked to leave stays open before the fake cuts it.
const LEAVE_GRACE: Duration = Duration::from_secs(10);

struct Pending {
    envelope_id: String,
    envelope: Value,
    retries: u64,
    /// The connection it went out on, and when.
    sent: Option<(usize, Instant)>,
}

/// A message the adapter posted.
struct Posted {
    channel: String,
    thread_ts: Option<String>,
    blocks: Value,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    pending: VecDeque<Pending>,
    /// Frames without an envelope id, sent once.
    raw: Vec<String>,
    acked: Vec<String>,
    deliveries: Vec<(String, u64)>,
    calls: Vec<(String, Value)>,
    posted: HashMap<String, Posted>,
    tickets: HashSet<String>,
    connections: usize,
    live: HashSet<usize>,
    /// Connections up to this one are to be cut.
    cut_upto: usize,
    disconnect: HashSet<usize>,
    /// Connections asked to leave, and since when: nothing more is delivered on them.
    leaving: HashMap<usize, Instant>,
    /// Connections the adapter closed while a newer one was open.
    handovers: usize,
    ping: HashSet<usize>,
    pongs: usize,
    rate_limited: usize,
    ack_timeout: Option<Duration>,
    /// Uploads asked for (file id → name and length), then their bytes once sent.
    uploads: HashMap<String, (String, usize, Option<Vec<u8>>)>,
    /// Files completed into a chat: channel (with `/thread` for a thread), name, bytes.
    files: Vec<(String, String, Vec<u8>)>,
}

struct Shared {
    app_token: String,
    bot_token: String,
    port: OnceLock<u16>,
    inner: Mutex<Inner>,
    changed: tokio::sync::Notify,
}

/// Slack on a loopback port: see the module's documentation.
pub struct FakeSlack {
    shared: Arc<Shared>,
    port: u16,
    tls: TestTls,
}

impl FakeSlack {
    /// Serve on 127.0.0.1 over HTTPS for an app with these tokens.
    pub fn start(app_token: &str, bot_token: &str) -> FakeSlack {
        let shared = Arc::new(Shared {
            app_token: app_token.to_string(),
            bot_token: bot_token.to_string(),
            port: OnceLock::new(),
            inner: Mutex::new(Inner {
                next_id: 1,
                ..Inner::default()
            }),
            changed: tokio::sync::Notify::new(),
        });
        let app = Router::new()
            .route("/api/{method}", post(api))
            .route("/upload/{file_id}", post(upload))
            .route("/link/", get(link))
            .with_state(shared.clone());
        let tls = TestTls::new();
        let port = serve(app, Some(&tls));
        let _ = shared.port.set(port);
        FakeSlack { shared, port, tls }
    }

    /// The root the fake's certificate chains to.
    pub fn ca_pem(&self) -> String {
        self.tls.ca_pem.clone()
    }

    /// The Web API's root, for [`crate::slack::Slack::new`].
    pub fn api_base(&self) -> String {
        format!("https://127.0.0.1:{}/api", self.port)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.shared.inner.lock().unwrap()
    }

    fn changed(&self) {
        self.shared.changed.notify_waiters();
    }

    /// Queue an envelope of `kind` around `payload(id)`; its envelope id.
    fn push(&self, kind: &str, payload: impl FnOnce(&mut Inner, u64) -> Value) -> String {
        let mut inner = self.lock();
        let id = inner.next_id;
        inner.next_id += 1;
        let envelope_id = format!("env-{id:04}-{:08x}", id.wrapping_mul(2654435761));
        let payload = payload(&mut inner, id);
        inner.pending.push_back(Pending {
            envelope_id: envelope_id.clone(),
            envelope: json!({
                "envelope_id": envelope_id, "type": kind, "payload": payload,
                "accepts_response_payload": false, "retry_attempt": 0, "retry_reason": "",
            }),
            retries: 0,
            sent: None,
        });
        drop(inner);
        self.changed();
        envelope_id
    }

    /// An Events API envelope around `event` (any event, as Slack would send it); the
    /// envelope's id.
    pub fn push_event(&self, event: Value) -> String {
        self.push("events_api", |_, id| {
            json!({
                "token": "fake-verification-token", "team_id": "T0FAKE", "api_app_id": "A0FAKE",
                "type": "event_callback", "event_id": format!("Ev{id:08}"), "event_time": 1_700_000_000,
                "event": event,
            })
        })
    }

    /// A person's message in `channel` (a direct message when `private`), escaped as Slack
    /// escapes it; the envelope's id.
    pub fn push_message(&self, channel: &str, user: &str, text: &str, private: bool) -> String {
        let ts = self.next_ts();
        self.push_event(json!({
            "type": "message", "channel": channel, "user": user, "text": slack_escape(text),
            "ts": ts, "event_ts": ts, "team": "T0FAKE",
            "channel_type": if private { "im" } else { "channel" },
        }))
    }

    /// A reply in the thread under `thread_ts` of `channel`; the envelope's id.
    pub fn push_thread_message(
        &self,
        channel: &str,
        thread_ts: &str,
        user: &str,
        text: &str,
    ) -> String {
        let ts = self.next_ts();
        self.push_event(json!({
            "type": "message", "channel": channel, "user": user, "text": slack_escape(text),
            "ts": ts, "event_ts": ts, "thread_ts": thread_ts, "team": "T0FAKE",
            "channel_type": "channel", "parent_user_id": "U0PARENT",
        }))
    }

    /// A press by `user` on the button with `value` of message `message_ts` in `channel`.
    /// When the adapter posted that message, the payload carries its thread and button
    /// as Slack's would. The envelope's id.
    pub fn push_press(&self, channel: &str, message_ts: &str, user: &str, value: &str) -> String {
        self.push("interactive", |inner, id| {
            let posted = inner.posted.get(message_ts);
            let thread = posted.and_then(|p| p.thread_ts.clone());
            let button = posted
                .and_then(|p| p.blocks.as_array())
                .into_iter()
                .flatten()
                .filter_map(|b| b["elements"].as_array())
                .flatten()
                .find(|e| e["value"] == value)
                .cloned()
                .unwrap_or_else(
                    || json!({"action_id": "unknown", "text": {"type": "plain_text", "text": "?"}}),
                );
            let mut message = json!({"type": "message", "ts": message_ts, "user": "U0BOT",
                                     "bot_id": "B0FAKE", "text": "a card"});
            let mut container = json!({"type": "message", "message_ts": message_ts,
                                       "channel_id": channel, "is_ephemeral": false});
            if let Some(t) = &thread {
                message["thread_ts"] = t.as_str().into();
                container["thread_ts"] = t.as_str().into();
            }
            json!({
                "type": "block_actions", "api_app_id": "A0FAKE", "token": "fake-verification-token",
                "user": {"id": user, "username": "someone", "name": "someone", "team_id": "T0FAKE"},
                "team": {"id": "T0FAKE", "domain": "fake"},
                "container": container, "channel": {"id": channel, "name": "a-channel"},
                "message": message, "trigger_id": format!("{id}.1.fake-trigger"),
                "response_url": "https://127.0.0.1/actions/fake",
                "actions": [{"type": "button", "action_id": button["action_id"], "block_id": "b",
                             "text": button["text"], "value": value, "action_ts": "1700000000.1"}],
            })
        })
    }

    /// A frame as it is: one with a string `envelope_id` is kept until acknowledged like
    /// any envelope, anything else (not JSON, say) is sent once.
    pub fn push_raw(&self, frame: &str) {
        let mut inner = self.lock();
        match serde_json::from_str::<Value>(frame) {
            Ok(v) if v["envelope_id"].is_string() => inner.pending.push_back(Pending {
                envelope_id: v["envelope_id"].as_str().unwrap().to_string(),
                envelope: v,
                retries: 0,
                sent: None,
            }),
            _ => inner.raw.push(frame.to_string()),
        }
        drop(inner);
        self.changed();
    }

    fn next_ts(&self) -> String {
        let mut inner = self.lock();
        inner.next_id += 1;
        format!("1700000000.{:06}", inner.next_id * 100)
    }

    /// Cut every open connection without a word, as a network failure does.
    pub fn drop_connections(&self) {
        let mut inner = self.lock();
        inner.cut_upto = inner.connections;
        drop(inner);
        self.changed();
    }

    /// Ask the newest connection to go: `{"type":"disconnect","reason":"refresh_requested"}`.
    /// Like Slack, the fake delivers nothing more on it, and cuts it after ten seconds.
    pub fn send_disconnect(&self) {
        let mut inner = self.lock();
        if let Some(&current) = inner.live.iter().max() {
            inner.disconnect.insert(current);
        }
        drop(inner);
        self.changed();
    }

    /// How many connections the adapter closed itself after opening a newer one (as Slack
    /// advises on a disconnect request).
    pub fn handovers(&self) -> usize {
        self.lock().handovers
    }

    /// Send a WebSocket ping on the newest connection.
    pub fn ping(&self) {
        let mut inner = self.lock();
        if let Some(&current) = inner.live.iter().max() {
            inner.ping.insert(current);
        }
        drop(inner);
        self.changed();
    }

    /// Pongs received.
    pub fn pongs(&self) -> usize {
        self.lock().pongs
    }

    /// How long an envelope may go unacknowledged before it is sent again (Slack's 3 s
    /// unless set).
    pub fn set_ack_timeout(&self, timeout: Duration) {
        self.lock().ack_timeout = Some(timeout);
    }

    /// The next `n` Web API calls are answered `429` with `Retry-After: 7`.
    pub fn rate_limit(&self, n: usize) {
        self.lock().rate_limited = n;
    }

    /// How many Socket Mode connections have opened.
    pub fn connections(&self) -> usize {
        self.lock().connections
    }

    /// Every acknowledgement received, in order (an envelope may be acknowledged twice).
    pub fn acked(&self) -> Vec<String> {
        self.lock().acked.clone()
    }

    /// Every envelope sent, with its `retry_attempt`.
    pub fn deliveries(&self) -> Vec<(String, u64)> {
        self.lock().deliveries.clone()
    }

    /// Every Web API call the adapter made (but those refused for their token), in
    /// order: the method and its body as JSON (a `chat.postMessage` with the `ts` it was
    /// given added as `sent_ts`).
    pub fn calls(&self) -> Vec<(String, Value)> {
        self.lock().calls.clone()
    }

    /// The files completed into chats so far: channel (`C…/ts` in a thread), name, bytes.
    pub fn files(&self) -> Vec<(String, String, Vec<u8>)> {
        self.lock().files.clone()
    }

    /// Every call of `method`.
    pub fn calls_of(&self, method: &str) -> Vec<Value> {
        self.calls()
            .into_iter()
            .filter(|(m, _)| m == method)
            .map(|(_, b)| b)
            .collect()
    }

    /// Wait up to a minute for a call of `method` whose body satisfies `pred`.
    pub fn wait_for(&self, method: &str, pred: impl Fn(&Value) -> bool) -> Value {
        super::wait_for_call(method, || self.calls(), |m| m == method, pred)
    }
}

/// Slack's escaping of message text.
fn slack_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn refused(error: &str) -> Response {
    Json(json!({"ok": false, "error": error})).into_response()
}

/// A body as Slack takes it: JSON, or a form whose `blocks` is JSON in a string.
fn read_body(headers: &HeaderMap, body: &[u8]) -> Option<Value> {
    let kind = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if kind.starts_with("application/json") {
        return serde_json::from_slice(body).ok();
    }
    let mut fields = serde_json::Map::new();
    for (k, v) in url::form_urlencoded::parse(body) {
        let value = match k.as_ref() {
            "blocks" | "mrkdwn" => serde_json::from_str(&v).unwrap_or(Value::String(v.into())),
            _ => Value::String(v.into_owned()),
        };
        fields.insert(k.into_owned(), value);
    }
    Some(Value::Object(fields))
}

/// The fake app's bot user (`auth.test`): a message mentions it as `<@U0AIRLOCK>`.
pub const BOT_USER_ID: &str = "U0AIRLOCK";

/// The upload URL `files.getUploadURLExternal` gave: the file's bytes, as a form's
/// `file`, of exactly the length that was announced.
async fn upload(
    State(s): State<Arc<Shared>>,
    Path(file_id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(fields) = super::form_fields(&headers, body).await else {
        return (StatusCode::BAD_REQUEST, "not a form").into_response();
    };
    let Some(file) = fields.into_iter().find(|f| f.name == "file") else {
        return (StatusCode::BAD_REQUEST, "no file").into_response();
    };
    let mut inner = s.inner.lock().unwrap();
    match inner.uploads.get_mut(&file_id) {
        Some((_, length, stored)) if *length == file.bytes.len() && stored.is_none() => {
            *stored = Some(file.bytes);
            (StatusCode::OK, "OK - 17").into_response()
        }
        Some(_) => (StatusCode::BAD_REQUEST, "length mismatch").into_response(),
        None => (StatusCode::NOT_FOUND, "no such upload").into_response(),
    }
}

async fn api(
    State(s): State<Arc<Shared>>,
    Path(method): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(body) = read_body(&headers, &body) else {
        return refused("invalid_json");
    };
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string)
        .or_else(|| body["token"].as_str().map(str::to_string));
    let Some(token) = token else {
        return refused("not_authed");
    };
    let wanted = if method == "apps.connections.open" {
        &s.app_token
    } else {
        &s.bot_token
    };
    if &token != wanted {
        let other = [&s.app_token, &s.bot_token].contains(&&token);
        return refused(if other {
            "not_allowed_token_type"
        } else {
            "invalid_auth"
        });
    }
    let mut inner = s.inner.lock().unwrap();
    if inner.rate_limited > 0 {
        inner.rate_limited -= 1;
        return (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, "7")],
            Json(json!({"ok": false, "error": "ratelimited"})),
        )
            .into_response();
    }
    inner.calls.push((method.clone(), body.clone()));
    match method.as_str() {
        "apps.connections.open" => {
            inner.next_id += 1;
            let ticket = format!("ticket-{}", inner.next_id);
            inner.tickets.insert(ticket.clone());
            let port = s.port.get().copied().unwrap_or_default();
            Json(
                json!({"ok": true, "url": format!("wss://127.0.0.1:{port}/link/?ticket={ticket}")}),
            )
            .into_response()
        }
        "chat.postMessage" | "chat.update" | "chat.postEphemeral" => {
            if let Err(e) = check_message(&body) {
                return refused(e);
            }
            let channel = body["channel"].as_str().unwrap_or_default().to_string();
            if method == "chat.postEphemeral" && !body["user"].is_string() {
                return refused("user_not_in_channel");
            }
            match method.as_str() {
                "chat.postMessage" => {
                    inner.next_id += 1;
                    let ts = format!("1700000000.{:06}", inner.next_id * 100);
                    let posted = Posted {
                        channel: channel.clone(),
                        thread_ts: body["thread_ts"].as_str().map(str::to_string),
                        blocks: body["blocks"].clone(),
                    };
                    inner.posted.insert(ts.clone(), posted);
                    // The log's entry (pushed under this same lock) gets the message's
                    // `ts`, for tests that press its buttons.
                    if let Some((_, logged)) = inner.calls.last_mut() {
                        logged["sent_ts"] = ts.clone().into();
                    }
                    Json(json!({"ok": true, "channel": channel, "ts": ts,
                                "message": {"type": "message", "text": body["text"], "ts": ts}}))
                    .into_response()
                }
                "chat.update" => {
                    let ts = body["ts"].as_str().unwrap_or_default().to_string();
                    let Some(posted) = inner.posted.get_mut(&ts) else {
                        return refused("message_not_found");
                    };
                    if posted.channel != channel {
                        return refused("message_not_found");
                    }
                    posted.blocks = body["blocks"].clone();
                    Json(json!({"ok": true, "channel": channel, "ts": ts, "text": body["text"]}))
                        .into_response()
                }
                _ => {
                    inner.next_id += 1;
                    let ts = format!("1700000000.{:06}", inner.next_id * 100);
                    Json(json!({"ok": true, "message_ts": ts})).into_response()
                }
            }
        }
        "files.getUploadURLExternal" => {
            let name = body["filename"].as_str().unwrap_or_default().to_string();
            let Some(length) = body["length"]
                .as_str()
                .and_then(|l| l.parse::<usize>().ok())
            else {
                return refused("invalid_arguments");
            };
            if name.is_empty() {
                return refused("invalid_arguments");
            }
            inner.next_id += 1;
            let id = format!("F0{:08}", inner.next_id);
            inner.uploads.insert(id.clone(), (name, length, None));
            let port = s.port.get().copied().unwrap_or_default();
            Json(json!({"ok": true, "file_id": id,
                        "upload_url": format!("https://127.0.0.1:{port}/upload/{id}")}))
            .into_response()
        }
        "files.completeUploadExternal" => {
            let Some(channel) = body["channel_id"].as_str().map(str::to_string) else {
                return refused("invalid_arguments");
            };
            let id = body["files"][0]["id"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let Some((name, _, Some(bytes))) = inner.uploads.remove(&id) else {
                return refused("file_not_found");
            };
            let chat = match body["thread_ts"].as_str() {
                Some(ts) => format!("{channel}/{ts}"),
                None => channel,
            };
            inner.files.push((chat, name, bytes));
            Json(json!({"ok": true, "files": [{"id": id}]})).into_response()
        }
        "auth.test" => Json(
            json!({"ok": true, "url": "https://fake.slack.test/", "team": "Fake",
                                   "user": "airlock", "team_id": "T0FAKE", "user_id": BOT_USER_ID,
                                   "bot_id": "B0FAKE"}),
        )
        .into_response(),
        _ => refused("unknown_method"),
    }
}

/// Slack's documented limits on a message's `text` and blocks.
fn check_message(body: &Value) -> Result<(), &'static str> {
    if body["channel"].as_str().is_none_or(str::is_empty) {
        return Err("channel_not_found");
    }
    let text = body["text"].as_str().unwrap_or_default();
    if text.chars().count() > 40_000 {
        // Slack truncates with a warning; refusing makes a cut visible.
        return Err("msg_too_long");
    }
    if !body["mrkdwn"].is_null() && !body["mrkdwn"].is_boolean() {
        return Err("invalid_arguments");
    }
    let blocks = match &body["blocks"] {
        Value::Null => Vec::new(),
        Value::Array(b) => b.clone(),
        _ => return Err("invalid_blocks"),
    };
    if text.is_empty() && blocks.is_empty() {
        return Err("no_text");
    }
    if blocks.len() > 50 {
        return Err("invalid_blocks");
    }
    let mut action_ids = HashSet::new();
    for block in &blocks {
        match block["type"].as_str() {
            Some("section") => check_text(&block["text"], 3000)?,
            Some("actions") => {
                let elements = block["elements"].as_array().ok_or("invalid_blocks")?;
                if elements.is_empty() || elements.len() > 25 {
                    return Err("invalid_blocks");
                }
                for e in elements {
                    if e["type"] != "button" {
                        return Err("invalid_blocks");
                    }
                    check_text(&e["text"], 75)?;
                    if e["text"]["type"] != "plain_text" {
                        return Err("invalid_blocks");
                    }
                    let id = e["action_id"].as_str().unwrap_or_default();
                    if id.chars().count() > 255 || (!id.is_empty() && !action_ids.insert(id)) {
                        return Err("invalid_blocks");
                    }
                    if !e["value"].is_null()
                        && e["value"]
                            .as_str()
                            .is_none_or(|v| v.is_empty() || v.chars().count() > 2000)
                    {
                        return Err("invalid_blocks");
                    }
                }
            }
            _ => return Err("invalid_blocks"),
        }
    }
    Ok(())
}

/// A text object: `plain_text` or `mrkdwn`, 1 to `max` characters.
fn check_text(t: &Value, max: usize) -> Result<(), &'static str> {
    let kind = t["type"].as_str().ok_or("invalid_blocks")?;
    let len = t["text"].as_str().map(|s| s.chars().count()).unwrap_or(0);
    let emoji_ok = t["emoji"].is_null() || (kind == "plain_text" && t["emoji"].is_boolean());
    if !["plain_text", "mrkdwn"].contains(&kind) || len == 0 || len > max || !emoji_ok {
        return Err("invalid_blocks");
    }
    Ok(())
}

async fn link(
    State(s): State<Arc<Shared>>,
    Query(q): Query<HashMap<String, String>>,
    ws: WebSocketUpgrade,
) -> Response {
    // A ticket is good for one connection.
    let known = q
        .get("ticket")
        .is_some_and(|t| s.inner.lock().unwrap().tickets.remove(t));
    if !known {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    ws.on_upgrade(move |socket| connection(socket, s))
}

/// A frame to send, and for an envelope what to record once it is out.
enum Outgoing {
    Frame(Message),
    Envelope(String, u64, Message),
}

impl Shared {
    /// What connection `me` is to send now, or `None` when it is to be cut. Envelopes
    /// only when `scan` (a change, or the ack timeout's tick), so a stream of
    /// acknowledgements does not rescan the queue each time.
    fn outgoing(&self, me: usize, scan: bool) -> Option<Vec<Outgoing>> {
        let mut inner = self.inner.lock().unwrap();
        let overstayed = inner
            .leaving
            .get(&me)
            .is_some_and(|at| at.elapsed() > LEAVE_GRACE);
        if me <= inner.cut_upto || overstayed {
            return None;
        }
        let mut out = Vec::new();
        if inner.ping.remove(&me) {
            out.push(Outgoing::Frame(Message::Ping(Bytes::from_static(b"fake"))));
        }
        if inner.disconnect.remove(&me) {
            inner.leaving.insert(me, Instant::now());
            let bye = json!({"type": "disconnect", "reason": "refresh_requested",
                             "debug_info": {"host": "fake"}});
            out.push(Outgoing::Frame(Message::text(bye.to_string())));
        }
        // Envelopes go to the newest connection only, and never to one asked to leave.
        let current = inner
            .live
            .iter()
            .filter(|c| !inner.leaving.contains_key(c))
            .max();
        if current != Some(&me) || !scan {
            return Some(out);
        }
        out.extend(
            inner
                .raw
                .drain(..)
                .map(|f| Outgoing::Frame(Message::text(f))),
        );
        let timeout = inner.ack_timeout.unwrap_or(Duration::from_secs(3));
        let now = Instant::now();
        let Inner {
            pending,
            live,
            leaving,
            ..
        } = &mut *inner;
        for p in pending.iter_mut() {
            let due = match p.sent {
                None => true,
                Some((conn, _)) if !live.contains(&conn) || leaving.contains_key(&conn) => true,
                Some((_, at)) => now - at >= timeout && p.retries < MAX_RETRIES,
            };
            if !due {
                continue;
            }
            if p.sent.is_some() {
                p.retries += 1;
                p.envelope["retry_attempt"] = p.retries.into();
                p.envelope["retry_reason"] = "timeout".into();
            }
            p.sent = Some((me, now));
            out.push(Outgoing::Envelope(
                p.envelope_id.clone(),
                p.retries,
                Message::text(p.envelope.to_string()),
            ));
        }
        Some(out)
    }

    fn on_frame(&self, text: &str) {
        let Ok(v) = serde_json::from_str::<Value>(text) else {
            return;
        };
        if let Some(id) = v["envelope_id"].as_str() {
            let mut inner = self.inner.lock().unwrap();
            inner.acked.push(id.to_string());
            // Acknowledgements come mostly in order: the front is where to look first.
            if let Some(at) = inner.pending.iter().position(|p| p.envelope_id == id) {
                inner.pending.remove(at);
            }
        }
    }
}

async fn connection(mut socket: WebSocket, s: Arc<Shared>) {
    let me = {
        let mut inner = s.inner.lock().unwrap();
        inner.connections += 1;
        let me = inner.connections;
        inner.live.insert(me);
        me
    };
    let hello = json!({"type": "hello", "num_connections": 1,
                       "debug_info": {"host": "fake", "approximate_connection_time": 18060},
                       "connection_info": {"app_id": "A0FAKE"}});
    let mut open = socket.send(Message::text(hello.to_string())).await.is_ok();
    // For the ack timeout, and for a leaving connection's grace.
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut scan = true;
    while open {
        let notified = s.changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        // Cut: dropping the socket closes it with no close frame.
        let Some(out) = s.outgoing(me, std::mem::take(&mut scan)) else {
            break;
        };
        for o in out {
            let (delivery, m) = match o {
                Outgoing::Frame(m) => (None, m),
                Outgoing::Envelope(id, retry, m) => (Some((id, retry)), m),
            };
            // Recorded once the socket took it: a client that stops reading holds this up.
            if socket.send(m).await.is_err() {
                open = false;
                break;
            }
            if let Some(d) = delivery {
                s.inner.lock().unwrap().deliveries.push(d);
            }
        }
        if !open {
            break;
        }
        tokio::select! {
            m = socket.recv() => match m {
                Some(Ok(Message::Text(t))) => s.on_frame(t.as_str()),
                Some(Ok(Message::Pong(_))) => s.inner.lock().unwrap().pongs += 1,
                Some(Ok(Message::Close(_))) => {
                    let mut inner = s.inner.lock().unwrap();
                    if inner.live.iter().any(|&c| c > me) {
                        inner.handovers += 1;
                    }
                    open = false;
                }
                Some(Err(_)) | None => open = false,
                Some(Ok(_)) => {}
            },
            _ = &mut notified => scan = true,
            _ = tick.tick() => scan = true,
        }
    }
    drop(socket);
    s.inner.lock().unwrap().live.remove(&me);
    // What went out on this connection unacknowledged goes out again on the next.
    s.changed.notify_waiters();
}
