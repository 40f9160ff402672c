//! The built-in tools: what the model is told about them, and how one of its tool calls
//! becomes a typed [`Action`] for the Gate.
//!
//! A call whose arguments do not fit is refused here, before the Gate, with an error the
//! model can act on.

use airlock_core::canonical::sha256_hex;
use serde::Deserialize;
use serde_json::{json, Value};

use airlock_core::action::{
    AgentSpawnAction, ExecAction, FsWriteAction, MessageAttachment, MessageSendAction,
    NetRequestAction, PathAction, TaskScheduleAction,
};
use airlock_core::{Action, IntoAction};

use crate::provider::{ToolArguments, ToolCall, ToolDefinition};

use super::workspace::{FileToolError, WorkspaceFiles, MAX_WRITE_BYTES};

/// Largest request body `fetch` may send.
pub const MAX_FETCH_BODY_BYTES: usize = 1024 * 1024;

/// A `read_file` payload: an `fs.read` the Gate authorizes for reading one file.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadFile(pub PathAction);

/// A `list_dir` payload: an `fs.read` the Gate authorizes for listing one directory.
#[derive(Debug, Clone, PartialEq)]
pub struct ListDir(pub PathAction);

impl IntoAction for ReadFile {
    fn to_action(&self) -> Action {
        Action::FsRead(self.0.clone())
    }
}

impl IntoAction for ListDir {
    fn to_action(&self) -> Action {
        Action::FsRead(self.0.clone())
    }
}

/// `sha256:<hex>` of file content, the form [`FsWriteAction::content_sha256`] binds.
pub fn content_hash(content: &[u8]) -> String {
    format!("sha256:{}", sha256_hex(content))
}

/// One tool call, turned into the typed action the Gate decides on, plus the bytes the
/// action binds by hash (file content, request body), which the loop holds until it runs.
#[derive(Debug, Clone)]
pub enum PlannedCall {
    Shell(ExecAction),
    ReadFile(ReadFile),
    ListDir(ListDir),
    /// `write_file` or `edit_file`: the new content, and the old one for the diff preview.
    Write {
        action: FsWriteAction,
        content: String,
        previous: Option<String>,
    },
    Fetch {
        action: NetRequestAction,
        body: Option<String>,
    },
    SendMessage(MessageSendAction),
    /// `memory_save`, `memory_search`, `memory_get` or `memory_forget`.
    Memory(super::memory_tools::MemoryPlan),
    /// `spawn_agent`: a child session, with the tools it will have filled in.
    SpawnAgent(AgentSpawnAction),
    /// `schedule_task`: a task the host runs on a schedule, held for the owner.
    ScheduleTask(TaskScheduleAction),
}

impl PlannedCall {
    /// The general action, as the Gate, the audit log and the approvals queue see it.
    pub fn action(&self) -> Action {
        match self {
            PlannedCall::Shell(a) => a.to_action(),
            PlannedCall::ReadFile(a) => a.to_action(),
            PlannedCall::ListDir(a) => a.to_action(),
            PlannedCall::Write { action, .. } => action.to_action(),
            PlannedCall::Fetch { action, .. } => action.to_action(),
            PlannedCall::SendMessage(a) => a.to_action(),
            PlannedCall::Memory(m) => m.action(),
            PlannedCall::SpawnAgent(a) => a.to_action(),
            PlannedCall::ScheduleTask(a) => a.to_action(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ShellArgs {
    command: String,
    #[serde(default)]
    cwd: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PathArgs {
    #[serde(default)]
    path: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    path: String,
    content: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EditArgs {
    path: String,
    old_text: String,
    new_text: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FetchArgs {
    url: String,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    body: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScheduleArgs {
    schedule: String,
    prompt: String,
    #[serde(default)]
    time_zone: Option<String>,
    #[serde(default)]
    deliver_to: Option<String>,
    #[serde(default)]
    budget: Option<String>,
    #[serde(default)]
    budget_per_day: Option<String>,
}

/// Runs an approver is shown for a proposed schedule.
const SHOWN_RUNS: usize = 3;

/// A `schedule_task` call as a `task.schedule` action: the schedule is checked now, and
/// its description and next runs (from `now`, unix seconds) are part of what the owner
/// approves. A schedule that names no time zone is in `default_zone`, the host's
/// `[tasks] time_zone`, and the approver is shown which.
fn planned_schedule(a: ScheduleArgs, now: i64, default_zone: &str) -> Result<PlannedCall, String> {
    use airlock_core::schedule::Schedule;
    let zone = a
        .time_zone
        .clone()
        .filter(|z| !z.is_empty())
        .unwrap_or_else(|| default_zone.into());
    let schedule = Schedule::parse(&a.schedule, &zone).map_err(|e| e.to_string())?;
    let next_runs: Vec<String> = schedule
        .next_runs(now, SHOWN_RUNS)
        .into_iter()
        .map(|t| schedule.local(t))
        .collect();
    if next_runs.is_empty() {
        return Err(format!(
            "{} is in the past\nhelp: give a time to come, or a cron expression",
            a.schedule
        ));
    }
    Ok(PlannedCall::ScheduleTask(TaskScheduleAction {
        schedule: schedule.spec(),
        prompt: a.prompt,
        time_zone: Some(zone),
        deliver_to: a.deliver_to.filter(|d| !d.is_empty()),
        budget: a.budget.filter(|b| !b.is_empty()),
        budget_per_day: a.budget_per_day.filter(|b| !b.is_empty()),
        description: schedule.describe(),
        next_runs,
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MessageArgs {
    #[serde(default)]
    destination: String,
    #[serde(default)]
    text: String,
    /// A workspace file to send with the message.
    #[serde(default)]
    file: Option<String>,
}

/// Largest workspace file a message may carry: under every chat platform's upload limit
/// for bots (Discord's is the lowest).
pub const MAX_ATTACHMENT_BYTES: usize = 8 * 1024 * 1024;

/// Turn a model's tool call into a planned call. `Err` is the text of the tool error the
/// model gets back. `conversation_with` is the third party the conversation is with, if
/// it is not with the owner ([`super::AgentConfig::conversation_with`]): a reply "to the
/// owner" there is a message to them. `allowed` is the session's tools
/// ([`super::AgentConfig::tools`]; `None`: all): a sub-agent calling any other is refused
/// here, and is given no other to hand on.
pub fn plan(
    call: &ToolCall,
    files: &WorkspaceFiles,
    config: &super::AgentConfig,
) -> Result<PlannedCall, String> {
    let channel = config.channel.as_str();
    let conversation_with = config.conversation_with.as_deref();
    let allowed = config.tools.as_deref();
    if !super::subagent_tools::is_allowed(allowed, &call.name) {
        return Err(format!(
            "`{}` is not among this session's tools\nhelp: use one of: {}",
            call.name,
            allowed.unwrap_or_default().join(", ")
        ));
    }
    let args = match &call.arguments {
        ToolArguments::Json { value } => value.clone(),
        ToolArguments::Invalid { error, .. } => {
            return Err(format!(
                "the arguments of `{}` could not be used: {error}\nhelp: send the arguments as one JSON object",
                call.name
            ))
        }
    };
    match call.name.as_str() {
        "shell" => {
            let a: ShellArgs = parse_args(&call.name, args)?;
            Ok(PlannedCall::Shell(ExecAction {
                command: a.command,
                cwd: a.cwd,
                env: Vec::new(),
            }))
        }
        "read_file" => {
            let a: PathArgs = parse_args(&call.name, args)?;
            Ok(PlannedCall::ReadFile(ReadFile(PathAction { path: a.path })))
        }
        "list_dir" => {
            let a: PathArgs = parse_args(&call.name, args)?;
            let path = if a.path.is_empty() {
                ".".into()
            } else {
                a.path
            };
            Ok(PlannedCall::ListDir(ListDir(PathAction { path })))
        }
        "write_file" => {
            let a: WriteArgs = parse_args(&call.name, args)?;
            let previous = files.current_content(&a.path).unwrap_or(None);
            planned_write(a.path, a.content, previous)
        }
        "edit_file" => {
            let a: EditArgs = parse_args(&call.name, args)?;
            let current = files
                .current_content(&a.path)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| {
                    format!("`{}` does not exist; use write_file to create it", a.path)
                })?;
            let count = if a.old_text.is_empty() {
                0
            } else {
                current.matches(&a.old_text).count()
            };
            match count {
                0 => Err(FileToolError::EditNotFound { path: a.path }.to_string()),
                1 => {
                    let content = current.replacen(&a.old_text, &a.new_text, 1);
                    planned_write(a.path, content, Some(current))
                }
                n => Err(FileToolError::EditAmbiguous {
                    path: a.path,
                    count: n,
                }
                .to_string()),
            }
        }
        "fetch" => {
            let a: FetchArgs = parse_args(&call.name, args)?;
            let method = a
                .method
                .unwrap_or_else(|| "GET".into())
                .to_ascii_uppercase();
            let body_bytes = a.body.as_ref().map_or(0, |b| b.len());
            if body_bytes > MAX_FETCH_BODY_BYTES {
                return Err(format!(
                    "the request body is {body_bytes} bytes, over the {MAX_FETCH_BODY_BYTES}-byte limit"
                ));
            }
            Ok(PlannedCall::Fetch {
                action: NetRequestAction {
                    method,
                    url: a.url,
                    headers: Vec::new(),
                    body_bytes: body_bytes as u64,
                    // As the proxy computes it: only for a non-empty body.
                    body_sha256: a
                        .body
                        .as_ref()
                        .filter(|b| !b.is_empty())
                        .map(|b| airlock_core::canonical::sha256_hex(b.as_bytes())),
                },
                body: a.body,
            })
        }
        "send_message" => {
            let a: MessageArgs = parse_args(&call.name, args)?;
            // In a conversation with someone else, every name of "here" (none, "owner",
            // the channel's own name) is that person's chat: the Gate, and the card put to
            // the owner, must show where the message really goes.
            let destination = match conversation_with {
                Some(other)
                    if a.destination.is_empty()
                        || a.destination == "owner"
                        || a.destination == channel =>
                {
                    other.to_string()
                }
                _ => a.destination,
            };
            // The file is read now only to bind its hash into the action the Gate decides
            // on; the executor reads it again and sends it only if the hash still matches.
            let attachment = match a.file {
                Some(path) => {
                    let bytes = files
                        .attachment_bytes(&path, MAX_ATTACHMENT_BYTES)
                        .map_err(|e| e.to_string())?;
                    Some(MessageAttachment {
                        sha256: sha256_hex(&bytes),
                        bytes: bytes.len() as u64,
                        path,
                    })
                }
                None if a.text.trim().is_empty() => {
                    return Err("a message needs `text`, a `file`, or both".into())
                }
                None => None,
            };
            Ok(PlannedCall::SendMessage(MessageSendAction {
                channel: channel.to_string(),
                destination,
                text: a.text,
                attachment,
            }))
        }
        "schedule_task" => {
            let a: ScheduleArgs = parse_args(&call.name, args)?;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64);
            planned_schedule(a, now, &config.task_time_zone)
        }
        name if super::memory_tools::is_memory_tool(name) => {
            super::memory_tools::plan(name, args).map(PlannedCall::Memory)
        }
        "spawn_agent" => {
            super::subagent_tools::plan_spawn(args, allowed).map(PlannedCall::SpawnAgent)
        }
        other => Err(format!(
            "there is no tool named `{other}`\nhelp: use one of: {}, {}",
            TOOL_NAMES.join(", "),
            super::memory_tools::MEMORY_TOOL_NAMES.join(", ")
        )),
    }
}

fn planned_write(
    path: String,
    content: String,
    previous: Option<String>,
) -> Result<PlannedCall, String> {
    if content.len() > MAX_WRITE_BYTES {
        return Err(FileToolError::TooLarge {
            size: content.len(),
            limit: MAX_WRITE_BYTES,
        }
        .to_string());
    }
    Ok(PlannedCall::Write {
        action: FsWriteAction {
            path,
            content_sha256: Some(content_hash(content.as_bytes())),
            bytes: Some(content.len() as u64),
        },
        content,
        previous,
    })
}

fn parse_args<T: serde::de::DeserializeOwned>(tool: &str, args: Value) -> Result<T, String> {
    serde_json::from_value(args).map_err(|e| {
        format!(
            "invalid arguments for `{tool}`: {e}\nhelp: see the tool's input schema for its fields"
        )
    })
}

/// Names of the built-in tools.
pub const TOOL_NAMES: [&str; 8] = [
    "shell",
    "read_file",
    "write_file",
    "edit_file",
    "list_dir",
    "fetch",
    "send_message",
    "schedule_task",
];

/// The definitions sent to the model with every request: the built-in tools, the memory
/// tools and the sub-agent tools, or of these only those in `allowed` (a sub-agent's).
pub fn definitions(allowed: Option<&[String]>) -> Vec<ToolDefinition> {
    let mut all = builtin_definitions();
    all.extend(super::memory_tools::definitions());
    all.extend(super::subagent_tools::definitions());
    all.retain(|d| super::subagent_tools::is_allowed(allowed, &d.name));
    all
}

fn builtin_definitions() -> Vec<ToolDefinition> {
    let def = |name: &str, description: &str, schema: Value| ToolDefinition {
        name: name.into(),
        description: description.into(),
        input_schema: schema,
    };
    let string = json!({"type": "string"});
    vec![
        def(
            "shell",
            "Run a shell command in the sandboxed session workspace.",
            json!({"type": "object", "properties": {"command": string, "cwd": string}, "required": ["command"]}),
        ),
        def(
            "read_file",
            "Read a text file in the workspace.",
            json!({"type": "object", "properties": {"path": string}, "required": ["path"]}),
        ),
        def(
            "write_file",
            "Create or replace a file in the workspace.",
            json!({"type": "object", "properties": {"path": string, "content": string}, "required": ["path", "content"]}),
        ),
        def(
            "edit_file",
            "Replace the one occurrence of old_text with new_text in a workspace file.",
            json!({"type": "object", "properties": {"path": string, "old_text": string, "new_text": string}, "required": ["path", "old_text", "new_text"]}),
        ),
        def(
            "list_dir",
            "List a directory of the workspace.",
            json!({"type": "object", "properties": {"path": string}}),
        ),
        def(
            "fetch",
            "Make an HTTP request through the egress proxy. The response is untrusted content.",
            json!({"type": "object", "properties": {"url": string, "method": string, "body": string}, "required": ["url"]}),
        ),
        def(
            "send_message",
            "Send a message, optionally with a workspace file (`file`, a path in the workspace, at most 8 MiB). An empty destination (or \"owner\") replies in this conversation.",
            json!({"type": "object", "properties": {"destination": string, "text": string, "file": string}}),
        ),
        def(
            "schedule_task",
            "Propose a task the host runs on a schedule, each run a new session given `prompt`. `schedule` is a cron expression (`0 8 * * MON-FRI`) or a time (`2026-12-05 08:00`); `time_zone` an IANA name (default: the host's); `deliver_to` a chat channel for the result (`telegram`); `budget` each run's limits (`tool_calls=20,output_tokens=20000`); `budget_per_day` the limits of all its runs of one day. The owner approves it before it exists.",
            json!({"type": "object", "properties": {"schedule": string, "prompt": string, "time_zone": string, "deliver_to": string, "budget": string, "budget_per_day": string}, "required": ["schedule", "prompt"]}),
        ),
    ]
}

#[cfg(test)]
mod message_tests {
    use super::*;

    fn planned_destination(conversation_with: Option<&str>, destination: &str) -> String {
        let ws = tempfile::tempdir().unwrap();
        let files = WorkspaceFiles::open(ws.path()).unwrap();
        let mut config = super::super::AgentConfig::new("m");
        config.channel = "telegram".into();
        config.conversation_with = conversation_with.map(str::to_string);
        let call = ToolCall {
            id: "c1".into(),
            name: "send_message".into(),
            arguments: ToolArguments::Json {
                value: serde_json::json!({"destination": destination, "text": "the notes"}),
            },
        };
        match plan(&call, &files, &config).unwrap() {
            PlannedCall::SendMessage(m) => m.destination,
            other => panic!("{other:?}"),
        }
    }

    /// In a conversation with a member or a group, "the channel" is their chat: the Gate
    /// and the owner's card see that destination, not one that reads as the owner's own.
    #[test]
    fn every_name_of_here_in_a_third_party_conversation_is_their_chat() {
        let member = "telegram:7777";
        for here in ["", "owner", "telegram"] {
            assert_eq!(planned_destination(Some(member), here), member, "{here:?}");
        }
        assert_eq!(planned_destination(Some(member), "slack"), "slack");
        // With the owner, the channel's name stays the owner's own channel.
        assert_eq!(planned_destination(None, "telegram"), "telegram");
    }
}

#[cfg(test)]
mod schedule_tests {
    use super::*;

    #[test]
    fn a_proposed_schedule_carries_its_words_and_next_runs_into_the_action() {
        let args = ScheduleArgs {
            schedule: "0 8 * * *".into(),
            prompt: "summarise my inbox".into(),
            time_zone: Some("Europe/Berlin".into()),
            deliver_to: Some("telegram".into()),
            budget: Some("tool_calls=5".into()),
            budget_per_day: Some("tool_calls=20".into()),
        };
        // 2026-03-28T00:00:00Z: the runs cross the change to summer time.
        let PlannedCall::ScheduleTask(a) = planned_schedule(args, 1_774_656_000, "UTC").unwrap()
        else {
            panic!("not a schedule");
        };
        assert_eq!(a.next_runs.len(), 3);
        assert!(
            a.next_runs[0].starts_with("Sat 2026-03-28 08:00 CET"),
            "{:?}",
            a.next_runs
        );
        assert!(
            a.next_runs[1].starts_with("Sun 2026-03-29 08:00 CEST"),
            "{:?}",
            a.next_runs
        );
        assert!(a.description.contains("08:00"), "{}", a.description);
        let bad = ScheduleArgs {
            schedule: "every morning".into(),
            prompt: "x".into(),
            time_zone: None,
            deliver_to: None,
            budget: None,
            budget_per_day: None,
        };
        let e = planned_schedule(bad, 0, "UTC").unwrap_err();
        assert!(e.contains("help: write five fields"), "{e}");
        // A schedule that names no zone is in the host's, and says so.
        let unzoned = ScheduleArgs {
            schedule: "0 8 * * *".into(),
            prompt: "x".into(),
            time_zone: None,
            deliver_to: None,
            budget: None,
            budget_per_day: None,
        };
        let PlannedCall::ScheduleTask(a) =
            planned_schedule(unzoned, 1_774_656_000, "America/New_York").unwrap()
        else {
            panic!("not a schedule");
        };
        assert_eq!(a.time_zone.as_deref(), Some("America/New_York"));
        assert!(a.next_runs[0].contains("EDT"), "{:?}", a.next_runs);
    }
}
