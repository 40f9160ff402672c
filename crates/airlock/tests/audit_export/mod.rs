//! `airlock audit export` (JSON lines and OTLP/JSON) from a real log, and
//! `airlock audit verify --export`: a copy off the machine verifies against the signed
//! checkpoints, and one altered in any way does not (invariant I4: the audit log cannot be
//! rewritten unnoticed, here or in its copies).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{assert_no_panic, run, text};

/// An initialised home whose log holds real records of three sandboxed runs.
fn home_with_log() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&ws, std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = run(tmp.path(), &["init"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    for cmd in ["true", "echo one", "ls"] {
        let o = run(
            tmp.path(),
            &["exec", "--workspace", ws.to_str().unwrap(), "--", cmd],
        );
        assert_eq!(o.status.code(), Some(0), "{cmd}: {}", text(&o));
    }
    tmp
}

fn export(home: &Path, format: &str) -> (PathBuf, String) {
    let file = home.join(format!("export.{format}"));
    let o = run(
        home,
        &[
            "audit",
            "export",
            "--format",
            format,
            "--output",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode & 0o077, 0, "the export is mode {mode:o}");
    let body = std::fs::read_to_string(&file).unwrap();
    (file, body)
}

fn verify_export(home: &Path, file: &Path) -> std::process::Output {
    let o = run(
        home,
        &["audit", "verify", "--export", file.to_str().unwrap()],
    );
    assert_no_panic(&o);
    o
}

fn log_lines(home: &Path, file: &str) -> Vec<String> {
    std::fs::read_to_string(home.join("state/audit").join(file))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The OTLP log records of an export.
fn otlp_records(body: &str) -> Vec<Value> {
    let req: Value = serde_json::from_str(body).unwrap();
    let rl = &req["resourceLogs"][0];
    let service = rl["resource"]["attributes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["key"] == "service.name")
        .unwrap();
    assert_eq!(service["value"]["stringValue"], "airlock");
    rl["scopeLogs"][0]["logRecords"].as_array().unwrap().clone()
}

fn attr<'a>(rec: &'a Value, key: &str) -> Option<&'a str> {
    rec["attributes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["key"] == key)
        .and_then(|a| {
            a["value"]["stringValue"]
                .as_str()
                .or(a["value"]["intValue"].as_str())
        })
}

#[test]
fn i4_both_export_formats_carry_a_hash_chain_that_verifies() {
    let home = home_with_log();
    let h = home.path();
    let log = log_lines(h, "log.jsonl");
    let checkpoints = log_lines(h, "checkpoints.jsonl");
    assert!(log.len() >= 6 && !checkpoints.is_empty(), "{log:?}");

    // JSON lines: every record and checkpoint line, verbatim.
    let (jsonl_file, jsonl) = export(h, "jsonl");
    let lines: Vec<&str> = jsonl.lines().collect();
    assert_eq!(lines.len(), log.len() + checkpoints.len());
    assert_eq!(
        &lines[..log.len()],
        &log.iter().map(String::as_str).collect::<Vec<_>>()[..]
    );
    let o = verify_export(h, &jsonl_file);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("audit log OK"), "{}", text(&o));

    // OTLP/JSON: the fields of the log data model, and the chain in the attributes.
    let (otlp_file, otlp) = export(h, "otlp");
    let recs = otlp_records(&otlp);
    assert_eq!(recs.len(), log.len() + checkpoints.len());
    let mut prev = "0".repeat(64);
    let mut seen_records = 0;
    for r in &recs {
        assert_eq!(r["severityText"], "INFO", "{r}");
        assert_eq!(r["severityNumber"], 9, "{r}");
        let t: u128 = r["timeUnixNano"].as_str().unwrap().parse().unwrap();
        assert!(t > 1_600_000_000_000_000_000, "{r}");
        let body: Value = serde_json::from_str(r["body"]["stringValue"].as_str().unwrap()).unwrap();
        match attr(r, "airlock.audit.type") {
            Some("record") => {
                assert_eq!(
                    attr(r, "airlock.audit.prev_hash"),
                    Some(prev.as_str()),
                    "{r}"
                );
                assert_eq!(attr(r, "airlock.audit.hash"), body["hash"].as_str(), "{r}");
                assert_eq!(attr(r, "airlock.audit.kind"), body["kind"].as_str(), "{r}");
                assert_eq!(
                    attr(r, "airlock.principal"),
                    body["principal"].as_str(),
                    "{r}"
                );
                assert_eq!(
                    attr(r, "airlock.audit.seq"),
                    Some(seen_records.to_string().as_str())
                );
                prev = body["hash"].as_str().unwrap().to_owned();
                seen_records += 1;
            }
            Some("checkpoint") => {
                assert_eq!(
                    attr(r, "airlock.audit.checkpoint.signature"),
                    body["signature"].as_str(),
                    "{r}"
                );
                assert!(attr(r, "airlock.audit.checkpoint.key_id").is_some(), "{r}");
            }
            other => panic!("type {other:?}: {r}"),
        }
    }
    assert_eq!(seen_records, log.len());
    let o = verify_export(h, &otlp_file);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("audit log OK"), "{}", text(&o));
}

#[test]
fn i4_an_altered_export_fails_verification() {
    let home = home_with_log();
    let h = home.path();
    let (_, jsonl) = export(h, "jsonl");
    let owned: Vec<String> = jsonl.lines().map(str::to_owned).collect();
    let write = |name: &str, lines: &[String]| {
        let p = h.join(name);
        std::fs::write(&p, lines.join("\n") + "\n").unwrap();
        p
    };

    // A record's content changed (the command that ran).
    let mut edited = owned.clone();
    let i = edited.iter().position(|l| l.contains("echo one")).unwrap();
    edited[i] = edited[i].replace("echo one", "echo two");
    // A record removed from the middle.
    let mut dropped = owned.clone();
    dropped.remove(2);
    // The signatures removed: the chain alone is not enough.
    let unsigned: Vec<String> = owned
        .iter()
        .filter(|l| !l.contains("\"signature\""))
        .cloned()
        .collect();
    for (name, lines) in [
        ("edited.jsonl", edited),
        ("dropped.jsonl", dropped),
        ("unsigned.jsonl", unsigned),
    ] {
        let p = write(name, &lines);
        let o = verify_export(h, &p);
        assert_eq!(o.status.code(), Some(1), "{name}: {}", text(&o));
        assert!(
            text(&o).contains("FAILED verification"),
            "{name}: {}",
            text(&o)
        );
    }

    // OTLP: an attribute that disagrees with the signed body is caught, so a pipeline that
    // filters on attributes cannot be shown a chain other than the one signed.
    let (_, otlp) = export(h, "otlp");
    let mut req: Value = serde_json::from_str(&otlp).unwrap();
    let rec = &mut req["resourceLogs"][0]["scopeLogs"][0]["logRecords"][1];
    for a in rec["attributes"].as_array_mut().unwrap() {
        if a["key"] == "airlock.audit.hash" {
            a["value"]["stringValue"] = Value::from("f".repeat(64));
        }
    }
    let p = h.join("altered.otlp");
    std::fs::write(&p, req.to_string()).unwrap();
    let o = verify_export(h, &p);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("airlock.audit.hash") && text(&o).contains("help: "),
        "{}",
        text(&o)
    );
}

/// A one-request OTLP collector on loopback: returns the request head and body.
fn collector() -> (String, std::thread::JoinHandle<(String, Vec<u8>)>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let handle = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut head = String::new();
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
            if line == "\r\n" || line.is_empty() {
                break;
            }
            head.push_str(&line);
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        let mut stream = stream;
        stream
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}")
            .unwrap();
        (head, body)
    });
    (url, handle)
}

#[test]
fn i4_otlp_export_posts_to_the_configured_collector() {
    let home = home_with_log();
    let h = home.path();
    let (url, received) = collector();
    let cfg = h.join("config/airlock.toml");
    let text_cfg = std::fs::read_to_string(&cfg).unwrap().replace(
        "# otlp_endpoint = \"https://collector.example:4318\"",
        &format!("otlp_endpoint = \"{url}\""),
    );
    std::fs::write(&cfg, text_cfg).unwrap();
    let o = run(h, &["audit", "export", "--format", "otlp", "--post"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let (head, body) = received.join().unwrap();
    assert!(head.starts_with("POST /v1/logs HTTP/1.1\r\n"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{head}"
    );
    let recs = otlp_records(std::str::from_utf8(&body).unwrap());
    let records = recs
        .iter()
        .filter(|r| attr(r, "airlock.audit.type") == Some("record"))
        .count();
    assert_eq!(records, log_lines(h, "log.jsonl").len());

    // Without a collector configured, --post refuses and says where to set one.
    let bare = tempfile::tempdir().unwrap();
    let o = run(bare.path(), &["init"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = run(
        bare.path(),
        &["audit", "export", "--format", "otlp", "--post"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("help: set otlp_endpoint"), "{}", text(&o));
}
