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

/// `airlock exec` of a payload that waits for `go`, then fetches a long collector URL;
/// `breaking` runs once the payload started, before `go`.
fn exec_breaking_midway(h: &Home, setup: &str, breaking: &str) -> std::process::Output {
    let ws = h.ws.display();
    let payload = format!(
        "touch started; i=0; while [ ! -e go ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; \
         curl -s --max-time 20 -w '\\nHTTP %{{http_code}}\\n' {url} > answer 2>&1; touch finished",
        url = h.long_url("proxy")
    );
    let script = format!(
        "{setup} || exit 99; \"$@\" & pid=$!; \
         i=0; while [ ! -e {ws}/started ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; \
         {breaking} || exit 98; touch {ws}/go; wait $pid"
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

fn answer(h: &Home) -> String {
    std::fs::read_to_string(h.ws.join("answer")).unwrap_or_default()
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
        assert!(answer(&h).contains("HTTP 200"), "{b:?}: {}", answer(&h));
        assert_eq!(h.collector.hits(), 1, "{b:?}: the control sent nothing");
        for f in ["started", "go", "answer", "finished"] {
            std::fs::remove_file(h.ws.join(f)).unwrap();
        }

        let o = exec_breaking_midway(&h, &setup, &break_now(b, &h));
        assert!(
            h.ws.join("finished").exists(),
            "{b:?}: the payload did not get to its request: {}",
            text(&o)
        );
        let answer = answer(&h);
        assert!(answer.contains("HTTP 403"), "{b:?}: {answer}");
        assert!(answer.contains("could not be recorded"), "{b:?}: {answer}");
        assert_eq!(h.collector.hits(), 1, "{b:?}: the request left: {answer}");
        assert_ne!(o.status.code(), Some(0), "{b:?}: {}", text(&o));
        assert_told(b, &h, &o);
    }
}
