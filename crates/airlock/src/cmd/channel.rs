//! `airlock channel`: the chat platforms the host listens on, and whose account there is
//! the owner's.
//!
//! `add` writes `config/channels.toml` (the bot token stays in the secrets store, bound to
//! the platform's API host); `pair` makes a one-time code that the owner sends to the bot
//! from their own account, which binds that account's platform id as the owner; `unpair`
//! forgets it. Each change is an audit record (a code's hash, never the code).

use clap::Subcommand;
use serde_json::json;

use airlock_core::gate::Verdict;
use airlock_core::terminal_text::escape_line;
use airlock_core::{Principal, Via};

use crate::channels::{self, ChatConfig, Pairing, UnknownSenders, PAIRING_SECS};
use crate::home::Home;

#[derive(Debug, Subcommand)]
pub enum ChannelCommand {
    /// Listen on a platform: `airlock channel add telegram --token-secret telegram`,
    /// `airlock channel add slack --token-secret slack-bot --app-token-secret slack-app`,
    /// `airlock channel add discord --token-secret discord`, or
    /// `airlock channel add webhook --token-secret hook --outbound-url URL`.
    Add {
        /// The platform: telegram, slack, discord or webhook.
        kind: String,
        /// The stored secret with the bot token (`airlock secret set NAME --host
        /// api.telegram.org`, `slack.com` or `discord.com`), or the webhook's signing key.
        #[arg(long)]
        token_secret: String,
        /// slack: the stored secret with the app-level token (xapp-…) for Socket Mode.
        #[arg(long)]
        app_token_secret: Option<String>,
        /// Let approval cards be shown and answered in the group chats it serves (off:
        /// an action held in a group is put to the owner privately).
        #[arg(long)]
        approve_in_groups: bool,
        /// The most messages one chat may send in a minute (default 20); the rest are
        /// dropped, with a record.
        #[arg(long)]
        messages_per_minute: Option<u32>,
        /// The least milliseconds between two messages to one chat (default 1000; 0:
        /// none), besides any pause the platform asks for.
        #[arg(long)]
        send_interval_ms: Option<u64>,
        /// webhook: where to listen (loopback only; default 127.0.0.1:8787).
        #[arg(long)]
        listen: Option<String>,
        /// webhook: where replies and cards are posted, signed.
        #[arg(long)]
        outbound_url: Option<String>,
        /// The platform API's root URL (default: the platform's own).
        #[arg(long)]
        base_url: Option<String>,
        /// Seconds one long poll waits for updates (default 25).
        #[arg(long)]
        poll_secs: Option<u64>,
        /// Serve group chats too, for the owner's messages that start with this word.
        #[arg(long)]
        group_trigger: Option<String>,
        /// What a message from someone who is neither the owner nor a member gets:
        /// `drop` (the default, recorded), `untrusted` (answered as untrusted content) or
        /// `ask` (the owner is asked, in their own chat, whether to answer it).
        #[arg(long, default_value = "drop")]
        unknown_senders: String,
        /// Which chats share a session: `thread` (each chat and each thread its own, the
        /// default), `chat` (a thread shares its chat's) or `channel` (one for all).
        #[arg(long, value_enum, default_value_t)]
        sessions: channels::SessionScope,
    },
    /// Admins and members of a channel, by platform user id.
    #[command(subcommand)]
    Members(MembersCommand),
    /// Print a one-time code for the owner to send to the bot from their own account.
    Pair { kind: String },
    /// Forget the channel's owner (the next pairing binds one anew).
    Unpair { kind: String },
    /// The configured channels and their owners.
    List,
}

#[derive(Debug, Subcommand)]
pub enum MembersCommand {
    /// Bind a platform user id as an admin or a member.
    Add {
        kind: String,
        id: String,
        #[arg(long)]
        role: String,
    },
    /// Unbind one.
    Rm {
        kind: String,
        id: String,
    },
    List {
        kind: String,
    },
}

fn check_kind(kind: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        channels::KINDS.contains(&kind),
        "no channel kind `{}`\nhelp: this build speaks {}",
        escape_line(kind),
        channels::KINDS.join(", ")
    );
    Ok(())
}

fn configured(home: &Home, kind: &str) -> anyhow::Result<()> {
    check_kind(kind)?;
    anyhow::ensure!(
        channels::load_config(home)?.has(kind),
        "the {kind} channel is not configured\nhelp: airlock channel add {kind} --token-secret NAME"
    );
    Ok(())
}

pub fn run(cmd: ChannelCommand) -> anyhow::Result<i32> {
    let home = Home::from_env()?;
    match cmd {
        ChannelCommand::Add {
            kind,
            token_secret,
            base_url,
            poll_secs,
            group_trigger,
            unknown_senders,
            listen,
            outbound_url,
            app_token_secret,
            approve_in_groups,
            messages_per_minute,
            send_interval_ms,
            sessions,
        } => {
            check_kind(&kind)?;
            if kind == "webhook" {
                return add_webhook(&home, token_secret, listen, outbound_url);
            }
            let unknown = match unknown_senders.as_str() {
                "drop" => UnknownSenders::Drop,
                "untrusted" => UnknownSenders::Untrusted,
                "ask" => UnknownSenders::Ask,
                other => anyhow::bail!(
                    "--unknown-senders {}: not a choice\nhelp: drop, untrusted or ask",
                    escape_line(other)
                ),
            };
            let cfg = ChatConfig {
                token_secret,
                app_token_secret,
                base_url,
                poll_secs: poll_secs.unwrap_or(25),
                unknown_senders: unknown,
                group_trigger,
                approve_in_groups,
                messages_per_minute: messages_per_minute.unwrap_or(20),
                send_interval_ms: send_interval_ms.unwrap_or(1000),
                sessions,
            };
            add_chat(&home, &kind, cfg, &unknown_senders)
        }
        ChannelCommand::Pair { kind } => {
            configured(&home, &kind)?;
            anyhow::ensure!(
                kind != "webhook",
                "a webhook has no owner to pair: what it posts is untrusted content, and nobody approves through it"
            );
            let code = channels::new_code()?;
            let hash = channels::code_hash(&code);
            let expires_at = crate::runtime::now_unix() + PAIRING_SECS;
            channels::update_state(&home, &kind, |s| {
                anyhow::ensure!(
                    s.owner.is_none(),
                    "the {kind} channel is paired already (owner id {})\nhelp: airlock channel unpair {kind} first",
                    s.owner.as_deref().unwrap_or("")
                );
                s.pairing = Some(Pairing {
                    code_hash: hash.clone(),
                    expires_at,
                    attempts: 0,
                });
                Ok(())
            })?;
            crate::config_audit::record(
                &home,
                "channel-pairing-started",
                json!({"channel": kind, "code_hash": hash, "expires_at": expires_at}),
            )?;
            // Slack and Discord take a leading `/` for a slash command of their own: the
            // code goes alone there.
            let message = if kind == "telegram" {
                format!("/start {code}")
            } else {
                code.clone()
            };
            crate::out!("send this to the bot in a private message from your own {kind} account, within {} minutes:\n\n    {message}\n\nthe account that sends it becomes this assistant's owner there", PAIRING_SECS / 60);
            Ok(0)
        }
        ChannelCommand::Unpair { kind } => {
            configured(&home, &kind)?;
            let was = channels::update_state(&home, &kind, |s| {
                if let Some(owner) = &s.owner {
                    operator_binds(&home, &kind, owner, "none")?;
                }
                s.pairing = None;
                Ok(s.owner.take())
            })?;
            crate::config_audit::record(
                &home,
                "channel-unpaired",
                json!({"channel": kind, "owner": was}),
            )?;
            crate::out!("{kind}: no owner now");
            Ok(0)
        }
        ChannelCommand::Members(m) => members(&home, m),
        ChannelCommand::List => {
            let file = channels::load_config(&home)?;
            if let Some(w) = &file.webhook {
                crate::out!(
                    "webhook: listening on {} (signing secret {}), replies to {}",
                    escape_line(&w.listen),
                    escape_line(&w.secret),
                    w.outbound_url
                        .as_deref()
                        .map(escape_line)
                        .unwrap_or_else(|| "nowhere".into())
                );
            }
            if file.chats().next().is_none() && file.webhook.is_none() {
                crate::out!("no channels (airlock channel add telegram --token-secret NAME)");
            }
            for (kind, t) in file.chats() {
                let state = channels::read_state(&home, kind)?;
                crate::out!(
                    "{kind}: {} (token secret {}), owner {}, {} chat(s)",
                    escape_line(&t.base_url(kind)),
                    escape_line(&t.token_secret),
                    state
                        .owner
                        .as_deref()
                        .map(|o| format!("id {}", escape_line(o)))
                        .unwrap_or_else(|| "not paired".into()),
                    state.chats.len()
                );
            }
            Ok(0)
        }
    }
}

/// Write a chat platform's section, once its tokens are found bound to its API's host.
fn add_chat(
    home: &Home,
    kind: &str,
    cfg: ChatConfig,
    unknown_senders: &str,
) -> anyhow::Result<i32> {
    let mut file = channels::load_config(home)?;
    let base = cfg.base_url(kind);
    // The tokens must exist and be bound to the API's host: the host sends them nowhere
    // else.
    crate::host::channels::token_for(home, &cfg.token_secret, &base)?;
    if let Some(app) = &cfg.app_token_secret {
        crate::host::channels::token_for(home, app, &base)?;
    }
    if let Some(slot) = file.chat_mut(kind) {
        *slot = Some(cfg.clone());
    }
    channels::save_config(home, &file)?;
    // Re-read, so what was written is what loads; a section that does not is taken back.
    if let Err(e) = channels::load_config(home) {
        if let Some(slot) = file.chat_mut(kind) {
            *slot = None;
        }
        channels::save_config(home, &file)?;
        return Err(e);
    }
    crate::config_audit::record(
        home,
        "channel-added",
        json!({"channel": kind, "token_secret": cfg.token_secret,
               "app_token_secret": cfg.app_token_secret,
               "base_url": base, "unknown_senders": unknown_senders,
               "group_trigger": cfg.group_trigger,
               "approve_in_groups": cfg.approve_in_groups,
               "messages_per_minute": cfg.messages_per_minute,
               "send_interval_ms": cfg.send_interval_ms,
               "sessions": cfg.sessions}),
    )?;
    crate::out!(
        "{kind}: configured; a running host picks it up when restarted\nnext: airlock channel pair {kind}"
    );
    Ok(0)
}

/// The Gate's decision on the operator binding `user` to `role` (`none`: unbinding),
/// recorded before the channel's state changes; a refusal says which policy refused.
fn operator_binds(home: &Home, kind: &str, user: &str, role: &str) -> anyhow::Result<()> {
    use crate::channels::decisions;
    let cfg = crate::config::load(&home.config_file())?;
    let profile = crate::policies::pick_profile(None, &cfg.policy.profile)?;
    let gate = crate::runtime::gate_for(home, &cfg, profile, &home.state)?;
    let action = decisions::bind_action(kind, user, role, "operator");
    let mut log = crate::runtime::open_audit(home, &cfg)?;
    let verdict = decisions::decide(&mut log, &gate, kind, Principal::Owner, Via::cli(), action);
    log.close().map_err(|e| anyhow::anyhow!("{e}"))?;
    match verdict {
        Verdict::Allow(_) => Ok(()),
        Verdict::Ask(t) => anyhow::bail!(
            "the policy holds this binding for approval ({}), and a binding made at the command line cannot wait\nhelp: change the policy that holds channel.bind",
            decisions::refusal_text(&t.reasons)
        ),
        Verdict::Deny(d) => anyhow::bail!(
            "the policy refuses this binding: {}\nhelp: see the policies named in `airlock audit tail`",
            decisions::refusal_text(&d.reasons)
        ),
    }
}

fn members(home: &Home, cmd: MembersCommand) -> anyhow::Result<i32> {
    match cmd {
        MembersCommand::Add { kind, id, role } => {
            configured(home, &kind)?;
            let role = channels::Role::parse(&role)?;
            anyhow::ensure!(
                !id.is_empty()
                    && id.len() <= 64
                    && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'),
                "`{}` is not a platform user id\nhelp: a Telegram or Discord user id is a number, a Slack one is like U012AB3CD",
                escape_line(&id)
            );
            channels::update_state(home, &kind, |s| {
                anyhow::ensure!(
                    s.owner.as_deref() != Some(id.as_str()),
                    "{id} is the channel's owner"
                );
                operator_binds(home, &kind, &id, role.as_str())?;
                s.members.insert(id.clone(), role);
                Ok(())
            })?;
            crate::config_audit::record(
                home,
                "channel-member-added",
                json!({"channel": kind, "platform_id": id, "role": role.as_str()}),
            )?;
            crate::out!("{kind}: {id} is a {}", role.as_str());
        }
        MembersCommand::Rm { kind, id } => {
            configured(home, &kind)?;
            channels::update_state(home, &kind, |s| {
                anyhow::ensure!(
                    s.members.contains_key(&id),
                    "{kind}: {} is not a member",
                    escape_line(&id)
                );
                operator_binds(home, &kind, &id, "none")?;
                s.members.remove(&id);
                Ok(())
            })?;
            crate::config_audit::record(
                home,
                "channel-member-removed",
                json!({"channel": kind, "platform_id": id}),
            )?;
            crate::out!("{kind}: {id} removed");
        }
        MembersCommand::List { kind } => {
            configured(home, &kind)?;
            for (id, role) in channels::read_state(home, &kind)?.members {
                crate::out!("{} {}", escape_line(&id), role.as_str());
            }
        }
    }
    Ok(0)
}

fn add_webhook(
    home: &Home,
    secret: String,
    listen: Option<String>,
    outbound_url: Option<String>,
) -> anyhow::Result<i32> {
    let mut file = channels::load_config(home)?;
    let cfg = channels::WebhookConfig {
        secret,
        listen: listen.unwrap_or_else(|| "127.0.0.1:8787".into()),
        outbound_url,
    };
    cfg.listen_addr()?;
    crate::host::channels::secret_named(home, &cfg.secret)?;
    file.webhook = Some(cfg.clone());
    channels::save_config(home, &file)?;
    channels::load_config(home)?;
    crate::config_audit::record(
        home,
        "channel-added",
        json!({"channel": "webhook", "secret": cfg.secret, "listen": cfg.listen,
               "outbound_url": cfg.outbound_url}),
    )?;
    crate::out!(
        "webhook: configured on {} (POST {}); a running host picks it up when restarted",
        cfg.listen,
        airlock_channels::webhook::INBOUND_PATH
    );
    Ok(0)
}
