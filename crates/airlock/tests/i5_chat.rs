//! `airlock chat` through the real binary, driven by piped stdin: the scripted model (a
//! real HTTP server on loopback) is the only stand-in; the Gate, the egress proxy, the
//! store and the audit log are real. An *ask* is answered inline on stdin, and a second
//! chat resumes the session with `--session`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Output, Stdio};
use std::sync::{Arc, Mutex};

use airlock_agent::scripted::{ScriptedModel, Step};
use airlock_proxy::{NetRule, NetRules};
use airlock_store::{ApprovalRequests, ApprovalStatus, SqliteStore};
use serde_json::Value;

mod exec_fixture;
use exec_fixture::{airlock_bin, fixture, scripted_command};

/// A loopback HTTP server that records `METHOD path` of each request and answers
/// `status page`.
fn start_upstream() -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(Mutex::new(Vec::new()));
    let hits2 = hits.clone();
    std::thread::spawn(move || {
        for tcp in listener.incoming() {
            let Ok(mut tcp) = tcp else { continue };
            let mut reader = BufReader::new(tcp.try_clone().unwrap());
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let mut parts = line.split_whitespace();
            let req = format!(
                "{} {}",
                parts.next().unwrap_or(""),
                parts.next().unwrap_or("")
            );
            let mut length = 0usize;
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                    break;
                }
                if let Some((k, v)) = h.split_once(':') {
                    if k.eq_ignore_ascii_case("content-length") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            hits2.lock().unwrap().push(req);
            let text = "status page: all systems normal";
            let _ = write!(
                tcp,
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                text.len()
            );
        }
    });
    (port, hits)
}

/// The operator allows GET to 127.0.0.1:`port`, but asks before each request.
fn allow_with_ask(home: &Path, port: u16) {
    let config = home.join("config");
    airlock::home::create_private_dir(&config).unwrap();
    let mut rules = NetRules::default();
    let mut rule = NetRule::for_host("127.0.0.1");
    rule.port = Some(port);
    rule.methods = vec!["GET".into()];
    rule.ask = true;
    rules.add(rule).unwrap();
    rules
        .allow_private
        .push(format!("127.0.0.1:{port}").parse().unwrap());
    rules.save(&config).unwrap();
}

/// Run `airlock chat` with `stdin` piped in, lines written with a pause between them.
async fn chat(home: &Path, model: &ScriptedModel, args: &[&str], stdin: &[&str]) -> Output {
    let mut cmd = scripted_command(home, model);
    cmd.arg("chat")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let lines: Vec<String> = stdin.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let mut child = cmd.spawn().unwrap();
        let mut input = child.stdin.take().unwrap();
        for l in lines {
            writeln!(input, "{l}").unwrap();
        }
        drop(input);
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn session_of(out: &str) -> String {
    out.lines()
        .find_map(|l| l.split_once("session ").map(|(_, r)| r))
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no session id in {out}"))
        .to_string()
}

fn audit_records(home: &Path) -> Vec<Value> {
    std::fs::read_to_string(home.join("state/audit/log.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_answered_inline_runs_the_request_and_the_session_resumes() {
    let f = fixture();
    let (port, hits) = start_upstream();
    allow_with_ask(&f.home, port);
    let url = format!("http://127.0.0.1:{port}/status");
    let model = ScriptedModel::start([
        Step::tool_call("c1", "fetch", format!(r#"{{"url":"{url}"}}"#)),
        Step::text("All systems are normal."),
        // The second chat, resumed.
        Step::text("You asked about the status page earlier."),
    ])
    .await
    .unwrap();

    // The operator types the task, answers `d` (details) then `y`, then quits.
    let o = chat(
        &f.home,
        &model,
        &["--approval-timeout", "30"],
        &["Check the status page", "d", "y", "/quit"],
    )
    .await;
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("model> calls fetch"), "{out}");
    assert!(out.contains("approval needed (net.request)"), "{out}");
    assert!(out.contains(&format!("GET {url}")), "{out}");
    assert!(out.contains("why held: operator net rule"), "{out}");
    assert!(out.contains("payload (exact; this is what runs)"), "{out}");
    assert!(out.contains("approve? [y]es / [n]o / [d]etails:"), "{out}");
    assert!(out.contains("model> All systems are normal."), "{out}");
    // Held, approved inline, then run.
    assert!(out.contains("[fetch] allow, ran: HTTP 200"), "{out}");
    // Exactly the approved request reached the server, once.
    assert_eq!(*hits.lock().unwrap(), vec!["GET /status".to_string()]);
    let id = session_of(&out);
    assert!(
        out.contains(&format!("airlock chat --session {id}")),
        "{out}"
    );
    // The answer is in the store and the audit log, with who gave it and how.
    let recs = audit_records(&f.home);
    let granted = recs
        .iter()
        .find(|r| r["kind"] == "approval-granted")
        .unwrap_or_else(|| panic!("no approval-granted record"));
    assert_eq!(
        granted["detail"]["decided_by"]["via"], "terminal",
        "{granted}"
    );
    let approval_id = granted["detail"]["approval_id"].as_str().unwrap();
    let store = SqliteStore::open(f.home.join("state")).unwrap();
    assert_eq!(
        store.get_approval(approval_id).unwrap().status,
        ApprovalStatus::Approved
    );

    // Resume: the model sees the earlier conversation.
    let o = chat(
        &f.home,
        &model,
        &["--session", &id],
        &["What did I ask before?", "/quit"],
    )
    .await;
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains(&format!("resumed session {id}")), "{out}");
    assert!(
        out.contains("You asked about the status page earlier."),
        "{out}"
    );
    let last = model.requests().last().unwrap().json().unwrap().to_string();
    assert!(last.contains("Check the status page"), "{last}");
    assert!(last.contains("status page: all systems normal"), "{last}");

    let v = std::process::Command::new(airlock_bin())
        .env("AIRLOCK_HOME", &f.home)
        .args(["audit", "verify"])
        .output()
        .unwrap();
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_denied_inline_never_reaches_the_server() {
    let f = fixture();
    let (port, hits) = start_upstream();
    allow_with_ask(&f.home, port);
    let url = format!("http://127.0.0.1:{port}/status");
    let model = ScriptedModel::start([
        Step::tool_call("c1", "fetch", format!(r#"{{"url":"{url}"}}"#)),
        Step::text("I did not fetch it."),
    ])
    .await
    .unwrap();
    let o = chat(
        &f.home,
        &model,
        &["--approval-timeout", "30"],
        &["Check the status page", "n", "/quit"],
    )
    .await;
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("[fetch] deny, did not run (error)"), "{out}");
    assert!(
        hits.lock().unwrap().is_empty(),
        "the denied request was sent"
    );
    let recs = audit_records(&f.home);
    assert!(
        recs.iter()
            .any(|r| r["kind"] == "approval-denied"
                && r["detail"]["decided_by"]["via"] == "terminal"),
        "no approval-denied record"
    );
    // The model was told it was denied.
    let second = model.requests()[1].json().unwrap().to_string();
    assert!(second.contains("denied"), "{second}");
}

/// The model's text reaches the chat with every terminal control made visible: it cannot
/// erase the line it is on, retitle the terminal or reorder what the operator reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i6_model_text_in_chat_is_shown_escaped() {
    let f = fixture();
    let hostile =
        "Done.\u{1b}[2K\rAll clear \u{202e}fdp.exe\u{2066} \u{1b}]0;title\u{7} \u{9b}31m\u{200b}";
    let model = ScriptedModel::start([
        Step::tool_call("c1", "shell\u{1b}[2K", r#"{"command":"true"}"#),
        Step::text(hostile),
    ])
    .await
    .unwrap();
    let o = chat(&f.home, &model, &[], &["hello", "/quit"]).await;
    assert!(o.status.success(), "{}", text(&o));
    for stream in [&o.stdout, &o.stderr] {
        let s = String::from_utf8_lossy(stream);
        let raw = s.chars().find(|&c| {
            (c.is_control() && c != '\n')
                || ('\u{202a}'..='\u{202e}').contains(&c)
                || ('\u{2066}'..='\u{2069}').contains(&c)
                || ('\u{200b}'..='\u{200f}').contains(&c)
        });
        assert!(raw.is_none(), "raw {raw:?} reached the terminal:\n{s:?}");
    }
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("Done.\\u{1b}[2K\\rAll clear \\u{202e}fdp.exe\\u{2066} \\u{1b}]0;title\\u{7} \\u{9b}31m\\u{200b}"),
        "{}",
        text(&o)
    );
    // A tool name from the model is shown escaped too.
    assert!(out.contains("shell\\u{1b}[2K"), "{}", text(&o));
}
