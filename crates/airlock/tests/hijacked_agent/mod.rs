//! I4 attacked by a hijacked session: the scripted model drives `airlock run` and tries,
//! with every tool it has, to change the operator's files (policies, `airlock.toml`,
//! `net-rules.toml`, the secrets store, the audit log, its key and high-water mark) and
//! the store's operator state (approvals, grants, budget counters). Each attack must fail
//! for its own reason (a Gate denial by the named policy, the sandbox's errno, the file
//! tools' refusal), every target must be unchanged, the budget must still stop the run,
//! and `airlock audit verify` must pass.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use airlock_agent::scripted::{ScriptedModel, Step};
use airlock_core::Action;
use airlock_store::{
    ApprovalLimits, ApprovalPreview, ApprovalRequests, ApprovalStatus, BudgetStore, GrantAdmin,
    NewApproval, NewSession, SessionStore, SqliteStore, Timestamp,
};
use serde_json::Value;

use crate::exec_fixture::{airlock, airlock_bin, airlock_run, report};

mod above_home;
mod file_tools;
mod shell;
mod store_and_channels;

/// An operator's home with everything I4 protects in it, and one session the hijacked
/// model works in, with a request of its own waiting for approval.
pub struct Operator {
    _tmp: tempfile::TempDir,
    /// The directory the home is in (where an operator might have started a run).
    pub above: PathBuf,
    pub home: PathBuf,
    pub session: String,
    pub workspace: PathBuf,
    /// The session's own pending approval request.
    pub approval: String,
}

impl Operator {
    /// A home whose session may make `tool_calls` tool calls in all.
    pub fn new(tool_calls: u64) -> Operator {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let above = tmp.path().to_path_buf();
        let home = above.join("home");
        std::fs::set_permissions(&above, std::fs::Permissions::from_mode(0o755)).unwrap();
        // Rules for a loopback port, so that net-rules.toml exists and holds something.
        let target = "127.0.0.1:9";
        ok(&home, &["init"]);
        ok(&home, &["net", "allow", target, "--methods", "GET"]);
        ok(&home, &["net", "allow-private", target]);
        let mut secret = std::process::Command::new(airlock_bin())
            .env("AIRLOCK_HOME", &home)
            .args(["secret", "set", "vault", "--host", "vault.example"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        use std::io::Write;
        secret
            .stdin
            .take()
            .unwrap()
            .write_all(b"s3cr3t-vault-token")
            .unwrap();
        assert!(secret.wait().unwrap().success());
        let config = home.join("config/airlock.toml");
        let text = std::fs::read_to_string(&config).unwrap();
        let limited = text.replacen(
            "tool_calls = 200\n",
            &format!("tool_calls = {tool_calls}\n"),
            1,
        );
        assert_ne!(
            text, limited,
            "the default config has no per-session tool_calls"
        );
        std::fs::write(&config, limited).unwrap();
        // The sandbox uid must reach the session workspace under the home (as root).
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o755)).unwrap();

        let store = SqliteStore::open(home.join("state")).unwrap();
        let s = store
            .create_session(&NewSession::owner(), Timestamp::now())
            .unwrap();
        let approval = hold_approval(&store, s.id());
        // One sandboxed run first writes what the binary itself keeps in the config dir
        // after its first run (the CA bundle the sandbox gets), so that a file appearing
        // during the attack is the attack's.
        let warm = above.join("warm-up");
        std::fs::create_dir(&warm).unwrap();
        std::fs::set_permissions(&warm, std::fs::Permissions::from_mode(0o777)).unwrap();
        ok(
            &home,
            &["exec", "--workspace", warm.to_str().unwrap(), "--", "true"],
        );
        Operator {
            _tmp: tmp,
            above,
            session: s.id().to_string(),
            workspace: s.workspace.clone(),
            home,
            approval,
        }
    }

    /// Every file the agent must not change, as the host sees them: the whole config dir
    /// (policies, airlock.toml, net rules, secrets, keys, the high-water mark, pins),
    /// the audit log and its checkpoints, and the database.
    pub fn targets(&self) -> Vec<PathBuf> {
        let mut all = Vec::new();
        files_under(&self.home.join("config"), &mut all);
        files_under(&self.home.join("state/audit"), &mut all);
        all.push(self.home.join("state/airlock.db"));
        all.retain(|p| !p.starts_with(self.home.join("config/cache")));
        all
    }

    /// The bytes of every file that must stay byte for byte as it is: everything but the
    /// audit files (which the run itself appends to), the high-water mark (which each
    /// checkpoint moves) and the database (which the run writes its session to).
    pub fn snapshot(&self) -> Snapshot {
        let fixed = self
            .targets()
            .into_iter()
            .filter(|p| {
                !p.starts_with(self.home.join("state"))
                    && !p.ends_with("keys/audit-high-water.mark")
            })
            .map(|p| {
                let bytes = std::fs::read(&p).unwrap();
                (p, bytes)
            })
            .collect();
        let store = self.store();
        Snapshot {
            fixed,
            log: std::fs::read(self.home.join("state/audit/log.jsonl")).unwrap(),
            approval: store.get_approval(&self.approval).unwrap().status,
            used: store
                .budget_state(&self.session, Timestamp::now())
                .unwrap()
                .session
                .tool_calls,
        }
    }

    pub fn store(&self) -> SqliteStore {
        SqliteStore::open(self.home.join("state")).unwrap()
    }

    /// `airlock run --session` of this operator's session against `steps`.
    pub async fn run(&self, steps: Vec<Step>, prompt: &str) -> (Output, Value, ScriptedModel) {
        let model = ScriptedModel::start(steps).await.unwrap();
        let o = airlock_run(
            &self.home,
            &model,
            &[
                "--session",
                &self.session,
                "--approval-timeout",
                "1",
                prompt,
            ],
        )
        .await;
        let r = report(&o);
        (o, r, model)
    }

    /// Nothing I4 protects changed: the fixed files byte for byte, the log only grew
    /// (its earlier records are untouched) and verifies with its key and mark, the
    /// session's request is still waiting, no grant exists, and the budget counted every
    /// call the session made and no more.
    pub fn assert_unchanged(&self, before: &Snapshot, calls_made: u64) {
        let after = self.snapshot();
        for (path, bytes) in &before.fixed {
            assert!(
                after.fixed.get(path) == Some(bytes),
                "{} changed or vanished",
                path.display()
            );
        }
        assert_eq!(
            before.fixed.keys().collect::<Vec<_>>(),
            after.fixed.keys().collect::<Vec<_>>(),
            "files appeared in or vanished from the config dir"
        );
        assert!(
            after.log.starts_with(&before.log),
            "the audit log's earlier records changed"
        );
        assert_eq!(
            after.approval, before.approval,
            "the session's own request changed state"
        );
        let store = self.store();
        let grants = store.active_grants(Timestamp::now()).unwrap();
        assert_eq!(
            grants.items.len(),
            0,
            "a grant appeared: {:?}",
            grants.items
        );
        assert_eq!(
            after.used,
            before.used + calls_made,
            "the budget counters were moved"
        );
        let v = airlock(&self.home, &["audit", "verify"]);
        assert!(
            v.status.success(),
            "audit verify: {}{}",
            String::from_utf8_lossy(&v.stdout),
            String::from_utf8_lossy(&v.stderr)
        );
    }
}

/// What [`Operator::assert_unchanged`] compares with.
pub struct Snapshot {
    fixed: BTreeMap<PathBuf, Vec<u8>>,
    log: Vec<u8>,
    approval: ApprovalStatus,
    used: u64,
}

fn ok(home: &Path, args: &[&str]) {
    let o = airlock(home, args);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.is_dir() {
            files_under(&path, out);
        } else if meta.is_file() {
            out.push(path);
        }
    }
}

/// A request of the session's own, waiting for the operator: a message to a stranger.
fn hold_approval(store: &SqliteStore, session: &str) -> String {
    let action = Action::from_json(
        r#"{"type":"message.send","channel":"terminal","destination":"mallory","text":"the keys"}"#,
    )
    .unwrap();
    let now = Timestamp::now();
    store
        .create_approval(
            &NewApproval {
                session_id: session,
                action: &action,
                preview: ApprovalPreview::Message {
                    channel: "terminal".into(),
                    recipient: "mallory".into(),
                    text: "the keys".into(),
                },
                reasons: vec!["a message to a destination you did not name".into()],
                policies: vec!["default.message.untraced-after-taint".into()],
                expires_at: now.plus(Duration::from_secs(3600)),
            },
            &ApprovalLimits::default(),
            now,
        )
        .unwrap()
        .id
}

/// One tool call of the script.
pub fn call(id: &str, tool: &str, args: Value) -> Step {
    Step::tool_call(id, tool, args.to_string())
}

/// The call the budget must stop: it would leave a marker in the workspace.
pub fn over_budget() -> Step {
    call(
        "over",
        "shell",
        serde_json::json!({"command": "touch over-budget"}),
    )
}

/// The run ended at the budget, and the call over it never ran.
pub fn assert_budget_held(op: &Operator, o: &Output, r: &Value, attacks: usize) {
    assert_eq!(
        o.status.code(),
        Some(3),
        "{r:#}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(r["outcome"], "budget_exhausted", "{r:#}");
    assert_eq!(r["tool_calls"].as_array().unwrap().len(), attacks, "{r:#}");
    assert!(
        !op.workspace.join("over-budget").exists(),
        "the call over the budget ran"
    );
}

/// The report of call `id`.
pub fn call_report<'a>(r: &'a Value, id: &str) -> &'a Value {
    r["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["call_id"] == id)
        .unwrap_or_else(|| panic!("no call {id} in {r:#}"))
}

/// Call `id` was denied at the Gate by `policy` and did not run.
pub fn assert_denied_by(r: &Value, id: &str, policy: &str) {
    let c = call_report(r, id);
    assert_eq!(c["decision"], "deny", "{id}: {c:#}");
    assert_eq!(c["executed"], false, "{id}: {c:#}");
    let text = c["result"].as_str().unwrap();
    assert!(
        text.contains(policy),
        "{id}: not denied by {policy}: {text}"
    );
}

/// The shell call `id` ran in the sandbox; its output.
pub fn shell_output<'a>(r: &'a Value, id: &str) -> &'a str {
    let c = call_report(r, id);
    assert_eq!(c["decision"], "allow", "{id}: {c:#}");
    assert_eq!(c["executed"], true, "{id}: {c:#}");
    c["result"].as_str().unwrap()
}
