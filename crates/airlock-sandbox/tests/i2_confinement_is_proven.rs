//! I2: code the model chose runs only inside a sandbox whose confinement was verified for
//! that run. These tests run real commands in the real sandbox.

mod common;
#[path = "suite/forced_shortfalls.rs"]
mod forced_shortfalls;
#[path = "suite/overlay.rs"]
mod overlay;
#[path = "suite/pooled.rs"]
mod pooled;
#[path = "suite/written_files.rs"]
mod written_files;

use std::time::Duration;

use airlock_sandbox::{SandboxError, SandboxProfile};
use common::*;

#[test]
fn output_and_exit_status_round_trip() {
    let (_d, ws) = workspace();
    let out = run(&ws, "echo out; echo err >&2; exit 7");
    assert_eq!(out.status, 7);
    assert_eq!(out.stdout, b"out\n");
    assert_eq!(out.stderr, b"err\n");
    assert!(!out.timed_out && !out.truncated);
}

#[test]
fn killed_command_reports_128_plus_signal() {
    let (_d, ws) = workspace();
    assert_eq!(run(&ws, "kill -TERM $$").status, 128 + 15);
    assert_eq!(run(&ws, "kill -KILL $$").status, 128 + 9);
}

#[test]
fn timeout_kills_the_whole_process_tree() {
    let (_d, ws) = workspace();
    let marker = "31.4159265";
    let mut profile = SandboxProfile::new(&ws);
    profile.timeout_secs = 1;
    let started = std::time::Instant::now();
    let out = run_in(
        &ws,
        &profile,
        &format!("sleep {marker} & (sleep {marker} &) ; sleep {marker}; echo survived"),
    )
    .unwrap();
    assert!(out.timed_out);
    assert_eq!(out.status, 137);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("survived"));
    assert_eq!(
        processes_with(marker),
        Vec::<u32>::new(),
        "stray processes after the timeout"
    );
}

#[test]
fn background_processes_die_with_the_command() {
    let (_d, ws) = workspace();
    let marker = "27.1828182";
    let out = run(&ws, &format!("(sleep {marker} &) ; echo started"));
    assert_eq!(out.status, 0);
    assert_eq!(processes_with(marker), Vec::<u32>::new());
}

#[test]
fn output_beyond_the_cap_is_cut_and_marked() {
    let (_d, ws) = workspace();
    let mut profile = SandboxProfile::new(&ws);
    profile.output_cap_bytes = 1000;
    let out = run_in(&ws, &profile, "head -c 100000 /dev/zero; echo done").unwrap();
    assert_eq!(out.status, 0, "the command still finishes");
    assert_eq!(out.stdout.len(), 1000);
    assert!(out.truncated);
}

#[test]
fn files_created_in_the_workspace_belong_to_the_caller_or_the_sandbox_uid() {
    use std::os::unix::fs::MetadataExt;
    let (_d, ws) = workspace();
    let out = run(&ws, "mkdir sub && echo data > sub/file && id -u");
    assert_eq!(out.status, 0, "{}", String::from_utf8_lossy(&out.stderr));
    let meta = std::fs::metadata(ws.join("sub/file")).unwrap();
    assert_eq!(meta.uid(), sandbox_uid());
    assert_ne!(meta.uid(), 0);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        sandbox_uid().to_string()
    );
}

#[test]
fn cwd_is_the_workspace_at_the_same_absolute_path() {
    let (_d, ws) = workspace();
    let out = run(&ws, "pwd");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        ws.to_str().unwrap()
    );
}

#[test]
fn protected_git_hooks_are_read_only_and_cannot_be_swapped() {
    let (_d, ws) = workspace();
    std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();
    if is_root() {
        for p in [".git", ".git/hooks", ".git/config"] {
            std::os::unix::fs::chown(ws.join(p), Some(65534), Some(65534)).unwrap();
        }
    }
    let out = run(
        &ws,
        "echo evil > .git/hooks/pre-commit; echo h=$?; echo x >> .git/config; echo c=$?; mv .git .git-old; echo m=$?; echo ok > other",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    // bash (the sandbox's shell) gives status 1 for a redirection that fails.
    assert!(text.contains("h=1") && text.contains("c=1"), "{text} {err}");
    assert!(err.contains("Read-only file system"), "{err}");
    assert!(text.contains("m=1") && err.contains("busy"), "{text} {err}");
    assert!(!ws.join(".git/hooks/pre-commit").exists());
    assert_eq!(
        std::fs::read_to_string(ws.join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert!(ws.join(".git").is_dir() && !ws.join(".git-old").exists());
    assert!(
        ws.join("other").exists(),
        "the rest of the workspace stays writable"
    );
}

#[test]
fn attestation_shows_the_confinement() {
    let (_d, ws) = workspace();
    let a = run(&ws, "true").attestation;
    assert_eq!(
        (
            a.cap_effective,
            a.cap_permitted,
            a.cap_bounding,
            a.cap_ambient,
            a.cap_inheritable
        ),
        (0, 0, 0, 0, 0)
    );
    assert!(a.no_new_privs);
    assert_eq!(a.seccomp_mode, 2);
    assert!(a.seccomp_filters >= 3);
    assert_eq!(a.landlock.status, "fully_enforced");
    assert!(a.landlock.applied_abi >= 6 && a.landlock.scoped);
    assert_eq!(a.landlock.signal_probe_errno, Some(libc::EPERM));
    assert_ne!(a.uid.effective, 0);
    assert_eq!(a.uid.effective, sandbox_uid());
    for ns in airlock_sandbox::attestation::NAMESPACES {
        assert_ne!(a.namespaces[*ns], a.host_namespaces[*ns], "{ns}");
    }
    let root = a
        .mounts
        .iter()
        .find(|m| m.mount_point == std::path::Path::new("/"))
        .unwrap();
    assert!(root.read_only);
    assert!(a.weakened.is_none());
    // It serializes for the audit record.
    let json = serde_json::to_string(&a).unwrap();
    assert!(json.contains("\"seccomp_filters\":4"));
}

#[test]
fn shortfall_refuses_the_run_before_the_payload_starts() {
    let (_d, ws) = workspace();
    let mut profile = SandboxProfile::new(&ws);
    profile.landlock_abi = Some(99);
    let err = run_in(&ws, &profile, "touch payload-ran").unwrap_err();
    match &err {
        SandboxError::Shortfall(items) => assert!(items
            .iter()
            .any(|s| s.feature == "landlock" && s.detail.contains("99"))),
        other => panic!("expected a shortfall, got {other}"),
    }
    let text = err.to_string();
    assert!(text.contains("help:"), "{text}");
    assert!(
        !ws.join("payload-ran").exists(),
        "the payload ran despite the shortfall"
    );
}

#[test]
fn environment_is_only_what_the_profile_passes() {
    let (_d, ws) = workspace();
    std::env::var("PATH").unwrap(); // the host has one; the sandbox gets the profile's
    let mut profile = SandboxProfile::new(&ws);
    profile.env.insert("ONLY_THIS".into(), "yes".into());
    let out = run_in(&ws, &profile, "env | sort").unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split('=').next())
        .filter(|n| !["PWD", "SHLVL", "_", "OLDPWD"].contains(n))
        .collect();
    assert_eq!(
        names,
        vec!["HOME", "LANG", "ONLY_THIS", "PATH", "TERM"],
        "{text}"
    );
}

#[test]
fn the_host_is_not_visible() {
    let (_d, ws) = workspace();
    let out = run(&ws, "ls /; test -e /sys && echo SYS; test -e /etc/shadow && echo SHADOW; test -e /root && echo ROOT; test -e /run && echo RUN; ls /proc | grep -c '^[0-9]'");
    let text = String::from_utf8_lossy(&out.stdout);
    for leak in ["SYS", "SHADOW", "ROOT", "RUN", "home\n", "work\n"] {
        assert!(!text.contains(leak), "{leak} visible: {text}");
    }
}

#[test]
fn missing_helper_is_a_clear_error() {
    let err = airlock_sandbox::Sandbox::with_init("/nonexistent/airlock-sandbox-init".into())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("help:") && err.contains("AIRLOCK_SANDBOX_INIT"),
        "{err}"
    );
}

#[test]
fn namespace_creation_and_mounts_are_refused_by_seccomp() {
    let (_d, ws) = workspace();
    let out = run(
        &ws,
        "unshare -Ur true; echo u=$?; mount -t tmpfs none /tmp; echo m=$?",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("u=1") && text.contains("m=32"),
        "{text} {err}"
    );
    assert!(
        err.contains("unshare failed: Operation not permitted"),
        "{err}"
    );
}

#[test]
fn describe_profile_prints_the_mount_plan_and_the_seccomp_rules() {
    let (_d, ws) = workspace();
    let text = airlock_sandbox::describe_profile(&SandboxProfile::new(&ws)).unwrap();
    assert!(text.contains("mount plan:") && text.contains(ws.to_str().unwrap()));
    assert!(
        text.contains("/proc/sys")
            && text.contains("open_by_handle_at")
            && text.contains("TIOCSTI")
    );
    let support = airlock_sandbox::host_support();
    assert!(support.to_string().contains("landlock"));
}

/// A root host's session workspaces lie below root's 0700 state dir. The host hands the
/// workspace over as a mount, so the sandbox uid works in it without any directory above
/// being opened to it.
#[test]
fn i2_a_workspace_below_root_only_directories_works_without_loosening_them() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let outer = tempfile::Builder::new()
        .prefix("airlock-private-")
        .tempdir_in("/tmp")
        .unwrap();
    let outer_path = outer.path().canonicalize().unwrap();
    let ws = outer_path.join("state/sessions/s1/workspace");
    std::fs::create_dir_all(&ws).unwrap();
    for d in [&outer_path, &outer_path.join("state")] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    if is_root() {
        std::os::unix::fs::chown(&ws, Some(65534), Some(65534)).unwrap();
    }
    let out = run(&ws, "echo made > file && cat file && pwd");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status,
        0,
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout, format!("made\n{}\n", ws.display()));
    assert_eq!(std::fs::read_to_string(ws.join("file")).unwrap(), "made\n");
    for d in [&outer_path, &outer_path.join("state")] {
        assert_eq!(
            std::fs::metadata(d).unwrap().mode() & 0o7777,
            0o700,
            "{} was loosened",
            d.display()
        );
    }
}
