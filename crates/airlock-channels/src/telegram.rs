//! Telegram's Bot API (<https://core.telegram.org/bots/api>): long polling with
//! `getUpdates`, `sendMessage`, `editMessageText`, inline keyboards and
//! `answerCallbackQuery`.
//!
//! The bot token is part of every method's URL (`<base>/bot<token>/<method>`), so no
//! error this module returns carries a URL, and the token is held as a secret.

use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::{split_text, Card, Channel, ChannelError, ChatId, Inbound, Sender};

const PLATFORM: &str = "telegram";
/// The most characters `sendMessage` takes.
pub const MESSAGE_LIMIT: usize = 4096;

pub struct Telegram {
    base_url: String,
    token: SecretString,
    http: reqwest::Client,
    poll: Duration,
    /// The next update to ask for; the ones before it are acknowledged.
    offset: Mutex<Option<i64>>,
    /// `@<username>` of the bot, from `getMe` before the first poll.
    mention: Mutex<Option<String>>,
}

impl Telegram {
    /// `base_url` is the API's root (`https://api.telegram.org`, or a local fake in tests);
    /// `poll` how long one `getUpdates` waits for updates; `offset` where the last run
    /// stopped (see [`Telegram::offset`]); `extra_roots_pem` roots to trust beside the
    /// webpki ones (a test's CA).
    pub fn new(
        base_url: &str,
        token: SecretString,
        poll: Duration,
        offset: Option<i64>,
        extra_roots_pem: &[String],
    ) -> Result<Telegram, ChannelError> {
        // No redirects: they could take the token's URL elsewhere.
        let http =
            crate::tls::http_client(PLATFORM, extra_roots_pem, poll + Duration::from_secs(15))?;
        Ok(Telegram {
            base_url: base_url.trim_end_matches('/').to_string(),
            token,
            http,
            poll,
            offset: Mutex::new(offset),
            mention: Mutex::new(None),
        })
    }

    /// The next update to ask for, to keep across restarts: updates before it were
    /// handed out already.
    pub fn offset(&self) -> Option<i64> {
        *self.offset.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn call(&self, method: &'static str, body: Value) -> Result<Value, ChannelError> {
        self.call_with(method, |r| r.json(&body)).await
    }

    /// A method whose body `build` sets (JSON, or a multipart form for uploads).
    async fn call_with(
        &self,
        method: &'static str,
        build: impl FnOnce(reqwest::RequestBuilder) -> reqwest::RequestBuilder,
    ) -> Result<Value, ChannelError> {
        let url = format!(
            "{}/bot{}/{method}",
            self.base_url,
            self.token.expose_secret()
        );
        let resp =
            build(self.http.post(url))
                .send()
                .await
                .map_err(|e| ChannelError::Unreachable {
                    platform: PLATFORM,
                    why: e.without_url().to_string(),
                })?;
        let status = resp.status();
        let answer: ApiAnswer = resp.json().await.map_err(|e| ChannelError::Unreachable {
            platform: PLATFORM,
            why: format!(
                "an answer to {method} that is not the API's JSON ({status}): {}",
                e.without_url()
            ),
        })?;
        if !answer.ok && answer.error_code == Some(429) {
            return Err(ChannelError::RateLimited {
                platform: PLATFORM,
                method: method.to_string(),
                retry_after: answer
                    .parameters
                    .and_then(|p| p.retry_after)
                    .map(|s| Duration::from_secs(s.min(3600))),
            });
        }
        if !answer.ok {
            return Err(ChannelError::Refused {
                platform: PLATFORM,
                method,
                why: format!(
                    "{} {}",
                    answer.error_code.unwrap_or(status.as_u16() as i64),
                    answer.description.unwrap_or_default()
                ),
            });
        }
        Ok(answer.result.unwrap_or(Value::Null))
    }
}

#[derive(Deserialize)]
struct ApiAnswer {
    ok: bool,
    result: Option<Value>,
    error_code: Option<i64>,
    description: Option<String>,
    /// `retry_after` comes here with a 429.
    parameters: Option<ResponseParameters>,
}

#[derive(Deserialize)]
struct ResponseParameters {
    retry_after: Option<u64>,
}

#[derive(Deserialize)]
struct Update {
    message: Option<Message>,
    callback_query: Option<CallbackQuery>,
}

#[derive(Deserialize)]
struct Message {
    message_id: i64,
    from: Option<User>,
    chat: Chat,
    text: Option<String>,
    /// Where a forward came from (Bot API 7.0 on): a `MessageOrigin`.
    forward_origin: Option<Value>,
    /// The same, as Bot API versions before 7.0 give it.
    forward_from: Option<User>,
    forward_from_chat: Option<Value>,
    forward_sender_name: Option<String>,
    forward_date: Option<i64>,
    /// A channel's post copied into its discussion group by Telegram itself.
    #[serde(default)]
    is_automatic_forward: bool,
    /// The inline bot that composed the text the user sent.
    via_bot: Option<User>,
}

impl Message {
    /// Where the text came from when it is not the sender's own words: a forward (of a
    /// user, a hidden user, a chat or a channel) or an inline bot's result. `None` for
    /// what the sender wrote. The description is for the record and for the content's
    /// source; nothing is decided on it but that it is there.
    fn passed_on_from(&self) -> Option<String> {
        if let Some(bot) = &self.via_bot {
            return Some(format!("inline bot {}", bot.id));
        }
        if let Some(origin) = &self.forward_origin {
            let id_at = |pointer: &str| origin.pointer(pointer).map(Value::to_string);
            let what = origin["type"]
                .as_str()
                .unwrap_or("unknown")
                .replace('_', " ");
            let whom = id_at("/sender_user/id")
                .or_else(|| origin["sender_user_name"].as_str().map(str::to_string))
                .or_else(|| id_at("/sender_chat/id"))
                .or_else(|| id_at("/chat/id"));
            return Some(match whom {
                Some(whom) => format!("forward from {what} {whom}"),
                None => format!("forward from {what}"),
            });
        }
        if let Some(user) = &self.forward_from {
            return Some(format!("forward from user {}", user.id));
        }
        if let Some(chat) = &self.forward_from_chat {
            return Some(format!("forward from chat {}", chat["id"]));
        }
        if let Some(name) = &self.forward_sender_name {
            return Some(format!("forward from hidden user {name}"));
        }
        if self.forward_date.is_some() || self.is_automatic_forward {
            return Some("forward".to_string());
        }
        None
    }
}

#[derive(Deserialize)]
struct Chat {
    id: i64,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct User {
    id: i64,
    #[serde(default)]
    first_name: String,
    username: Option<String>,
    #[serde(default)]
    is_bot: bool,
}

#[derive(Deserialize)]
struct CallbackQuery {
    id: String,
    from: User,
    message: Option<Message>,
    data: Option<String>,
}

fn sender(u: &User) -> Sender {
    Sender {
        id: u.id.to_string(),
        display: u
            .username
            .as_ref()
            .map(|n| format!("@{n}"))
            .unwrap_or_else(|| u.first_name.clone()),
    }
}

fn message_id(v: &Value) -> String {
    v.get("message_id")
        .and_then(Value::as_i64)
        .map(|i| i.to_string())
        .unwrap_or_default()
}

fn chat_value(chat: &ChatId) -> Value {
    // Telegram's chat ids are integers; an id that is not one is sent as the string it is
    // (the API takes `@channelusername` too).
    chat.0
        .parse::<i64>()
        .map(Value::from)
        .unwrap_or_else(|_| Value::from(chat.0.clone()))
}

#[async_trait]
impl Channel for Telegram {
    fn name(&self) -> &'static str {
        PLATFORM
    }

    async fn next_events(&self) -> Result<Vec<Inbound>, ChannelError> {
        // Who the bot is, for mentions in groups: asked once, before any update.
        if self
            .mention
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
        {
            let me = self.call("getMe", json!({})).await?;
            let name = me["username"].as_str().unwrap_or_default();
            *self.mention.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!("@{name}"));
        }
        let mut body = json!({
            "timeout": self.poll.as_secs(),
            "allowed_updates": ["message", "callback_query"],
        });
        if let Some(o) = self.offset() {
            body["offset"] = o.into();
        }
        let result = self.call("getUpdates", body).await?;
        let updates: Vec<Value> =
            serde_json::from_value(result).map_err(|e| ChannelError::Unreachable {
                platform: PLATFORM,
                why: format!("getUpdates answered something that is not a list of updates: {e}"),
            })?;
        let mut events = Vec::new();
        let mut next = self.offset();
        for raw in updates {
            // One update the adapter cannot read must not stop the ones after it.
            let id = raw.get("update_id").and_then(Value::as_i64);
            if let Some(id) = id {
                next = Some(next.map_or(id + 1, |n| n.max(id + 1)));
            }
            let Ok(u) = serde_json::from_value::<Update>(raw) else {
                continue;
            };
            if let Some(m) = u.message {
                let passed_on_from = m.passed_on_from();
                let (Some(from), Some(text)) = (m.from, m.text) else {
                    continue;
                };
                if from.is_bot {
                    continue;
                }
                events.push(Inbound::Message {
                    chat: ChatId(m.chat.id.to_string()),
                    private: m.chat.kind == "private",
                    from: sender(&from),
                    text,
                    passed_on_from,
                });
            } else if let Some(q) = u.callback_query {
                let Some(m) = q.message else { continue };
                events.push(Inbound::Press {
                    press_id: q.id,
                    chat: ChatId(m.chat.id.to_string()),
                    message_id: m.message_id.to_string(),
                    from: sender(&q.from),
                    data: q.data.unwrap_or_default(),
                });
            }
        }
        *self.offset.lock().unwrap_or_else(|p| p.into_inner()) = next;
        Ok(events)
    }

    async fn send(&self, chat: &ChatId, text: &str) -> Result<String, ChannelError> {
        let mut last = String::new();
        for part in split_text(text, MESSAGE_LIMIT) {
            // No parse_mode: the text is shown as the characters it is.
            let m = self
                .call(
                    "sendMessage",
                    json!({"chat_id": chat_value(chat), "text": part}),
                )
                .await?;
            last = message_id(&m);
        }
        Ok(last)
    }

    async fn send_file(
        &self,
        chat: &ChatId,
        name: &str,
        bytes: &[u8],
    ) -> Result<String, ChannelError> {
        let part = reqwest::multipart::Part::bytes(bytes.to_vec()).file_name(name.to_string());
        let form = reqwest::multipart::Form::new()
            .text("chat_id", chat.0.clone())
            .part("document", part);
        let m = self
            .call_with("sendDocument", |r| r.multipart(form))
            .await?;
        Ok(message_id(&m))
    }

    async fn send_card(&self, chat: &ChatId, card: &Card) -> Result<String, ChannelError> {
        let mut parts = split_text(&card.text, MESSAGE_LIMIT);
        let last = parts.pop().unwrap_or_default();
        for part in parts {
            self.call(
                "sendMessage",
                json!({"chat_id": chat_value(chat), "text": part}),
            )
            .await?;
        }
        let keyboard: Vec<Value> = card
            .buttons
            .iter()
            .map(|(label, data)| json!({"text": label, "callback_data": data}))
            .collect();
        let m = self
            .call(
                "sendMessage",
                json!({"chat_id": chat_value(chat), "text": last,
                       "reply_markup": {"inline_keyboard": [keyboard]}}),
            )
            .await?;
        Ok(message_id(&m))
    }

    async fn close_card(
        &self,
        chat: &ChatId,
        message_id: &str,
        text: &str,
    ) -> Result<(), ChannelError> {
        let text: String = text.chars().take(MESSAGE_LIMIT).collect();
        // Without a reply_markup the edit takes the buttons away.
        self.call(
            "editMessageText",
            json!({"chat_id": chat_value(chat),
                   "message_id": message_id.parse::<i64>().unwrap_or_default(),
                   "text": text}),
        )
        .await
        .map(|_| ())
    }

    fn mention_forms(&self) -> Vec<String> {
        self.mention
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|m| m.len() > 1)
            .cloned()
            .collect()
    }

    fn resume_offset(&self) -> Option<i64> {
        self.offset()
    }

    async fn answer_press(&self, press_id: &str, text: &str) -> Result<(), ChannelError> {
        let text: String = text.chars().take(200).collect();
        self.call(
            "answerCallbackQuery",
            json!({"callback_query_id": press_id, "text": text}),
        )
        .await
        .map(|_| ())
    }
}
