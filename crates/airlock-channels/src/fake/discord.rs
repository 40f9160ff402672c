//! A local stand-in for Discord, for tests: the REST API's routes the adapter uses and
//! the Gateway (Hello, Identify, READY, heartbeats and their ACKs, Resume with replay,
//! RESUMED, Reconnect, Invalid Session, close codes), in Discord's wire format over HTTPS
//! and WSS on a loopback port with a test CA. Dispatches the test queues are numbered per
//! session and kept, so a client that resumes gets what it missed.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::sync::{broadcast, Notify};

use super::tls::{serve, TestTls};

/// The fake bot's user id (`READY`): a message mentions it as `<@1000000000000000001>`.
pub const BOT_ID: &str = "1000000000000000001";
const CONTENT_LIMIT: usize = 2000;
const CUSTOM_ID_LIMIT: usize = 100;

/// What the test tells live Gateway connections to do.
#[derive(Clone, Copy, Debug)]
enum Control {
    Drop,
    Reconnect,
    Invalidate,
}

/// One Gateway session: its dispatches in order (sequence number = index + 1) and the
/// connection it is live on.
struct SessionLog {
    dispatches: Vec<Value>,
    live: u64,
}

#[derive(Default)]
struct Inner {
    heartbeat_ms: u64,
    sessions: HashMap<String, SessionLog>,
    /// The session new dispatches go to.
    current: Option<String>,
    /// Dispatches queued while there is no session, for the next one.
    unsessioned: Vec<(String, Value)>,
    calls: Vec<(String, Value)>,
    identifies: usize,
    resumes: usize,
    heartbeats: usize,
    acks_stopped: bool,
    next_id: u64,
    next_conn: u64,
    connected: usize,
    /// Interactions issued and not answered yet: id → token.
    interactions: HashMap<String, String>,
    answered: HashSet<String>,
    messages: HashSet<String>,
    close_next_identify: Option<u16>,
    replay_overlap: u64,
    rate_limited: usize,
    broken: usize,
    /// Files sent with messages: channel, file name, bytes.
    files: Vec<(String, String, Vec<u8>)>,
}

impl Inner {
    fn id(&mut self) -> String {
        self.next_id += 1;
        self.next_id.to_string()
    }
}

struct Shared {
    token: String,
    port: OnceLock<u16>,
    inner: Mutex<Inner>,
    /// A dispatch was queued or a session changed: connections look again.
    arrived: Notify,
    control: broadcast::Sender<Control>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap()
    }

    fn url(&self, path: &str) -> String {
        format!("wss://127.0.0.1:{}{path}", self.port.get().unwrap())
    }
}

pub struct FakeDiscord {
    shared: Arc<Shared>,
    tls: TestTls,
    port: u16,
}

impl FakeDiscord {
    /// Serve on 127.0.0.1 for bot `token` (another token gets 401 from the REST API and
    /// close code 4004 from the Gateway). The heartbeat interval is 500 ms.
    pub fn start(token: &str) -> FakeDiscord {
        let (control, _) = broadcast::channel(16);
        let shared = Arc::new(Shared {
            token: token.to_string(),
            port: OnceLock::new(),
            inner: Mutex::new(Inner {
                heartbeat_ms: 500,
                next_id: 1_200_000_000_000_000_000,
                ..Inner::default()
            }),
            arrived: Notify::new(),
            control,
        });
        let app = Router::new()
            .route("/api/v10/gateway/bot", get(gateway_bot))
            .route("/api/v10/channels/{channel}/messages", post(create_message))
            .route(
                "/api/v10/channels/{channel}/messages/{message}",
                patch(edit_message),
            )
            .route(
                "/api/v10/interactions/{id}/{token}/callback",
                post(interaction_callback),
            )
            .route("/gateway", get(gateway_first))
            .route("/gateway-resume", get(gateway_resume))
            .fallback(|| async { error(StatusCode::NOT_FOUND, 0, "404: Not Found") })
            .with_state(shared.clone());
        let tls = TestTls::new();
        let port = serve(app, Some(&tls));
        shared.port.set(port).unwrap();
        FakeDiscord { shared, tls, port }
    }

    /// The CA the fake's certificate is signed by: the root a client must add.
    pub fn ca_pem(&self) -> String {
        self.tls.ca_pem.clone()
    }

    pub fn api_base(&self) -> String {
        format!("https://127.0.0.1:{}/api/v10", self.port)
    }

    /// The interval the next Hellos ask for.
    pub fn set_heartbeat_interval(&self, interval: Duration) {
        self.shared.lock().heartbeat_ms = interval.as_millis().max(1) as u64;
    }

    fn push(&self, event: &str, d: impl FnOnce(&mut Inner) -> Value) {
        let mut inner = self.shared.lock();
        let d = d(&mut inner);
        let current = inner.current.clone();
        match current.and_then(|c| inner.sessions.get_mut(&c)) {
            Some(log) => {
                let s = log.dispatches.len() as u64 + 1;
                log.dispatches
                    .push(json!({"op": 0, "t": event, "s": s, "d": d}));
            }
            None => inner.unsessioned.push((event.to_string(), d)),
        }
        drop(inner);
        self.shared.arrived.notify_waiters();
    }

    fn push_message_as(
        &self,
        channel_id: &str,
        guild_id: Option<&str>,
        author_id: &str,
        username: &str,
        text: &str,
        bot: bool,
    ) {
        self.push("MESSAGE_CREATE", |inner| {
            let author = json!({"id": author_id, "username": username, "discriminator": "0",
                                "global_name": username, "avatar": null, "bot": bot});
            let mut d = json!({
                "id": inner.id(), "channel_id": channel_id, "author": author,
                "content": text, "type": 0, "timestamp": "2025-01-01T00:00:00+00:00",
                "edited_timestamp": null, "tts": false, "mention_everyone": false,
                "mentions": [], "mention_roles": [], "attachments": [], "embeds": [],
                "pinned": false, "flags": 0,
            });
            if let Some(g) = guild_id {
                d["guild_id"] = g.into();
                d["member"] = json!({"roles": [], "joined_at": "2025-01-01T00:00:00+00:00"});
            }
            d
        })
    }

    /// A message from a person in `channel_id`: a DM without `guild_id`, a server
    /// channel's message with one.
    pub fn push_message(
        &self,
        channel_id: &str,
        guild_id: Option<&str>,
        author_id: &str,
        username: &str,
        text: &str,
    ) {
        self.push_message_as(channel_id, guild_id, author_id, username, text, false)
    }

    /// The same from a bot (`author.bot`).
    pub fn push_bot_message(
        &self,
        channel_id: &str,
        guild_id: Option<&str>,
        author_id: &str,
        username: &str,
        text: &str,
    ) {
        self.push_message_as(channel_id, guild_id, author_id, username, text, true)
    }

    fn push_press_in(
        &self,
        guild_id: Option<&str>,
        channel_id: &str,
        message_id: &str,
        user_id: &str,
        username: &str,
        custom_id: &str,
    ) {
        self.push("INTERACTION_CREATE", |inner| {
            let id = inner.id();
            let token = format!("aW50ZXJhY3Rpb24{id}x{}", inner.next_id % 9973);
            inner.interactions.insert(id.clone(), token.clone());
            let user = json!({"id": user_id, "username": username, "discriminator": "0",
                              "global_name": username, "avatar": null});
            let mut d = json!({
                "id": id, "application_id": BOT_ID, "type": 3, "token": token, "version": 1,
                "channel_id": channel_id, "channel": {"id": channel_id},
                "data": {"custom_id": custom_id, "component_type": 2},
                "message": {"id": message_id, "channel_id": channel_id, "type": 0,
                            "author": {"id": BOT_ID, "username": "airlock", "bot": true}},
                "locale": "en-US", "app_permissions": "0", "entitlements": [],
            });
            // In a server the presser comes as a member, in a DM as a user.
            match guild_id {
                Some(g) => {
                    d["guild_id"] = g.into();
                    d["member"] = json!({"user": user, "roles": []});
                }
                None => d["user"] = user,
            }
            d
        })
    }

    /// A press on the button `custom_id` of message `message_id`, in a DM (the presser
    /// in `user`), with a fresh interaction id and token.
    pub fn push_press(
        &self,
        channel_id: &str,
        message_id: &str,
        user_id: &str,
        username: &str,
        custom_id: &str,
    ) {
        self.push_press_in(None, channel_id, message_id, user_id, username, custom_id)
    }

    /// The same in a server channel (the presser in `member.user`).
    pub fn push_guild_press(
        &self,
        guild_id: &str,
        channel_id: &str,
        message_id: &str,
        user_id: &str,
        username: &str,
        custom_id: &str,
    ) {
        self.push_press_in(
            Some(guild_id),
            channel_id,
            message_id,
            user_id,
            username,
            custom_id,
        )
    }

    fn control(&self, c: Control) {
        // No receiver means no connection: nothing to tell.
        let _ = self.shared.control.send(c);
    }

    /// Cut every Gateway connection without a close frame, as a network failure does.
    pub fn drop_connections(&self) {
        self.control(Control::Drop)
    }

    /// Send op 7 Reconnect on every live connection.
    pub fn send_reconnect(&self) {
        self.control(Control::Reconnect)
    }

    /// Forget the current session and send op 9 Invalid Session (`d: false`): the client
    /// must identify anew. Dispatches queued from now go to the next session.
    pub fn invalidate_session(&self) {
        let mut inner = self.shared.lock();
        if let Some(cur) = inner.current.take() {
            inner.sessions.remove(&cur);
        }
        drop(inner);
        self.control(Control::Invalidate)
    }

    /// Stop (or resume) answering heartbeats with op 11, as a connection that died
    /// half-way does.
    pub fn stop_heartbeat_acks(&self, stop: bool) {
        self.shared.lock().acks_stopped = stop;
    }

    /// Answer the next Identify by closing the connection with `code` (4004, 4014, …).
    pub fn close_next_identify_with(&self, code: u16) {
        self.shared.lock().close_next_identify = Some(code);
    }

    /// Replay also the last `n` dispatches a resuming client already had, as an
    /// at-least-once delivery may.
    pub fn set_replay_overlap(&self, n: u64) {
        self.shared.lock().replay_overlap = n;
    }

    /// The next `n` REST calls get 429 with a `retry_after`.
    pub fn rate_limit_next(&self, n: usize) {
        self.shared.lock().rate_limited = n;
    }

    /// The next `n` REST calls get a 502 with an HTML page, as from a proxy.
    pub fn break_next(&self, n: usize) {
        self.shared.lock().broken = n;
    }

    pub fn identifies(&self) -> usize {
        self.shared.lock().identifies
    }

    /// Resumes that were accepted (RESUMED sent).
    pub fn resumes(&self) -> usize {
        self.shared.lock().resumes
    }

    pub fn heartbeats(&self) -> usize {
        self.shared.lock().heartbeats
    }

    /// Gateway connections open now.
    pub fn connected(&self) -> usize {
        self.shared.lock().connected
    }

    /// Every call, in order: the route (`POST /channels/1/messages`; `GATEWAY identify`
    /// and `GATEWAY resume` for those opcodes, with the path they came on and their
    /// payload, token blotted out) and its JSON body; a created message's entry carries
    /// the id it was given as `sent_message_id`.
    pub fn calls(&self) -> Vec<(String, Value)> {
        self.shared.lock().calls.clone()
    }

    /// The files sent with messages so far: channel id, file name and bytes.
    pub fn files(&self) -> Vec<(String, String, Vec<u8>)> {
        self.shared.lock().files.clone()
    }

    /// The bodies of the calls whose route starts with `prefix`.
    pub fn calls_of(&self, prefix: &str) -> Vec<Value> {
        self.calls()
            .into_iter()
            .filter(|(r, _)| r.starts_with(prefix))
            .map(|(_, b)| b)
            .collect()
    }

    /// Wait up to a minute for a call whose route starts with `route` and whose body
    /// satisfies `pred`.
    pub fn wait_for(&self, route: &str, pred: impl Fn(&Value) -> bool) -> Value {
        super::wait_for_call(route, || self.calls(), |r| r.starts_with(route), pred)
    }
}

fn error(status: StatusCode, code: i64, message: &str) -> Response {
    (status, Json(json!({"code": code, "message": message}))).into_response()
}

fn invalid_form(why: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({"code": 50035, "message": "Invalid Form Body",
                    "errors": {"_errors": [{"code": "BASE_TYPE_INVALID", "message": why}]}})),
    )
        .into_response()
}

/// The checks every REST call passes first: injected failures, then the bot token
/// (unless the route authenticates otherwise), then a JSON body.
fn admit(
    s: &Shared,
    headers: &HeaderMap,
    bot_auth: bool,
    body: &[u8],
) -> Result<Value, Box<Response>> {
    {
        let mut inner = s.lock();
        if inner.rate_limited > 0 {
            inner.rate_limited -= 1;
            return Err(Box::new(
                (
                    StatusCode::TOO_MANY_REQUESTS,
                    Json(
                        json!({"message": "You are being rate limited.", "retry_after": 1.5,
                            "global": false}),
                    ),
                )
                    .into_response(),
            ));
        }
        if inner.broken > 0 {
            inner.broken -= 1;
            return Err(Box::new(
                (StatusCode::BAD_GATEWAY, "<html>502 Bad Gateway</html>").into_response(),
            ));
        }
    }
    if bot_auth {
        let want = format!("Bot {}", s.token);
        let auth = headers.get("authorization").and_then(|v| v.to_str().ok());
        if auth != Some(want.as_str()) {
            return Err(Box::new(error(
                StatusCode::UNAUTHORIZED,
                0,
                "401: Unauthorized",
            )));
        }
    }
    if body.is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_slice(body).map_err(|_| {
        Box::new(error(
            StatusCode::BAD_REQUEST,
            50109,
            "The request body contains invalid JSON.",
        ))
    })
}

async fn gateway_bot(State(s): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Err(r) = admit(&s, &headers, true, b"") {
        return *r;
    }
    s.lock()
        .calls
        .push(("GET /gateway/bot".into(), Value::Null));
    Json(json!({
        "url": s.url("/gateway"),
        "shards": 1,
        "session_start_limit": {"total": 1000, "remaining": 999, "reset_after": 14400000,
                                "max_concurrency": 1},
    }))
    .into_response()
}

/// Discord's checks of a message's content and components.
fn check_message(body: &Value) -> Result<(), Box<Response>> {
    let content = body["content"].as_str().unwrap_or("");
    if content.chars().count() > CONTENT_LIMIT {
        return Err(Box::new(invalid_form(
            "content: Must be 2000 or fewer in length.",
        )));
    }
    let rows = body["components"].as_array().cloned().unwrap_or_default();
    if content.is_empty() && rows.is_empty() {
        return Err(Box::new(error(
            StatusCode::BAD_REQUEST,
            50006,
            "Cannot send an empty message",
        )));
    }
    if rows.len() > 5 {
        return Err(Box::new(invalid_form(
            "components: Must be 5 or fewer in length.",
        )));
    }
    for row in &rows {
        let buttons = row["components"].as_array().cloned().unwrap_or_default();
        if row["type"] != 1 || buttons.is_empty() || buttons.len() > 5 {
            return Err(Box::new(invalid_form(
                "components: an action row of 1 to 5 components",
            )));
        }
        for b in &buttons {
            let id = b["custom_id"].as_str().unwrap_or("");
            let label = b["label"].as_str().unwrap_or("");
            if b["type"] != 2
                || id.is_empty()
                || id.chars().count() > CUSTOM_ID_LIMIT
                || label.chars().count() > 80
                || !(1..=4).contains(&b["style"].as_i64().unwrap_or(0))
            {
                return Err(Box::new(invalid_form("components: a button is invalid")));
            }
        }
    }
    Ok(())
}

fn message_object(id: &str, channel: &str, body: &Value) -> Value {
    json!({
        "id": id, "channel_id": channel, "type": 0, "content": body["content"],
        "components": body.get("components").cloned().unwrap_or(json!([])),
        "author": {"id": BOT_ID, "username": "airlock", "bot": true},
        "timestamp": "2025-01-01T00:00:00+00:00", "embeds": [], "attachments": [],
    })
}

/// A message-with-file form: its `payload_json`, and its one file (name and bytes), whose
/// name the payload's `attachments` must give as Discord requires.
async fn read_upload(
    headers: &HeaderMap,
    body: Bytes,
) -> Result<(Value, Option<(String, Vec<u8>)>), &'static str> {
    let fields = super::form_fields(headers, body)
        .await
        .ok_or("the form is not multipart/form-data")?;
    let payload = fields
        .iter()
        .find(|f| f.name == "payload_json")
        .and_then(|f| serde_json::from_slice::<Value>(&f.bytes).ok())
        .ok_or("payload_json: a JSON object is required")?;
    let file = fields
        .iter()
        .find(|f| f.name == "files[0]")
        .ok_or("files[0]: a file is required")?;
    let name = file
        .file_name
        .clone()
        .ok_or("files[0]: a filename is required")?;
    if payload["attachments"][0]["filename"] != name.as_str() {
        return Err("attachments: the filename must match files[0]");
    }
    if file.bytes.len() > 10 * 1024 * 1024 {
        return Err("files[0]: Request entity too large");
    }
    Ok((payload, Some((name, file.bytes.clone()))))
}

async fn create_message(
    State(s): State<Arc<Shared>>,
    Path(channel): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let multipart = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("multipart/form-data"));
    // A message with files comes as a form: `payload_json` and `files[n]`.
    let (body, file) = if multipart {
        if let Err(r) = admit(&s, &headers, true, b"") {
            return *r;
        }
        match read_upload(&headers, body).await {
            Ok(found) => found,
            Err(why) => return invalid_form(why),
        }
    } else {
        match admit(&s, &headers, true, &body) {
            Ok(b) => (b, None),
            Err(r) => return *r,
        }
    };
    let mut inner = s.lock();
    let mut logged = body.clone();
    if let Some((name, bytes)) = &file {
        logged["file"] = json!({"filename": name, "bytes": bytes.len()});
    }
    inner
        .calls
        .push((format!("POST /channels/{channel}/messages"), logged));
    match &file {
        Some((name, bytes)) => inner
            .files
            .push((channel.clone(), name.clone(), bytes.clone())),
        None => {
            if let Err(r) = check_message(&body) {
                return *r;
            }
        }
    }
    let id = inner.id();
    inner.messages.insert(id.clone());
    // The log's entry gets the id the message was given, for tests that press its buttons.
    if let Some((_, logged)) = inner.calls.last_mut() {
        logged["sent_message_id"] = id.clone().into();
    }
    Json(message_object(&id, &channel, &body)).into_response()
}

async fn edit_message(
    State(s): State<Arc<Shared>>,
    Path((channel, message)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body = match admit(&s, &headers, true, &body) {
        Ok(b) => b,
        Err(r) => return *r,
    };
    let mut inner = s.lock();
    inner.calls.push((
        format!("PATCH /channels/{channel}/messages/{message}"),
        body.clone(),
    ));
    if !inner.messages.contains(&message) {
        return error(StatusCode::NOT_FOUND, 10008, "Unknown Message");
    }
    if body["content"].as_str().unwrap_or("").chars().count() > CONTENT_LIMIT {
        return invalid_form("content: Must be 2000 or fewer in length.");
    }
    Json(message_object(&message, &channel, &body)).into_response()
}

async fn interaction_callback(
    State(s): State<Arc<Shared>>,
    Path((id, token)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    // Discord authenticates a callback by the interaction's token, not the bot's.
    let body = match admit(&s, &headers, false, &body) {
        Ok(b) => b,
        Err(r) => return *r,
    };
    let mut inner = s.lock();
    inner.calls.push((
        format!("POST /interactions/{id}/{token}/callback"),
        body.clone(),
    ));
    if inner.interactions.get(&id) != Some(&token) {
        return error(StatusCode::UNAUTHORIZED, 50027, "Invalid Webhook Token");
    }
    if !inner.answered.insert(id) {
        return error(
            StatusCode::BAD_REQUEST,
            40060,
            "Interaction has already been acknowledged.",
        );
    }
    if !(1..=10).contains(&body["type"].as_i64().unwrap_or(0)) {
        return invalid_form("type: Value must be one of {1, 4, 5, 6, 7, 8, 9, 10}.");
    }
    if body["data"]["content"]
        .as_str()
        .unwrap_or("")
        .chars()
        .count()
        > CONTENT_LIMIT
    {
        return invalid_form("data.content: Must be 2000 or fewer in length.");
    }
    StatusCode::NO_CONTENT.into_response()
}

async fn gateway_first(
    State(s): State<Arc<Shared>>,
    Query(q): Query<HashMap<String, String>>,
    ws: WebSocketUpgrade,
) -> Response {
    upgrade(s, q, ws, "/gateway")
}

async fn gateway_resume(
    State(s): State<Arc<Shared>>,
    Query(q): Query<HashMap<String, String>>,
    ws: WebSocketUpgrade,
) -> Response {
    upgrade(s, q, ws, "/gateway-resume")
}

fn upgrade(
    s: Arc<Shared>,
    q: HashMap<String, String>,
    ws: WebSocketUpgrade,
    path: &'static str,
) -> Response {
    let versioned = q.get("v").map(String::as_str) == Some("10")
        && q.get("encoding").map(String::as_str) == Some("json");
    ws.on_upgrade(move |socket| async move {
        let conn = {
            let mut inner = s.lock();
            inner.next_conn += 1;
            inner.connected += 1;
            inner.next_conn
        };
        let _open = Open(s.clone());
        Connection {
            s,
            socket,
            conn,
            path,
            session: None,
            sent_upto: 0,
        }
        .run(versioned)
        .await
    })
}

/// Counts a Gateway connection as open while it lives.
struct Open(Arc<Shared>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.lock().connected -= 1;
    }
}

/// Whether a connection goes on after a payload.
enum Flow {
    Go,
    Stop,
}

struct Connection {
    s: Arc<Shared>,
    socket: WebSocket,
    conn: u64,
    path: &'static str,
    session: Option<String>,
    /// The last sequence number sent on this connection.
    sent_upto: u64,
}

impl Connection {
    async fn send(&mut self, v: Value) -> Result<(), axum::Error> {
        self.socket.send(Message::Text(v.to_string().into())).await
    }

    async fn close(&mut self, code: u16, reason: &str) {
        let frame = CloseFrame {
            code,
            reason: reason.into(),
        };
        let _ = self.socket.send(Message::Close(Some(frame))).await;
    }

    async fn run(mut self, versioned: bool) {
        let mut control = self.s.control.subscribe();
        let interval = self.s.lock().heartbeat_ms;
        if !versioned {
            self.close(4012, "Invalid API version").await;
            return;
        }
        if self
            .send(json!({"op": 10, "s": null, "t": null, "d": {"heartbeat_interval": interval}}))
            .await
            .is_err()
        {
            return;
        }
        let s = self.s.clone();
        loop {
            // Registered before looking, so that a push between the look and the wait
            // still wakes this connection.
            let notified = s.arrived.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(session) = self.session.clone() {
                let due = {
                    let inner = self.s.lock();
                    match inner.sessions.get(&session) {
                        // Resumed on another connection: this one is done.
                        Some(log) if log.live != self.conn => return,
                        Some(log) => log
                            .dispatches
                            .get(self.sent_upto as usize..)
                            .unwrap_or_default()
                            .to_vec(),
                        None => Vec::new(),
                    }
                };
                for d in due {
                    if self.send(d).await.is_err() {
                        return;
                    }
                    self.sent_upto += 1;
                }
            }
            tokio::select! {
                msg = self.socket.recv() => match msg {
                    Some(Ok(Message::Text(text))) => {
                        if let Flow::Stop = self.on_payload(text.as_str()).await {
                            return;
                        }
                    }
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return,
                    Some(Ok(_)) => {}
                },
                c = control.recv() => match c {
                    // Dropping the socket ends the connection without a close frame.
                    Ok(Control::Drop) => return,
                    Ok(Control::Reconnect) => {
                        if self.send(json!({"op": 7, "d": null, "s": null, "t": null})).await.is_err() {
                            return;
                        }
                    }
                    Ok(Control::Invalidate) => {
                        let gone = self
                            .session
                            .as_ref()
                            .is_some_and(|sid| !self.s.lock().sessions.contains_key(sid));
                        if gone {
                            self.session = None;
                            if self.send(json!({"op": 9, "d": false, "s": null, "t": null})).await.is_err() {
                                return;
                            }
                        }
                    }
                    Err(_) => {}
                },
                _ = &mut notified => {}
            }
        }
    }

    async fn on_payload(&mut self, text: &str) -> Flow {
        let Ok(p) = serde_json::from_str::<Value>(text) else {
            self.close(4002, "Error while decoding payload.").await;
            return Flow::Stop;
        };
        match p["op"].as_u64() {
            Some(1) => {
                let ack = {
                    let mut inner = self.s.lock();
                    inner.heartbeats += 1;
                    !inner.acks_stopped
                };
                if ack && self.send(json!({"op": 11})).await.is_err() {
                    return Flow::Stop;
                }
                Flow::Go
            }
            Some(2) => self.identify(&p["d"]).await,
            Some(6) => self.resume(&p["d"]).await,
            _ => Flow::Go,
        }
    }

    fn log(&self, what: &str, d: &Value) {
        let mut d = d.clone();
        if d.get("token").is_some() {
            d["token"] = "[token]".into();
        }
        self.s.lock().calls.push((
            format!("GATEWAY {what}"),
            json!({"path": self.path, "d": d}),
        ));
    }

    async fn identify(&mut self, d: &Value) -> Flow {
        self.log("identify", d);
        if d["token"].as_str() != Some(self.s.token.as_str()) {
            self.close(4004, "Authentication failed.").await;
            return Flow::Stop;
        }
        if self.session.is_some() {
            self.close(4005, "Already authenticated.").await;
            return Flow::Stop;
        }
        let closing = self.s.lock().close_next_identify.take();
        if let Some(code) = closing {
            self.close(code, "Closed as the test asked.").await;
            return Flow::Stop;
        }
        let mut inner = self.s.lock();
        inner.identifies += 1;
        let sid = format!("session{}", inner.identifies);
        let ready = json!({"op": 0, "t": "READY", "s": 1, "d": {
            "v": 10,
            "user": {"id": BOT_ID, "username": "airlock", "discriminator": "0", "bot": true},
            "guilds": [],
            "session_id": sid,
            "resume_gateway_url": self.s.url("/gateway-resume"),
            "shard": [0, 1],
            "application": {"id": BOT_ID, "flags": 0},
        }});
        let mut dispatches = vec![ready];
        for (event, d) in std::mem::take(&mut inner.unsessioned) {
            let s = dispatches.len() as u64 + 1;
            dispatches.push(json!({"op": 0, "t": event, "s": s, "d": d}));
        }
        inner.sessions.insert(
            sid.clone(),
            SessionLog {
                dispatches,
                live: self.conn,
            },
        );
        inner.current = Some(sid.clone());
        self.session = Some(sid);
        self.sent_upto = 0;
        // The loop sends READY and what waited for it.
        Flow::Go
    }

    async fn resume(&mut self, d: &Value) -> Flow {
        self.log("resume", d);
        if d["token"].as_str() != Some(self.s.token.as_str()) {
            self.close(4004, "Authentication failed.").await;
            return Flow::Stop;
        }
        let sid = d["session_id"].as_str().unwrap_or("").to_string();
        let seq = d["seq"].as_u64().unwrap_or(0);
        let replay = {
            let mut inner = self.s.lock();
            let overlap = inner.replay_overlap;
            match inner.sessions.get_mut(&sid) {
                Some(log) if seq <= log.dispatches.len() as u64 => {
                    log.live = self.conn;
                    let from = seq.saturating_sub(overlap) as usize;
                    let replay = log.dispatches[from..].to_vec();
                    let upto = log.dispatches.len() as u64;
                    inner.resumes += 1;
                    inner.current = Some(sid.clone());
                    Some((replay, upto))
                }
                _ => None,
            }
        };
        let Some((replay, upto)) = replay else {
            // Not a session to resume: the client must identify a new one.
            if self
                .send(json!({"op": 9, "d": false, "s": null, "t": null}))
                .await
                .is_err()
            {
                return Flow::Stop;
            }
            return Flow::Go;
        };
        // Any older connection of this session sees it is no longer live.
        self.s.arrived.notify_waiters();
        for p in replay {
            if self.send(p).await.is_err() {
                return Flow::Stop;
            }
        }
        self.session = Some(sid);
        self.sent_upto = upto;
        if self
            .send(json!({"op": 0, "t": "RESUMED", "s": null, "d": {}}))
            .await
            .is_err()
        {
            return Flow::Stop;
        }
        Flow::Go
    }
}
