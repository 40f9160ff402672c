//! `airlock service install|uninstall|status`: a systemd unit that runs `airlock serve`.
//!
//! The unit hardens the host with every directive that still lets the sandbox work, and
//! says in a comment why each one it leaves out would break a run (the sandbox needs user
//! namespaces, the mount API, its own seccomp filters and cgroups; payloads such as Node.js
//! need executable memory; commits write into the operator's own directories).

use std::path::{Path, PathBuf};

use clap::Subcommand;

use crate::home::Home;

pub const UNIT_NAME: &str = "airlock.service";

/// Which unit the command is about.
#[derive(Debug, clap::Args)]
pub struct UnitArgs {
    /// A system unit (in /etc/systemd/system, as root) instead of the user's own.
    #[arg(long)]
    system: bool,
    /// The unit's directory instead of systemd's (packaging, tests).
    #[arg(long)]
    unit_dir: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum ServiceCommand {
    /// Write the unit and tell systemd (`daemon-reload`); then `systemctl [--user] enable
    /// --now airlock`.
    Install {
        #[command(flatten)]
        unit: UnitArgs,
        /// Do not run `systemctl daemon-reload`.
        #[arg(long)]
        no_reload: bool,
    },
    /// Remove the unit (stop it first: `systemctl [--user] disable --now airlock`).
    Uninstall {
        #[command(flatten)]
        unit: UnitArgs,
        /// Do not run `systemctl daemon-reload`.
        #[arg(long)]
        no_reload: bool,
    },
    /// Whether the unit is installed, what systemd says of it, and whether a host runs.
    Status {
        #[command(flatten)]
        unit: UnitArgs,
    },
}

fn unit_dir(system: bool, explicit: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(d) = explicit {
        return Ok(d);
    }
    if system {
        if !nix::unistd::geteuid().is_root() {
            anyhow::bail!("a system unit is written by root\nhelp: run it with sudo, or leave out --system for a user unit");
        }
        return Ok(PathBuf::from("/etc/systemd/system"));
    }
    let config = match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(c) => PathBuf::from(c),
        None => std::env::var_os("HOME")
            .map(|h| PathBuf::from(h).join(".config"))
            .ok_or_else(|| {
                anyhow::anyhow!("neither XDG_CONFIG_HOME nor HOME is set\nhelp: pass --unit-dir")
            })?,
    };
    Ok(config.join("systemd/user"))
}

/// A value for a unit file line: systemd's own quoting, so a path with spaces or `%` stays
/// one word and is never expanded.
fn unit_quote(s: &str) -> String {
    let escaped = s
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('%', "%%");
    format!("\"{escaped}\"")
}

/// The unit's text for the binary at `exe`, with `AIRLOCK_HOME` if the caller has one.
pub fn unit_text(exe: &Path, airlock_home: Option<&Path>, system: bool) -> String {
    let mut env = String::new();
    if let Some(h) = airlock_home {
        env = format!(
            "Environment={}\n",
            unit_quote(&format!("AIRLOCK_HOME={}", h.display()))
        );
    }
    let wanted = if system {
        "multi-user.target"
    } else {
        "default.target"
    };
    format!(
        r#"# Written by `airlock service install`; `airlock service uninstall` removes it.
[Unit]
Description=Airlock agent host (airlock serve)
After=network.target

[Service]
Type=exec
ExecStart={exe} serve
{env}Restart=on-failure
RestartSec=2
# SIGTERM to the host, which lets runs in flight finish (up to 30 s) and signs off the log;
# then SIGKILL for whatever is left, which takes every sandbox with it.
KillMode=mixed
TimeoutStopSec=45
# Runs get cgroups of their own below the host's.
Delegate=yes
UMask=0077
NoNewPrivileges=yes
LockPersonality=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectKernelTunables=yes
ProtectClock=yes
ProtectSystem=full
# Left out, because the sandbox or its payloads need what they take away:
# RestrictNamespaces, PrivateUsers: each run is a user, mount, pid and network namespace.
# SystemCallFilter: the sandbox calls unshare, mount and seccomp, and installs its own filter.
# ProtectControlGroups: runs are confined in cgroups below the host's (Delegate=yes).
# MemoryDenyWriteExecute: it is inherited by every payload, and breaks Node.js and Java.
# ProtectSystem=strict, ProtectHome, PrivateTmp: commits write into the operator's
#   workspaces, which may be anywhere.

[Install]
WantedBy={wanted}
"#,
        exe = unit_quote(&exe.display().to_string()),
    )
}

fn systemctl(system: bool, args: &[&str]) -> Result<String, String> {
    let mut cmd = std::process::Command::new("systemctl");
    if !system {
        cmd.arg("--user");
    }
    match cmd.args(args).output() {
        Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).trim().to_string()),
        Ok(o) => Err(String::from_utf8_lossy(&o.stderr).trim().to_string()),
        Err(e) => Err(e.to_string()),
    }
}

fn reload(system: bool) {
    let scope = if system { "" } else { " --user" };
    match systemctl(system, &["daemon-reload"]) {
        Ok(_) => println!("systemd reloaded; start it with: systemctl{scope} enable --now airlock"),
        Err(e) => eprintln!(
            "airlock: note: systemd did not answer ({}); once it runs: systemctl{scope} daemon-reload && systemctl{scope} enable --now airlock",
            airlock_core::terminal_text::escape_line(&e)
        ),
    }
}

pub fn run(c: ServiceCommand) -> anyhow::Result<i32> {
    match c {
        ServiceCommand::Install { unit, no_reload } => {
            let system = unit.system;
            let dir = unit_dir(system, unit.unit_dir)?;
            let exe = std::env::current_exe()?.canonicalize()?;
            let home = std::env::var_os("AIRLOCK_HOME")
                .filter(|v| !v.is_empty())
                .map(|h| std::path::absolute(PathBuf::from(h)))
                .transpose()?;
            std::fs::create_dir_all(&dir)
                .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
            let path = dir.join(UNIT_NAME);
            airlock_proxy::write_atomic(
                &path,
                unit_text(&exe, home.as_deref(), system).as_bytes(),
                0o644,
            )
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
            crate::out!("wrote {}", path.display());
            if !no_reload {
                reload(system);
            }
            Ok(0)
        }
        ServiceCommand::Uninstall { unit, no_reload } => {
            let system = unit.system;
            let path = unit_dir(system, unit.unit_dir)?.join(UNIT_NAME);
            match std::fs::remove_file(&path) {
                Ok(()) => crate::out!("removed {}", path.display()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    crate::out!("no unit at {}", path.display())
                }
                Err(e) => anyhow::bail!("cannot remove {}: {e}", path.display()),
            }
            if !no_reload {
                let _ = systemctl(system, &["daemon-reload"]);
            }
            Ok(0)
        }
        ServiceCommand::Status { unit } => {
            let system = unit.system;
            let path = unit_dir(system, unit.unit_dir)?.join(UNIT_NAME);
            if path.exists() {
                crate::out!("unit: {}", path.display());
                let said = systemctl(system, &["is-active", "airlock"])
                    .unwrap_or_else(|e| format!("unknown ({e})"));
                crate::out!(
                    "systemd says: {}",
                    airlock_core::terminal_text::escape_line(&said)
                );
            } else {
                crate::out!("unit: not installed (airlock service install)");
            }
            let home = Home::from_env()?;
            match crate::host::lock::running_host(&home) {
                Some(pid) => crate::out!("host: running, pid {pid}"),
                None => crate::out!("host: not running"),
            }
            Ok(0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_paths_stay_one_word_and_are_never_expanded() {
        let text = unit_text(
            Path::new("/opt/my tools/air%lock"),
            Some(Path::new("/h \"x\"")),
            false,
        );
        assert!(
            text.contains("ExecStart=\"/opt/my tools/air%%lock\" serve"),
            "{text}"
        );
        assert!(
            text.contains("Environment=\"AIRLOCK_HOME=/h \\\"x\\\"\""),
            "{text}"
        );
        assert!(text.contains("WantedBy=default.target"));
        assert!(unit_text(Path::new("/a"), None, true).contains("WantedBy=multi-user.target"));
    }
}
