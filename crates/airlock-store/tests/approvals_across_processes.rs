//! The approvals queue shared by real processes, as `airlock exec` uses it: the run keeps
//! two long-lived connections open (its session and its proxy's approval hook), queues a
//! request and polls it, while short-lived `airlock approvals list|approve` processes
//! open, answer and close. Each side must see the other's commits.
//!
//! This breaks if anything in the long-lived process opens and closes its own descriptor
//! of the database file (a header check before `sqlite3_open`, say): closing any
//! descriptor of a file drops every POSIX lock the process holds on it, including the
//! shared lock SQLite keeps for each open WAL connection. The next short-lived process to
//! close then believes it is the last user, checkpoints and deletes the WAL and its index
//! under the live connections, which go on writing to and reading from the orphaned files:
//! their new requests never reach the queue, and they never see the approval.

mod common;

use std::process::Command;

use airlock_store::*;
use common::*;

const ENV: &str = "AIRLOCK_STORE_TEST_QUEUE_CHILD";
const TEST: &str = "a_long_lived_run_and_short_lived_operator_processes_see_each_other";

/// The child's half: one operator command on the store in `dir`, then close.
fn operator_command() {
    let spec = std::env::var(ENV).expect("started by the parent test");
    let mut parts = spec.split('\n');
    let (dir, cmd) = (parts.next().unwrap(), parts.next().unwrap());
    let store = open(std::path::Path::new(dir));
    match cmd {
        "list" => {
            for r in store.pending_approvals(at(1)).unwrap().items {
                println!("PENDING={}", r.id);
            }
        }
        "approve" => {
            let (id, hash) = (parts.next().unwrap(), parts.next().unwrap());
            let req = ApproveRequest {
                approver: "owner",
                payload_hash: hash,
                grant: None,
            };
            store.approve(id, &req, at(2)).unwrap();
            println!("APPROVED={id}");
        }
        other => panic!("unknown child command {other:?}"),
    }
}

/// Run one operator command in a fresh process; its stdout.
fn operator(dir: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env(ENV, format!("{}\n{}", dir.display(), args.join("\n")))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "operator process failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn pending_ids(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        // The harness prints its own words before the first line of the test's output.
        .filter_map(|l| l.split_once("PENDING="))
        .map(|(_, id)| id.trim().to_string())
        .collect()
}

#[test]
fn a_long_lived_run_and_short_lived_operator_processes_see_each_other() {
    if std::env::var_os(ENV).is_some() {
        return operator_command();
    }
    let dir = tempfile::tempdir().unwrap();
    // The run: its session store, then its approval hook's store, both kept open.
    let run = open(dir.path());
    let session = run
        .create_session(&NewSession::owner(), T0)
        .unwrap()
        .id()
        .to_string();
    let hook = open(dir.path());
    let first_action = exec("curl http://127.0.0.1:9/first");
    let first = hook
        .create_approval(
            &new_approval(&session, &first_action, at(300)),
            &ApprovalLimits::default(),
            T0,
        )
        .unwrap();

    // The operator lists the queue: the run's request is there.
    let listed = operator(dir.path(), &["list"]);
    assert_eq!(pending_ids(&listed), vec![first.id.clone()], "{listed}");
    // The run goes on writing after that process closed: its next request is queued too.
    let second_action = exec("curl http://127.0.0.1:9/second");
    let second = hook
        .create_approval(
            &new_approval(&session, &second_action, at(300)),
            &ApprovalLimits::default(),
            T0,
        )
        .unwrap();
    let listed = operator(dir.path(), &["list"]);
    // Both were created at the same instant `T0`: the listing's order between them is
    // not defined, so compare as sets.
    let mut expected = vec![first.id.clone(), second.id.clone()];
    expected.sort();
    let mut got = pending_ids(&listed);
    got.sort();
    assert_eq!(
        got, expected,
        "a request the run queued never reached the database the operator reads: {listed}"
    );

    // The operator approves the first; both of the run's connections see it.
    let out = operator(dir.path(), &["approve", &first.id, &first.payload_hash]);
    assert!(out.contains(&format!("APPROVED={}", first.id)), "{out}");
    for (name, store) in [("hook", &hook), ("session", &run)] {
        let seen = store.get_approval(&first.id).unwrap();
        assert_eq!(
            seen.status,
            ApprovalStatus::Approved,
            "the {name} connection still reads {seen:?}"
        );
        assert_eq!(seen.decided_by.as_deref(), Some("owner"));
        assert_eq!(
            store.get_approval(&second.id).unwrap().status,
            ApprovalStatus::Pending
        );
    }
}
