//! The action model: one typed enum for every effect an agent can ask for.
//!
//! An [`Action`] is a *proposal*. It has no effect by itself; only an executor holding an
//! [`crate::Authorized`] token, which the Gate alone can mint, may carry it out.
//!
//! The wire form is JSON with a `type` tag (`"exec"`, `"fs.read"`, …) and strict fields:
//! unknown fields are refused, so a proposer cannot smuggle in a field that one component
//! reads and another ignores.
//!
//! ```
//! use airlock_core::Action;
//! let a = Action::from_json(r#"{"type":"exec","command":"ls -la","cwd":"/w"}"#).unwrap();
//! assert_eq!(a.kind(), "exec");
//! assert!(a.hash().unwrap().starts_with("sha256:"));
//! ```

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::canonical::{canonical_json, content_hash, CanonicalError};

/// Largest shell command the Gate will look at. Anything longer is refused outright:
/// no legitimate interactive command is a megabyte long, and parsing cost must stay bounded.
pub const MAX_COMMAND_BYTES: usize = 1024 * 1024;
/// Largest serialized action accepted from a proposer.
pub const MAX_ACTION_JSON_BYTES: usize = 4 * 1024 * 1024;

/// Run a shell command (inside the sandbox).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecAction {
    /// The command line exactly as proposed; parsed by [`crate::shell`].
    pub command: String,
    /// Working directory, absolute or relative to the workspace root.
    #[serde(default)]
    pub cwd: String,
    /// Names (never values) of environment variables the command asks for.
    #[serde(default)]
    pub env: Vec<String>,
}

/// Read or delete a path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathAction {
    pub path: String,
}

/// Write a file. The content itself is carried by the executor; the action binds its hash
/// so that an approval covers exactly those bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FsWriteAction {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

/// An HTTP(S) request, made by the proxy on the agent's behalf.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetRequestAction {
    pub method: String,
    pub url: String,
    /// The request's headers as the client sent them, names lower-case and sorted (each
    /// name's values in the order sent). Values are part of the payload: a header can
    /// carry data out as well as a URL can, and an approval covers these values only. A
    /// value never holds a secret: the sandbox has only placeholders, and the proxy puts
    /// the real value in after the decision.
    #[serde(default)]
    pub headers: Vec<HeaderField>,
    #[serde(default)]
    pub body_bytes: u64,
    /// SHA-256 (hex) of the body, when there is one. It makes an approval or an exact
    /// grant bind the body's bytes, not only its length.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_sha256: Option<String>,
}

/// One request header, as sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "HeaderFieldForm")]
pub struct HeaderField {
    /// Lower-case name.
    pub name: String,
    /// The value exactly as sent (placeholders for secrets included).
    #[serde(default)]
    pub value: String,
    /// Set by the proxy when the whole value is the placeholder of this secret, written
    /// as the secret's header template writes it, for a request the secret is bound to:
    /// the value the proxy then puts in is the operator's, not data from the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

impl HeaderField {
    /// A header with `name` and `value` that holds no placeholder.
    pub fn new(name: impl Into<String>, value: impl Into<String>) -> HeaderField {
        HeaderField {
            name: name.into(),
            value: value.into(),
            secret: None,
        }
    }
}

/// How a header is read back: as a record, or as a bare name, the form actions were
/// stored in before header values were part of them (an approval or grant kept in the
/// store from then reads back, with no value).
#[derive(Deserialize)]
#[serde(untagged)]
enum HeaderFieldForm {
    Name(String),
    Field(HeaderFieldRecord),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HeaderFieldRecord {
    name: String,
    #[serde(default)]
    value: String,
    #[serde(default)]
    secret: Option<String>,
}

impl From<HeaderFieldForm> for HeaderField {
    fn from(form: HeaderFieldForm) -> HeaderField {
        match form {
            HeaderFieldForm::Name(name) => HeaderField::new(name, ""),
            HeaderFieldForm::Field(r) => HeaderField {
                name: r.name,
                value: r.value,
                secret: r.secret,
            },
        }
    }
}

/// A header with an empty value (`"host".into()`).
impl From<&str> for HeaderField {
    fn from(name: &str) -> HeaderField {
        HeaderField::new(name, "")
    }
}

/// Read or write one memory record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryAction {
    /// `pinned` (always loaded into context) or `recall` (searched on demand).
    pub scope: String,
    pub key: String,
    /// Record kind: `note`, `fact`, `preference`, `contact`, `task_state`.
    pub kind: String,
}

/// Send a message through a channel (terminal, web, chat app).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageSendAction {
    pub channel: String,
    pub destination: String,
    #[serde(default)]
    pub text: String,
    /// A workspace file sent with the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attachment: Option<MessageAttachment>,
}

/// A workspace file a message carries out. The executor reads it again when it sends and
/// checks the hash, so an approval covers exactly those bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageAttachment {
    /// Workspace path of the file, as proposed.
    pub path: String,
    /// SHA-256 (hex) of its content.
    pub sha256: String,
    pub bytes: u64,
}

/// MCP tool annotations. They are *hints* from the tool's author and are only trusted as
/// far as the operator trusts the extension (its definitions are pinned by hash).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolAnnotations {
    #[serde(rename = "readOnlyHint", default)]
    pub read_only_hint: bool,
    #[serde(rename = "destructiveHint", default)]
    pub destructive_hint: bool,
    #[serde(rename = "openWorldHint", default)]
    pub open_world_hint: bool,
}

/// Call a tool of an extension (MCP server) or a built-in tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCallAction {
    pub server: String,
    pub tool: String,
    #[serde(default)]
    pub arguments: Value,
    #[serde(default)]
    pub input_schema: Value,
    #[serde(default)]
    pub annotations: ToolAnnotations,
}

/// Schedule a task to run later.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskScheduleAction {
    /// Cron expression or RFC 3339 instant.
    pub schedule: String,
    /// What every run is asked to do.
    pub prompt: String,
    /// The schedule's time zone (an IANA name); absent: the host's `[tasks] time_zone`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// Where each run's result goes (`telegram`, `telegram:<chat>`); absent: the run
    /// history only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliver_to: Option<String>,
    /// Each run's budget, as `airlock tasks add --budget` takes it
    /// (`tool_calls=20,output_tokens=20000`); absent: the per-session budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<String>,
    /// The task's own budget over its runs of one day, in the same form; absent: only
    /// the owner's per-day budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_per_day: Option<String>,
    /// The schedule in words, as the approver reads it (computed when proposed).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The next runs when it was proposed, as dates in its time zone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub next_runs: Vec<String>,
}

/// Start a sub-agent: a session of its own under the proposing one, with `prompt` as its
/// instructions, only `tools` (a subset of the parent's), and, with `workspace`, confined
/// to that subfolder of the parent's workspace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSpawnAction {
    pub name: String,
    pub prompt: String,
    #[serde(default)]
    pub tools: Vec<String>,
    /// A subfolder of the parent's workspace (relative) that is the child's whole
    /// workspace; `None` shares the parent's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
}

/// Let a message from a chat platform reach a session: the host asks this of every
/// message that is not dropped first for rate, with who sent it as the channel knows them.
/// The host fills it; a model never proposes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelAdmitAction {
    /// The channel's name (`telegram`, `slack`, `discord`).
    pub channel: String,
    /// The chat the message came in (the platform's id; `<channel>/<thread>` for threads).
    pub chat: String,
    /// The sender's platform user id.
    pub sender: String,
    /// What the channel's state binds the sender to: `owner`, `admin`, `member`, or
    /// `unknown`.
    pub role: String,
    /// The chat is a private one with the assistant (not a group or channel).
    pub private: bool,
    /// The channel's `unknown_senders` setting: `drop`, `untrusted` or `ask`.
    pub unknown_senders: String,
}

/// Bind (or unbind) a platform user to a role on a channel: pairing binds the owner,
/// `airlock channel members` binds admins and members. The host fills it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelBindAction {
    pub channel: String,
    /// The platform user id.
    pub user: String,
    /// `owner`, `admin`, `member`, or `none` (the binding is removed).
    pub role: String,
    /// How: `pairing` (the one-time code came from this user) or `operator` (the owner
    /// at the command line).
    pub how: String,
}

/// Most paths a [`WorkspaceCommitAction`] lists in each of its path lists. The counts stay
/// exact; only the lists are cut, so a policy judges counts, and a person reads the lists
/// with the full change set beside them.
pub const MAX_COMMIT_PATHS: usize = 200;

/// Commit a run's change set to the workspace: the files a sandboxed run or a file tool
/// wrote in its upper layer, copied into the workspace as one checkpoint.
///
/// The binary fills it from the change set (the core reads no files). The change set
/// itself is bound by `change_set_sha256`, the hash of its rendered form that an approver
/// is shown, so an approval covers exactly those changes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceCommitAction {
    /// The workspace the change set applies to (absolute path).
    pub workspace: String,
    /// SHA-256 (hex) of the rendered change set.
    pub change_set_sha256: String,
    pub files_added: u64,
    pub files_modified: u64,
    pub files_deleted: u64,
    /// Bytes of content the commit writes.
    pub bytes: u64,
    /// Changed paths, workspace-relative (at most [`MAX_COMMIT_PATHS`]).
    #[serde(default)]
    pub paths: Vec<String>,
    /// Files that existed before the session and that the change deletes.
    #[serde(default)]
    pub deletes_preexisting: CommitPaths,
    /// Files that existed before the session and that the change overwrites.
    #[serde(default)]
    pub overwrites_preexisting: CommitPaths,
    /// Sensitive paths the change touches (git metadata, `.envrc`, editor and build
    /// config, the operator's `protected_paths`): files that host tools execute.
    #[serde(default)]
    pub touches_sensitive: CommitPaths,
    /// `.git` entries the change creates where there was none (top level or nested).
    #[serde(default)]
    pub creates_git: CommitPaths,
    /// Protected paths the change creates that did not exist.
    #[serde(default)]
    pub creates_protected: CommitPaths,
    /// Symbolic links whose target leaves the workspace.
    #[serde(default)]
    pub symlink_out_of_workspace: CommitPaths,
    /// Files the owner changed in the workspace while the run was going.
    #[serde(default)]
    pub conflicts: CommitPaths,
    /// The per-run limits the change exceeds, each as `name: value > limit`.
    #[serde(default)]
    pub exceeds_limits: Vec<String>,
}

/// How many paths have one property, and the first [`MAX_COMMIT_PATHS`] of them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommitPaths {
    pub count: u64,
    #[serde(default)]
    pub paths: Vec<String>,
}

impl CommitPaths {
    /// `count` paths, of which `paths` is cut to [`MAX_COMMIT_PATHS`].
    pub fn new(count: u64, mut paths: Vec<String>) -> CommitPaths {
        paths.truncate(MAX_COMMIT_PATHS);
        CommitPaths { count, paths }
    }

    /// All of `paths`, counted.
    pub fn of(paths: Vec<String>) -> CommitPaths {
        CommitPaths::new(paths.len() as u64, paths)
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// Every effect an agent can ask for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum Action {
    #[serde(rename = "exec")]
    Exec(ExecAction),
    #[serde(rename = "fs.read")]
    FsRead(PathAction),
    #[serde(rename = "fs.write")]
    FsWrite(FsWriteAction),
    #[serde(rename = "fs.delete")]
    FsDelete(PathAction),
    #[serde(rename = "net.request")]
    NetRequest(NetRequestAction),
    #[serde(rename = "memory.read")]
    MemoryRead(MemoryAction),
    #[serde(rename = "memory.write")]
    MemoryWrite(MemoryAction),
    #[serde(rename = "message.send")]
    MessageSend(MessageSendAction),
    #[serde(rename = "tool.call")]
    ToolCall(ToolCallAction),
    #[serde(rename = "task.schedule")]
    TaskSchedule(TaskScheduleAction),
    #[serde(rename = "agent.spawn")]
    AgentSpawn(AgentSpawnAction),
    #[serde(rename = "workspace.commit")]
    WorkspaceCommit(WorkspaceCommitAction),
    #[serde(rename = "channel.admit")]
    ChannelAdmit(ChannelAdmitAction),
    #[serde(rename = "channel.bind")]
    ChannelBind(ChannelBindAction),
}

/// Why a proposed action was refused before the Gate could look at it.
#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    #[error("action JSON is {size} bytes, over the {limit}-byte limit\nhelp: split the work into smaller actions")]
    TooLarge { size: usize, limit: usize },
    #[error("exec command is {size} bytes, over the {limit}-byte limit\nhelp: put long scripts in a workspace file and run that file")]
    CommandTooLarge { size: usize, limit: usize },
    #[error("a workspace.commit path list has {size} entries, over the {limit}-entry limit\nhelp: list at most {limit} paths and give the exact number in `count`")]
    CommitListTooLong { size: usize, limit: usize },
    #[error("invalid action JSON: {0}\nhelp: an action is an object with \"type\" one of exec, fs.read, fs.write, fs.delete, net.request, memory.read, memory.write, message.send, tool.call, task.schedule, agent.spawn, workspace.commit, channel.admit, channel.bind, and only that type's fields")]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Canonical(#[from] CanonicalError),
}

impl Action {
    /// Parse and validate an action from its JSON wire form.
    pub fn from_json(text: &str) -> Result<Action, ActionError> {
        if text.len() > MAX_ACTION_JSON_BYTES {
            return Err(ActionError::TooLarge {
                size: text.len(),
                limit: MAX_ACTION_JSON_BYTES,
            });
        }
        let action: Action = serde_json::from_str(text)?;
        action.validate()?;
        Ok(action)
    }

    /// Check the size limits that serde cannot express.
    pub fn validate(&self) -> Result<(), ActionError> {
        if let Action::Exec(e) = self {
            if e.command.len() > MAX_COMMAND_BYTES {
                return Err(ActionError::CommandTooLarge {
                    size: e.command.len(),
                    limit: MAX_COMMAND_BYTES,
                });
            }
        }
        if let Action::WorkspaceCommit(c) = self {
            let lists = [
                c.paths.len(),
                c.deletes_preexisting.paths.len(),
                c.overwrites_preexisting.paths.len(),
                c.touches_sensitive.paths.len(),
                c.creates_git.paths.len(),
                c.creates_protected.paths.len(),
                c.symlink_out_of_workspace.paths.len(),
                c.conflicts.paths.len(),
                c.exceeds_limits.len(),
            ];
            if let Some(&size) = lists.iter().find(|&&n| n > MAX_COMMIT_PATHS) {
                return Err(ActionError::CommitListTooLong {
                    size,
                    limit: MAX_COMMIT_PATHS,
                });
            }
        }
        Ok(())
    }

    /// The action's type tag, as used in policy (`exec`, `net.request`, …).
    pub fn kind(&self) -> &'static str {
        match self {
            Action::Exec(_) => "exec",
            Action::FsRead(_) => "fs.read",
            Action::FsWrite(_) => "fs.write",
            Action::FsDelete(_) => "fs.delete",
            Action::NetRequest(_) => "net.request",
            Action::MemoryRead(_) => "memory.read",
            Action::MemoryWrite(_) => "memory.write",
            Action::MessageSend(_) => "message.send",
            Action::ToolCall(_) => "tool.call",
            Action::TaskSchedule(_) => "task.schedule",
            Action::AgentSpawn(_) => "agent.spawn",
            Action::WorkspaceCommit(_) => "workspace.commit",
            Action::ChannelAdmit(_) => "channel.admit",
            Action::ChannelBind(_) => "channel.bind",
        }
    }

    /// RFC 8785 canonical JSON of the action.
    pub fn canonical(&self) -> Result<String, ActionError> {
        Ok(canonical_json(self)?)
    }

    /// `sha256:<hex>` of the canonical form. Approvals and audit records bind this.
    pub fn hash(&self) -> Result<String, ActionError> {
        Ok(content_hash(self)?)
    }
}

/// Conversion of a typed action payload into the general [`Action`], so the Gate can
/// decide on it and then hand back an `Authorized` token of the *typed* payload.
pub trait IntoAction: Clone {
    fn to_action(&self) -> Action;
}

impl IntoAction for Action {
    fn to_action(&self) -> Action {
        self.clone()
    }
}

macro_rules! into_action {
    ($ty:ty, $variant:ident) => {
        impl IntoAction for $ty {
            fn to_action(&self) -> Action {
                Action::$variant(self.clone())
            }
        }
    };
}
into_action!(ExecAction, Exec);
into_action!(NetRequestAction, NetRequest);
into_action!(ToolCallAction, ToolCall);
into_action!(MessageSendAction, MessageSend);
into_action!(TaskScheduleAction, TaskSchedule);
into_action!(AgentSpawnAction, AgentSpawn);
into_action!(FsWriteAction, FsWrite);
into_action!(WorkspaceCommitAction, WorkspaceCommit);
into_action!(ChannelAdmitAction, ChannelAdmit);
into_action!(ChannelBindAction, ChannelBind);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_are_refused() {
        let err = Action::from_json(r#"{"type":"exec","command":"ls","sneaky":1}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
    }

    #[test]
    fn unknown_type_is_refused() {
        assert!(Action::from_json(r#"{"type":"exec.host","command":"ls"}"#).is_err());
    }

    #[test]
    fn oversized_command_is_refused() {
        let big = "a".repeat(MAX_COMMAND_BYTES + 1);
        let json = serde_json::json!({"type": "exec", "command": big}).to_string();
        let err = Action::from_json(&json).unwrap_err();
        assert!(matches!(err, ActionError::CommandTooLarge { .. }), "{err}");
    }

    #[test]
    fn round_trip_keeps_hash() {
        let a = Action::from_json(
            r#"{"type":"tool.call","server":"bank","tool":"send_money","arguments":{"recipient":"X","amount":1},"annotations":{"readOnlyHint":false}}"#,
        )
        .unwrap();
        let b = Action::from_json(&serde_json::to_string(&a).unwrap()).unwrap();
        assert_eq!(a.hash().unwrap(), b.hash().unwrap());
        assert_eq!(a.kind(), "tool.call");
    }
}

#[cfg(test)]
mod body_binding_tests {
    use super::*;

    fn post(body: &str) -> Action {
        Action::NetRequest(NetRequestAction {
            method: "POST".into(),
            url: "https://api.example.com/v1/notes".into(),
            headers: vec![],
            body_bytes: body.len() as u64,
            body_sha256: Some(crate::canonical::sha256_hex(body.as_bytes())),
        })
    }

    #[test]
    fn two_bodies_of_the_same_length_hash_differently() {
        let a = crate::canonical::content_hash(&post("amount=100")).unwrap();
        let b = crate::canonical::content_hash(&post("amount=999")).unwrap();
        assert_ne!(a, b, "an approval of one body must not cover another");
    }

    #[test]
    fn header_values_are_part_of_the_payload() {
        let with = |v: &str| {
            let mut a = match post("x") {
                Action::NetRequest(n) => n,
                _ => unreachable!(),
            };
            a.headers = vec![HeaderField::new("x-d", v)];
            crate::canonical::content_hash(&Action::NetRequest(a)).unwrap()
        };
        assert_ne!(
            with("a"),
            with("b"),
            "an approval of one header value must not cover another"
        );
        // An action stored before values were kept (names only) still reads back, and a
        // record with a field it does not know is still refused.
        let old = Action::from_json(
            r#"{"type":"net.request","method":"GET","url":"https://x.example/","headers":["cookie"]}"#,
        )
        .unwrap();
        match old {
            Action::NetRequest(n) => assert_eq!(n.headers, vec![HeaderField::new("cookie", "")]),
            other => panic!("{other:?}"),
        }
        assert!(Action::from_json(
            r#"{"type":"net.request","method":"GET","url":"https://x.example/","headers":[{"name":"a","valu":"b"}]}"#,
        )
        .is_err());
    }

    #[test]
    fn a_request_without_a_body_hashes_as_before() {
        // No `body_sha256` key at all: hashes of body-less requests are unchanged.
        let json = r#"{"type":"net.request","method":"GET","url":"https://a.example/"}"#;
        let action: Action = serde_json::from_str(json).unwrap();
        let canonical = crate::canonical::canonical_json(&action).unwrap();
        assert!(!canonical.contains("body_sha256"), "{canonical}");
    }
}
