//! `airlock secret`: credentials the proxy adds at the boundary. Values are read from
//! stdin only (never argv, where other processes and shell history could see them) and
//! are never printed.

use std::io::{IsTerminal, Read};

use airlock_proxy::secrets::{Binding, HeaderTemplate, SecretStore};
use clap::Subcommand;
use secrecy::SecretString;

use crate::home::{create_private_dir, Home};

#[derive(Debug, Subcommand)]
pub enum SecretCommand {
    /// Store a secret; the value is read from stdin: `printf %s "$TOKEN" | airlock secret set GH --host api.github.com`.
    Set {
        name: String,
        /// The only host the value is sent to: `host` or `host:port`.
        #[arg(long)]
        host: String,
        /// The scheme it is sent over: https (default) or http.
        #[arg(long)]
        scheme: Option<String>,
        /// The port it is sent to (default 443 for https, 80 for http).
        #[arg(long)]
        port: Option<u16>,
        /// Only for paths equal to or below this prefix.
        #[arg(long)]
        path_prefix: Option<String>,
        /// The header that carries it; `{}` marks where the value goes.
        #[arg(long, default_value = "Authorization: Bearer {}")]
        header: String,
    },
    /// List names, bindings and placeholders (never values).
    List,
    /// Remove a secret.
    Rm { name: String },
}

pub fn run(cmd: SecretCommand) -> anyhow::Result<i32> {
    let home = Home::from_env()?;
    let store = SecretStore::new(&home.config);
    match cmd {
        SecretCommand::Set {
            name,
            host,
            scheme,
            port,
            path_prefix,
            header,
        } => {
            let header = HeaderTemplate::parse(&header)?;
            let binding = Binding::parse(&host, scheme.as_deref(), port, path_prefix.as_deref())?;
            if std::io::stdin().is_terminal() {
                anyhow::bail!("the secret value is read from stdin, which is a terminal here\nhelp: pipe it in, e.g. `printf %s \"$TOKEN\" | airlock secret set {name} --host {host}`");
            }
            let mut raw = String::new();
            std::io::stdin()
                .take(airlock_proxy::secrets::store::MAX_SECRET_BYTES as u64 + 3)
                .read_to_string(&mut raw)
                .map_err(|e| anyhow::anyhow!("cannot read the secret value from stdin: {e}"))?;
            let trimmed = raw
                .strip_suffix('\n')
                .map(|s| s.strip_suffix('\r').unwrap_or(s))
                .unwrap_or(&raw);
            let value = SecretString::from(trimmed.to_string());
            drop(raw);
            create_private_dir(&home.config)?;
            let placeholder = store.set(&name, &binding, header.clone(), &value)?;
            crate::out!(
                "stored secret {name} for {} in {}",
                binding.display(),
                header.display()
            );
            crate::out!("placeholder (what a sandbox sees): {placeholder}");
            // Name and binding only: the value never goes into a record.
            crate::config_audit::record(
                &home,
                "config-secret-set",
                serde_json::json!({
                    "name": name,
                    "binding": binding.display(),
                    "header": header.display(),
                }),
            )?;
        }
        SecretCommand::List => {
            let list = store.list()?;
            if list.is_empty() {
                crate::out!("no secrets\nhelp: add one with `printf %s \"$TOKEN\" | airlock secret set <name> --host <host>`");
            }
            let mut legacy = Vec::new();
            for s in list {
                crate::out!(
                    "{:<20} {}  {}  placeholder {}",
                    s.name,
                    s.binding.display(),
                    s.header.display(),
                    s.placeholder
                );
                if s.legacy {
                    legacy.push(s.name);
                }
            }
            if !legacy.is_empty() {
                crate::out!(
                    "note: {} stored before bindings named a scheme and port, so now sent only over https to port 443\nhelp: to send one elsewhere, set it again with --scheme/--port",
                    legacy.join(", ")
                );
            }
        }
        SecretCommand::Rm { name } => {
            store.remove(&name)?;
            crate::out!("removed secret {name}");
            crate::config_audit::record(
                &home,
                "config-secret-rm",
                serde_json::json!({"name": name}),
            )?;
        }
    }
    Ok(0)
}
