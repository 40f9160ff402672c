//! `airlock net`: the operator's egress allowlist (`<config>/net-rules.toml`).
//!
//! These commands edit operator-owned files in the config dir; nothing inside a sandbox
//! can reach them.

use airlock_core::policy::{builtin_sources, PolicyEngine, PolicySource, Profile};
use airlock_proxy::{rules_to_cedar, NetRule, NetRules, RulesError, RULES_FILE, RULES_POLICY_NAME};
use clap::Subcommand;

use crate::home::{create_private_dir, Home};

#[derive(Debug, Subcommand)]
pub enum NetCommand {
    /// Allow requests to a host: `airlock net allow api.github.com --methods GET,HEAD`.
    Allow {
        /// `host` or `host:port` (without a port: 443 for https, 80 for http).
        target: String,
        /// Only these methods (comma-separated); default any.
        #[arg(long, value_delimiter = ',')]
        methods: Vec<String>,
        /// Only this path and below (`/p` matches `/p` and `/p/...`).
        #[arg(long)]
        path_prefix: Option<String>,
        /// Ask before each matching request.
        #[arg(long)]
        ask: bool,
        /// Tunnel TLS without interception (decided on host and port only).
        #[arg(long, conflicts_with_all = ["methods", "path_prefix"])]
        pass_through: bool,
    },
    /// Let the proxy reach one loopback/private `addr:port` (an SSRF exception).
    AllowPrivate {
        /// Exact address and port, e.g. `127.0.0.1:8443`.
        addr: std::net::SocketAddr,
    },
    /// List the rules.
    List,
    /// Remove a rule by number (`3` or `net.rule.3`), by host, or an allow-private address.
    Revoke { rule: String },
}

pub fn run(cmd: NetCommand) -> anyhow::Result<i32> {
    let home = Home::from_env()?;
    match cmd {
        NetCommand::List => {
            let rules = NetRules::load(&home.config)?;
            if rules.rules.is_empty() && rules.allow_private.is_empty() {
                crate::out!("no net rules: every request is denied\nhelp: allow a host with `airlock net allow <host>`");
            }
            for r in &rules.rules {
                crate::out!("net.rule.{:<4} {}", r.id, r.describe());
            }
            for a in &rules.allow_private {
                crate::out!("allow-private {a}");
            }
        }
        NetCommand::Allow {
            target,
            methods,
            path_prefix,
            ask,
            pass_through,
        } => {
            let (host, port) = NetRule::parse_target(&target)?;
            let mut rule = NetRule::for_host(&host);
            rule.port = port;
            rule.methods = methods
                .iter()
                .map(|m| m.trim().to_ascii_uppercase())
                .filter(|m| !m.is_empty())
                .collect();
            rule.path_prefix = path_prefix;
            rule.ask = ask;
            rule.pass_through = pass_through;
            let added = edit(&home, |rules| {
                let id = rules.add(rule)?;
                check_policy(rules)?;
                Ok(rules.rules.iter().find(|r| r.id == id).cloned())
            })?;
            if let Some(r) = &added {
                crate::out!("added net.rule.{}: {}", r.id, r.describe());
            }
            crate::config_audit::record(
                &home,
                "config-net-allow",
                serde_json::json!({
                    "target": target,
                    "rule": added.as_ref().map(|r| format!("net.rule.{}", r.id)),
                    "describe": added.as_ref().map(|r| r.describe()),
                }),
            )?;
        }
        NetCommand::AllowPrivate { addr } => {
            edit(&home, |rules| {
                if !rules.allow_private.contains(&addr) {
                    rules.allow_private.push(addr);
                }
                Ok(())
            })?;
            crate::out!("the proxy may now reach {addr} (still only for hosts a rule allows)");
            crate::config_audit::record(
                &home,
                "config-net-allow-private",
                serde_json::json!({"addr": addr.to_string()}),
            )?;
        }
        NetCommand::Revoke { rule } => {
            // An address names both what `allow-private` let through and any rule for
            // that host: revoking it takes back both, so that no rule is left waiting to
            // come back into force when the address is allowed again.
            let removed = edit(&home, |rules| {
                let mut removed = Vec::new();
                if let Ok(addr) = rule.parse::<std::net::SocketAddr>() {
                    if rules.allow_private.contains(&addr) {
                        rules.allow_private.retain(|a| *a != addr);
                        removed.push(format!("allow-private {addr}"));
                    }
                }
                match rules.revoke(&rule) {
                    Ok(gone) => removed.extend(
                        gone.iter()
                            .map(|r| format!("net.rule.{}: {}", r.id, r.describe())),
                    ),
                    Err(RulesError::NoSuchRule(_)) if !removed.is_empty() => {}
                    Err(e) => return Err(e.into()),
                }
                Ok(removed)
            })?;
            for r in &removed {
                crate::out!("removed {r}");
            }
            crate::config_audit::record(
                &home,
                "config-net-revoke",
                serde_json::json!({"rule": rule, "removed": removed}),
            )?;
        }
    }
    Ok(0)
}

/// Change the rules file as one locked read-modify-write, so that commands run at the
/// same time never lose each other's edits.
fn edit<T>(
    home: &Home,
    change: impl FnOnce(&mut NetRules) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    create_private_dir(&home.config)?;
    NetRules::update(&home.config, change)
}

/// The generated policy must validate before the file changes, so a bad rule never
/// reaches a later startup.
fn check_policy(rules: &NetRules) -> anyhow::Result<()> {
    let mut sources = builtin_sources(Profile::Default);
    sources.push(PolicySource {
        name: RULES_POLICY_NAME.into(),
        text: rules_to_cedar(rules),
    });
    PolicyEngine::load(&sources)
        .map_err(|e| anyhow::anyhow!("the rule does not make a valid policy: {e}\nhelp: fix the rule; {RULES_FILE} was not changed"))?;
    Ok(())
}
