//! `airlock audit tail` on logs whose lines are hostile: one line larger than any record,
//! records of every size, and records carrying terminal controls. The tail always shows
//! the last lines, bounded per record and inert, and never prints nothing with success.

use std::io::Write;
use std::path::Path;

use super::{run, text};

const ESC: char = '\u{1b}';

fn record(seq: u64, command: &str) -> String {
    serde_json::json!({"seq": seq, "time": "2026-01-01T00:00:00Z", "session": "s1",
        "kind": "decision", "decision": "allow",
        "action": {"type": "exec", "command": command}, "policies": ["p"]})
    .to_string()
}

fn write_log(home: &Path, lines: &[Vec<u8>]) {
    let dir = home.join("state/audit");
    std::fs::create_dir_all(&dir).unwrap();
    let mut f = std::fs::File::create(dir.join("log.jsonl")).unwrap();
    for l in lines {
        f.write_all(l).unwrap();
        f.write_all(b"\n").unwrap();
    }
}

fn no_raw_controls(out: &str) {
    for c in out.chars() {
        assert!(
            c == '\n'
                || !(c.is_control()
                    || ('\u{202a}'..='\u{202e}').contains(&c)
                    || ('\u{2066}'..='\u{2069}').contains(&c)),
            "raw {:?} reached the terminal: {out:?}",
            c
        );
    }
}

#[test]
fn audit_tail_shows_the_tail_when_the_last_line_is_larger_than_any_record() {
    let home = tempfile::tempdir().unwrap();
    // 17 MiB, more than the 16 MiB a record may have, and more than tail used to read back.
    let mut huge = record(3, "").into_bytes();
    huge.splice(
        1..1,
        format!("\"pad\":\"{}\",", "x".repeat(17 << 20)).into_bytes(),
    );
    write_log(
        home.path(),
        &[
            record(1, "echo one").into(),
            record(2, "echo two").into(),
            huge,
        ],
    );
    let o = run(home.path(), &["audit", "tail", "-n", "3"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(out.lines().count(), 3, "{}", text(&o));
    assert!(
        out.contains("#1 ") && out.contains("exec: echo one"),
        "{out}"
    );
    assert!(
        out.contains("#2 ") && out.contains("exec: echo two"),
        "{out}"
    );
    assert!(out.contains("not shown: the line is longer than"), "{out}");
    assert!(out.len() < 4096, "{} bytes printed", out.len());
    // Not a silent success: the operator is told to verify.
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("help: run `airlock audit verify`"));
    let o = run(home.path(), &["audit", "tail", "-n", "1", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["unreadable"]["bytes"].as_u64().unwrap() > 17 << 20, "{v}");
}

#[test]
fn audit_tail_bounds_each_record_and_shows_records_of_any_size() {
    let home = tempfile::tempdir().unwrap();
    let big_command = format!("echo {}", "y".repeat(3 << 20));
    let not_json = b"{this is not json".to_vec();
    write_log(
        home.path(),
        &[
            record(1, &big_command).into(),
            not_json,
            record(3, "true").into(),
        ],
    );
    let o = run(home.path(), &["audit", "tail"]);
    let out = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{}", text(&o));
    assert!(
        lines[0].starts_with("#1 ") && lines[0].contains("exec: echo yyy"),
        "{out}"
    );
    assert!(
        lines[0].len() < 1024,
        "a record printed {} bytes",
        lines[0].len()
    );
    assert!(lines[1].contains("not JSON"), "{out}");
    assert!(lines[2].starts_with("#3 "), "{out}");
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn audit_tail_shows_terminal_controls_in_records_escaped() {
    let home = tempfile::tempdir().unwrap();
    let hostile = serde_json::json!({"seq": 1, "time": "t", "session": format!("s{ESC}]0;title\u{7}"),
        "kind": "decision", "decision": format!("allow{ESC}[2K\r"),
        "action": {"type": "exec", "command": format!("rm -rf ./x {ESC}[2K\rls -la \u{202e}gnp.exe\u{2066}\u{7f}\u{9b}")},
        "policies": ["p\u{200b}"]});
    write_log(home.path(), &[hostile.to_string().into()]);
    for args in [&["audit", "tail"][..], &["audit", "tail", "--json"][..]] {
        let o = run(home.path(), args);
        assert!(o.status.success(), "{}", text(&o));
        let out = String::from_utf8(o.stdout.clone()).unwrap();
        no_raw_controls(&out);
        assert!(out.contains("rm -rf ./x"), "{out}");
        if args.len() == 2 {
            assert!(
                out.contains("\\u{1b}[2K\\rls -la \\u{202e}gnp.exe\\u{2066}"),
                "{out}"
            );
        } else {
            // The JSON stays the same JSON.
            let v: serde_json::Value = serde_json::from_str(&out).unwrap();
            assert_eq!(v, hostile);
        }
    }
}
