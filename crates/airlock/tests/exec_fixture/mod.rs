//! Shared set-up for tests that run the real `airlock` binary with the real sandbox: the
//! binary (with its helpers next to it), a home plus a workspace the sandbox uid can use,
//! and commands against the scripted model server.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use airlock_agent::provider::ProviderKind;
use airlock_agent::scripted::{ScriptedModel, SCRIPTED_MODEL_NAME};
use serde_json::Value;

/// The `airlock` binary under test; fails clearly when its sandbox helper was not built.
pub fn airlock_bin() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_airlock"));
    let init = bin.with_file_name("airlock-sandbox-init");
    assert!(
        init.exists(),
        "{} is missing: build the workspace's binaries first (cargo build --workspace --bins)",
        init.display()
    );
    bin
}

/// A temporary `AIRLOCK_HOME` and workspace.
pub struct Fixture {
    pub _tmp: tempfile::TempDir,
    pub home: PathBuf,
    pub ws: PathBuf,
}

pub fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    // When the tests run as root the sandbox runs as 65534, which must be able to enter
    // and write the workspace.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&ws, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    Fixture {
        _tmp: tmp,
        home,
        ws,
    }
}

/// `airlock ARGS` in `home`, without stdin.
pub fn airlock(home: &Path, args: &[&str]) -> Output {
    Command::new(airlock_bin())
        .env("AIRLOCK_HOME", home)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// An `airlock` command in `home` whose model is the scripted server `model` (OpenAI wire
/// format); the caller adds the subcommand and its arguments.
pub fn scripted_command(home: &Path, model: &ScriptedModel) -> Command {
    let mut cmd = Command::new(airlock_bin());
    cmd.env("AIRLOCK_HOME", home)
        .env("AIRLOCK_PROVIDER", "openai")
        .env("AIRLOCK_MODEL", SCRIPTED_MODEL_NAME)
        .env("AIRLOCK_BASE_URL", model.base_url(ProviderKind::Openai))
        .env("AIRLOCK_API_KEY", "sk-scripted-test-key")
        .stdin(Stdio::null());
    cmd
}

/// `airlock run --json ARGS` against `model`, in a child process, off the async runtime.
pub async fn airlock_run(home: &Path, model: &ScriptedModel, args: &[&str]) -> Output {
    let mut cmd = scripted_command(home, model);
    cmd.args(["run", "--json"]).args(args);
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

/// The JSON report a `run --json` printed.
pub fn report(o: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&o.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

/// The report of a `run --json` that must have succeeded.
pub fn report_ok(o: &Output) -> Value {
    let r = report(o);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{r:#}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    r
}
