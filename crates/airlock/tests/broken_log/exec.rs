//! `airlock exec` on a broken log: the command does not run and sends nothing.

use std::process::Command;

use super::*;

/// A payload that leaves a marker and sends one request to the collector; the comment
/// makes the command, and so its decision record, longer than a page.
fn payload(h: &Home) -> String {
    format!(
        "touch marker && curl -s -o /dev/null --max-time 20 {} # {}",
        h.collector.url("/exec"),
        "x".repeat(5000)
    )
}

fn exec(h: &Home, setup: Option<&str>) -> std::process::Output {
    let mut cmd = Command::new(airlock_bin());
    cmd.env("AIRLOCK_HOME", &h.home)
        .current_dir(&h.ws)
        .args(["exec", "--", &payload(h)]);
    match setup {
        Some(s) => in_private_mounts(s, &cmd).output().unwrap(),
        None => cmd.stdin(Stdio::null()).output().unwrap(),
    }
}

#[test]
fn i1_exec_on_a_broken_log_runs_nothing_and_sends_nothing() {
    for b in Breakage::ALL {
        if !may_mount(b) {
            continue;
        }
        let h = Home::new();
        // On a healthy log the payload runs and its request arrives.
        let o = exec(&h, None);
        assert_eq!(o.status.code(), Some(0), "{b:?}: {}", text(&o));
        assert!(
            h.ws.join("marker").exists(),
            "{b:?}: the control did not run"
        );
        assert_eq!(h.collector.hits(), 1, "{b:?}: the control sent nothing");
        std::fs::remove_file(h.ws.join("marker")).unwrap();
        h.assert_verifies();

        let setup = b.apply(&h);
        let o = exec(&h, setup.as_deref());
        assert!(
            !matches!(o.status.code(), Some(0) | Some(99)),
            "{b:?}: {}",
            text(&o)
        );
        assert!(!h.ws.join("marker").exists(), "{b:?}: the payload ran");
        assert_eq!(h.collector.hits(), 1, "{b:?}: a request left");
        assert_told(b, &h, &o);
    }
}
