//! Chats that live in the host: a session outlives its client, is attached again with
//! `--session`, one client at a time; a client that leaves in the middle of an ask leaves
//! the request waiting for another client, whose answer releases the call; what the
//! session said meanwhile is shown to the next client; `airlock kill` ends a live session.

use std::io::{Read, Write};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use airlock_agent::scripted::{ScriptedModel, Step};

use super::super::exec_fixture::{airlock, fixture, scripted_command, Fixture};
use super::super::host_fixture::Host;
use super::super::{audit_records, verify};
use super::{init, pending_approvals, status, wait_for};

/// A chat client with piped streams, whose output is collected as it comes.
pub(super) struct ChatClient {
    child: Child,
    stdin: Option<std::process::ChildStdin>,
    out: Arc<Mutex<String>>,
    err: Arc<Mutex<String>>,
}

fn collect(mut from: impl Read + Send + 'static) -> Arc<Mutex<String>> {
    let text = Arc::new(Mutex::new(String::new()));
    let to = text.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 {
                break;
            }
            to.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    text
}

impl ChatClient {
    pub(super) fn start(f: &Fixture, model: &ScriptedModel, args: &[&str]) -> ChatClient {
        let mut cmd = scripted_command(&f.home, model);
        cmd.current_dir(&f.ws)
            .arg("chat")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take();
        let out = collect(child.stdout.take().unwrap());
        let err = collect(child.stderr.take().unwrap());
        ChatClient {
            child,
            stdin,
            out,
            err,
        }
    }

    pub(super) fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(format!("{line}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    pub(super) fn out(&self) -> String {
        self.out.lock().unwrap().clone()
    }

    pub(super) fn wait_for_out(&self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.out().contains(text) {
            assert!(
                Instant::now() < deadline,
                "the chat never said {text:?}; it said:\n{}\nstderr:\n{}",
                self.out(),
                self.err.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Close its input and wait for it: its exit status, stdout and stderr.
    pub(super) fn finish(mut self) -> (Option<i32>, String, String) {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        // The readers end with the pipes.
        std::thread::sleep(Duration::from_millis(100));
        let out = self.out();
        let err = self.err.lock().unwrap().clone();
        (status.code(), out, err)
    }

    /// Say `/quit` and wait for the client to leave, which it must do with status 0: what
    /// it printed.
    pub(super) async fn quit(mut self) -> String {
        self.send("/quit");
        let (code, out, err) = tokio::task::spawn_blocking(move || self.finish())
            .await
            .unwrap();
        assert_eq!(code, Some(0), "{out}\n{err}");
        out
    }
}

/// The session id a chat's greeting names.
pub(super) fn session_in(greeting: &str) -> String {
    let after = greeting
        .split("session ")
        .nth(1)
        .unwrap_or_else(|| panic!("no session in {greeting:?}"));
    after.split_whitespace().next().unwrap().to_string()
}

pub(super) fn live(f: &Fixture) -> serde_json::Value {
    status(f)["host"]["live_sessions"].clone()
}

/// A chat through the host goes on after its client leaves: the next `chat --session`
/// attaches to the same live session (the model sees the whole conversation), a second
/// client is refused while one is attached, and `airlock kill` ends the live session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_in_the_host_outlives_its_client_and_is_attached_again() {
    let f = fixture();
    init(&f, "");
    let host = Host::start(&f.home);
    let model = ScriptedModel::start([Step::text("First answer."), Step::text("Second answer.")])
        .await
        .unwrap();
    let mut first = ChatClient::start(&f, &model, &[]);
    first.send("remember the word heron");
    first.wait_for_out("First answer.");
    let out = first.quit().await;
    let id = session_in(&out);
    assert!(
        out.contains(&format!("detached: session {id} goes on in the host")),
        "{out}"
    );
    let l = live(&f);
    assert_eq!(l[0]["id"], id.as_str(), "{l}");
    assert_eq!(l[0]["attached"], false, "{l}");

    // Attached again: the same session, and the model is sent the turn before.
    let mut second = ChatClient::start(&f, &model, &["--session", &id]);
    second.wait_for_out(&format!("attached to session {id}"));
    wait_for("the second client to be attached", || {
        live(&f)[0]["attached"] == true
    });
    // One client at a time: a third is refused, naming the session, and leaves the
    // attached one alone.
    let third = ChatClient::start(&f, &model, &["--session", &id]);
    let (code, out3, err3) = tokio::task::spawn_blocking(move || third.finish())
        .await
        .unwrap();
    assert_eq!(code, Some(1), "{out3}\n{err3}");
    assert!(
        err3.contains(&format!("session {id} is attached to another client")),
        "{err3}"
    );
    // Nor does `airlock run` get a turn of it beside the chat's.
    let run = airlock(&f.home, &["run", "--session", &id, "what was the word?"]);
    assert!(!run.status.success(), "{run:?}");
    let said = String::from_utf8_lossy(&run.stderr);
    assert!(
        said.contains(&format!("session {id} is live in the host as a chat"))
            && said.contains("airlock chat --session"),
        "{said}"
    );
    second.send("what was the word?");
    second.wait_for_out("Second answer.");
    let requests = model.requests();
    let last = requests.last().unwrap().json().unwrap().to_string();
    assert!(last.contains("remember the word heron"), "{last}");
    assert!(last.contains("First answer."), "{last}");
    assert!(last.contains("what was the word?"), "{last}");
    assert_eq!(requests.len(), 2);

    // Killed from another client: the attached one is told and let go with the kill's
    // status, and the session no longer lives in the host.
    let o = airlock(&f.home, &["kill", &id]);
    assert!(o.status.success(), "{o:?}");
    let (code, out, _) = tokio::task::spawn_blocking(move || second.finish())
        .await
        .unwrap();
    assert_eq!(code, Some(137), "{out}");
    assert!(out.contains(&format!("session {id} was killed")), "{out}");
    wait_for("the killed session to be closed", || {
        live(&f) == serde_json::json!([])
    });
    assert_eq!(status(&f)["host"]["sessions_running"], 0);
    drop(host);
    assert!(verify(&f.home).status.success());
}

/// A client that goes away while its chat's turn waits on an ask does not deny it: the
/// request stays in the queue, the turn goes on in the host, an approval from another
/// client releases the held call at once, and the next client to attach is shown what the
/// session said while nobody was attached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_mid_ask_leaves_the_request_to_another_client() {
    let f = fixture();
    init(&f, "");
    std::fs::write(
        f.ws.join("page.html"),
        "<p>Send the minutes to bob@example.com.</p>",
    )
    .unwrap();
    let host = Host::start(&f.home);
    let model = ScriptedModel::start([
        Step::tool_call("c1", "read_file", r#"{"path":"page.html"}"#),
        Step::tool_call(
            "c2",
            "send_message",
            r#"{"destination":"bob@example.com","text":"the minutes"}"#,
        ),
        Step::text("Sent the minutes while you were away."),
    ])
    .await
    .unwrap();
    let ws = f.ws.display().to_string();
    let mut client = ChatClient::start(
        &f,
        &model,
        &["--workspace", &ws, "--approval-timeout", "300"],
    );
    client.send("Read page.html and do what it says");
    client.wait_for_out("approve? [y]es / [n]o / [d]etails: ");
    let id = session_in(&client.out());
    let held = {
        let pending = pending_approvals(&f.home);
        assert_eq!(pending.len(), 1, "{pending:?}");
        assert_eq!(pending[0].action_kind, "message.send");
        pending[0].id.clone()
    };
    // The client goes away (as a closed terminal would take it) without answering.
    let _ = client.child.kill();
    let _ = client.child.wait();
    wait_for("the host to see the client go", || {
        live(&f)[0]["attached"] == false
    });
    // Still pending, not denied, and the turn still running in the host.
    std::thread::sleep(Duration::from_millis(500));
    let pending = pending_approvals(&f.home);
    assert_eq!(pending.len(), 1, "the request did not wait: {pending:?}");
    assert_eq!(live(&f)[0]["busy"], true, "{}", live(&f));
    // Another client answers; the call is released without waiting out a poll.
    let answered = Instant::now();
    let o = airlock(&f.home, &["approvals", "approve", &held]);
    assert!(o.status.success(), "{o:?}");
    wait_for("the turn to finish in the host", || {
        live(&f)[0]["busy"] == false
    });
    assert!(
        answered.elapsed() < Duration::from_secs(30),
        "{:?}",
        answered.elapsed()
    );
    let records = audit_records(&f.home);
    assert!(
        records.iter().any(|r| r["kind"] == "approval-granted"
            && r["detail"]["approval_id"] == held.as_str()),
        "no approval-granted record for {held}"
    );
    assert!(
        !records.iter().any(|r| r["kind"] == "approval-denied"),
        "the client that left denied the request"
    );
    // The next client to attach sees the end of the turn it missed.
    let back = ChatClient::start(&f, &model, &["--session", &id]);
    back.wait_for_out("Sent the minutes while you were away.");
    back.wait_for_out(&format!("held for approval {held}"));
    let (code, out, err) = tokio::task::spawn_blocking(move || back.finish())
        .await
        .unwrap();
    assert_eq!(code, Some(0), "{out}\n{err}");
    drop(host);
    assert!(verify(&f.home).status.success());
}

/// SIGTERM of a host with a chat attached: the client is told the session is kept and how
/// to continue it, and let go; the host stops (it does not wait out its grace for the
/// idle session), records its stop, and the session continues embedded from the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_host_lets_its_chat_clients_go_and_keeps_their_sessions() {
    let f = fixture();
    init(&f, "");
    let mut host = Host::start(&f.home);
    let model = ScriptedModel::start([Step::text("Before the stop."), Step::text("After it.")])
        .await
        .unwrap();
    let mut client = ChatClient::start(&f, &model, &[]);
    client.send("hello");
    client.wait_for_out("Before the stop.");
    let id = session_in(&client.out());
    let stopped_at = Instant::now();
    host.signal(nix::sys::signal::Signal::SIGTERM);
    let (code, out, err) = tokio::task::spawn_blocking(move || {
        // The client is let go with its input still open.
        let status = client.child.wait().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let out = client.out();
        let err = client.err.lock().unwrap().clone();
        (status.code(), out, err)
    })
    .await
    .unwrap();
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(
        out.contains(&format!(
            "the host is stopping; session {id} is kept: continue it with `airlock chat --session {id}`"
        )),
        "{out}"
    );
    assert!(host.wait().success(), "{}", host.log_text());
    assert!(
        stopped_at.elapsed() < Duration::from_secs(20),
        "the host waited out its grace: {:?}",
        stopped_at.elapsed()
    );
    assert!(audit_records(&f.home)
        .iter()
        .any(|r| r["kind"] == "host-stop"));
    // Without the host, the same session goes on embedded.
    let mut again = ChatClient::start(&f, &model, &["--session", &id]);
    again.send("and now?");
    again.wait_for_out("After it.");
    let (code, out, _) = tokio::task::spawn_blocking(move || again.finish())
        .await
        .unwrap();
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains(&format!("resumed session {id}")), "{out}");
    assert!(verify(&f.home).status.success());
}

/// A live session waiting for its person holds nothing open in the host: twenty detached
/// chats leave the host with the descriptors and threads it had before them (a session is
/// opened only while a turn runs), and each is still listed and still attachable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_live_sessions_hold_no_descriptors_or_threads_in_the_host() {
    let f = fixture();
    init(&f, "\n[host]\nmax_sessions = 32\n");
    let host = Host::start(&f.home);
    let model = ScriptedModel::start([Step::text("One turn."), Step::text("Back again.")])
        .await
        .unwrap();
    // One chat with a turn first, so whatever a turn opens once (its first connections,
    // the runtime's threads) is counted before.
    let mut first = ChatClient::start(&f, &model, &[]);
    first.send("hello");
    first.wait_for_out("One turn.");
    let (code, out, _) = tokio::task::spawn_blocking(move || first.finish())
        .await
        .unwrap();
    assert_eq!(code, Some(0), "{out}");
    let id = session_in(&out);
    let pid = host.child.id();
    let before = tokio::task::spawn_blocking(move || super::descriptors_and_threads(pid))
        .await
        .unwrap();
    for _ in 0..20 {
        let c = ChatClient::start(&f, &model, &[]);
        let (code, out, err) = tokio::task::spawn_blocking(move || c.finish())
            .await
            .unwrap();
        assert_eq!(code, Some(0), "{out}\n{err}");
    }
    assert_eq!(live(&f).as_array().map(Vec::len), Some(21), "{}", live(&f));
    let after = tokio::task::spawn_blocking(move || super::descriptors_and_threads(pid))
        .await
        .unwrap();
    assert_eq!(
        after, before,
        "(descriptors, threads) before and after 20 idle chats"
    );
    // Asleep is not gone: the first one takes its next turn with its history.
    let mut back = ChatClient::start(&f, &model, &["--session", &id]);
    back.send("again");
    back.wait_for_out("Back again.");
    let last = model.requests().last().unwrap().json().unwrap().to_string();
    assert!(last.contains("One turn."), "{last}");
    let (code, out, _) = tokio::task::spawn_blocking(move || back.finish())
        .await
        .unwrap();
    assert_eq!(code, Some(0), "{out}");
}

/// A chat session that lives in the host starts a sub-agent there: the child is a session
/// under it in the store, its records name `agent:<child>;parent=<session>`, its answer
/// reaches the parent's model, and the log verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i7_a_chat_in_the_host_runs_its_sub_agent_under_it() {
    let f = fixture();
    init(&f, "");
    let host = Host::start(&f.home);
    let model = ScriptedModel::start([
        Step::tool_call(
            "p1",
            "spawn_agent",
            r#"{"name":"h","instructions":"[host-child] look around","tools":["list_dir"]}"#,
        ),
        Step::tool_call("p2", "wait_agent", r#"{"id":"h"}"#),
        Step::text("The helper is done."),
    ])
    .await
    .unwrap();
    model.route(
        "[host-child]",
        [
            Step::tool_call("c1", "list_dir", r#"{"path":"."}"#),
            Step::text("helper looked"),
        ],
    );
    let mut client = ChatClient::start(&f, &model, &[]);
    client.send("split the job");
    client.wait_for_out("The helper is done.");
    let out = client.quit().await;
    let id = session_in(&out);
    // The child's answer was sent back to the parent's model (its last request: the
    // parent asked again only after the wait returned).
    let sent = model.requests().last().unwrap().json().unwrap().to_string();
    assert!(sent.contains("helper looked"), "{sent}");

    let store = airlock_store::SqliteStore::open(f.home.join("state")).unwrap();
    use airlock_store::SessionStore;
    let family = store.descendants(&id).unwrap();
    assert_eq!(family.len(), 1, "{family:?}");
    let expected = format!("agent:{};parent={id}", family[0]);
    let recs = audit_records(&f.home);
    let mine: Vec<_> = recs.iter().filter(|r| r["session"] == family[0]).collect();
    assert!(mine.iter().any(|r| r["kind"] == "decision"), "{mine:?}");
    for r in &mine {
        assert_eq!(r["principal"], expected.as_str(), "{r}");
    }
    drop(host);
    verify(&f.home);
}

/// A chat's turns in the host append through the host's one audit writer: every decision,
/// execution and turn record is there, the chain verifies, and no turn signs a checkpoint
/// of its own (each turn wakes the session, so a turn with logs of its own would sign
/// at least one as it went back to sleep).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i1_a_chats_turns_in_the_host_append_through_the_hosts_one_writer() {
    const TURNS: usize = 4;
    let f = fixture();
    init(&f, "");
    std::fs::write(f.ws.join("notes.txt"), "alpha\n").unwrap();
    let mut host = Host::start(&f.home);
    let mut steps = Vec::new();
    for i in 0..TURNS {
        steps.push(Step::tool_call(
            format!("r{i}"),
            "read_file",
            r#"{"path":"notes.txt"}"#,
        ));
        steps.push(Step::tool_call(
            format!("s{i}"),
            "shell",
            format!(r#"{{"command":"echo turn-{i}"}}"#),
        ));
        steps.push(Step::text(format!("Turn {i} done.")));
    }
    let model = ScriptedModel::start(steps).await.unwrap();
    let (before, signed) = (
        audit_records(&f.home).len(),
        super::audit_writer::checkpoints(&f.home),
    );
    let ws = f.ws.display().to_string();
    let mut client = ChatClient::start(&f, &model, &["--workspace", &ws]);
    for i in 0..TURNS {
        client.send(&format!("turn {i}: read notes.txt and echo"));
        client.wait_for_out(&format!("Turn {i} done."));
    }
    let out = client.quit().await;
    let id = session_in(&out);
    // The shell ran each time: its output went back to the model.
    let sent = model.requests().last().unwrap().json().unwrap().to_string();
    assert!(sent.contains(&format!("turn-{}", TURNS - 1)), "{sent}");

    let records = audit_records(&f.home);
    let mine: Vec<_> = records[before..]
        .iter()
        .filter(|r| r["session"] == id.as_str())
        .collect();
    let count = |kind: &str| mine.iter().filter(|r| r["kind"] == kind).count();
    assert!(count("decision") >= 2 * TURNS, "{mine:?}");
    assert!(count("execution") >= 2 * TURNS, "{mine:?}");
    assert_eq!(count("turn_end"), TURNS, "{mine:?}");
    // `checkpoint_every` (256) is not reached: the host's writer signed nothing yet.
    let new_checkpoints = super::audit_writer::checkpoints(&f.home) - signed;
    assert_eq!(
        new_checkpoints,
        0,
        "{new_checkpoints} checkpoints for {TURNS} turns ({} records)",
        records.len() - before
    );
    // At the stop the host's writer signs once, over everything.
    host.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(host.wait().success(), "{}", host.log_text());
    assert_eq!(
        super::audit_writer::checkpoints(&f.home) - signed,
        1,
        "{}",
        host.log_text()
    );
    let v = verify(&f.home);
    let said = String::from_utf8_lossy(&v.stdout);
    assert!(v.status.success(), "{v:?}");
    assert!(said.contains(" 0 unsigned tail records"), "{said}");
}
