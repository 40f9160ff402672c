//! A local stand-in for Telegram's Bot API, for tests: the real wire format over HTTPS on
//! a loopback port (with a test CA of its own), with updates the test queues and a log of
//! every call the adapter made.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

#[derive(Default)]
struct Inner {
    next_update: i64,
    updates: Vec<Value>,
    calls: Vec<(String, Value)>,
    next_message: i64,
    /// Polls still to fail, as a platform that is down does.
    failing_polls: usize,
    /// Sends still to answer with 429, and how many were.
    limited_sends: usize,
    limited_served: usize,
    /// Documents sent (`sendDocument`): chat id, file name and bytes.
    documents: Vec<(String, String, Vec<u8>)>,
}

struct Shared {
    token: String,
    inner: Mutex<Inner>,
    arrived: tokio::sync::Notify,
}

pub struct FakeTelegram {
    shared: Arc<Shared>,
    port: u16,
    ca_pem: String,
}

impl FakeTelegram {
    /// Serve on 127.0.0.1 for bot `token` (other tokens get 401, as from Telegram).
    pub fn start(token: &str) -> FakeTelegram {
        let shared = Arc::new(Shared {
            token: token.to_string(),
            inner: Mutex::new(Inner {
                next_update: 1000,
                next_message: 1,
                ..Inner::default()
            }),
            arrived: tokio::sync::Notify::new(),
        });
        let app = Router::new()
            .route("/{bot}/{method}", post(api))
            .with_state(shared.clone());
        let tls = super::tls::TestTls::new();
        let port = super::tls::serve(app, Some(&tls));
        FakeTelegram {
            shared,
            port,
            ca_pem: tls.ca_pem,
        }
    }

    pub fn base_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// The test CA's certificate: the root a client must trust to reach the fake.
    pub fn ca_pem(&self) -> String {
        self.ca_pem.clone()
    }

    /// Queue an update of any shape, made from its update id (`getUpdates` gives it next).
    pub fn push(&self, update: impl FnOnce(i64) -> Value) {
        let mut inner = self.shared.inner.lock().unwrap();
        let id = inner.next_update;
        inner.next_update += 1;
        inner.updates.push(update(id));
        drop(inner);
        self.shared.arrived.notify_waiters();
    }

    /// A text message from user `from` in chat `chat` (private when they are the same).
    pub fn push_message(&self, chat: i64, from: i64, username: &str, text: &str) {
        self.push(|id| {
            json!({"update_id": id, "message": {
                "message_id": id, "date": 0, "text": text,
                "from": {"id": from, "is_bot": false, "first_name": username, "username": username},
                "chat": {"id": chat, "type": if chat == from { "private" } else { "group" }},
            }})
        })
    }

    /// A text that user `from` forwarded into chat `chat` (private when they are the same):
    /// the words of user `origin`, as Telegram marks a forward (`forward_origin`).
    pub fn push_forward(&self, chat: i64, from: i64, username: &str, origin: i64, text: &str) {
        self.push(|id| {
            json!({"update_id": id, "message": {
                "message_id": id, "date": 0, "text": text,
                "from": {"id": from, "is_bot": false, "first_name": username, "username": username},
                "chat": {"id": chat, "type": if chat == from { "private" } else { "group" }},
                "forward_origin": {"type": "user", "date": 0,
                                   "sender_user": {"id": origin, "is_bot": false, "first_name": "x"}},
            }})
        })
    }

    /// A press by user `from` on a button with `data` of message `message_id` in `chat`.
    pub fn push_press(&self, chat: i64, message_id: &str, from: i64, username: &str, data: &str) {
        self.push(|id| {
            json!({"update_id": id, "callback_query": {
                "id": format!("press-{id}"), "data": data, "chat_instance": "x",
                "from": {"id": from, "is_bot": false, "first_name": username, "username": username},
                "message": {"message_id": message_id.parse::<i64>().unwrap_or(0), "date": 0,
                            "chat": {"id": chat, "type": "private"}, "text": "card"},
            }})
        })
    }

    /// The documents sent so far: chat id, file name and bytes.
    pub fn documents(&self) -> Vec<(String, String, Vec<u8>)> {
        self.shared.inner.lock().unwrap().documents.clone()
    }

    /// The next `n` polls fail with `502 Bad Gateway` and a page that is not the API's.
    pub fn fail_polls(&self, n: usize) {
        self.shared.inner.lock().unwrap().failing_polls = n;
    }

    /// The next `n` `sendMessage` calls are answered `429 Too Many Requests` with
    /// `retry_after` 1, as Telegram answers a bot that sends too fast; they are not in
    /// [`FakeTelegram::calls`] (nothing was sent).
    pub fn rate_limit_sends(&self, n: usize) {
        self.shared.inner.lock().unwrap().limited_sends = n;
    }

    /// How many sends were answered 429.
    pub fn rate_limited_sends(&self) -> usize {
        self.shared.inner.lock().unwrap().limited_served
    }

    /// Every call the adapter made, in order: the method and its JSON body (for a
    /// `sendMessage`, with the id of the message it made added as `sent_message_id`).
    pub fn calls(&self) -> Vec<(String, Value)> {
        self.shared.inner.lock().unwrap().calls.clone()
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

/// The fake bot's user id and username (`getMe`): a group message mentions it as
/// `@airlock_test_bot`.
pub const BOT_ID: i64 = 7_000_000;
pub const BOT_USERNAME: &str = "airlock_test_bot";

/// A `sendDocument` form: its `chat_id`, and its `document` kept in the fake's list (the
/// call's log gets the name and size).
async fn read_form(s: &Shared, mut form: axum::extract::Multipart) -> Option<Value> {
    let mut chat = None;
    let mut document = None;
    while let Ok(Some(field)) = form.next_field().await {
        match field.name() {
            Some("chat_id") => chat = Some(field.text().await.ok()?),
            Some("document") => {
                let name = field.file_name()?.to_string();
                document = Some((name, field.bytes().await.ok()?.to_vec()));
            }
            _ => return None,
        }
    }
    let (chat, (name, bytes)) = (chat?, document?);
    let logged = json!({"chat_id": chat.parse::<i64>().map_or(Value::from(chat.clone()), Value::from),
                        "document": {"file_name": name, "bytes": bytes.len()}});
    s.inner.lock().unwrap().documents.push((chat, name, bytes));
    Some(logged)
}

fn refused(code: i64, description: &str) -> Json<Value> {
    Json(json!({"ok": false, "error_code": code, "description": description}))
}

async fn api(
    State(s): State<Arc<Shared>>,
    Path((bot, method)): Path<(String, String)>,
    request: axum::extract::Request,
) -> axum::response::Response {
    use axum::extract::FromRequest;
    use axum::response::IntoResponse;
    let multipart = request
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("multipart/form-data"));
    // Uploads come as a form (as Telegram takes them); every other method as JSON.
    let body = if multipart {
        match axum::extract::Multipart::from_request(request, &()).await {
            Ok(form) => match read_form(&s, form).await {
                Some(body) => body,
                None => {
                    return refused(400, "Bad Request: the form is not one this fake reads")
                        .into_response()
                }
            },
            Err(e) => return e.into_response(),
        }
    } else {
        match Json::<Value>::from_request(request, &()).await {
            Ok(Json(body)) => body,
            Err(e) => return e.into_response(),
        }
    };
    if method == "getUpdates" {
        let mut inner = s.inner.lock().unwrap();
        if inner.failing_polls > 0 {
            inner.failing_polls -= 1;
            inner.calls.push((method.clone(), body.clone()));
            return (
                axum::http::StatusCode::BAD_GATEWAY,
                "<html>502 Bad Gateway</html>",
            )
                .into_response();
        }
    }
    answer(s, bot, method, body).await.into_response()
}

async fn answer(s: Arc<Shared>, bot: String, method: String, body: Value) -> Json<Value> {
    if bot.strip_prefix("bot") != Some(s.token.as_str()) {
        return refused(401, "Unauthorized");
    }
    if method == "sendMessage" {
        let mut inner = s.inner.lock().unwrap();
        if inner.limited_sends > 0 {
            inner.limited_sends -= 1;
            inner.limited_served += 1;
            return Json(json!({"ok": false, "error_code": 429,
                               "description": "Too Many Requests: retry after 1",
                               "parameters": {"retry_after": 1}}));
        }
    }
    s.inner
        .lock()
        .unwrap()
        .calls
        .push((method.clone(), body.clone()));
    match method.as_str() {
        "getUpdates" => {
            let offset = body["offset"].as_i64().unwrap_or(0);
            let wait = Duration::from_secs(body["timeout"].as_u64().unwrap_or(0).min(1));
            let deadline = tokio::time::Instant::now() + wait;
            loop {
                let notified = s.arrived.notified();
                {
                    let mut inner = s.inner.lock().unwrap();
                    // Updates before the offset are acknowledged: Telegram forgets them.
                    inner
                        .updates
                        .retain(|u| u["update_id"].as_i64().unwrap_or(0) >= offset);
                    if !inner.updates.is_empty() || tokio::time::Instant::now() >= deadline {
                        return Json(json!({"ok": true, "result": inner.updates.clone()}));
                    }
                }
                let _ = tokio::time::timeout_at(deadline, notified).await;
            }
        }
        "sendMessage" | "editMessageText" => {
            if body["text"]
                .as_str()
                .is_none_or(|t| t.is_empty() || t.chars().count() > 4096)
            {
                return refused(400, "Bad Request: message text is empty or too long");
            }
            let mut inner = s.inner.lock().unwrap();
            let id = match method.as_str() {
                "sendMessage" => {
                    inner.next_message += 1;
                    let id = inner.next_message;
                    // This call's own entry: the latest with its body and no id yet.
                    if let Some((_, logged)) = inner
                        .calls
                        .iter_mut()
                        .rev()
                        .find(|(m, b)| m == "sendMessage" && *b == body)
                    {
                        logged["sent_message_id"] = id.to_string().into();
                    }
                    id
                }
                _ => body["message_id"].as_i64().unwrap_or(0),
            };
            Json(json!({"ok": true, "result": {"message_id": id, "date": 0,
                         "chat": {"id": body["chat_id"], "type": "private"}, "text": body["text"]}}))
        }
        "answerCallbackQuery" => Json(json!({"ok": true, "result": true})),
        "sendDocument" => {
            let mut inner = s.inner.lock().unwrap();
            inner.next_message += 1;
            let id = inner.next_message;
            Json(json!({"ok": true, "result": {"message_id": id, "date": 0,
                         "chat": {"id": body["chat_id"], "type": "private"},
                         "document": {"file_name": body["document"]["file_name"]}}}))
        }
        "getMe" => Json(json!({"ok": true, "result": {"id": BOT_ID, "is_bot": true,
                     "first_name": "Airlock", "username": BOT_USERNAME}})),
        _ => refused(404, "Not Found: method not found"),
    }
}
