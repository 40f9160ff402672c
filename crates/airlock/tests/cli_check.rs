//! `airlock init`, `policy check`, `check` and `replay` as a user runs them, including bad
//! input: every failure is a clear error, never a panic.

use std::os::unix::ffi::OsStrExt;
use std::process::{Command, Output};

mod audit_export;
mod audit_tail;
mod common_eval;
mod config_changes;
mod helper_pin;
mod host_fixture;
mod host_serve;
mod operator_display;
mod operator_input;

fn airlock(home: &std::path::Path, args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_airlock"))
        .env("AIRLOCK_HOME", home)
        .env("RUST_BACKTRACE", "0")
        .args(args)
        .output()
        .unwrap()
}

fn run(home: &std::path::Path, args: &[&str]) -> Output {
    let os: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
    airlock(home, &os)
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn assert_no_panic(o: &Output) {
    let t = text(o);
    assert!(!t.contains("panicked"), "panic: {t}");
    assert_ne!(o.status.code(), Some(101), "panic exit: {t}");
}

#[test]
fn check_exit_codes_and_json() {
    let home = tempfile::tempdir().unwrap();
    let o = run(home.path(), &["check", "--json", "--", "ls", "-la"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["decision"], "allow");
    assert!(v["reasons"].as_array().unwrap().len() == 1);
    assert!(v["facts"]["context"]["shell"]["programs"]
        .as_array()
        .unwrap()
        .contains(&"ls".into()));
    // The program's resolved path, from a PATH search like the sandbox's.
    let paths = v["facts"]["context"]["shell"]["program_paths"]
        .as_array()
        .unwrap();
    assert!(
        paths
            .iter()
            .any(|p| p.as_str().is_some_and(|p| p.ends_with("/ls"))),
        "{paths:?}"
    );

    let o = run(
        home.path(),
        &[
            "check",
            "--profile",
            "strict",
            "--json",
            "--",
            "bash",
            "-c",
            "'id'",
        ],
    );
    assert_eq!(o.status.code(), Some(10), "{}", text(&o));

    let o = run(
        home.path(),
        &[
            "check",
            "--json",
            "--action",
            r#"{"type":"net.request","method":"GET","url":"https://example.com/"}"#,
        ],
    );
    assert_eq!(o.status.code(), Some(20), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["reasons"][0]
            .as_str()
            .unwrap()
            .contains("airlock net allow"),
        "{v}"
    );
}

#[test]
fn bad_input_gets_clear_errors() {
    let home = tempfile::tempdir().unwrap();
    // Malformed action JSON.
    let o = run(home.path(), &["check", "--action", "{\"type\": \"exec\", "]);
    assert_no_panic(&o);
    assert!(![0, 10, 20].contains(&o.status.code().unwrap()));
    assert!(text(&o).contains("invalid action JSON"), "{}", text(&o));
    // Unknown field.
    let o = run(
        home.path(),
        &[
            "check",
            "--action",
            r#"{"type":"exec","command":"ls","x":1}"#,
        ],
    );
    assert!(text(&o).contains("unknown field"), "{}", text(&o));
    // Oversized command (over 1 MB).
    let big =
        serde_json::json!({"type": "exec", "command": "a".repeat(1024 * 1024 + 10)}).to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .env("AIRLOCK_HOME", home.path())
        .args(["check", "--action", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), big.as_bytes()).unwrap();
    let o = child.wait_with_output().unwrap();
    assert_no_panic(&o);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains("over the"),
        "{}",
        &text(&o)[..200.min(text(&o).len())]
    );
    // Invalid UTF-8 in argv.
    let bad = std::ffi::OsStr::from_bytes(b"ls \xff\xfe");
    let o = airlock(
        home.path(),
        &[
            std::ffi::OsStr::new("check"),
            std::ffi::OsStr::new("--"),
            bad,
        ],
    );
    assert_no_panic(&o);
    assert!(o.status.code() != Some(0));
    // Replay of a file with garbage lines: the good trace is still decided, errors name lines.
    let traces = home.path().join("t.jsonl");
    let mut data = b"{not json\n".to_vec();
    data.extend_from_slice(b"\xff\xfe\n");
    data.extend_from_slice(br#"{"id":"ok","kind":"benign","tools":[{"name":"f","annotations":{"readOnlyHint":true}}],"events":[{"type":"user","text":"hi"},{"type":"call","id":"1","tool":"f","args":{}}]}"#);
    data.push(b'\n');
    std::fs::write(&traces, data).unwrap();
    let o = run(home.path(), &["replay", traces.to_str().unwrap(), "--json"]);
    assert_no_panic(&o);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("line 1:") && err.contains("line 2: not valid UTF-8"),
        "{err}"
    );
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 1);
}

#[test]
fn broken_policy_stops_with_file_and_line() {
    let home = tempfile::tempdir().unwrap();
    let o = run(home.path(), &["init"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = run(home.path(), &["policy", "check"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("valid against the Airlock schema"));
    let local = home.path().join("config/policy/local/mine.cedar");
    std::fs::write(&local, "// mine\n\npermit (principal, action == Airlock::Action::\"exec\", resource)\nwhen { context.shell.prgrams.isEmpty() };\n").unwrap();
    for args in [&["policy", "check"][..], &["check", "--", "ls"][..]] {
        let o = run(home.path(), args);
        assert_no_panic(&o);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        assert!(text(&o).contains("mine.cedar:4"), "{}", text(&o));
    }
    std::fs::write(&local, "permit (principal, action, resource) when {").unwrap();
    let o = run(home.path(), &["policy", "check"]);
    assert!(text(&o).contains("mine.cedar:1"), "{}", text(&o));
    // A broken airlock.toml names the key.
    std::fs::remove_file(&local).unwrap();
    std::fs::write(
        home.path().join("config/airlock.toml"),
        "[policy]\nprofle = \"strict\"\n",
    )
    .unwrap();
    let o = run(home.path(), &["check", "--", "ls"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("profle"), "{}", text(&o));
}

#[test]
fn edited_policy_copy_takes_effect() {
    let home = tempfile::tempdir().unwrap();
    assert_eq!(run(home.path(), &["init"]).status.code(), Some(0));
    let local = home.path().join("config/policy/local/allow-example.cedar");
    std::fs::write(
        &local,
        "@id(\"local.example\")\n@reason(\"operator allows example.com\")\npermit (principal, action == Airlock::Action::\"net.request\", resource)\nwhen { context.net.host == \"example.com\" && context.net.method == \"GET\" };\n",
    )
    .unwrap();
    let req = |m: &str| {
        format!(r#"{{"type":"net.request","method":"{m}","url":"https://example.com/x"}}"#)
    };
    let o = run(home.path(), &["check", "--json", "--action", &req("GET")]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = run(home.path(), &["check", "--json", "--action", &req("POST")]);
    assert_eq!(o.status.code(), Some(20), "{}", text(&o));
}

#[test]
fn a_closed_output_pipe_ends_quietly() {
    use std::io::BufRead;
    let home = tempfile::tempdir().unwrap();
    // Enough output to fill any pipe buffer: every call of a large generated trace file.
    let traces = home.path().join("many.jsonl");
    let line = r#"{"id":"t","kind":"benign","tools":[{"name":"f","annotations":{"readOnlyHint":true}}],"events":[{"type":"user","text":"hi"},{"type":"call","id":"1","tool":"f","args":{}}]}"#;
    std::fs::write(&traces, format!("{line}\n").repeat(20_000)).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .env("AIRLOCK_HOME", home.path())
        .args(["replay", traces.to_str().unwrap(), "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.contains("\"decision\""));
    // The reader is gone now (stdout dropped with the BufReader).
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(o.status.code(), Some(141), "{err}");
}

// Operator config edits racing each other.
mod config_races;

/// Invariant I4 for the audit log as the operator runs it: a deleted signing key is never
/// replaced silently, a key is replaced only by `airlock audit rotate-key` (which the log
/// records), and an emptied log fails verification and stops every action.
mod audit_key_and_wipe {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::path::{Path, PathBuf};

    struct Home {
        tmp: tempfile::TempDir,
        ws: PathBuf,
    }

    impl Home {
        fn new() -> Home {
            let tmp = tempfile::tempdir().unwrap();
            let ws = tmp.path().join("ws");
            std::fs::create_dir(&ws).unwrap();
            // As root the sandbox runs as 65534, which must reach and write the workspace.
            std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
            std::fs::set_permissions(&ws, std::fs::Permissions::from_mode(0o777)).unwrap();
            let home = Home { tmp, ws };
            let o = home.run(&["init"]);
            assert_eq!(o.status.code(), Some(0), "{}", text(&o));
            home
        }

        fn path(&self) -> &Path {
            self.tmp.path()
        }

        fn run(&self, args: &[&str]) -> Output {
            let o = run(self.path(), args);
            assert_no_panic(&o);
            o
        }

        fn exec_true(&self) -> Output {
            let ws = self.ws.to_str().unwrap();
            self.run(&["exec", "--workspace", ws, "--", "true"])
        }

        fn key(&self) -> PathBuf {
            self.path().join("config/keys/audit-signing.key")
        }

        fn audit(&self, file: &str) -> PathBuf {
            self.path().join("state/audit").join(file)
        }
    }

    #[test]
    fn i4_deleted_audit_key_stops_exec_until_an_explicit_rotation() {
        let h = Home::new();
        let o = h.exec_true();
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        std::fs::remove_file(h.key()).unwrap();

        for args in [&["init"][..], &["kill", "--all"][..]] {
            let o = h.run(args);
            assert_ne!(o.status.code(), Some(0), "{args:?}: {}", text(&o));
            let t = text(&o);
            assert!(
                t.contains("audit signing key") && t.contains("is missing"),
                "{t}"
            );
            assert!(
                t.contains("help: ") && t.contains("airlock audit rotate-key"),
                "{t}"
            );
            assert!(!h.key().exists(), "{args:?} created a new key silently");
        }
        let o = h.exec_true();
        assert_ne!(o.status.code(), Some(0), "{}", text(&o));
        assert!(!h.key().exists(), "exec created a new key silently");

        // The operator replaces the key knowingly; the old one was not there to sign.
        let o = h.run(&["audit", "rotate-key"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        assert!(text(&o).contains("was not there to sign"), "{}", text(&o));
        let o = h.exec_true();
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let o = h.run(&["audit", "verify"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        assert!(
            text(&o).contains("was NOT signed by the old key"),
            "{}",
            text(&o)
        );

        // With the key present, the old key signs the hand-over.
        let o = h.run(&["audit", "rotate-key"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        let o = h.run(&["audit", "verify"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        assert!(text(&o).contains("signed the hand-over"), "{}", text(&o));
        let log = std::fs::read_to_string(h.audit("log.jsonl")).unwrap();
        assert_eq!(log.matches("\"audit-key-rotated\"").count(), 2, "{log}");
    }

    #[test]
    fn i4_rotation_interrupted_before_the_new_key_took_over_is_finished_not_lost() {
        let h = Home::new();
        assert_eq!(h.exec_true().status.code(), Some(0));
        let pub_path = h.path().join("config/keys/audit-signing.key.pub");
        let (old_key, old_pub) = (
            std::fs::read(h.key()).unwrap(),
            std::fs::read(&pub_path).unwrap(),
        );
        let o = h.run(&["audit", "rotate-key"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        // As if the rotation died after recording the hand-over, before moving the key.
        let next = h.path().join("config/keys/audit-signing.key.next");
        std::fs::rename(h.key(), &next).unwrap();
        std::fs::write(h.key(), &old_key).unwrap();
        std::fs::set_permissions(h.key(), std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&pub_path, &old_pub).unwrap();

        // The old key may not sign on after the hand-over.
        let o = h.exec_true();
        assert_ne!(o.status.code(), Some(0), "{}", text(&o));
        assert!(text(&o).contains("signs with key"), "{}", text(&o));
        // Rotating again finishes the interrupted rotation instead of starting another.
        let o = h.run(&["audit", "rotate-key"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        assert!(
            text(&o).contains("finished an interrupted key rotation"),
            "{}",
            text(&o)
        );
        assert!(!next.exists());
        assert_eq!(h.exec_true().status.code(), Some(0));
        let o = h.run(&["audit", "verify"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        // A stray key file the log never handed over to is not installed.
        std::fs::write(&next, &old_key).unwrap();
        std::fs::set_permissions(&next, std::fs::Permissions::from_mode(0o600)).unwrap();
        let o = h.run(&["audit", "rotate-key"]);
        assert_ne!(o.status.code(), Some(0), "{}", text(&o));
        assert!(text(&o).contains("did not finish"), "{}", text(&o));
    }

    #[test]
    fn i4_emptied_or_cut_audit_log_fails_verify_and_stops_exec() {
        let h = Home::new();
        for _ in 0..2 {
            let o = h.exec_true();
            assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        }
        let log = std::fs::read(h.audit("log.jsonl")).unwrap();
        let cps = std::fs::read(h.audit("checkpoints.jsonl")).unwrap();

        // Emptied.
        std::fs::write(h.audit("log.jsonl"), b"").unwrap();
        std::fs::write(h.audit("checkpoints.jsonl"), b"").unwrap();
        let o = h.run(&["audit", "verify"]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        assert!(
            text(&o).contains(
                "the log is empty but a checkpoint at seq 4 was made; records were removed"
            ),
            "{}",
            text(&o)
        );
        let o = h.exec_true();
        assert_ne!(o.status.code(), Some(0), "{}", text(&o));
        assert_eq!(
            std::fs::read(h.audit("log.jsonl")).unwrap(),
            b"",
            "a new chain started"
        );

        // Cut together with the last checkpoints: `init`'s record #0, the first exec's
        // #1 and #2, and their checkpoints.
        let keep = |bytes: &[u8], n: usize| -> Vec<u8> {
            bytes
                .split_inclusive(|&b| b == b'\n')
                .take(n)
                .flatten()
                .copied()
                .collect()
        };
        std::fs::write(h.audit("log.jsonl"), keep(&log, 3)).unwrap();
        std::fs::write(h.audit("checkpoints.jsonl"), keep(&cps, 2)).unwrap();
        let o = h.run(&["audit", "verify"]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        assert!(
            text(&o).contains("the log ends at seq 2 but a checkpoint at seq 4 was made"),
            "{}",
            text(&o)
        );
        let o = h.exec_true();
        assert_ne!(o.status.code(), Some(0), "{}", text(&o));
        assert_eq!(
            std::fs::read(h.audit("log.jsonl")).unwrap(),
            keep(&log, 3),
            "seq #3 was written again"
        );
    }
}

/// Commands whose text the shell reads differently than a naive parse: each hides an
/// `rm -rf ./important` behind something harmless.
const HIDDEN_RM: &[&str] = &[
    // Control characters that tree-sitter-bash reads as blanks, bash as word characters.
    "ls\r# ; rm -rf ./important",
    "ls\x0c# ; rm -rf ./important",
    "ls\x0b# ; rm -rf ./important",
    "ls\x1b# ; rm -rf ./important",
    "touch marker\r# ; rm -rf ./important",
    // A `$'…'` string bash ends earlier than the grammar does.
    "echo $'\\\\' ; rm -rf ./important ; # '",
    // Dialect: one `echo` to bash, an `rm` to dash.
    "sh -c \"echo \\$'\\\\' ; rm -rf ./important ; # '\"",
    // Dialect: `[[ … && … ]]` is one test to bash; dash runs `rm` after `[[ -n x`.
    "sh -c '[[ -n x && rm -rf ./important ]]'",
    // Dialect through another string runner.
    "watch -n 1 '[[ -n x && rm -rf ./important ]]'",
];

#[test]
fn i2_text_the_shell_reads_differently_is_unparsed_and_never_allowed() {
    let home = tempfile::tempdir().unwrap();
    assert_eq!(run(home.path(), &["init"]).status.code(), Some(0));
    for cmd in HIDDEN_RM {
        for profile in ["strict", "default"] {
            let o = run(
                home.path(),
                &["check", "--profile", profile, "--json", "--", cmd],
            );
            assert_no_panic(&o);
            let v: serde_json::Value = serde_json::from_slice(&o.stdout)
                .unwrap_or_else(|e| panic!("{cmd:?}: {e}: {}", text(&o)));
            assert_ne!(v["decision"], "allow", "{profile} {cmd:?}: {v}");
            assert_eq!(v["facts"]["context"]["shell"]["parsed"], false, "{cmd:?}");
            let reasons = v["reasons"].to_string();
            assert!(
                reasons.contains("could not be parsed"),
                "{profile} {cmd:?}: {reasons}"
            );
        }
    }
}

#[test]
fn i2_an_operator_forbid_is_not_bypassed_by_text_the_shell_reads_differently() {
    let home = tempfile::tempdir().unwrap();
    assert_eq!(run(home.path(), &["init"]).status.code(), Some(0));
    std::fs::write(
        home.path().join("config/policy/local/no-rm.cedar"),
        "@id(\"local.no-rm\")\n@reason(\"rm is not allowed here\")\nforbid (principal, action == Airlock::Action::\"exec\", resource)\nwhen { context.shell.programs.contains(\"rm\") };\n\
         @id(\"local.allow-all\")\npermit (principal, action == Airlock::Action::\"exec\", resource);\n",
    )
    .unwrap();
    let o = run(
        home.path(),
        &["check", "--json", "--", "rm -rf ./important"],
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["decision"], "deny", "{v}");
    let o = run(home.path(), &["check", "--json", "--", "ls -la"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["decision"], "allow", "{v}");
    for cmd in HIDDEN_RM {
        let o = run(home.path(), &["check", "--json", "--", cmd]);
        assert_no_panic(&o);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_ne!(v["decision"], "allow", "{cmd:?}: {v}");
        assert!(
            v["reasons"].to_string().contains("could not be parsed"),
            "{v}"
        );
    }
}

#[test]
fn deeply_nested_policy_is_a_clean_error_naming_the_file() {
    let home = tempfile::tempdir().unwrap();
    assert_eq!(run(home.path(), &["init"]).status.code(), Some(0));
    let local = home.path().join("config/policy/local/deep.cedar");
    for body in [
        format!("{}true{}", "(".repeat(1_000), ")".repeat(1_000)),
        format!("{}true", "!".repeat(1_000)),
        format!("{}1 > 0", "1 + ".repeat(100_000)),
    ] {
        std::fs::write(
            &local,
            format!("// fine so far\npermit (principal, action, resource)\nwhen {{ {body} }};\n"),
        )
        .unwrap();
        for args in [&["policy", "check"][..], &["check", "--", "ls"][..]] {
            let o = run(home.path(), args);
            assert_no_panic(&o);
            assert_eq!(o.status.code(), Some(1), "{args:?}: {}", text(&o));
            let t = text(&o);
            assert!(t.contains("deep.cedar:3: "), "{args:?}: {t}");
            assert!(t.contains("help: "), "{args:?}: {t}");
        }
    }
}
