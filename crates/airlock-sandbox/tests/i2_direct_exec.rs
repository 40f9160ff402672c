//! A command of plain words runs without the intermediate shell, and behaves as it would
//! under `sh -c`: the same argv (with `argv[0]` as typed), `PWD` set, the shell's exit
//! statuses, and the same confinement. Everything else still goes through the shell.

mod common;

use common::*;

/// Field 4 of `/proc/self/stat`: the parent pid, inside the sandbox's pid namespace.
fn parent_pid(stat: &[u8]) -> u32 {
    let text = String::from_utf8_lossy(stat);
    // The command name (field 2) is in parentheses and may contain spaces.
    let after_name = &text[text.rfind(')').expect("stat has a name") + 2..];
    after_name
        .split(' ')
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no parent pid in {text:?}"))
}

#[test]
fn a_plain_command_is_the_child_of_the_reaper_not_of_a_shell() {
    let (_d, ws) = workspace();
    let direct = run(&ws, "cat /proc/self/stat");
    assert_eq!(
        direct.status,
        0,
        "{}",
        String::from_utf8_lossy(&direct.stderr)
    );
    assert_eq!(
        parent_pid(&direct.stdout),
        1,
        "ran without a shell, under PID 1"
    );
    // A pipe needs the shell: there `cat` is the shell's child.
    let shell = run(&ws, "cat /proc/self/stat | cat");
    assert_eq!(shell.status, 0);
    assert_ne!(parent_pid(&shell.stdout), 1, "ran under the shell");
}

#[test]
fn a_plain_command_sees_what_the_shell_would_give_it() {
    let (_d, ws) = workspace();
    // argv[0] as typed, the arguments unchanged.
    let out = run(&ws, "ls /no-such-dir-xyz");
    assert_eq!(out.status, 2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("ls: "), "argv[0] must be `ls`: {err}");
    // The shell exports PWD; so does a direct run.
    let direct = run(&ws, "printenv PWD");
    let shell = run(&ws, "printenv PWD | cat");
    assert_eq!(direct.stdout, shell.stdout);
    assert_eq!(
        String::from_utf8_lossy(&direct.stdout).trim(),
        ws.display().to_string()
    );
}

#[test]
fn a_plain_command_is_confined_like_any_other() {
    let (_d, ws) = workspace();
    // The system trees are read-only.
    let out = run(&ws, "touch /usr/airlock-direct-exec-probe");
    assert_ne!(out.status, 0);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Read-only file system") || err.contains("Permission denied"),
        "{err}"
    );
    assert!(!std::path::Path::new("/usr/airlock-direct-exec-probe").exists());
    // The attestation of a direct run is as complete as that of a shell run.
    let direct = run(&ws, "cat /proc/self/status");
    let text = String::from_utf8_lossy(&direct.stdout);
    assert!(text.contains("NoNewPrivs:\t1"), "{text}");
    assert!(text.contains("Seccomp:\t2"), "{text}");
    assert_eq!(direct.attestation.landlock.status, "fully_enforced");
}

#[test]
fn an_unknown_program_gets_the_shells_not_found_status() {
    let (_d, ws) = workspace();
    let out = run(&ws, "no-such-program-xyz");
    assert_eq!(out.status, 127);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not found"), "{err}");
}
