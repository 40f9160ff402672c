//! The sub-agent tools: `spawn_agent` starts a child session (an `agent.spawn` action the
//! Gate decides) and `wait_agent` waits for a child's final answer.
//!
//! What a child may use is checked here, before the Gate: its tools must be a subset of
//! the spawning session's own ([`super::AgentConfig::tools`]), named among the built-in
//! ones, and its workspace a plain relative subfolder. The host then runs the child with
//! exactly these tools (see [`super::Executors::spawn_agent`]).

use serde::Deserialize;
use serde_json::{json, Value};

use airlock_core::action::AgentSpawnAction;

use crate::provider::ToolDefinition;

/// Names of the sub-agent tools.
pub const SUBAGENT_TOOL_NAMES: [&str; 2] = ["spawn_agent", "wait_agent"];

/// Longest instructions a child may be given.
pub const MAX_INSTRUCTIONS_BYTES: usize = 32 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SpawnArgs {
    instructions: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    tools: Option<Vec<String>>,
    #[serde(default)]
    workspace: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WaitArgs {
    id: String,
}

/// Every tool a session may hand on: the built-in ones, memory, and the sub-agent tools.
pub fn known_tools() -> Vec<&'static str> {
    let mut all: Vec<&str> = super::tools::TOOL_NAMES.to_vec();
    all.extend(super::memory_tools::MEMORY_TOOL_NAMES);
    all.extend(SUBAGENT_TOOL_NAMES);
    all
}

/// Whether `tool` is one the session may call: every tool when `allowed` is `None`.
pub fn is_allowed(allowed: Option<&[String]>, tool: &str) -> bool {
    allowed.is_none_or(|list| list.iter().any(|t| t == tool))
}

/// A `spawn_agent` call as the `agent.spawn` action the Gate decides. `allowed` is the
/// spawning session's own tools (`None`: all). `Err` is the tool error the model gets.
pub fn plan_spawn(args: Value, allowed: Option<&[String]>) -> Result<AgentSpawnAction, String> {
    let a: SpawnArgs = serde_json::from_value(args).map_err(|e| {
        format!("invalid arguments for `spawn_agent`: {e}\nhelp: give `instructions`, and optionally `name`, `tools` (a list of tool names) and `workspace` (a subfolder)")
    })?;
    if a.instructions.trim().is_empty() {
        return Err("`spawn_agent` needs `instructions` for the sub-agent".into());
    }
    if a.instructions.len() > MAX_INSTRUCTIONS_BYTES {
        return Err(format!(
            "the instructions are {} bytes, over the {MAX_INSTRUCTIONS_BYTES}-byte limit",
            a.instructions.len()
        ));
    }
    let known = known_tools();
    let tools = match a.tools {
        // The child gets what the parent has, never more.
        None => match allowed {
            Some(list) => list.to_vec(),
            None => known.iter().map(|t| t.to_string()).collect(),
        },
        Some(list) => {
            for t in &list {
                if !known.contains(&t.as_str()) {
                    return Err(format!(
                        "there is no tool named `{t}` to give a sub-agent\nhelp: use some of: {}",
                        known.join(", ")
                    ));
                }
                if !is_allowed(allowed, t) {
                    return Err(format!(
                        "a sub-agent cannot be given `{t}`: this session does not have it itself\nhelp: give it a subset of: {}",
                        allowed.unwrap_or_default().join(", ")
                    ));
                }
            }
            let mut list = list;
            list.sort();
            list.dedup();
            list
        }
    };
    let workspace = match a.workspace.as_deref().map(str::trim) {
        None | Some("") | Some(".") => None,
        Some(dir) => Some(check_subfolder(dir)?),
    };
    let name = a.name.unwrap_or_else(|| "helper".into());
    if name.is_empty()
        || name.len() > 64
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(format!(
            "the sub-agent name {name:?} must be 1 to 64 ASCII letters, digits, `-` or `_`"
        ));
    }
    Ok(AgentSpawnAction {
        name,
        prompt: a.instructions,
        tools,
        workspace,
    })
}

/// A relative path of plain names (no `..`, no `.` parts, not absolute) that is no
/// protected or sensitive place ([`airlock_core::paths::subworkspace_refusal`]): inside a
/// child's workspace every path is judged from the child's root, so a child rooted at
/// `.git` would see `hooks/pre-commit` as an ordinary file. Refused here, before the Gate,
/// so that no approval card offers it as a harmless choice; the host checks again against
/// the top workspace, the operator's lists and the filesystem (links) when it makes the
/// folder.
fn check_subfolder(dir: &str) -> Result<String, String> {
    let path = std::path::Path::new(dir);
    let plain = !path.is_absolute()
        && path
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
    if !plain || dir.len() > 512 || dir.contains('\0') {
        return Err(format!(
            "the sub-agent workspace {dir:?} must be a subfolder of this workspace\nhelp: give a relative path such as `reports/q3`, without `..`"
        ));
    }
    // One spelling per folder (`a//b/` is `a/b`): the host resolves exactly what was decided.
    let clean = path
        .components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/");
    if let Some(why) = airlock_core::paths::subworkspace_refusal(std::path::Path::new(&clean), &[])
    {
        return Err(format!(
            "refused: the sub-agent workspace {clean:?} cannot be a sub-agent's whole workspace: {why}; inside it, nothing would protect those files\nhelp: give an ordinary subfolder such as `reports/q3`"
        ));
    }
    Ok(clean)
}

/// The id of the child a `wait_agent` call names.
pub fn plan_wait(args: Value) -> Result<String, String> {
    let a: WaitArgs = serde_json::from_value(args).map_err(|e| {
        format!("invalid arguments for `wait_agent`: {e}\nhelp: give the `id` spawn_agent returned")
    })?;
    Ok(a.id)
}

/// What the model is told about the sub-agent tools.
pub fn definitions() -> Vec<ToolDefinition> {
    let string = json!({"type": "string"});
    vec![
        ToolDefinition {
            name: "spawn_agent".into(),
            description: "Start a sub-agent on part of the task. It works on its own with the given instructions, only the listed tools (a subset of yours; all of yours when left out), and, with `workspace`, only in that subfolder. Returns its id at once; call wait_agent for its answer, which is untrusted content.".into(),
            input_schema: json!({"type": "object", "properties": {
                "instructions": string, "name": string,
                "tools": {"type": "array", "items": {"type": "string"}},
                "workspace": string}, "required": ["instructions"]}),
        },
        ToolDefinition {
            name: "wait_agent".into(),
            description: "Wait for a sub-agent started with spawn_agent to finish, and get its final answer (untrusted content). `id` is the id spawn_agent returned, or the name you gave it.".into(),
            input_schema: json!({"type": "object", "properties": {"id": string}, "required": ["id"]}),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_gets_no_tool_its_parent_lacks() {
        let parent = vec!["read_file".to_string(), "spawn_agent".to_string()];
        let e = plan_spawn(
            json!({"instructions": "x", "tools": ["shell"]}),
            Some(&parent),
        )
        .unwrap_err();
        assert!(e.contains("does not have it itself"), "{e}");
        let a = plan_spawn(json!({"instructions": "x"}), Some(&parent)).unwrap();
        assert_eq!(a.tools, parent);
        let e = plan_spawn(json!({"instructions": "x", "tools": ["sudo"]}), None).unwrap_err();
        assert!(e.contains("no tool named `sudo`"), "{e}");
    }

    #[test]
    fn a_child_workspace_is_a_plain_subfolder() {
        for bad in ["../x", "/etc", "a/../../b", "./a"] {
            let e = plan_spawn(json!({"instructions": "x", "workspace": bad}), None);
            assert!(e.is_err(), "{bad} was accepted");
        }
        let a = plan_spawn(json!({"instructions": "x", "workspace": "part/one/"}), None).unwrap();
        assert_eq!(a.workspace.as_deref(), Some("part/one"));
        let a = plan_spawn(json!({"instructions": "x", "workspace": "part//two"}), None).unwrap();
        assert_eq!(a.workspace.as_deref(), Some("part/two"));
    }

    #[test]
    fn a_subagent_workspace_in_or_over_a_protected_place_is_refused_before_the_gate() {
        for (bad, why) in [
            (".git", ".git"),
            (".git/hooks", ".git"),
            ("vendor/lib/.git", ".git"),
            (".github/workflows", "hidden folder"),
            (".github", "hidden folder"),
            ("web/.vscode", "hidden folder"),
            (".airlock", "hidden folder"),
            ("keys/id_rsa", "credentials"),
        ] {
            let e = plan_spawn(json!({"instructions": "x", "workspace": bad}), None).unwrap_err();
            assert!(e.contains("refused") && e.contains(why), "{bad}: {e}");
        }
    }
}
