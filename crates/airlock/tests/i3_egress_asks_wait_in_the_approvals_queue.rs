//! I3 with I6: a request that an *ask* rule holds at `airlock exec`'s own proxy waits in
//! the store's approvals queue. The real binary runs curl in the real sandbox; the test
//! finds the request in the queue, answers it with `airlock approvals approve`, and curl
//! gets the upstream's answer. No answer within the approval timeout, or `airlock kill`,
//! refuses it. The upstream is plain HTTP on a loopback address the operator excepted.

mod i3_common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use airlock_store::{ApprovalPreview, ApprovalRequest, ApprovalRequests, ApprovalStatus};
use i3_common::*;

struct Env {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    ws: PathBuf,
    upstream: Upstream,
}

/// An operator home whose rules ask before any GET to the upstream, with approvals that
/// time out after `timeout_secs`.
fn env(timeout_secs: u64) -> Env {
    use std::os::unix::fs::PermissionsExt;
    let upstream = start_plain_upstream();
    let tmp = tempfile::Builder::new()
        .prefix("airlock-i3q-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    std::fs::set_permissions(&ws, std::fs::Permissions::from_mode(0o777)).unwrap();
    let home = tmp.path().join("home");
    let config = home.join("config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(
        config.join("airlock.toml"),
        format!("[agent]\napproval_timeout_secs = {timeout_secs}\n"),
    )
    .unwrap();
    let mut rules = airlock_proxy::NetRules::default();
    let mut r = rule("127.0.0.1", upstream.port, &["GET"]);
    r.ask = true;
    rules.add(r).unwrap();
    rules
        .allow_private
        .push(format!("127.0.0.1:{}", upstream.port).parse().unwrap());
    rules.save(&config).unwrap();
    let e = Env {
        _tmp: tmp,
        home,
        ws,
        upstream,
    };
    // Before any run the operator finds an empty queue.
    let first = e.airlock(&["approvals", "list"]);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert!(
        String::from_utf8_lossy(&first.stdout).contains("no approval requests are waiting"),
        "{}",
        String::from_utf8_lossy(&first.stdout)
    );
    e
}

impl Env {
    fn airlock(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_airlock"))
            .env("AIRLOCK_HOME", &self.home)
            .current_dir(&self.ws)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// `airlock exec -- curl <url>` in the background.
    fn exec_curl(&self, path: &str) -> Child {
        let url = format!("http://127.0.0.1:{}{path}", self.upstream.port);
        Command::new(env!("CARGO_BIN_EXE_airlock"))
            .env("AIRLOCK_HOME", &self.home)
            .current_dir(&self.ws)
            .args([
                "exec",
                "--",
                &format!("curl -sS --max-time 60 -w '\\nHTTP %{{http_code}}\\n' {url}"),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// `airlock approvals approve ID --hash HASH`, which must succeed.
    fn approve(&self, req: &ApprovalRequest) {
        let ok = self.airlock(&["approvals", "approve", &req.id, "--hash", &req.payload_hash]);
        assert!(
            ok.status.success(),
            "{}",
            String::from_utf8_lossy(&ok.stderr)
        );
    }

    fn store(&self) -> airlock_store::SqliteStore {
        airlock_store::SqliteStore::open(self.home.join("state")).unwrap()
    }

    /// The one pending request as the operator finds it (`airlock approvals list`, then
    /// the store's record of that id), waiting for it to appear (bounded). Fails early if
    /// the run ends without asking.
    fn pending(&self, child: &mut Child) -> ApprovalRequest {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                let (mut out, mut err) = (String::new(), String::new());
                use std::io::Read;
                child
                    .stdout
                    .take()
                    .unwrap()
                    .read_to_string(&mut out)
                    .unwrap();
                child
                    .stderr
                    .take()
                    .unwrap()
                    .read_to_string(&mut err)
                    .unwrap();
                panic!("exec ended ({status}) before asking:\n{out}\n{err}");
            }
            let list = self.airlock(&["approvals", "list"]);
            let text = String::from_utf8_lossy(&list.stdout).into_owned();
            if let Some(id) = text
                .lines()
                .nth(1)
                .and_then(|l| l.split_whitespace().next())
            {
                assert!(
                    text.contains(&format!("GET http://127.0.0.1:{}/", self.upstream.port)),
                    "{text}"
                );
                return self.store().get_approval(id).unwrap();
            }
            assert!(Instant::now() < deadline, "no approval request appeared");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn audit(&self) -> Vec<serde_json::Value> {
        let text =
            std::fs::read_to_string(self.home.join("state/audit").join(airlock_audit::LOG_FILE))
                .unwrap();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

fn finish(child: Child) -> (Option<i32>, String, String) {
    let o = child.wait_with_output().unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn assert_verifies(home: &Path) {
    let v = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .env("AIRLOCK_HOME", home)
        .args(["audit", "verify"])
        .output()
        .unwrap();
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stdout));
}

#[test]
fn an_approved_request_goes_through_and_the_record_names_who_decided() {
    let e = env(60);
    let mut child = e.exec_curl("/approved");
    let req = e.pending(&mut child);
    let url = format!("http://127.0.0.1:{}/approved", e.upstream.port);
    assert_eq!(req.action_kind, "net.request");
    let ApprovalPreview::Http {
        method,
        url: shown,
        body_preview,
        headers,
    } = &req.preview
    else {
        panic!("not an HTTP preview: {:?}", req.preview);
    };
    assert_eq!(
        (method.as_str(), shown, body_preview),
        ("GET", &url, &None),
        "{:?}",
        req.preview
    );
    // The approver sees the header values that would leave, not only their names.
    assert!(
        headers
            .iter()
            .any(|(n, v)| n == "user-agent" && v.starts_with("curl/")),
        "{headers:?}"
    );
    assert!(req.payload.contains(&url), "{}", req.payload);
    assert!(
        req.payload_hash.starts_with("sha256:"),
        "{}",
        req.payload_hash
    );
    assert!(!req.reasons.is_empty());
    let ttl = req.expires_at.as_unix_ms() - req.created_at.as_unix_ms();
    assert!(
        (59_000..=61_000).contains(&ttl),
        "expiry {ttl} ms after creation"
    );
    // Held: nothing reached the upstream while the request waits.
    std::thread::sleep(Duration::from_millis(500));
    assert!(e.upstream.seen().is_empty(), "{:?}", e.upstream.seen());
    // The operator sees it and approves it.
    let list = e.airlock(&["approvals", "list"]);
    let listed = String::from_utf8_lossy(&list.stdout);
    assert!(
        listed.contains(&req.id) && listed.contains(&format!("GET {url}")),
        "{listed}"
    );
    e.approve(&req);
    let (code, out, err) = finish(child);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(
        out.contains(&format!(
            "hello from 127.0.0.1:{} GET /approved",
            e.upstream.port
        )),
        "{out}\n{err}"
    );
    assert!(out.contains("HTTP 200"), "{out}");
    let stored = e.store().get_approval(&req.id).unwrap();
    assert_eq!(stored.status, ApprovalStatus::Approved);
    assert_eq!(stored.decided_by.as_deref(), Some("owner"));
    let recs = e.audit();
    let kinds: Vec<&str> = recs.iter().filter_map(|r| r["kind"].as_str()).collect();
    for kind in [
        "approval_requested",
        "approval-granted",
        "approval_outcome",
        "net.exchange",
    ] {
        assert!(kinds.contains(&kind), "no {kind} record: {kinds:?}");
    }
    let outcome = recs
        .iter()
        .find(|r| r["kind"] == "approval_outcome")
        .unwrap();
    assert_eq!(outcome["detail"]["decided_by"], "owner", "{outcome}");
    assert_eq!(outcome["detail"]["outcome"], "released", "{outcome}");
    let ex = recs
        .iter()
        .find(|r| r["kind"] == "net.exchange" && r["detail"]["path"] == "/approved")
        .unwrap();
    assert_eq!(ex["detail"]["decision"], "ask-approved", "{ex}");
    assert_verifies(&e.home);
}

/// A rule-scoped grant made on a proxy's ask lets a later run's request of the same shape
/// (method, host, port, directory) through without asking; another directory still asks.
#[test]
fn a_rule_scoped_grant_answers_later_proxy_asks_of_the_same_shape() {
    let e = env(60);
    let mut child = e.exec_curl("/v1/first");
    let req = e.pending(&mut child);
    let ok = e.airlock(&[
        "approvals",
        "approve",
        &req.id,
        "--hash",
        &req.payload_hash,
        "--for",
        "10m",
        "--scope",
        "rule",
    ]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let (code, out, err) = finish(child);
    assert_eq!(code, Some(0), "{out}\n{err}");
    // Another run (another session), same directory: answered by the grant.
    let (code, out, err) = finish(e.exec_curl("/v1/second"));
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(
        out.contains("GET /v1/second") && out.contains("HTTP 200"),
        "{out}\n{err}"
    );
    let asked = e
        .audit()
        .into_iter()
        .filter(|r| r["kind"] == "approval_requested")
        .count();
    assert_eq!(asked, 1, "only the first request was queued");
    // Another directory is another shape: it is held again.
    let mut other = e.exec_curl("/v2/third");
    let held = e.pending(&mut other);
    assert!(held.payload.contains("/v2/third"), "{}", held.payload);
    let _ = other.kill();
    let _ = other.wait();
    assert_verifies(&e.home);
}

#[test]
fn no_answer_within_the_timeout_denies_with_a_403_naming_it() {
    let e = env(2);
    let mut child = e.exec_curl("/never");
    let req = e.pending(&mut child);
    let (code, out, err) = finish(child);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains("HTTP 403"), "{out}\n{err}");
    assert!(out.contains("no approval arrived within 2 s"), "{out}");
    assert!(e.upstream.seen().is_empty(), "{:?}", e.upstream.seen());
    // The queue entry does not linger as pending: airlock denied it for the timeout.
    let stored = e.store().get_approval(&req.id).unwrap();
    assert!(
        matches!(
            stored.status,
            ApprovalStatus::Denied | ApprovalStatus::Expired
        ),
        "{stored:?}"
    );
    let late = e.airlock(&["approvals", "approve", &req.id]);
    assert!(!late.status.success(), "a timed-out request was approved");
    let recs = e.audit();
    let outcome = recs
        .iter()
        .find(|r| r["kind"] == "approval_outcome")
        .unwrap_or_else(|| panic!("{recs:#?}"));
    assert_eq!(outcome["detail"]["decided_by"], "airlock", "{outcome}");
    assert_eq!(
        outcome["detail"]["outcome"], "refused: timed out",
        "{outcome}"
    );
    let ex = recs
        .iter()
        .find(|r| r["kind"] == "net.exchange" && r["detail"]["path"] == "/never")
        .unwrap();
    assert_eq!(ex["detail"]["decision"], "ask-timeout", "{ex}");
    assert_verifies(&e.home);
}

#[test]
fn a_denial_and_a_kill_each_refuse_the_held_request() {
    let e = env(60);
    let mut child = e.exec_curl("/denied");
    let req = e.pending(&mut child);
    let no = e.airlock(&["approvals", "deny", &req.id, "--reason", "not today"]);
    assert!(
        no.status.success(),
        "{}",
        String::from_utf8_lossy(&no.stderr)
    );
    let (code, out, err) = finish(child);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains("HTTP 403") && out.contains("refused"), "{out}");

    // `airlock kill` of the session cancels its pending request and ends the run.
    let mut child = e.exec_curl("/killed");
    let req = e.pending(&mut child);
    let started = Instant::now();
    let k = e.airlock(&["kill", &req.session_id]);
    assert!(k.status.success(), "{}", String::from_utf8_lossy(&k.stderr));
    let (code, out, err) = finish(child);
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(code, Some(137), "{out}\n{err}");
    let stored = e.store().get_approval(&req.id).unwrap();
    assert_eq!(stored.status, ApprovalStatus::Cancelled, "{stored:?}");
    assert!(e.upstream.seen().is_empty(), "{:?}", e.upstream.seen());
    assert_verifies(&e.home);
}

/// An approval releases a held request; it does not override a forbid the operator added
/// while the request waited. The request is decided again with the policy in force when
/// the approval arrives: refused with a 403 that says so, and nothing reaches the upstream.
#[test]
fn an_approval_does_not_override_a_forbid_added_while_the_request_waited() {
    use std::os::unix::fs::PermissionsExt;
    let e = env(60);
    let mut child = e.exec_curl("/tightened");
    let req = e.pending(&mut child);
    let local = e.home.join("config/policy/local");
    std::fs::create_dir_all(&local).unwrap();
    std::fs::set_permissions(&local, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(
        local.join("no-upstream.cedar"),
        "@id(\"local.no-upstream\")\n@reason(\"the upstream is off limits now\")\n@help(\"remove config/policy/local/no-upstream.cedar\")\nforbid (principal, action == Airlock::Action::\"net.request\", resource);\n",
    )
    .unwrap();
    e.approve(&req);
    let (code, out, err) = finish(child);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains("HTTP 403"), "{out}\n{err}");
    assert!(out.contains("the policy now forbids it"), "{out}");
    assert!(e.upstream.seen().is_empty(), "{:?}", e.upstream.seen());
    let recs = e.audit();
    let ex = recs
        .iter()
        .find(|r| r["kind"] == "net.exchange" && r["detail"]["path"] == "/tightened")
        .unwrap_or_else(|| panic!("{recs:#?}"));
    assert_eq!(ex["detail"]["decision"], "ask-refused", "{ex}");
    assert_verifies(&e.home);
}
