//! Chat channels: which platforms the host listens on (`config/channels.toml`), and what
//! it knows of each (`state/channels/<channel>.json`): the owner it was paired with, a
//! pending pairing code, where its update stream stopped, and which session each chat is.
//!
//! The adapters (`airlock-channels`) only carry messages. Everything that decides who may
//! talk to the assistant lives here and in `host::channels`: a platform user is the owner
//! only by the id that sent the one-time pairing code from their own account, never by
//! a display name, a chat or a message's text.

pub mod decisions;
mod pairing;

pub use pairing::{
    code_hash, code_in, keep_wrong, new_code, spend_code, void_code, Judged, PairingTries, Refusal,
    Unpaired, PAIRING_SECS,
};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::home::Home;

/// The channels this build speaks.
pub const KINDS: &[&str] = &["telegram", "slack", "discord", "webhook"];

/// The chat platforms: each has an owner bound by pairing.
pub const CHAT_KINDS: &[&str] = &["telegram", "slack", "discord"];

/// `config/channels.toml`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelsFile {
    pub telegram: Option<ChatConfig>,
    pub slack: Option<ChatConfig>,
    pub discord: Option<ChatConfig>,
    pub webhook: Option<WebhookConfig>,
}

impl ChannelsFile {
    pub fn has(&self, kind: &str) -> bool {
        match kind {
            "webhook" => self.webhook.is_some(),
            _ => self.chat(kind).is_some(),
        }
    }

    /// A chat platform's section.
    pub fn chat(&self, kind: &str) -> Option<&ChatConfig> {
        match kind {
            "telegram" => self.telegram.as_ref(),
            "slack" => self.slack.as_ref(),
            "discord" => self.discord.as_ref(),
            _ => None,
        }
    }

    pub fn chat_mut(&mut self, kind: &str) -> Option<&mut Option<ChatConfig>> {
        match kind {
            "telegram" => Some(&mut self.telegram),
            "slack" => Some(&mut self.slack),
            "discord" => Some(&mut self.discord),
            _ => None,
        }
    }

    /// Every configured chat platform, with its kind.
    pub fn chats(&self) -> impl Iterator<Item = (&'static str, &ChatConfig)> {
        CHAT_KINDS
            .iter()
            .filter_map(move |k| self.chat(k).map(|c| (*k, c)))
    }
}

/// Signed webhooks: what they post is untrusted content (an event, never an order), and
/// nobody approves through them.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// The stored secret whose value is the HMAC key both ways.
    pub secret: String,
    /// Where inbound requests are taken: a loopback address and port.
    #[serde(default = "default_webhook_listen")]
    pub listen: String,
    /// Where replies and cards are posted, signed; none: they are not sent.
    pub outbound_url: Option<String>,
}

fn default_webhook_listen() -> String {
    "127.0.0.1:8787".into()
}

impl WebhookConfig {
    /// The address to listen on, refused unless it is loopback: a webhook port bound to
    /// every interface is how such hosts get reached from outside.
    pub fn listen_addr(&self) -> anyhow::Result<std::net::SocketAddr> {
        let addr: std::net::SocketAddr = self.listen.parse().map_err(|e| {
            anyhow::anyhow!(
                "[webhook] listen {:?}: {e}\nhelp: an address and port, such as 127.0.0.1:8787",
                self.listen
            )
        })?;
        anyhow::ensure!(
            addr.ip().is_loopback(),
            "[webhook] listen {:?} is not a loopback address\nhelp: the webhook listens on loopback only; to take requests from elsewhere, put a TLS reverse proxy in front of it",
            self.listen
        );
        Ok(addr)
    }
}

/// A chat platform's section (`[telegram]`, `[slack]`, `[discord]`): the same fields
/// for each, since who may talk and who may approve is decided the same way on all of
/// them; the few platform-only fields are checked per platform when the file loads.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatConfig {
    /// The secret that holds the bot token; its binding must be the API's host.
    pub token_secret: String,
    /// Slack only: the secret with the app-level token (`xapp-…`) that opens Socket Mode
    /// connections; bound to the API's host too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_token_secret: Option<String>,
    /// The API's root; none: the platform's own ([`default_base_url`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// How long one wait for updates lasts (a long poll, or a read of the socket).
    #[serde(default = "default_poll_secs")]
    pub poll_secs: u64,
    /// What to do with a message from anyone but the owner.
    #[serde(default)]
    pub unknown_senders: UnknownSenders,
    /// In a group chat, the assistant takes only messages that start with this word
    /// (`/ai what's on today?`); without it, group chats are not served.
    #[serde(default)]
    pub group_trigger: Option<String>,
    /// Approval cards may be shown and answered in a group chat the assistant serves.
    /// Off: an action held in a group is put to the owner in their private chat.
    #[serde(default)]
    pub approve_in_groups: bool,
    /// The most messages one chat may send the assistant in a minute; the rest are
    /// dropped (and counted in the record of the first one dropped).
    #[serde(default = "default_messages_per_minute")]
    pub messages_per_minute: u32,
    /// The least time between two messages the host sends to one chat, in milliseconds
    /// (0: none), besides any pause the platform asks for.
    #[serde(default = "default_send_interval_ms")]
    pub send_interval_ms: u64,
    /// Which chats share a session (and so one history, one taint and one turn at a
    /// time): each thread its own (the default), a thread its chat's, or one for the
    /// whole channel.
    #[serde(default)]
    pub sessions: SessionScope,
}

/// Which chats of a channel share a session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum SessionScope {
    /// Each chat, and each thread where the platform has threads, is a session of its
    /// own.
    #[default]
    Thread,
    /// A thread shares the session of the chat it is in (Slack's threads under their
    /// channel).
    Chat,
    /// Every chat on the channel shares one session: what was said in one is known in
    /// the others, and untrusted content read in any of them taints all of them.
    Channel,
}

impl SessionScope {
    /// The key of `chat`'s session in the channel's state: chats with one key share a
    /// session. `parent` is the chat a thread is in, as the adapter knows it.
    pub fn session_key(self, chat: &str, parent: Option<&str>) -> String {
        match self {
            SessionScope::Thread => chat.to_string(),
            SessionScope::Chat => parent.unwrap_or(chat).to_string(),
            // No platform's chat id is `*`, so this key is no chat's own.
            SessionScope::Channel => "*".to_string(),
        }
    }
}

impl ChatConfig {
    /// The API root in force.
    pub fn base_url(&self, kind: &str) -> String {
        self.base_url
            .clone()
            .unwrap_or_else(|| default_base_url(kind).to_string())
    }
}

/// Each platform's API root.
pub fn default_base_url(kind: &str) -> &'static str {
    match kind {
        "slack" => "https://slack.com/api",
        "discord" => "https://discord.com/api/v10",
        _ => "https://api.telegram.org",
    }
}

fn default_messages_per_minute() -> u32 {
    20
}

fn default_send_interval_ms() -> u64 {
    1000
}

/// The text of a group message addressed to the assistant: one that mentions the bot
/// (`mentions`, the forms its platform uses; the mention taken out) or starts with
/// `trigger` (the trigger and the space after it taken off). `None` when it is neither.
pub fn addressed(text: &str, trigger: Option<&str>, mentions: &[String]) -> Option<String> {
    if let Some(rest) = airlock_channels::mentions_in(text, mentions) {
        return Some(rest);
    }
    let trigger = trigger?;
    let rest = text.trim_start().strip_prefix(trigger)?;
    // `/ai` must not match `/aim`; Telegram adds `@botname` to commands in groups.
    if let Some(r) = rest.strip_prefix('@') {
        return Some(
            r.split_once(char::is_whitespace)
                .map_or("", |(_, t)| t.trim())
                .to_string(),
        );
    }
    (rest.is_empty() || rest.starts_with(char::is_whitespace)).then(|| rest.trim().to_string())
}

fn default_poll_secs() -> u64 {
    25
}

/// What a message from someone who is not the owner gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnknownSenders {
    /// Dropped, with a record of who and why.
    #[default]
    Drop,
    /// Answered, with the message taken as untrusted content (it taints the chat's
    /// session, as a fetched page does). Only once the channel is paired.
    Untrusted,
    /// The owner is asked, with a card in their own chat showing who wrote and what;
    /// answered "yes", the message is taken as untrusted content; "no", or no answer in
    /// ten minutes, drops it. Each with a record.
    Ask,
}

impl UnknownSenders {
    /// The setting's name in `channels.toml`, as the Gate sees it (`channel.admit`).
    pub fn as_str(self) -> &'static str {
        match self {
            UnknownSenders::Drop => "drop",
            UnknownSenders::Untrusted => "untrusted",
            UnknownSenders::Ask => "ask",
        }
    }
}

/// What the owner made a platform user in a channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Their messages are trusted input, as the owner's; their presses on approval cards
    /// count only where a policy names admins for the action (none does yet).
    Admin,
    /// Their messages are answered as untrusted content.
    Member,
}

impl Role {
    pub fn parse(text: &str) -> anyhow::Result<Role> {
        match text {
            "admin" => Ok(Role::Admin),
            "member" => Ok(Role::Member),
            other => anyhow::bail!("no role `{other}`\nhelp: --role admin or --role member"),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Member => "member",
        }
    }
}

pub fn config_path(home: &Home) -> PathBuf {
    home.config.join("channels.toml")
}

/// The channels file; absent means none.
pub fn load_config(home: &Home) -> anyhow::Result<ChannelsFile> {
    let path = config_path(home);
    if !path.exists() {
        return Ok(ChannelsFile::default());
    }
    let text = crate::operator_file::read_text(&path, crate::operator_file::CONFIG_FILE)?;
    let file: ChannelsFile = toml::from_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "{}: {e}\nhelp: `airlock channel add telegram --token-secret NAME` writes a valid one",
            path.display()
        )
    })?;
    for (kind, t) in file.chats() {
        check_chat(kind, t).map_err(|e| anyhow::anyhow!("{}: [{kind}] {e:#}", path.display()))?;
    }
    if let Some(w) = &file.webhook {
        w.listen_addr()
            .map_err(|e| anyhow::anyhow!("{}: {e:#}", path.display()))?;
        if let Some(u) = &w.outbound_url {
            let url = url::Url::parse(u).map_err(|e| {
                anyhow::anyhow!("{}: [webhook] outbound_url {u:?}: {e}", path.display())
            })?;
            anyhow::ensure!(
                matches!(url.scheme(), "https" | "http") && url.host_str().is_some(),
                "{}: [webhook] outbound_url {u:?} is not an http(s) URL with a host",
                path.display()
            );
        }
    }
    Ok(file)
}

/// What a chat platform's section must hold.
fn check_chat(kind: &str, t: &ChatConfig) -> anyhow::Result<()> {
    let base = t.base_url(kind);
    let url = url::Url::parse(&base).map_err(|e| anyhow::anyhow!("base_url {base:?}: {e}"))?;
    anyhow::ensure!(
        matches!(url.scheme(), "https" | "http") && url.host_str().is_some(),
        "base_url {base:?} is not an http(s) URL with a host"
    );
    if let Some(g) = &t.group_trigger {
        anyhow::ensure!(
            !g.is_empty() && !g.chars().any(char::is_whitespace),
            "group_trigger {g:?} must be one word, such as \"/ai\""
        );
    }
    anyhow::ensure!(
        (1..=50).contains(&t.poll_secs),
        "poll_secs = {} is out of range (1 to 50)",
        t.poll_secs
    );
    anyhow::ensure!(
        (1..=600).contains(&t.messages_per_minute),
        "messages_per_minute = {} is out of range (1 to 600)",
        t.messages_per_minute
    );
    anyhow::ensure!(
        t.send_interval_ms <= 60_000,
        "send_interval_ms = {} is out of range (0 to 60000)",
        t.send_interval_ms
    );
    match (kind, &t.app_token_secret) {
        ("slack", None) => anyhow::bail!(
            "app_token_secret is missing\nhelp: Slack's Socket Mode needs the app-level token (xapp-…): airlock channel add slack --token-secret BOT --app-token-secret APP"
        ),
        ("slack", Some(_)) | (_, None) => {}
        (_, Some(_)) => anyhow::bail!("app_token_secret is for slack only"),
    }
    Ok(())
}

pub fn save_config(home: &Home, file: &ChannelsFile) -> anyhow::Result<()> {
    let text = toml::to_string(file)?;
    airlock_proxy::write_atomic(&config_path(home), text.as_bytes(), 0o600)?;
    Ok(())
}

/// What the host knows of one channel.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelState {
    /// The owner's platform user id, bound by pairing.
    pub owner: Option<String>,
    /// The owner's private chat with the assistant (where they paired, or last wrote
    /// privately): where approval cards go when the chat that held them is not it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_chat: Option<String>,
    pub pairing: Option<Pairing>,
    /// Where the platform's update stream stopped.
    pub offset: Option<i64>,
    /// The session of each chat, by its key ([`SessionScope::session_key`]: the chat's
    /// id, its parent chat's id, or `*` for the whole channel).
    #[serde(default)]
    pub chats: BTreeMap<String, String>,
    /// Admins and members by platform user id.
    #[serde(default)]
    pub members: BTreeMap<String, Role>,
}

/// A pairing code waiting to be sent by the owner.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pairing {
    /// `sha256:` of the code; the code itself is only printed.
    pub code_hash: String,
    /// Unix seconds.
    pub expires_at: u64,
    /// Wrong codes from everyone so far, as the host last kept them: it counts tries in
    /// memory (per sender, see `pairing`) and writes this only with the records of them,
    /// so a restarted host goes on from it.
    pub attempts: u32,
}

fn state_path(home: &Home, channel: &str) -> PathBuf {
    home.state.join("channels").join(format!("{channel}.json"))
}

/// Read, change and write a channel's state under its lock (the host and the command
/// line both change it). The state is written only when `change` returns `Ok`.
pub fn update_state<T>(
    home: &Home,
    channel: &str,
    change: impl FnOnce(&mut ChannelState) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let path = state_path(home, channel);
    if let Some(dir) = path.parent() {
        crate::home::create_private_dir(dir)?;
    }
    let _lock = crate::policy_change::lock_beside(&path)?;
    let mut state = read_state_at(&path)?;
    let out = change(&mut state)?;
    airlock_proxy::write_atomic(&path, &serde_json::to_vec_pretty(&state)?, 0o600)?;
    Ok(out)
}

pub fn read_state(home: &Home, channel: &str) -> anyhow::Result<ChannelState> {
    read_state_at(&state_path(home, channel))
}

fn read_state_at(path: &Path) -> anyhow::Result<ChannelState> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            anyhow::anyhow!(
                "{} is not a channel state file: {e}\nhelp: move it away and pair the channel again (`airlock channel pair`)",
                path.display()
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ChannelState::default()),
        Err(e) => Err(anyhow::anyhow!("cannot read {}: {e}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_key_shares_a_session_only_as_far_as_the_scope_says() {
        let thread = "C1/1700000000.000100";
        assert_eq!(SessionScope::Thread.session_key(thread, Some("C1")), thread);
        assert_eq!(SessionScope::Chat.session_key(thread, Some("C1")), "C1");
        assert_eq!(SessionScope::Chat.session_key("C1", None), "C1");
        assert_eq!(SessionScope::Channel.session_key(thread, Some("C1")), "*");
        assert_eq!(SessionScope::Channel.session_key("D9", None), "*");
        // The setting is spelt in channels.toml as `--sessions` takes it.
        let parsed: ChatConfig =
            toml::from_str("token_secret = \"t\"\nsessions = \"chat\"\n").unwrap();
        assert_eq!(parsed.sessions, SessionScope::Chat);
        let wrong = toml::from_str::<ChatConfig>("token_secret = \"t\"\nsessions = \"group\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            wrong.contains("thread") && wrong.contains("channel"),
            "{wrong}"
        );
    }

    #[test]
    fn a_group_message_is_for_the_assistant_only_after_its_trigger_or_a_mention() {
        let t = Some("/ai");
        let none: &[String] = &[];
        let at = |text: &str, trigger: Option<&str>, mentions: &[String]| {
            addressed(text, trigger, mentions)
        };
        assert_eq!(
            at("/ai what is on today?", t, none).as_deref(),
            Some("what is on today?")
        );
        assert_eq!(at("  /ai@airlock_bot hi", t, none).as_deref(), Some("hi"));
        assert_eq!(at("/aim high", t, none), None);
        assert_eq!(at("tell /ai nothing", t, none), None);
        assert_eq!(at("/ai hi", None, none), None);
        let bot = ["@airlock_bot".to_string()];
        assert_eq!(
            at("@airlock_bot what is on today?", None, &bot).as_deref(),
            Some("what is on today?")
        );
        assert_eq!(at("@airlock_botnet hi", None, &bot), None);
        assert_eq!(at("lunch at noon", t, &bot), None);
    }
}
