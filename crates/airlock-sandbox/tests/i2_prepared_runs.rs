//! A sandbox can be built and attested before its command is decided
//! ([`Sandbox::prepare`]): nothing of the payload's runs until an authorized command
//! arrives, dropping an unused sandbox leaves no process behind, and the command must run
//! where the sandbox was prepared.

mod common;

use std::time::{Duration, Instant};

use airlock_core::action::ExecAction;
use airlock_core::testing::authorize_for_tests;
use airlock_sandbox::{OutputMode, SandboxError, SandboxProfile};
use common::*;

fn action(command: &str, cwd: &str) -> ExecAction {
    ExecAction {
        command: command.into(),
        cwd: cwd.into(),
        env: vec![],
    }
}

/// Whether `pid` is still a process (running or an unreaped zombie).
fn exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn a_prepared_sandbox_is_attested_and_runs_the_command_it_is_given_later() {
    let (_d, ws) = workspace();
    let profile = SandboxProfile::new(&ws);
    let prepared = sandbox()
        .prepare(&profile, "", OutputMode::Capture)
        .expect("prepare");
    assert_eq!(prepared.attestation().landlock.status, "fully_enforced");
    assert!(prepared.attestation().no_new_privs);
    // Nothing has run: the command is not even known yet.
    assert!(std::fs::read_dir(&ws).unwrap().next().is_none());
    let out = prepared
        .run(&authorize_for_tests(action(
            "echo hi > made-late; cat made-late",
            "",
        )))
        .expect("run");
    assert_eq!(out.status, 0, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.stdout, b"hi\n");
    assert!(ws.join("made-late").exists());
}

#[test]
fn a_prepared_sandbox_that_is_dropped_runs_nothing_and_leaves_no_process() {
    let (_d, ws) = workspace();
    let helper = std::sync::Arc::new(std::sync::Mutex::new(None));
    let seen = helper.clone();
    let prepared = sandbox()
        .on_spawn(move |pid| *seen.lock().unwrap() = Some(pid))
        .prepare(&SandboxProfile::new(&ws), "", OutputMode::Capture)
        .expect("prepare");
    let pid = helper.lock().unwrap().expect("the helper was started");
    // The helper is alive while the sandbox waits for its command.
    assert!(exists(pid), "a prepared sandbox keeps its helper");
    drop(prepared);
    // Dropping kills and reaps it: no zombie, no straggler.
    let deadline = Instant::now() + Duration::from_secs(5);
    while exists(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!exists(pid), "the helper {pid} was reaped");
    assert!(
        std::fs::read_dir(&ws).unwrap().next().is_none(),
        "nothing ran in the workspace"
    );
}

#[test]
fn the_command_must_run_in_the_directory_the_sandbox_was_prepared_for() {
    let (_d, ws) = workspace();
    let sub = ws.join("sub");
    std::fs::create_dir(&sub).unwrap();
    if is_root() {
        std::os::unix::fs::chown(&sub, Some(65534), Some(65534)).unwrap();
    }
    let prepared = sandbox()
        .prepare(&SandboxProfile::new(&ws), "", OutputMode::Capture)
        .expect("prepare");
    let err = prepared
        .run(&authorize_for_tests(action(
            "touch moved",
            &sub.display().to_string(),
        )))
        .expect_err("another cwd is refused");
    assert!(
        matches!(err, SandboxError::Profile { field: "cwd", .. }),
        "{err}"
    );
    assert!(!sub.join("moved").exists() && !ws.join("moved").exists());

    // Prepared for the subdirectory, the same command runs there.
    let prepared = sandbox()
        .prepare(
            &SandboxProfile::new(&ws),
            &sub.display().to_string(),
            OutputMode::Capture,
        )
        .expect("prepare in sub");
    let out = prepared
        .run(&authorize_for_tests(action(
            "touch moved",
            &sub.display().to_string(),
        )))
        .expect("run");
    assert_eq!(out.status, 0, "{}", String::from_utf8_lossy(&out.stderr));
    assert!(sub.join("moved").exists());
}
