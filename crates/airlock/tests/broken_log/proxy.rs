//! The egress proxy on a log that breaks while the command runs: the command was decided
//! and recorded on a healthy log, then, with the log broken, it sends a request from
//! inside the sandbox. The proxy cannot record its decision, so the request is refused
//! and never reaches the collector.

use std::process::Command;

use super::*;

/// What breaks the log mid-run, as a shell command run beside `airlock exec`.
fn break_now(b: Breakage, h: &Home) -> String {
    match b {
        Breakage::LogIsADirectory => format!(
            "mv {log} {dir}/log.aside && mkdir {log}",
            log = h.log().display(),
            dir = h.audit_dir().display()
        ),
        Breakage::DiskFull => fill_command(&h.audit_dir().display().to_string()),
        other => panic!("{other:?} is not broken mid-run here"),
    }
}

/// `airlock exec` of a payload that announces itself, waits, then fetches a long collector
/// URL and prints the answer; `breaking` runs once the payload started, while it waits.
///
/// The run writes into its own overlay layer (`<state>/runs/<run>/upper`), so its start is
/// seen there, and its answer travels on stdout: a run whose commit cannot be recorded
/// leaves nothing in the workspace. The payload waits a fixed time rather than for a file
/// the host makes, because a change to the overlay's lower layer while it is mounted is
/// not guaranteed to be seen.
fn exec_breaking_midway(h: &Home, setup: &str, breaking: &str) -> std::process::Output {
    let runs = h.home.join("state/runs");
    let payload = format!(
        "touch started; sleep 8; \
         curl -s --max-time 20 -w '\\nHTTP %{{http_code}}\\n' {url} 2>&1; echo payload-finished",
        url = h.long_url("proxy")
    );
    let script = format!(
        "{setup} || exit 99; \"$@\" & pid=$!; \
         i=0; until ls {runs}/*/upper/started >/dev/null 2>&1 || [ $i -ge 1200 ]; do sleep 0.05; i=$((i+1)); done; \
         {breaking} || exit 98; wait $pid",
        runs = runs.display()
    );
    let mut c = Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .arg("sh")
        .arg(airlock_bin())
        .args(["exec", "--", &payload])
        .env("AIRLOCK_HOME", &h.home)
        .current_dir(&h.ws)
        .stdin(Stdio::null());
    c.output().unwrap()
}

/// What the payload printed: the collector's answer and its closing marker.
fn answer(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn i1_a_request_from_the_sandbox_does_not_leave_once_the_log_breaks() {
    if !nix::unistd::geteuid().is_root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "the proxy's broken-log test needs root for a private mount namespace"
        );
        eprintln!("skipped: needs root for a private mount namespace");
        return;
    }
    for b in [Breakage::LogIsADirectory, Breakage::DiskFull] {
        let h = Home::new();
        let setup = match b {
            Breakage::DiskFull => b.mount_script(&h.audit_dir(), false),
            _ => "true".into(),
        };
        // Healthy, on the host's own log (a tmpfs would take the control's records and
        // checkpoints with it, and leave the log below its high-water mark): the request
        // arrives.
        let o = exec_breaking_midway(&h, "true", "true");
        assert_eq!(o.status.code(), Some(0), "{b:?}: {}", text(&o));
        assert!(answer(&o).contains("HTTP 200"), "{b:?}: {}", text(&o));
        assert_eq!(h.collector.hits(), 1, "{b:?}: the control sent nothing");
        std::fs::remove_file(h.ws.join("started")).unwrap();

        let o = exec_breaking_midway(&h, &setup, &break_now(b, &h));
        let answer = answer(&o);
        assert!(
            answer.contains("payload-finished"),
            "{b:?}: the payload did not get to its request: {}",
            text(&o)
        );
        assert!(answer.contains("HTTP 403"), "{b:?}: {answer}");
        assert!(answer.contains("could not be recorded"), "{b:?}: {answer}");
        assert_eq!(h.collector.hits(), 1, "{b:?}: the request left: {answer}");
        assert_ne!(o.status.code(), Some(0), "{b:?}: {}", text(&o));
        assert_told(b, &h, &o);
    }
}
