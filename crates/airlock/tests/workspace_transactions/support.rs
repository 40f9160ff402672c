//! Shared set-up: a home whose config sets the approval timeout, a workspace with files,
//! `airlock exec` in it, and the approvals queue as the operator sees it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use airlock_store::{ApprovalDecisions, ApprovalRequest, SqliteStore, Timestamp};

pub use crate::exec_fixture::{airlock, airlock_bin, fixture, Fixture};

/// A fixture whose `airlock.toml` sets the approval timeout (and anything in `extra`).
pub fn home_with(approval_timeout_secs: u64, extra: &str) -> Fixture {
    let f = fixture();
    let config = f.home.join("config");
    airlock::home::create_private_dir(&config).unwrap();
    std::fs::write(
        config.join("airlock.toml"),
        format!("[agent]\napproval_timeout_secs = {approval_timeout_secs}\n{extra}"),
    )
    .unwrap();
    f
}

/// Files in the workspace, as its owner made them (as root: root's, with the usual
/// modes; a root host's sandbox sees them as its own through an id-mapped lower layer).
pub fn put(ws: &Path, files: &[(&str, &str)]) {
    for (name, text) in files {
        let p = ws.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
    }
}

pub fn read(ws: &Path, name: &str) -> Option<String> {
    std::fs::read_to_string(ws.join(name)).ok()
}

/// `airlock exec --workspace WS -- COMMAND`, to the end.
pub fn exec(f: &Fixture, command: &str) -> Output {
    exec_command(f, command).output().unwrap()
}

pub fn exec_command(f: &Fixture, command: &str) -> Command {
    let mut cmd = Command::new(airlock_bin());
    cmd.env("AIRLOCK_HOME", &f.home)
        .current_dir(&f.ws)
        .args(["exec", "--workspace"])
        .arg(&f.ws)
        .args(["--", command])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `airlock ARGS` run in the workspace directory.
pub fn airlock_in(f: &Fixture, args: &[&str]) -> Output {
    Command::new(airlock_bin())
        .env("AIRLOCK_HOME", &f.home)
        .current_dir(&f.ws)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// The first pending approval request of kind `workspace.commit`, waiting for it
/// (bounded); fails early when `child` ends without asking.
pub fn pending_commit(home: &Path, child: &mut Child) -> ApprovalRequest {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the run ended ({status}) before its commit was held");
        }
        if let Ok(store) = SqliteStore::open(home.join("state")) {
            if let Ok(listing) = store.pending_approvals(Timestamp::now()) {
                if let Some(r) = listing
                    .items
                    .into_iter()
                    .find(|r| r.action_kind == "workspace.commit")
                {
                    return r;
                }
            }
        }
        assert!(Instant::now() < deadline, "no commit was held");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The audit log's records.
pub fn audit(home: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(home.join("state/audit").join(airlock_audit::LOG_FILE))
        .unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

pub fn kinds(home: &Path) -> Vec<String> {
    audit(home)
        .iter()
        .filter_map(|r| r["kind"].as_str().map(str::to_string))
        .collect()
}

/// Every file below `dir`, relative, sorted.
pub fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                stack.push(p.clone());
            }
            out.push(p.strip_prefix(dir).unwrap().to_path_buf());
        }
    }
    out.sort();
    out
}

/// The checkpoint a run's output says its changes were committed as.
pub fn checkpoint_of(o: &Output) -> String {
    let all = text(o);
    all.split("committed as checkpoint ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no checkpoint in {all}"))
        .to_string()
}
