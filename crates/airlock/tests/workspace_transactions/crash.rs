//! A crash between the end of a run and its commit: the workspace is untouched or fully
//! committed, and the next command that opens it finishes or rolls back, and says which.

use std::time::{Duration, Instant};

use crate::support::*;

const FILES: usize = 1500;

fn count(ws: &std::path::Path) -> usize {
    std::fs::read_dir(ws)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().starts_with('f'))
        })
        .count()
}

#[test]
fn i1_a_kill_between_run_end_and_commit_leaves_all_or_nothing() {
    let f = home_with(1, "");
    let mut child = exec_command(
        &f,
        &format!("for i in $(seq 1 {FILES}); do echo $i > f$i; done"),
    )
    .spawn()
    .unwrap();
    let log = f.home.join("state/audit").join(airlock_audit::LOG_FILE);
    let deadline = Instant::now() + Duration::from_secs(120);
    // The run is over once its execution record is written; kill at once, while the
    // change set is being decided or committed.
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("\"kind\":\"execution\"") {
            break;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "exec ended before its record was seen"
        );
        assert!(Instant::now() < deadline, "the run never ended");
        std::thread::sleep(Duration::from_millis(2));
    }
    child.kill().unwrap();
    child.wait().unwrap();

    let next = airlock_in(&f, &["checkpoints", "list"]);
    let said = text(&next);
    assert!(next.status.success(), "{said}");
    let n = count(&f.ws);
    assert!(
        n == 0 || n == FILES,
        "half a commit: {n} of {FILES} files\n{said}"
    );
    if said.contains("rolled back") {
        assert_eq!(n, 0, "{said}");
    }
    if said.contains("finished") {
        assert_eq!(n, FILES, "{said}");
    }
}
