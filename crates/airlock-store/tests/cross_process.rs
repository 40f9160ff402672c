//! Several real processes on one database file: budget charges from all of them together
//! never pass the limit (SQLite's file locks serialize the `BEGIN IMMEDIATE` charges).

mod common;

use std::process::Command;

use airlock_store::*;
use common::*;

const LIMIT: u64 = 60;
const ENV: &str = "AIRLOCK_STORE_TEST_CHILD";

fn limits() -> BudgetLimits {
    BudgetLimits {
        per_session: Limits {
            tool_calls: Some(LIMIT),
            ..Limits::default()
        },
        per_day: Limits::default(),
    }
}

/// Run only as a child of `charges_from_several_processes_never_overshoot`: charges until
/// the budget is exhausted and prints how many charges succeeded.
fn child_charges_until_exhausted() {
    let spec = std::env::var(ENV).expect("started by the parent test");
    let (dir, id) = spec.split_once('\n').expect("dir and session id");
    let dir = std::path::Path::new(dir);
    let store = open(dir);
    // Start together, so the processes really contend for the write lock.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !dir.join("go").exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let one = Usage {
        tool_calls: 1,
        ..Usage::default()
    };
    let mut ok = 0u64;
    loop {
        match store.charge(id, &one, &limits(), T0) {
            Ok(_) => ok += 1,
            Err(ChargeError::Exhausted(_)) => break,
            Err(e) => panic!("store error under contention: {e}"),
        }
    }
    println!("CHARGED={ok}");
}

#[test]
fn charges_from_several_processes_never_overshoot() {
    // Re-run of this same test in a child process: do the child's half only.
    if std::env::var_os(ENV).is_some() {
        return child_charges_until_exhausted();
    }
    let dir = tempfile::tempdir().unwrap();
    let id = open(dir.path())
        .create_session(&NewSession::owner(), T0)
        .unwrap()
        .id()
        .to_string();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..4)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "charges_from_several_processes_never_overshoot",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(ENV, format!("{}\n{id}", dir.path().display()))
                .output_async()
        })
        .collect();
    std::fs::write(dir.path().join("go"), b"").unwrap();
    let mut total = 0u64;
    let mut counts = Vec::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "child failed: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let n: u64 = stdout
            .lines()
            .find_map(|l| l.split_once("CHARGED=").map(|(_, n)| n.trim()))
            .unwrap_or_else(|| panic!("child printed no count: {stdout}"))
            .parse()
            .unwrap();
        counts.push(n);
        total += n;
    }
    println!("charges per process: {counts:?}");
    assert_eq!(total, LIMIT);
    assert_eq!(
        open(dir.path())
            .budget_state(&id, T0)
            .unwrap()
            .session
            .tool_calls,
        LIMIT
    );
}

trait SpawnPiped {
    fn output_async(&mut self) -> std::process::Child;
}

impl SpawnPiped for Command {
    fn output_async(&mut self) -> std::process::Child {
        self.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }
}
