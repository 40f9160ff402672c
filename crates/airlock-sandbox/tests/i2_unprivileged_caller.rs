//! I2 for an unprivileged caller: the whole launcher runs as an ordinary uid, the sandbox
//! runs as that uid with no capabilities, and files it creates belong to it.

mod common;

use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

const UNPRIVILEGED: u32 = 4242;

/// The `sandbox-run` example cargo builds next to the test binaries.
fn runner() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples/sandbox-run")
}

#[test]
fn unprivileged_caller_runs_confined_as_itself() {
    let (_d, ws) = common::workspace();
    let mut cmd = Command::new(runner());
    cmd.arg("--init")
        .arg(env!("CARGO_BIN_EXE_airlock-sandbox-init"))
        .arg("--capture")
        .arg("--attestation");
    let expected_uid = if common::is_root() {
        std::os::unix::fs::chown(&ws, Some(UNPRIVILEGED), Some(UNPRIVILEGED)).unwrap();
        cmd.uid(UNPRIVILEGED).gid(UNPRIVILEGED);
        UNPRIVILEGED
    } else {
        nix::unistd::geteuid().as_raw()
    };
    let out = cmd
        .arg(&ws)
        .arg("--")
        .arg("id -u; grep CapEff /proc/self/status; echo hi > made-here")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.starts_with(&format!("{expected_uid}\n")), "{stdout}");
    assert!(stdout.contains("CapEff:\t0000000000000000"), "{stdout}");
    assert!(
        stderr.contains("\"status\": \"fully_enforced\""),
        "{stderr}"
    );
    assert_eq!(
        std::fs::metadata(ws.join("made-here")).unwrap().uid(),
        expected_uid
    );
}
