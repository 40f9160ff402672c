//! Shared helpers of the sandbox integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use airlock_core::action::ExecAction;
use airlock_core::testing::authorize_for_tests;
use airlock_sandbox::{OutputMode, RunOutcome, Sandbox, SandboxError, SandboxProfile};

pub fn sandbox() -> Sandbox {
    Sandbox::with_init(env!("CARGO_BIN_EXE_airlock-sandbox-init").into())
        .expect("helper built by cargo")
}

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The uid the sandbox runs as for this test process.
pub fn sandbox_uid() -> u32 {
    if is_root() {
        65534
    } else {
        nix::unistd::geteuid().as_raw()
    }
}

/// A fresh workspace the sandbox uid can write (owned by it when the tests run as root).
pub fn workspace() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("airlock-ws-")
        .tempdir_in("/tmp")
        .unwrap();
    let path = dir.path().canonicalize().unwrap();
    if is_root() {
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
    }
    (dir, path)
}

pub fn run_in(
    ws: &Path,
    profile: &SandboxProfile,
    command: &str,
) -> Result<RunOutcome, SandboxError> {
    let mut profile = profile.clone();
    profile.workspace = ws.to_path_buf();
    let auth = authorize_for_tests(ExecAction {
        command: command.into(),
        cwd: String::new(),
        env: vec![],
    });
    sandbox().run(&auth, &profile, OutputMode::Capture)
}

pub fn run(ws: &Path, command: &str) -> RunOutcome {
    run_in(ws, &SandboxProfile::new(ws), command).unwrap_or_else(|e| panic!("run failed: {e}"))
}

/// Whether process `pid` is gone (exited and reaped) within 5 s. A helper whose sandbox
/// ran its command is reaped on a thread of its own once it reported the command's end
/// (its exit tears down the namespaces, which the run does not wait for), so it can
/// outlive the run's return by a moment; one that is never reaped fails this.
pub fn gone_soon(pid: u32) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while Path::new(&format!("/proc/{pid}")).exists() {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    true
}

/// Host pids whose command line contains `marker`.
pub fn processes_with(marker: &str) -> Vec<u32> {
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(marker))
                .unwrap_or(false)
        })
        .collect()
}
