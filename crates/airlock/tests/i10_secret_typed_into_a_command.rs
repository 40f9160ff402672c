//! I10: a stored secret's value never lands in the audit log, even when the operator pastes
//! it into a command (every stored secret is redacted, not only those a run exposes).

use std::io::Write;
use std::process::{Command, Stdio};

#[test]
fn pasted_secret_value_is_redacted_from_the_audit_log() {
    let bin = env!("CARGO_BIN_EXE_airlock");
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&ws, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = |args: &[&str], stdin: Option<&str>| {
        let mut c = Command::new(bin)
            .env("AIRLOCK_HOME", &home)
            .current_dir(&ws)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = c.stdin.take().unwrap();
        if let Some(s) = stdin {
            input.write_all(s.as_bytes()).unwrap();
        }
        drop(input);
        c.wait_with_output().unwrap()
    };
    assert!(run(&["init"], None).status.success());
    let value = "tok-7f3c91d2e8a64b0f";
    let o = run(
        &["secret", "set", "gh", "--host", "api.github.com"],
        Some(value),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = run(&["exec", "--", &format!("echo {value} > /dev/null")], None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let log = std::fs::read_to_string(home.join("state/audit/log.jsonl")).unwrap();
    assert!(log.contains("echo"), "the exec records are missing:\n{log}");
    assert!(
        !log.contains(value),
        "the secret value is in the audit log:\n{log}"
    );
    assert!(log.contains("[REDACTED:gh]"), "{log}");
    let v = run(&["audit", "verify"], None);
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
}
