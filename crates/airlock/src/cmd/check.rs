//! `airlock check`: decide one action in a fresh, untainted session (through the host
//! when one runs; see [`crate::service::check`]).

use std::path::PathBuf;

use airlock_core::action::{Action, ExecAction, MAX_ACTION_JSON_BYTES};
use airlock_core::gate::Gate;
use airlock_core::terminal_text::{escape_json_text, escape_line};
use airlock_core::DecisionKind;

use crate::home::Home;
use crate::service::check::{self, CheckReport, CheckRequest};
use crate::{config, policies};

/// Exit status for each decision.
pub fn exit_code(d: DecisionKind) -> i32 {
    match d {
        DecisionKind::Allow => 0,
        DecisionKind::Ask => 10,
        DecisionKind::Deny => 20,
    }
}

pub fn run(
    profile_flag: Option<&str>,
    as_json: bool,
    action_json: Option<&str>,
    workspace: Option<PathBuf>,
    command: &[String],
) -> anyhow::Result<i32> {
    let home = Home::from_env()?;
    let workspace = match workspace {
        Some(w) => std::path::absolute(w)?,
        None => std::env::current_dir()?,
    };
    let action = match action_json {
        Some(text) => {
            let owned;
            let text = if text == "-" {
                // Large actions do not fit in one argv string (the kernel caps it at 128 KiB).
                let buf = crate::operator_file::read_stdin(
                    "--action -: the action",
                    MAX_ACTION_JSON_BYTES as u64,
                )?;
                owned = String::from_utf8(buf).map_err(|_| {
                    anyhow::anyhow!("--action -: standard input is not valid UTF-8")
                })?;
                owned.as_str()
            } else {
                text
            };
            Action::from_json(text).map_err(|e| anyhow::anyhow!("--action: {e}"))?
        }
        None => {
            if command.is_empty() {
                anyhow::bail!("nothing to check\nhelp: airlock check -- <command…>   or   airlock check --action '<json>'");
            }
            // The same command line `airlock exec` would run: one word is a shell line,
            // several are an argument vector with each word quoted (`-- sh -c 'a b'`).
            Action::Exec(ExecAction {
                command: airlock_core::shell::command_line_from_words(command),
                cwd: workspace.display().to_string(),
                env: vec![],
            })
        }
    };
    let request = CheckRequest {
        action,
        workspace,
        profile: profile_flag.map(str::to_string),
    };
    // The host decides when one serves this state dir; the same service decides here
    // otherwise, so either way gives the same answer.
    let report: CheckReport = crate::host::client::through_host_or(
        &home,
        |host| host.post("/v1/check", &request),
        || {
            let cfg = config::load(&home.config_file())?;
            let profile = policies::pick_profile(profile_flag, &cfg.policy.profile)?;
            let loaded = policies::load(&home, profile)?;
            let gate = Gate::new(
                loaded.engine,
                check::gate_config(&cfg, request.workspace.clone()),
            );
            check::evaluate(&gate, profile.name(), &request.action)
        },
    )?;
    if as_json {
        crate::out!("{}", escape_json_text(&serde_json::to_string(&report)?));
    } else {
        crate::out!("decision: {} (profile {})", report.decision, report.profile);
        for (i, r) in report.reasons.iter().enumerate() {
            let by = report
                .policies
                .get(i)
                .map(|p| format!(" [{}]", escape_line(p)))
                .unwrap_or_default();
            let lines: Vec<String> = r.split('\n').map(escape_line).collect();
            crate::out!("  reason{by}: {}", lines.join("\n    "));
        }
        crate::out!(
            "facts: {}",
            escape_json_text(&serde_json::to_string_pretty(&report.facts)?)
        );
    }
    Ok(exit_code(match report.decision.as_str() {
        "allow" => DecisionKind::Allow,
        "ask" => DecisionKind::Ask,
        _ => DecisionKind::Deny,
    }))
}
