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

/// The workspace overlay for an unprivileged caller: the helper binds the workspace and
/// the layers from the host by path (no host-made detached mounts), the writes land in
/// the upper layer owned by the caller, and the workspace stays as it was.
#[test]
fn i2_unprivileged_caller_writes_only_into_its_overlay() {
    let (_d, ws) = common::workspace();
    std::fs::write(ws.join("a"), "a\n").unwrap();
    let runs_dir = tempfile::Builder::new()
        .prefix("airlock-runs-")
        .tempdir_in("/tmp")
        .unwrap();
    // The caller reaches its runs dir by path, as it reaches the workspace.
    std::fs::set_permissions(
        runs_dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let runs = runs_dir.path().join("runs");
    let mut cmd = Command::new(runner());
    let expected_uid = if common::is_root() {
        for p in [&ws, &ws.join("a")] {
            std::os::unix::fs::chown(p, Some(UNPRIVILEGED), Some(UNPRIVILEGED)).unwrap();
        }
        std::fs::create_dir(&runs).unwrap();
        std::os::unix::fs::chown(&runs, Some(UNPRIVILEGED), Some(UNPRIVILEGED)).unwrap();
        cmd.uid(UNPRIVILEGED).gid(UNPRIVILEGED);
        UNPRIVILEGED
    } else {
        nix::unistd::geteuid().as_raw()
    };
    let overlay =
        airlock_sandbox::WorkspaceOverlay::create(&runs, "run-1", expected_uid, expected_uid)
            .unwrap();
    let mut profile = airlock_sandbox::SandboxProfile::new(&ws);
    profile.workspace_overlay = Some(overlay.clone());
    let out = cmd
        .arg("--init")
        .arg(env!("CARGO_BIN_EXE_airlock-sandbox-init"))
        .arg("--profile")
        .arg(serde_json::to_string(&profile).unwrap())
        .arg("--capture")
        .arg(&ws)
        .arg("--")
        .arg("echo b > b && rm a && grep -c ' - overlay ' /proc/self/mountinfo")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert_eq!(stdout, "1\n");
    assert_eq!(std::fs::read_to_string(ws.join("a")).unwrap(), "a\n");
    assert!(!ws.join("b").exists(), "the run wrote into the workspace");
    let b = std::fs::metadata(overlay.upper.join("b")).unwrap();
    assert_eq!(b.uid(), expected_uid);
    assert!(airlock_sandbox::overlay::is_whiteout(
        &std::fs::symlink_metadata(overlay.upper.join("a")).unwrap()
    ));

    // The caller removes the layers of a run it made itself (`--overlay`), even what
    // it cannot enter as they were left: a directory the run locked (mode 000) and
    // overlayfs' own work/work (mode 000).
    let mut again = Command::new(runner());
    if common::is_root() {
        again.uid(UNPRIVILEGED).gid(UNPRIVILEGED);
    }
    let out = again
        .arg("--init")
        .arg(env!("CARGO_BIN_EXE_airlock-sandbox-init"))
        .arg("--overlay")
        .arg(&runs)
        .arg("--capture")
        .arg(&ws)
        .arg("--")
        .arg("mkdir -p locked/inner && touch locked/inner/f && chmod 000 locked/inner locked")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let left: Vec<_> = std::fs::read_dir(&runs)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        left,
        vec![std::ffi::OsString::from("run-1")],
        "layers left behind"
    );
}
