//! The shape a scoped grant matches: which future actions count as "the same" as an
//! approved one.
//!
//! `airlock approvals approve <id> --for D --scope session|rule` stores a grant keyed by
//! the pattern computed here from the approved payload; the agent loop computes the same
//! pattern for every held action and asks the store for a grant with it. Both sides call
//! [`grant_pattern`], so they cannot drift apart.
//!
//! A pattern binds, besides the action kind:
//! - **the asking rules**: the `@id`s of the policies that asked (sorted). An action held
//!   for another reason (for example because the session became tainted since) does not
//!   match, so a grant never covers a question the operator was not asked;
//! - **the target shape**, per kind, chosen so that a grant never reaches another
//!   program, host or recipient:
//!   - `exec`: the exact command text *and* its parse together: every simple command the
//!     Gate found (resolved program, arguments, wrapper chain) and the structure flags.
//!     Either alone is not enough: the text alone trusts that the Gate and the shell
//!     read it alike, and the parse alone lets text the Gate reads the same way but the
//!     shell does not (`touch marker\r# ; rm …`) ride on a grant. A command the Gate
//!     could not parse has no pattern. The working directory may differ, but must be
//!     inside the workspace. The environment variable names must be equal. Arguments
//!     never vary: in an arbitrary program's argv the Gate cannot tell a file name from
//!     a host, a recipient or code.
//!   - `fs.read`, `fs.write`: a workspace path in the same directory (not below it); the
//!     content written may differ. Protected paths and paths outside the workspace have
//!     no pattern.
//!   - `fs.delete`: the same workspace path.
//!   - `net.request`: the same method, scheme, host, port and header names, and a path in
//!     the same directory (the path up to its last `/`); the last path segment, the query,
//!     the header values and the body may differ. An unparsable URL has no pattern.
//!   - `message.send`: the same channel and destination; the text may differ.
//!   - anything else (memory, extension tools, schedules, sub-agents) has no pattern and
//!     can only be granted as its exact payload.
//!
//! The pattern stored is a hash of the canonical JSON of all of the above, so the store
//! matches it exactly and never interprets it; [`GrantPattern::shape`] keeps the readable
//! form for the audit record and the operator.

use std::path::Path;

use serde_json::{json, Value};

use airlock_core::canonical::{canonical_json, sha256_hex};
use airlock_core::facts::GateConfig;
use airlock_core::paths::{path_facts, WorkspacePath};
use airlock_core::shell::{self, ShellFacts};
use airlock_core::url_facts::parse_url;
use airlock_core::Action;

/// Version tag of the pattern format; bump it if the shape definition changes, so old
/// grants stop matching instead of matching something new.
const PATTERN_VERSION: &str = "grant-shape-v2";

/// The pattern of one action, for storing in a grant or looking one up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantPattern {
    /// `grant-shape-v2:sha256:<hex>`: the key the store matches exactly.
    pub pattern: String,
    /// The readable shape the key was computed from (kind, asking rules, target shape).
    pub shape: Value,
    /// One line for the operator: what else the grant lets through.
    pub summary: String,
}

/// Why an action has no pattern: only its exact payload can be granted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}\nhelp: approve with `--for DURATION` alone to grant only this exact payload")]
pub struct NotScopable {
    pub reason: String,
}

fn not_scopable(reason: impl Into<String>) -> NotScopable {
    NotScopable {
        reason: reason.into(),
    }
}

/// The grant pattern of `action`, held by the rules `policies`, in the workspace and with
/// the protected paths and program resolver of `config` (the Gate's own configuration).
pub fn grant_pattern(
    action: &Action,
    policies: &[String],
    config: &GateConfig,
) -> Result<GrantPattern, NotScopable> {
    let (target, summary) = target_shape(action, config)?;
    let mut rules: Vec<&str> = policies.iter().map(String::as_str).collect();
    rules.sort_unstable();
    rules.dedup();
    let shape = json!({
        "version": PATTERN_VERSION,
        "kind": action.kind(),
        "asked_by": rules,
        "target": target,
    });
    let canonical = canonical_json(&shape)
        .map_err(|e| not_scopable(format!("the action cannot be put in canonical form: {e}")))?;
    Ok(GrantPattern {
        pattern: format!(
            "{PATTERN_VERSION}:sha256:{}",
            sha256_hex(canonical.as_bytes())
        ),
        shape,
        summary,
    })
}

fn target_shape(action: &Action, config: &GateConfig) -> Result<(Value, String), NotScopable> {
    match action {
        Action::Exec(e) => {
            let cwd = if e.cwd.is_empty() {
                config.workspace.to_string_lossy().into_owned()
            } else {
                e.cwd.clone()
            };
            if WorkspacePath::resolve(&cwd, &config.workspace).is_none() {
                return Err(not_scopable(
                    "the command runs outside the workspace, so no grant may cover it",
                ));
            }
            let mut env = e.env.clone();
            env.sort_unstable();
            env.dedup();
            let mut facts = shell::normalize(&e.command);
            if let Some(reason) = &facts.unparsed {
                return Err(not_scopable(format!(
                    "the command could not be parsed ({reason}), so no grant may cover it"
                )));
            }
            if let Some(resolve) = &config.resolver {
                shell::resolve_programs(&mut facts, resolve.as_ref());
            }
            let summary = match plain_argv(&facts) {
                Some(argv) => format!(
                    "the command `{}` exactly (any directory in the workspace)",
                    argv.join(" ")
                ),
                None => format!(
                    "the command `{}` exactly (any directory in the workspace)",
                    e.command.escape_debug()
                ),
            };
            Ok((
                json!({"command": e.command, "parsed": parsed_shape(&facts), "env": env}),
                summary,
            ))
        }
        Action::FsRead(p) => {
            let rel = workspace_file(&p.path, config, false)?;
            let dir = parent_dir(&rel);
            Ok((
                json!({"dir": dir}),
                format!("reading files directly in `{}`", shown_dir(&dir)),
            ))
        }
        Action::FsWrite(w) => {
            let rel = workspace_file(&w.path, config, true)?;
            let dir = parent_dir(&rel);
            Ok((
                json!({"dir": dir}),
                format!("writing files directly in `{}`", shown_dir(&dir)),
            ))
        }
        Action::FsDelete(p) => {
            let rel = workspace_file(&p.path, config, true)?;
            Ok((json!({"path": rel}), format!("deleting `{rel}` again")))
        }
        Action::NetRequest(n) => {
            let url = parse_url(&n.url).map_err(|e| not_scopable(e.to_string()))?;
            // An encoded `/`, `\` or `.` may be decoded by the server into another path than
            // the directory the pattern names (`/v1/items/..%2F..%2Fadmin`).
            let lower = url.path.to_ascii_lowercase();
            if ["%2f", "%5c", "%2e"].iter().any(|e| lower.contains(e)) {
                return Err(not_scopable(
                    "the path has an encoded `/`, `\\` or `.`".to_string(),
                ));
            }
            let dir = match url.path.rfind('/') {
                Some(i) => url.path[..=i].to_string(),
                None => "/".to_string(),
            };
            let mut headers: Vec<String> = n.headers.iter().map(|h| h.name.to_ascii_lowercase()).collect();
            headers.sort_unstable();
            headers.dedup();
            let method = n.method.to_ascii_uppercase();
            let summary = format!(
                "{method} requests to {}://{}:{}{dir}* (any query and body)",
                url.scheme, url.host, url.port
            );
            Ok((
                json!({"method": method, "scheme": url.scheme, "host": url.host,
                       "port": url.port, "path_dir": dir, "headers": headers}),
                summary,
            ))
        }
        Action::MessageSend(m) => Ok((
            json!({"channel": m.channel, "destination": m.destination}),
            format!(
                "messages to `{}` on `{}` (any text)",
                m.destination, m.channel
            ),
        )),
        Action::MemoryRead(_)
        | Action::MemoryWrite(_)
        | Action::ToolCall(_)
        | Action::TaskSchedule(_)
        | Action::AgentSpawn(_)
        // A change set is approved as exactly that change set (its hash), never as a kind.
        | Action::WorkspaceCommit(_)
        // Who may talk to the assistant is decided per sender by the host, never granted.
        | Action::ChannelAdmit(_)
        | Action::ChannelBind(_) => Err(not_scopable(format!(
            "`{}` actions have no grant pattern: their arguments carry instructions or targets the Gate cannot compare safely",
            action.kind()
        ))),
    }
}

/// What the Gate read in a command line: every simple command (resolved program,
/// arguments, wrapper chain, dynamic and arbitrary-code marks), every redirection and
/// assignment, and the structure flags.
fn parsed_shape(facts: &ShellFacts) -> Value {
    let commands: Vec<Value> = facts
        .commands
        .iter()
        .map(|c| {
            json!({
                "program": c.resolved_path.clone().unwrap_or_else(|| c.program.clone()),
                "args": c.args,
                "via": c.via,
                "dynamic": c.dynamic_program,
                "arbitrary": c.runs_arbitrary_code.is_some(),
            })
        })
        .collect();
    let redirections: Vec<Value> = facts
        .redirections
        .iter()
        .map(|r| json!({"kind": r.kind, "target": r.target, "dynamic": r.dynamic}))
        .collect();
    json!({
        "commands": commands,
        "redirections": redirections,
        "assignments": facts.assignments,
        "structure": [
            facts.has_pipeline,
            facts.has_list,
            facts.has_background,
            facts.has_subshell,
            facts.has_command_substitution,
            facts.has_process_substitution,
            facts.has_heredoc,
            facts.has_compound,
            facts.runs_arbitrary_code,
        ],
    })
}

/// The argv of a command line that is exactly one plain simple command, with the program
/// replaced by its resolved path when known. `None` for anything with more structure.
/// A program that runs code from elsewhere (`git push` runs hooks, `python3 x.py`) may
/// still have a plain argv: the words are compared exactly, so a grant covers exactly
/// what the exact command text would.
fn plain_argv(facts: &ShellFacts) -> Option<Vec<String>> {
    let plain = facts.unparsed.is_none()
        && facts.commands.len() == 1
        && facts.redirections.is_empty()
        && facts.assignments.is_empty()
        && !facts.has_pipeline
        && !facts.has_list
        && !facts.has_background
        && !facts.has_subshell
        && !facts.has_command_substitution
        && !facts.has_process_substitution
        && !facts.has_heredoc
        && !facts.has_compound;
    let cmd = facts.commands.first()?;
    if !plain
        || cmd.dynamic_program
        || cmd.basename.is_empty()
        || !cmd.via.is_empty()
        // A word that kept its source text has an expansion: its value is not known. Glob,
        // brace and tilde characters are kept as written whether quoted or not, so `rm '*'`
        // and `rm *` would look alike: such a command keeps its exact text instead.
        || cmd
            .args
            .iter()
            .any(|a| a.contains(['$', '`', '*', '?', '[', ']', '{', '}', '~']))
    {
        return None;
    }
    let program = cmd
        .resolved_path
        .clone()
        .unwrap_or_else(|| cmd.program.clone());
    Some(
        std::iter::once(program)
            .chain(cmd.args.iter().cloned())
            .collect(),
    )
}

/// The workspace-relative path of a file action, refusing paths outside the workspace
/// and (for changes) protected ones.
fn workspace_file(path: &str, config: &GateConfig, changes: bool) -> Result<String, NotScopable> {
    let facts = path_facts(path, &config.workspace, &config.protected);
    let inside = WorkspacePath::resolve(path, &config.workspace);
    match inside {
        Some(wp) if facts.in_workspace && !(changes && facts.protected) => {
            Ok(wp.relative().to_string_lossy().into_owned())
        }
        Some(_) if facts.in_workspace => Err(not_scopable(format!(
            "`{path}` is a protected path, so no grant may cover changes to it"
        ))),
        _ => Err(not_scopable(format!(
            "`{path}` is outside the workspace, so no grant may cover it"
        ))),
    }
}

/// The directory part of a workspace-relative path (`""` for the workspace root).
fn parent_dir(rel: &str) -> String {
    Path::new(rel)
        .parent()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn shown_dir(dir: &str) -> &str {
    if dir.is_empty() {
        "."
    } else {
        dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> GateConfig {
        GateConfig::new("/ws")
    }

    fn action(json: &str) -> Action {
        Action::from_json(json).unwrap()
    }

    fn pattern(json: &str, rules: &[&str]) -> Result<String, NotScopable> {
        let rules: Vec<String> = rules.iter().map(|r| r.to_string()).collect();
        grant_pattern(&action(json), &rules, &config()).map(|p| p.pattern)
    }

    const ASK: &[&str] = &["default.net.ask"];

    #[test]
    fn net_pattern_keeps_method_host_port_and_directory() {
        let base = pattern(
            r#"{"type":"net.request","method":"GET","url":"https://api.example.com/v1/items/1?x=1"}"#,
            ASK,
        )
        .unwrap();
        let same = pattern(
            r#"{"type":"net.request","method":"get","url":"https://API.example.com/v1/items/2?y=2","body_bytes":5}"#,
            ASK,
        )
        .unwrap();
        assert_eq!(base, same);
        for other in [
            r#"{"type":"net.request","method":"POST","url":"https://api.example.com/v1/items/1"}"#,
            r#"{"type":"net.request","method":"GET","url":"https://evil.example.com/v1/items/1"}"#,
            r#"{"type":"net.request","method":"GET","url":"https://api.example.com.evil.com/v1/items/1"}"#,
            r#"{"type":"net.request","method":"GET","url":"https://api.example.com:8443/v1/items/1"}"#,
            r#"{"type":"net.request","method":"GET","url":"http://api.example.com/v1/items/1"}"#,
            r#"{"type":"net.request","method":"GET","url":"https://api.example.com/v1/items/1/deeper"}"#,
            r#"{"type":"net.request","method":"GET","url":"https://api.example.com/v1/items/../admin/1"}"#,
            r#"{"type":"net.request","method":"GET","url":"https://api.example.com/v1/items/1","headers":["cookie"]}"#,
        ] {
            assert_ne!(base, pattern(other, ASK).unwrap(), "{other}");
        }
        // Another asking rule: another question, another pattern.
        assert_ne!(
            base,
            pattern(
                r#"{"type":"net.request","method":"GET","url":"https://api.example.com/v1/items/1"}"#,
                &["default.net.tainted"]
            )
            .unwrap()
        );
        assert!(pattern(
            r#"{"type":"net.request","method":"GET","url":"https://u:p@x.com/"}"#,
            ASK
        )
        .is_err());
        // A last segment that a server may decode into another directory is not scoped.
        for encoded in [
            "..%2F..%2Fadmin",
            "..%2f..%2fadmin",
            "x%5C..%5Cadmin",
            "a%2E%2E",
        ] {
            let url = format!(
                r#"{{"type":"net.request","method":"GET","url":"https://api.example.com/v1/items/{encoded}"}}"#
            );
            assert!(pattern(&url, ASK).is_err(), "{encoded}");
        }
    }

    #[test]
    fn message_pattern_keeps_channel_and_recipient() {
        let base = pattern(
            r#"{"type":"message.send","channel":"terminal","destination":"bob","text":"hi"}"#,
            ASK,
        )
        .unwrap();
        let same = pattern(
            r#"{"type":"message.send","channel":"terminal","destination":"bob","text":"other text"}"#,
            ASK,
        )
        .unwrap();
        assert_eq!(base, same);
        assert_ne!(
            base,
            pattern(
                r#"{"type":"message.send","channel":"terminal","destination":"mallory","text":"hi"}"#,
                ASK
            )
            .unwrap()
        );
        assert_ne!(
            base,
            pattern(
                r#"{"type":"message.send","channel":"slack","destination":"bob","text":"hi"}"#,
                ASK
            )
            .unwrap()
        );
    }

    #[test]
    fn exec_pattern_never_varies_program_or_arguments() {
        let base = pattern(
            r#"{"type":"exec","command":"git push origin main","cwd":""}"#,
            ASK,
        )
        .unwrap();
        // The directory inside the workspace may differ.
        assert_eq!(
            base,
            pattern(
                r#"{"type":"exec","command":"git push origin main","cwd":"/ws/sub"}"#,
                ASK
            )
            .unwrap()
        );
        // The text must be equal too: quoting the Gate reads alike is still other text.
        assert_ne!(
            base,
            pattern(
                r#"{"type":"exec","command":"git  push 'origin' \"main\"","cwd":""}"#,
                ASK
            )
            .unwrap()
        );
        for other in [
            r#"{"type":"exec","command":"git push evil main","cwd":""}"#,
            r#"{"type":"exec","command":"git push origin main --force","cwd":""}"#,
            r#"{"type":"exec","command":"gitx push origin main","cwd":""}"#,
            r#"{"type":"exec","command":"git push origin main","cwd":"","env":["GIT_SSH_COMMAND"]}"#,
            r#"{"type":"exec","command":"git push origin main | sh","cwd":""}"#,
            r#"{"type":"exec","command":"git push origin main > out","cwd":""}"#,
        ] {
            assert_ne!(base, pattern(other, ASK).unwrap(), "{other}");
        }
        // A quoted glob (or brace, or tilde) is not the expanding one.
        let exec = |command: &str| {
            pattern(
                &serde_json::json!({"type": "exec", "command": command, "cwd": ""}).to_string(),
                ASK,
            )
            .unwrap()
        };
        for (quoted, expanding) in [
            ("rm '*'", "rm *"),
            ("rm \\*.txt", "rm *.txt"),
            ("ls '{a,b}'", "ls {a,b}"),
            ("cat '~/x'", "cat ~/x"),
            ("rm 'f?'", "rm f?"),
        ] {
            assert_ne!(exec(quoted), exec(expanding), "{quoted}");
        }
        // Structured commands keep their exact text.
        let piped = pattern(r#"{"type":"exec","command":"cat a | wc -l","cwd":""}"#, ASK).unwrap();
        assert_ne!(
            piped,
            pattern(
                r#"{"type":"exec","command":"cat a |  wc -l","cwd":""}"#,
                ASK
            )
            .unwrap()
        );
        assert!(pattern(r#"{"type":"exec","command":"ls","cwd":"/etc"}"#, ASK).is_err());
    }

    /// A grant for `touch marker` covers no text the shell reads differently: a control
    /// character, a dialect trick or anything unparsed has no pattern at all.
    #[test]
    fn i6_exec_grant_covers_no_text_the_shell_reads_differently() {
        let exec = |command: &str| {
            pattern(
                &serde_json::json!({"type": "exec", "command": command, "cwd": ""}).to_string(),
                ASK,
            )
        };
        let base = exec("touch marker").unwrap();
        for trick in [
            "touch marker\r# ; rm -rf ./important",
            "touch marker\x0c# ; rm -rf ./important",
            "touch marker\x0b# ; rm -rf ./important",
            "touch marker\x1b# ; rm -rf ./important",
            "touch marker\u{85}# ; rm -rf ./important",
            "touch $'marker\\\\' ; rm -rf ./important ; # '",
            "sh -c \"touch \\$'marker\\\\' ; rm -rf ./important ; # '\"",
        ] {
            let p = exec(trick);
            assert!(p.is_err(), "{trick:?} got a pattern");
            assert!(
                p.unwrap_err().reason.contains("could not be parsed"),
                "{trick:?}"
            );
        }
        for other in ["touch marker ", "touch 'marker'", "touch marker # x"] {
            assert_ne!(base, exec(other).unwrap(), "{other:?}");
        }
    }

    #[test]
    fn file_patterns_stay_in_one_workspace_directory() {
        let base = pattern(r#"{"type":"fs.write","path":"notes/a.md"}"#, ASK).unwrap();
        assert_eq!(
            base,
            pattern(
                r#"{"type":"fs.write","path":"/ws/notes/b.md","content_sha256":"x"}"#,
                ASK
            )
            .unwrap()
        );
        assert_ne!(
            base,
            pattern(r#"{"type":"fs.write","path":"notes/deep/a.md"}"#, ASK).unwrap()
        );
        assert_ne!(
            base,
            pattern(r#"{"type":"fs.write","path":"a.md"}"#, ASK).unwrap()
        );
        assert_ne!(
            base,
            pattern(r#"{"type":"fs.read","path":"notes/a.md"}"#, ASK).unwrap()
        );
        assert!(pattern(r#"{"type":"fs.write","path":".git/hooks/pre-commit"}"#, ASK).is_err());
        assert!(pattern(r#"{"type":"fs.read","path":"../etc/passwd"}"#, ASK).is_err());
        assert_ne!(
            pattern(r#"{"type":"fs.delete","path":"notes/a.md"}"#, ASK).unwrap(),
            pattern(r#"{"type":"fs.delete","path":"notes/b.md"}"#, ASK).unwrap()
        );
    }

    #[test]
    fn instruction_carrying_actions_have_no_pattern() {
        let e = pattern(
            r#"{"type":"task.schedule","schedule":"* * * * *","prompt":"x"}"#,
            ASK,
        )
        .unwrap_err();
        assert!(e.to_string().contains("help:"), "{e}");
    }
}
