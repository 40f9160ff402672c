//! The host's one audit writer: runs through the host append to one open log, which signs
//! a checkpoint every `checkpoint_every` records and once at the host's stop, not once
//! per run; every record is still there and the chain verifies.

use super::super::exec_fixture::fixture;
use super::super::host_fixture::Host;
use super::super::{audit_records, exec, verify};
use super::init;

pub(super) fn checkpoints(home: &std::path::Path) -> usize {
    std::fs::read_to_string(home.join("state/audit/checkpoints.jsonl"))
        .unwrap_or_default()
        .lines()
        .count()
}

#[test]
fn i1_runs_through_the_host_share_one_writer_that_checkpoints_every_n_records_and_at_stop() {
    let f = fixture();
    init(&f, "");
    let path = f.home.join("config/airlock.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("checkpoint_every = 256"), "{text}");
    std::fs::write(
        &path,
        text.replace("checkpoint_every = 256", "checkpoint_every = 8"),
    )
    .unwrap();
    let mut host = Host::start(&f.home);
    let (records, signed) = (audit_records(&f.home).len(), checkpoints(&f.home));
    for i in 0..12 {
        let o = exec(&f, &[], &format!("echo run-{i}"));
        assert_eq!(
            String::from_utf8_lossy(&o.stdout),
            format!("run-{i}\n"),
            "{o:?}"
        );
    }
    let appended = audit_records(&f.home).len() - records;
    // Each run appends its decision and its execution record (and each is synced
    // before the run goes on: I1). Embedded, each run also signed a checkpoint as it
    // closed its log: 12 more. One writer signs one per 8 records (and the first).
    assert!(appended >= 24, "{appended} records");
    let new_checkpoints = checkpoints(&f.home) - signed;
    assert!(
        new_checkpoints <= appended / 8 + 1,
        "{new_checkpoints} checkpoints for {appended} records"
    );
    // At the stop, one more covers everything: nothing is left unsigned.
    host.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(host.wait().success(), "{}", host.log_text());
    let v = verify(&f.home);
    let out = String::from_utf8_lossy(&v.stdout);
    assert!(v.status.success(), "{v:?}");
    assert!(out.contains(" 0 unsigned tail records"), "{out}");
    let stop = audit_records(&f.home)
        .into_iter()
        .rfind(|r| r["kind"] == "host-stop")
        .expect("the stop is recorded");
    assert_eq!(stop["principal"], "system:host", "{stop}");
}

#[test]
fn i1_the_hosts_services_record_through_its_one_writer() {
    use super::super::exec_fixture::airlock;
    let f = fixture();
    init(&f, "");
    let host = Host::start(&f.home);
    let (records, signed) = (audit_records(&f.home).len(), checkpoints(&f.home));
    // The kill switch and a configuration change, answered by the host's services:
    // each is recorded (embedded, each would also sign a checkpoint as its log closed).
    for _ in 0..3 {
        let o = airlock(&f.home, &["kill", "--all"]);
        assert!(o.status.success(), "{o:?}");
    }
    let o = airlock(
        &f.home,
        &[
            "tasks",
            "add",
            "--cron",
            "0 8 * * *",
            "--prompt",
            "Summarise",
        ],
    );
    assert!(o.status.success(), "{o:?}");
    let new: Vec<_> = audit_records(&f.home).into_iter().skip(records).collect();
    let kinds: Vec<&str> = new.iter().filter_map(|r| r["kind"].as_str()).collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "tasks-paused").count(),
        3,
        "{kinds:?}"
    );
    assert!(kinds.contains(&"task-added"), "{kinds:?}");
    assert_eq!(
        checkpoints(&f.home),
        signed,
        "a service in the host signed a checkpoint of its own: {kinds:?}"
    );
    drop(host);
    let v = verify(&f.home);
    assert!(v.status.success(), "{v:?}");
}

/// `SIGTERM` with an `exec` still running past `[host] stop_grace_secs`: the run holds
/// the writer, yet the stop signs its last checkpoint over everything, its own record
/// naming the run as interrupted (the sandbox ends with the host); the chain verifies
/// with nothing unsigned.
#[test]
fn i1_a_stop_past_its_grace_with_an_exec_running_signs_its_checkpoint_and_names_the_run() {
    use super::{background_exec, processes_with, wait_for};
    let f = fixture();
    init(&f, "\n[host]\nstop_grace_secs = 1\n");
    let mut host = Host::start(&f.home);
    let marker = format!("stop-exec-{}", std::process::id());
    let client = background_exec(&f, &format!("sleep 300; : {marker}"));
    wait_for("the run's sandbox", || {
        processes_with(&marker)
            .iter()
            .any(|l| !l.contains("airlock"))
    });
    host.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(host.wait().success(), "{}", host.log_text());
    assert!(
        host.log_text().contains("recorded as interrupted"),
        "{}",
        host.log_text()
    );
    let v = verify(&f.home);
    let out = String::from_utf8_lossy(&v.stdout);
    assert!(v.status.success(), "{v:?}");
    assert!(out.contains(" 0 unsigned tail records"), "{out}");
    let stop = audit_records(&f.home)
        .into_iter()
        .rfind(|r| r["kind"] == "host-stop")
        .expect("the stop is recorded");
    let interrupted = stop["detail"]["interrupted"].as_array().cloned();
    assert!(
        interrupted.as_ref().is_some_and(
            |ids| ids.len() == 1 && ids[0].as_str().is_some_and(|id| id.starts_with("exec-"))
        ),
        "{stop}"
    );
    let o = client.wait_with_output().unwrap();
    assert!(!o.status.success(), "the client heard its run end: {o:?}");
    wait_for("the run's sandbox to be gone", || {
        processes_with(&marker).is_empty()
    });
}
