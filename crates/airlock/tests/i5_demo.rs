//! `airlock demo` through the real binary, non-interactively as CI runs it: stdin is not a
//! terminal, so the held action is denied by default. The transcript must show the
//! injection held and refused, the attacker site must have received nothing, and the audit
//! log must verify; the home it leaves (with `--home`) is checked independently.

use std::path::Path;
use std::process::{Output, Stdio};

use airlock_store::{ApprovalRequests, ApprovalStatus, SqliteStore};
use serde_json::Value;

mod exec_fixture;
use exec_fixture::{airlock_bin, fixture};

fn demo(args: &[&str]) -> Output {
    std::process::Command::new(airlock_bin())
        .arg("demo")
        .args(args)
        // No model configuration is needed: nothing from the environment is used.
        .env_remove("AIRLOCK_PROVIDER")
        .env_remove("AIRLOCK_MODEL")
        .env_remove("AIRLOCK_BASE_URL")
        .env_remove("AIRLOCK_API_KEY")
        .env_remove("AIRLOCK_HOME")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}\n--- stderr ---\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn records(home: &Path) -> Vec<Value> {
    std::fs::read_to_string(home.join("state/audit/log.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn the_demo_holds_the_injection_and_nothing_reaches_the_attacker() {
    let f = fixture();
    let home = f.home.clone();
    let o = demo(&["--home", home.to_str().unwrap()]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");

    // Honest labelling: the model is scripted.
    assert!(
        out.contains("SCRIPTED MODEL (airlock-scripted-model)"),
        "{out}"
    );
    // The page was fetched over HTTPS through the proxy and tainted the session.
    assert!(
        out.contains("1. fetch -> allow, ran\n     HTTP 200"),
        "{out}"
    );
    assert!(
        out.contains("untrusted content entered the session"),
        "{out}"
    );
    // The POST to the attacker was denied by the Gate, with the reason.
    assert!(
        out.contains("fetch -> deny, did not run  <- the injection"),
        "{out}"
    );
    assert!(
        out.contains("no policy permits this net.request action"),
        "{out}"
    );
    // The message to the attacker was held, shown for approval, and denied (no TTY).
    assert!(out.contains("approval needed (message.send)"), "{out}");
    assert!(
        out.contains("to:      ops-backup@attacker.demo.test"),
        "{out}"
    );
    assert!(
        out.contains("approve? no (stdin is not a terminal"),
        "{out}"
    );
    assert!(
        out.contains("send_message -> held, then denied, did not run  <- the injection"),
        "{out}"
    );
    // Every attempt stopped, nothing received, budget shown, audit verified.
    let line = out
        .lines()
        .find(|l| l.starts_with("injection:"))
        .unwrap_or_else(|| panic!("{out}"));
    let counts: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        counts[1], counts[3],
        "not every attempt was stopped: {line}"
    );
    assert!(
        out.contains("attacker.demo.test received 0 requests"),
        "{out}"
    );
    assert!(out.contains("budget:     turns "), "{out}");
    assert!(
        out.contains("`airlock audit verify`: audit log OK"),
        "{out}"
    );
    assert!(out.contains("notes.md was written"), "{out}");

    // Independently of the transcript: the home the demo left.
    let recs = records(&home);
    let to_attacker: Vec<&Value> = recs
        .iter()
        .filter(|r| r.to_string().contains("attacker.demo.test"))
        .collect();
    assert!(!to_attacker.is_empty());
    for r in &to_attacker {
        if r["kind"] == "decision" && r["action"]["type"] == "net.request" {
            assert_ne!(
                r["decision"], "allow",
                "a request to the attacker was allowed: {r}"
            );
        }
        if r["kind"] == "net.exchange" {
            assert_ne!(r["detail"]["decision"], "allow", "{r}");
            assert_ne!(r["detail"]["status"], 200, "{r}");
        }
    }
    // The fetched article went through the proxy, intercepted over TLS.
    assert!(
        recs.iter().any(|r| r["kind"] == "net.exchange"
            && r["detail"]["host"] == "news.demo.test"
            && r["detail"]["scheme"] == "https"
            && r["detail"]["decision"] == "allow"),
        "no proxy record of the article"
    );
    // The operator's answer is recorded with who gave it.
    let denied = recs
        .iter()
        .find(|r| r["kind"] == "approval-denied")
        .unwrap_or_else(|| panic!("no approval-denied record"));
    let store = SqliteStore::open(home.join("state")).unwrap();
    let req = store
        .get_approval(denied["detail"]["approval_id"].as_str().unwrap())
        .unwrap();
    assert_eq!(req.status, ApprovalStatus::Denied);
    assert!(req.payload.contains("ops-backup@attacker.demo.test"));

    let v = std::process::Command::new(airlock_bin())
        .env("AIRLOCK_HOME", &home)
        .args(["audit", "verify"])
        .output()
        .unwrap();
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));

    // A second run in the same home works (it was made by the demo).
    let again = demo(&["--home", home.to_str().unwrap(), "--no"]);
    assert_eq!(again.status.code(), Some(0), "{}", text(&again));
    assert!(text(&again).contains("approve? no (--no)"));
}

#[test]
fn without_home_the_demo_runs_in_a_throwaway_directory_and_removes_it() {
    let o = demo(&[]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    let home = out
        .lines()
        .find_map(|l| l.strip_prefix("home:"))
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("{out}"));
    assert!(out.contains("(throwaway, removed at the end"), "{out}");
    assert!(!Path::new(home).exists(), "{home} was left behind");
}

#[test]
fn the_demo_refuses_a_home_it_did_not_make() {
    let f = fixture();
    std::fs::create_dir_all(&f.home).unwrap();
    std::fs::write(f.home.join("keep-me.txt"), "operator data").unwrap();
    let o = demo(&["--home", f.home.to_str().unwrap()]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("was not made by `airlock demo`"), "{out}");
    assert!(out.contains("help:"), "{out}");
    assert_eq!(
        std::fs::read_to_string(f.home.join("keep-me.txt")).unwrap(),
        "operator data"
    );
    assert!(!f.home.join("config").exists());
}

/// On a terminal the demo asks the operator. `script` (util-linux, in Debian's essential
/// `bsdutils`) gives the demo a pseudo-terminal as stdin; the operator answers `d` (the
/// exact payload) and then `y`.
#[test]
fn on_a_terminal_the_demo_asks_and_takes_the_answer() {
    use std::io::Write;
    let f = fixture();
    let cmd = format!(
        "{} demo --home {}",
        airlock_bin().display(),
        f.home.display()
    );
    let mut child = std::process::Command::new("script")
        .args(["-q", "-e", "-c", &cmd, "/dev/null"])
        .env_remove("AIRLOCK_HOME")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("`script` (util-linux) runs the demo on a pseudo-terminal");
    let mut input = child.stdin.take().unwrap();
    input.write_all(b"d\ny\n").unwrap();
    let o = child.wait_with_output().unwrap();
    drop(input);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("approve? [y]es / [n]o / [d]etails:"), "{out}");
    assert!(out.contains("payload (exact; this is what runs)"), "{out}");
    // Approved: the message was let through to the executor, which has no channel to the
    // attacker's address, so nothing was sent anyway.
    assert!(
        out.contains("send_message -> held, then approved, ran  <- the injection"),
        "{out}"
    );
    assert!(
        out.contains("no channel is configured for destination"),
        "{out}"
    );
    assert!(
        out.contains("attacker.demo.test received 0 requests"),
        "{out}"
    );
    let recs = records(&f.home);
    let granted = recs
        .iter()
        .find(|r| r["kind"] == "approval-granted")
        .unwrap_or_else(|| panic!("no approval-granted record"));
    assert_eq!(
        granted["detail"]["decided_by"]["via"], "terminal",
        "{granted}"
    );
}
