//! Chat-platform adapters for the host (`airlock serve`).
//!
//! Each platform is one [`Channel`]: inbound events (messages, button presses) in;
//! messages, approval cards and their updates out. An adapter holds no policy and decides
//! nothing: who may talk to the assistant, which press counts and what a message may do
//! are the host's business (`airlock::host::channels`). That is why this crate depends on
//! no part of Airlock: it cannot reach the Gate, the store or the audit log.
//!
//! Text goes out as plain text, never with the platform's markup turned on, so a payload
//! that contains Markdown, HTML or a mention is shown as the characters it is. A text
//! longer than the platform takes is split into numbered parts ([`split_text`]), never cut.

pub mod discord;
#[cfg(feature = "fake")]
pub mod fake;
mod seen;
pub mod slack;
pub mod telegram;
pub mod tls;
pub mod webhook;

use async_trait::async_trait;

/// A chat on the platform (a private chat, a group, a channel), by the platform's id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ChatId(pub String);

/// Someone on the platform, by the platform's own user id (never by display name, which
/// anyone can choose).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sender {
    pub id: String,
    /// For messages to the person; never used to decide anything.
    pub display: String,
}

/// What arrived.
#[derive(Clone, PartialEq, Eq)]
pub enum Inbound {
    Message {
        chat: ChatId,
        /// A one-to-one chat with the assistant.
        private: bool,
        from: Sender,
        text: String,
        /// Set when the text is someone else's words that the sender passed on (a
        /// forward, a message an inline bot composed): where the platform says it came
        /// from. Such text is never the sender's own order, whoever the sender is.
        passed_on_from: Option<String>,
    },
    /// A button of an earlier card was pressed.
    Press {
        /// The platform's id of this press, to answer it.
        press_id: String,
        chat: ChatId,
        message_id: String,
        from: Sender,
        /// The button's data, as the card set it.
        data: String,
    },
}

// By hand: a press id can hold a secret (a Discord interaction's token is its
// callback's credential), so it is shown only by its length.
impl std::fmt::Debug for Inbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Inbound::Message {
                chat,
                private,
                from,
                text,
                passed_on_from,
            } => f
                .debug_struct("Message")
                .field("chat", chat)
                .field("private", private)
                .field("from", from)
                .field("text", text)
                .field("passed_on_from", passed_on_from)
                .finish(),
            Inbound::Press {
                press_id,
                chat,
                message_id,
                from,
                data,
            } => f
                .debug_struct("Press")
                .field("press_id", &format_args!("<{} bytes>", press_id.len()))
                .field("chat", chat)
                .field("message_id", message_id)
                .field("from", from)
                .field("data", data)
                .finish(),
        }
    }
}

/// A message with buttons: what the host asks a person to decide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Card {
    pub text: String,
    /// Each button's label and the data its press carries back.
    pub buttons: Vec<(String, String)>,
}

#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    /// The platform could not be reached, or its connection dropped: try again later.
    #[error("{platform} could not be reached: {why}")]
    Unreachable { platform: &'static str, why: String },
    /// The platform asked for a pause (HTTP 429): try again after `retry_after`, when it
    /// said how long.
    #[error("{platform} is rate limiting {method}{}", retry_after.map(|d| format!("; it asks to retry after {:.1} s", d.as_secs_f64())).unwrap_or_default())]
    RateLimited {
        platform: &'static str,
        method: String,
        retry_after: Option<std::time::Duration>,
    },
    /// The platform answered with an error (a bad token, a chat it does not know, …).
    #[error("{platform} refused {method}: {why}")]
    Refused {
        platform: &'static str,
        method: &'static str,
        why: String,
    },
}

/// One chat platform.
#[async_trait]
pub trait Channel: Send + Sync {
    /// The platform's name in records and principals (`telegram`).
    fn name(&self) -> &'static str;
    /// Wait (up to the platform's long-poll time) for what arrived since the last call.
    /// What this returns is acknowledged to the platform at the next call, so what a
    /// crash loses is asked for again.
    async fn next_events(&self) -> Result<Vec<Inbound>, ChannelError>;
    /// Send `text` to `chat`, split into parts if it is long; the id of the last part.
    async fn send(&self, chat: &ChatId, text: &str) -> Result<String, ChannelError>;
    /// Send a card; the id of its message (the one with the buttons).
    async fn send_card(&self, chat: &ChatId, card: &Card) -> Result<String, ChannelError>;
    /// Replace a card's text and take its buttons away (once it is decided).
    async fn close_card(
        &self,
        chat: &ChatId,
        message_id: &str,
        text: &str,
    ) -> Result<(), ChannelError>;
    /// Answer a press (the platform shows `text` to the person who pressed).
    async fn answer_press(&self, press_id: &str, text: &str) -> Result<(), ChannelError>;
    /// Send a file (`name` as the platform should show it, at most 8 MiB, which every
    /// platform takes from a bot) to `chat`; the id of the message that carries it. The
    /// adapter sends exactly these bytes: whether they may leave was decided before.
    async fn send_file(
        &self,
        _chat: &ChatId,
        _name: &str,
        _bytes: &[u8],
    ) -> Result<String, ChannelError> {
        Err(ChannelError::Refused {
            platform: self.name(),
            method: "send file",
            why: "this channel does not send files".into(),
        })
    }
    /// Where the platform's update stream stopped, for a platform that keeps it for the
    /// client to ask from (Telegram's update offset): the host keeps it across restarts.
    /// `None` for platforms that redeliver or replay on their own.
    fn resume_offset(&self) -> Option<i64> {
        None
    }
    /// How a message mentions the assistant's own account on this platform, as the
    /// adapter has learnt it from the platform (Telegram's `@username`, Slack's and
    /// Discord's `<@id>` forms); empty until it knows. The host answers a group on a
    /// mention (see [`mentions_in`]).
    fn mention_forms(&self) -> Vec<String> {
        Vec::new()
    }
    /// The chat a thread belongs to, when `chat` is a thread this adapter models as a
    /// chat of its own (Slack's `C123/1700000000.000100` is under `C123`); none for a
    /// chat that is not a thread. The host uses it to let a thread share its chat's
    /// session when so configured.
    fn thread_parent(&self, _chat: &ChatId) -> Option<ChatId> {
        None
    }
}

/// Whether `text` mentions the assistant by one of `forms` (as a whole word:
/// `@airlock_bot` is not in `@airlock_botnet`; case-insensitively, as platforms match
/// user names), and the text without those mentions.
pub fn mentions_in(text: &str, forms: &[String]) -> Option<String> {
    let mut rest = text.to_string();
    let mut found = false;
    for form in forms.iter().filter(|f| !f.is_empty() && f.is_ascii()) {
        let lower_form = form.to_ascii_lowercase();
        let mut out = String::with_capacity(rest.len());
        let mut i = 0;
        // Searched in a lower-cased copy; the byte offsets hold because forms are ASCII
        // and `to_ascii_lowercase` keeps every offset.
        let lower = rest.to_ascii_lowercase();
        while let Some(at) = lower[i..].find(&lower_form) {
            let start = i + at;
            let end = start + lower_form.len();
            let word_char = |c: char| c.is_alphanumeric() || c == '_';
            let ends_word = !rest[end..].starts_with(word_char);
            out.push_str(&rest[i..start]);
            if ends_word {
                found = true;
            } else {
                out.push_str(&rest[start..end]);
            }
            i = end;
        }
        out.push_str(&rest[i..]);
        rest = out;
    }
    found.then(|| rest.trim().to_string())
}

/// `text` in parts of at most `limit` characters, each part but a single one numbered
/// `(k/n)`, split at line ends where it can be. Nothing is dropped.
pub fn split_text(text: &str, limit: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= limit {
        return vec![text.to_string()];
    }
    // Room for the "(kk/nn) " marker in front of each part.
    let room = limit.saturating_sub(10).max(1);
    let mut parts = Vec::new();
    let mut start = 0;
    while start < chars.len() {
        let mut end = (start + room).min(chars.len());
        if end < chars.len() {
            if let Some(nl) = chars[start..end].iter().rposition(|&c| c == '\n') {
                if nl > room / 2 {
                    end = start + nl + 1;
                }
            }
        }
        parts.push(chars[start..end].iter().collect::<String>());
        start = end;
    }
    let n = parts.len();
    parts
        .into_iter()
        .enumerate()
        .map(|(k, p)| format!("({}/{n}) {p}", k + 1))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_press_id_never_shows_in_debug_output() {
        let press = super::Inbound::Press {
            press_id: "1234:interaction-token-secret".into(),
            chat: super::ChatId("1".into()),
            message_id: "2".into(),
            from: super::Sender {
                id: "3".into(),
                display: "x".into(),
            },
            data: "a:b".into(),
        };
        let shown = format!("{press:?}");
        assert!(
            !shown.contains("secret") && shown.contains("<29 bytes>"),
            "{shown}"
        );
    }

    #[test]
    fn a_mention_is_found_as_a_whole_word_and_taken_out() {
        use super::mentions_in;
        let forms = vec!["@airlock_bot".to_string(), "<@U0BOT>".to_string()];
        assert_eq!(
            mentions_in("@Airlock_Bot what is on today?", &forms).as_deref(),
            Some("what is on today?")
        );
        assert_eq!(
            mentions_in("hey <@U0BOT>, the\nlist", &forms).as_deref(),
            Some("hey , the\nlist")
        );
        assert_eq!(mentions_in("@airlock_botnet run this", &forms), None);
        assert_eq!(mentions_in("no mention here", &forms), None);
        assert_eq!(mentions_in("@airlock_bot", &[]), None);
        assert_eq!(
            mentions_in("ünïcode @airlock_bot ok", &forms).as_deref(),
            Some("ünïcode  ok")
        );
    }

    use super::*;

    #[test]
    fn a_long_text_is_split_into_numbered_parts_and_nothing_is_lost() {
        let text: String = (0..500).map(|i| format!("line {i}\n")).collect();
        let parts = split_text(&text, 400);
        assert!(parts.len() > 1);
        let n = parts.len();
        let mut joined = String::new();
        for (k, p) in parts.iter().enumerate() {
            assert!(p.chars().count() <= 400, "{p}");
            let marker = format!("({}/{n}) ", k + 1);
            assert!(p.starts_with(&marker), "{p}");
            joined.push_str(&p[marker.len()..]);
        }
        assert_eq!(joined, text);
        assert_eq!(split_text("short", 400), vec!["short".to_string()]);
    }

    #[test]
    fn a_text_without_line_ends_is_split_too() {
        let text = "é".repeat(1000);
        let parts = split_text(&text, 100);
        let total: usize = parts
            .iter()
            .map(|p| p.split_once(") ").unwrap().1.chars().count())
            .sum();
        assert_eq!(total, 1000);
    }
}
