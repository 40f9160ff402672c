//! `airlock exec` through a running host: the caller's own streams and exit status, the
//! same records as embedded, 50 at once queued under the default limits, a full queue
//! refused by the limit's name, and no sandbox left alive after `kill -9` of the host.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::exec_fixture::{airlock_bin, fixture, Fixture};
use super::host_fixture::Host;
use super::{audit_records, exec, verify};

mod audit_writer;
mod browser;
mod chat_platforms;
mod connections;
mod front;
mod peer;
mod pool;
mod runs;
mod sandbox_slots;
mod sessions;
mod tasks;
mod telegram;
mod web;
mod web_remote;
mod webhook;

fn status(f: &Fixture) -> serde_json::Value {
    status_of(&f.home)
}

fn status_of(home: &std::path::Path) -> serde_json::Value {
    let o = Command::new(airlock_bin())
        .env("AIRLOCK_HOME", home)
        .args(["status", "--json"])
        .output()
        .unwrap();
    serde_json::from_slice(&o.stdout).unwrap_or(serde_json::Value::Null)
}

/// The Gate's decision records about channel `kind` (`channel.admit` or `channel.bind`)
/// with `decision` (`allow`, `ask`, `deny`).
fn channel_decisions(home: &std::path::Path, kind: &str, decision: &str) -> Vec<serde_json::Value> {
    audit_records(home)
        .into_iter()
        .filter(|r| {
            r["kind"] == "decision" && r["action"]["type"] == kind && r["decision"] == decision
        })
        .collect()
}

/// The approval requests pending now.
fn pending_approvals(home: &std::path::Path) -> Vec<airlock_store::ApprovalRequest> {
    use airlock_store::ApprovalDecisions;
    airlock_store::SqliteStore::open(home.join("state"))
        .unwrap()
        .pending_approvals(airlock_store::Timestamp::now())
        .unwrap()
        .items
}

/// `airlock secret set NAME --host HOST --scheme SCHEME` with `value` on stdin.
fn set_secret(
    home: &std::path::Path,
    name: &str,
    value: &str,
    host: &str,
    scheme: &str,
) -> std::process::Output {
    use std::io::Write;
    let mut child = Command::new(airlock_bin())
        .env("AIRLOCK_HOME", home)
        .args(["secret", "set", name, "--host", host, "--scheme", scheme])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(value.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn init(f: &Fixture, config: &str) {
    let o = Command::new(airlock_bin())
        .env("AIRLOCK_HOME", &f.home)
        .arg("init")
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    if !config.is_empty() {
        let path = f.home.join("config/airlock.toml");
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(config);
        std::fs::write(path, text).unwrap();
    }
}

/// The decision and execution records of `command`, without what differs run to run.
fn records_of(f: &Fixture, command: &str) -> Vec<(String, serde_json::Value)> {
    audit_records(&f.home)
        .into_iter()
        .filter(|r| r["action"]["command"] == command)
        .map(|r| {
            let kind = r["kind"].as_str().unwrap_or("").to_string();
            let keep = if kind == "execution" {
                serde_json::json!({"status": r["detail"]["status"], "hash": r["action_hash"]})
            } else {
                serde_json::json!({"decision": r["decision"], "policies": r["policies"], "hash": r["action_hash"]})
            };
            (kind, keep)
        })
        .collect()
}

#[test]
fn exec_through_the_host_uses_the_callers_streams_and_leaves_the_same_records() {
    let f = fixture();
    init(&f, "");
    let command = "echo to-stdout; echo to-stderr >&2; exit 7";
    let embedded = exec(&f, &[], command);
    let host = Host::start(&f.home);
    let through = exec(&f, &[], command);
    assert_eq!(through.status.code(), Some(7), "{through:?}");
    assert_eq!(String::from_utf8_lossy(&through.stdout), "to-stdout\n");
    assert!(
        String::from_utf8_lossy(&through.stderr).contains("to-stderr"),
        "{through:?}"
    );
    assert_eq!(embedded.status.code(), through.status.code());
    assert_eq!(embedded.stdout, through.stdout);
    // The same decision and execution records, once each way.
    let recs = records_of(&f, command);
    let (first, second) = recs.split_at(recs.len() / 2);
    assert!(!first.is_empty(), "no records of the command: {recs:?}");
    assert_eq!(first, second, "embedded and through the host differ");
    // Several words stay an argument vector through the host too.
    let o = Command::new(airlock_bin())
        .env("AIRLOCK_HOME", &f.home)
        .current_dir(&f.ws)
        .args(["exec", "--", "sh", "-c", "echo \"a  b\""])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout), "a  b\n", "{o:?}");
    drop(host);
    assert!(verify(&f.home).status.success());
}

#[test]
fn fifty_concurrent_execs_through_the_host_are_queued_and_all_succeed() {
    let f = fixture();
    init(&f, "");
    let _host = Host::start(&f.home);
    let children: Vec<_> = (0..50)
        .map(|i| {
            Command::new(airlock_bin())
                .env("AIRLOCK_HOME", &f.home)
                .current_dir(&f.ws)
                .args(["exec", "--", &format!("echo run-{i}")])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for (i, c) in children.into_iter().enumerate() {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "run {i}: {o:?}");
        assert_eq!(String::from_utf8_lossy(&o.stdout), format!("run-{i}\n"));
    }
    let executions = audit_records(&f.home)
        .iter()
        .filter(|r| r["kind"] == "execution")
        .count();
    assert_eq!(executions, 50);
    let v = verify(&f.home);
    assert!(v.status.success(), "{v:?}");
}

/// Descriptors and threads of process `pid` at rest: the least of a few looks, so that a
/// reload the host makes every second (a directory open, a blocking thread) is not counted.
fn descriptors_and_threads(pid: u32) -> (usize, usize) {
    let count = |dir: String| std::fs::read_dir(dir).unwrap().count();
    (0..20)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(50));
            (
                count(format!("/proc/{pid}/fd")),
                count(format!("/proc/{pid}/task")),
            )
        })
        .fold((usize::MAX, usize::MAX), |(f, t), (f2, t2)| {
            (f.min(f2), t.min(t2))
        })
}

/// The host lives long and runs every exec in its own process: what a run opens (its log,
/// proxy, sandbox channels, store connections, threads) must all be given back. After a
/// hundred more runs it holds what it held after ten.
#[test]
fn a_hundred_runs_leave_the_host_holding_no_more_than_before() {
    let f = fixture();
    init(&f, "");
    let host = Host::start(&f.home);
    let run = |n: usize| {
        for i in 0..n {
            let o = exec(&f, &[], "true");
            assert!(o.status.success(), "run {i}: {o:?}");
        }
    };
    run(10);
    let before = descriptors_and_threads(host.child.id());
    run(100);
    // What the last runs give back after their answers (the proxy's runtime ending on
    // its own, the helper reaped aside, the next run staged ahead) can take a while on a
    // loaded machine: wait for it, but a leak never settles.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut after = descriptors_and_threads(host.child.id());
    while (after.0 > before.0 || after.1 > before.1) && Instant::now() < deadline {
        after = descriptors_and_threads(host.child.id());
    }
    assert!(
        after.0 <= before.0 && after.1 <= before.1,
        "(descriptors, threads) after 110 runs {after:?}, after 10 {before:?}"
    );
}

/// Send a request to the host's exec socket with `count` descriptors (`/dev/null`) beside
/// it, as a client that sends more or fewer than stdin, stdout and stderr would; the
/// host's answer.
fn exec_request_with_descriptors(home: &std::path::Path, count: usize) -> String {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    use std::io::{BufRead, BufReader};
    use std::os::fd::{AsRawFd, RawFd};
    let socket = airlock_client::host::exec_socket(&home.join("state"));
    let stream = std::os::unix::net::UnixStream::connect(socket).unwrap();
    let files: Vec<std::fs::File> = (0..count)
        .map(|_| std::fs::File::open("/dev/null").unwrap())
        .collect();
    let fds: Vec<RawFd> = files.iter().map(|f| f.as_raw_fd()).collect();
    let body = br#"{"exec":{"command":"true"}}"#;
    let mut message = (body.len() as u32).to_be_bytes().to_vec();
    message.extend_from_slice(body);
    sendmsg::<()>(
        stream.as_raw_fd(),
        &[std::io::IoSlice::new(&message)],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::empty(),
        None,
    )
    .unwrap();
    let mut answer = String::new();
    BufReader::new(&stream).read_line(&mut answer).unwrap();
    answer
}

/// A client that sends the exec socket more descriptors than the three it takes is refused
/// clearly, and every descriptor the host received with the request is closed: a hundred
/// such requests leave the host holding what it held before.
#[test]
fn extra_descriptors_sent_to_the_exec_socket_are_closed_and_the_request_refused() {
    let f = fixture();
    init(&f, "");
    let host = Host::start(&f.home);
    let first = exec_request_with_descriptors(&f.home, 5);
    assert!(
        first.contains("more than 3 descriptors") && first.contains("closed"),
        "{first}"
    );
    let too_few = exec_request_with_descriptors(&f.home, 1);
    assert!(too_few.contains("1 descriptors, not 3"), "{too_few}");
    let before = descriptors_and_threads(host.child.id());
    for n in [5, 20, 1, 4].repeat(25) {
        let answer = exec_request_with_descriptors(&f.home, n);
        assert!(answer.contains(r#""exit":null"#), "{n}: {answer}");
    }
    let after = descriptors_and_threads(host.child.id());
    assert_eq!(
        after.0, before.0,
        "descriptors of the host before and after 100 requests with the wrong number"
    );
}

fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn background_exec(f: &Fixture, command: &str) -> std::process::Child {
    Command::new(airlock_bin())
        .env("AIRLOCK_HOME", &f.home)
        .current_dir(&f.ws)
        .args(["exec", "--", command])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn a_run_past_the_full_queue_is_refused_by_the_limits_name() {
    let f = fixture();
    init(&f, "\n[host]\nmax_sandboxes = 1\nmax_queued = 1\n");
    let _host = Host::start(&f.home);
    // Long enough that it is still running once the second has queued, on a loaded machine.
    let first = background_exec(&f, "sleep 10");
    wait_for("the first run", || status(&f)["host"]["runs_active"] == 1);
    let second = background_exec(&f, "echo second");
    wait_for("the second run to queue", || {
        status(&f)["host"]["runs_waiting"] == 1
    });
    let third = exec(&f, &[], "echo third");
    assert_eq!(third.status.code(), Some(1), "{third:?}");
    let err = String::from_utf8_lossy(&third.stderr);
    assert!(err.contains("host.max_queued = 1"), "{err}");
    assert!(third.stdout.is_empty(), "the refused run did not run");
    // The queued one ran once the first was done.
    let o = second.wait_with_output().unwrap();
    assert!(o.status.success(), "{o:?}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "second\n");
    assert!(first.wait_with_output().unwrap().status.success());
}

fn processes_with(marker: &str) -> Vec<String> {
    let o = Command::new("pgrep")
        .args(["-a", "-f", marker])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| !l.contains("pgrep"))
        .map(str::to_string)
        .collect()
}

#[test]
fn kill_9_of_the_host_mid_run_leaves_no_process_of_the_sandbox() {
    let f = fixture();
    init(&f, "");
    let mut host = Host::start(&f.home);
    let marker = format!(
        "marker-{}-{}",
        std::process::id(),
        f.ws.display().to_string().len()
    );
    let client = background_exec(&f, &format!("sleep 300; : {marker}"));
    // The command itself, inside the sandbox (not only the `airlock exec` naming it).
    wait_for("the run's sandbox", || {
        processes_with(&marker)
            .iter()
            .any(|l| !l.contains("airlock"))
    });
    // The run is the host's own work: its children are sandbox helpers (the run's, and
    // those the pool builds ahead), and no `airlock` process runs the command for it.
    let comms: Vec<String> = children_of(host.child.id())
        .iter()
        .map(|(pid, _)| command_name(*pid))
        .collect();
    assert!(
        !comms.is_empty() && comms.iter().all(|c| c == "airlock-sandbox-init"),
        "the host's children: {comms:?}"
    );
    host.signal(nix::sys::signal::Signal::SIGKILL);
    host.wait();
    wait_for("every process of the run to be gone", || {
        processes_with(&marker).is_empty()
    });
    let o = client.wait_with_output().unwrap();
    assert!(!o.status.success(), "the client heard its run end: {o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("closed the connection"),
        "{o:?}"
    );
    // A new host takes over, records the run as interrupted, and the chain verifies.
    let _again = Host::start(&f.home);
    let recovery: Vec<serde_json::Value> = audit_records(&f.home)
        .into_iter()
        .filter(|r| r["kind"] == "host-recovery")
        .collect();
    assert_eq!(
        recovery.len(),
        1,
        "{:?}\nhost log: {}",
        audit_records(&f.home)
            .iter()
            .map(|r| r["kind"].clone())
            .collect::<Vec<_>>(),
        _again.log_text()
    );
    // The host's own act, on the owner's behalf: not the operator at a command line.
    assert_eq!(
        recovery[0]["principal"], "system:recovery",
        "{:?}",
        recovery[0]
    );
    assert_eq!(recovery[0]["on_behalf_of"], "owner", "{:?}", recovery[0]);
    let starts: Vec<serde_json::Value> = audit_records(&f.home)
        .into_iter()
        .filter(|r| r["kind"] == "host-start")
        .collect();
    assert!(
        starts.iter().all(|r| r["principal"] == "system:host"),
        "{starts:?}"
    );
    let interrupted = recovery[0]["detail"]["interrupted"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(interrupted.len(), 1, "{recovery:?}");
    let id = interrupted[0].as_str().unwrap();
    assert!(id.starts_with("exec-"), "{id}");
    let listed = status(&f)["sessions"].to_string();
    assert!(
        !listed.contains(id),
        "the interrupted session is no longer active: {listed}"
    );
    let o = exec(&f, &[], "echo after");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "after\n", "{o:?}");
    let v = verify(&f.home);
    assert!(v.status.success(), "{v:?}");
}

/// The file name of the program `pid` runs (the helper is executed from a descriptor, so
/// its `comm` is a number; `exe` names the file).
fn command_name(pid: u32) -> String {
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default()
}

/// A client that goes away ends its run: the host kills the sandbox's process tree at
/// once, records the run as killed because the client went away, and goes on serving.
#[test]
fn a_client_that_goes_away_takes_its_run_with_it() {
    let f = fixture();
    init(&f, "");
    let host = Host::start(&f.home);
    let marker = format!("hangup-{}", std::process::id());
    let command = format!("sleep 300; : {marker}");
    let mut client = background_exec(&f, &command);
    wait_for("the run's sandbox", || {
        processes_with(&marker)
            .iter()
            .any(|l| !l.contains("airlock"))
    });
    client.kill().unwrap();
    client.wait().unwrap();
    wait_for("every process of the run to be gone", || {
        processes_with(&marker).is_empty()
    });
    wait_for("the run's execution record", || {
        records_of(&f, &command)
            .iter()
            .any(|(kind, _)| kind == "execution")
    });
    let execution = audit_records(&f.home)
        .into_iter()
        .find(|r| r["kind"] == "execution" && r["action"]["command"] == command.as_str())
        .unwrap();
    assert_eq!(execution["detail"]["outcome"], "killed", "{execution}");
    assert!(
        execution["detail"]["killed_by"]
            .as_str()
            .is_some_and(|by| by.contains("client")),
        "{execution}"
    );
    let o = exec(&f, &[], "echo still-serving");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "still-serving\n",
        "{o:?}"
    );
    assert_eq!(host_pid_in_status(&f), Some(host.child.id() as u64));
    let v = verify(&f.home);
    assert!(v.status.success(), "{v:?}");
}

/// The id of an exec running under `home` (its run dir), other than those in `seen`.
fn running_exec(f: &Fixture, seen: &[String]) -> Option<String> {
    std::fs::read_dir(f.home.join("state/run"))
        .ok()?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("exec-") && !seen.contains(n))
}

/// `airlock kill` goes through the host while it answers, and does not depend on it: with
/// the host stopped (SIGSTOP), the kill gives up on it after its wait and kills the run
/// embedded. Either way the run ends killed, with its record.
#[test]
fn kill_goes_through_the_host_and_works_without_it() {
    use nix::sys::signal::Signal;
    let f = fixture();
    init(&f, "");
    let host = Host::start(&f.home);
    let mut seen = Vec::new();
    for (round, stop_the_host) in [false, true].into_iter().enumerate() {
        let marker = format!("kill-{}-{round}", std::process::id());
        let client = background_exec(&f, &format!("sleep 300; : {marker}"));
        wait_for("the run's sandbox", || {
            processes_with(&marker)
                .iter()
                .any(|l| !l.contains("airlock"))
        });
        let id = running_exec(&f, &seen).unwrap();
        seen.push(id.clone());
        if stop_the_host {
            host.signal(Signal::SIGSTOP);
        }
        let k = super::exec_fixture::airlock(&f.home, &["kill", &id]);
        if stop_the_host {
            host.signal(Signal::SIGCONT);
        }
        assert!(k.status.success(), "{k:?}");
        let said = String::from_utf8_lossy(&k.stderr);
        assert_eq!(
            said.contains("killing without it"),
            stop_the_host,
            "round {round}: {said}"
        );
        assert!(
            String::from_utf8_lossy(&k.stdout).contains(&format!("killed {id}")),
            "{k:?}"
        );
        let o = client.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(137), "{o:?}");
        wait_for("every process of the run to be gone", || {
            processes_with(&marker).is_empty()
        });
        let killed = audit_records(&f.home)
            .into_iter()
            .filter(|r| {
                r["kind"] == "session-killed"
                    && r["session"] == id.as_str()
                    && r["detail"]["already_killed"] != true
            })
            .count();
        // Killed once. In the second round the host, let go on again, may yet take the
        // request its client gave up on: that repeat is recorded as one.
        assert_eq!(killed, 1, "round {round}");
    }
    // The first kill went through the host. The second did not: its client killed
    // without the stopped host; the host, let go on, may yet read the request that client
    // gave up on (a late repeat, recorded as already killed above), but nothing else.
    let log = host.log_text();
    let through: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("kill through the host"))
        .collect();
    let names = |l: &str, id: &str| l.contains(&format!("{id:?}"));
    assert_eq!(
        through.iter().filter(|l| names(l, &seen[0])).count(),
        1,
        "{log}"
    );
    assert!(
        through.len() == 1 || (through.len() == 2 && names(through[1], &seen[1])),
        "{log}"
    );
    let v = verify(&f.home);
    assert!(v.status.success(), "{v:?}");
}

/// A host that is stopped (SIGSTOP) still takes connections (the kernel queues them), so
/// a command asking it something that is answered at once must not wait for it for ever:
/// it gives up with an error that names the host and says it may be stopped.
#[test]
fn a_stopped_host_leaves_no_command_waiting_for_ever() {
    use nix::sys::signal::Signal;
    let f = fixture();
    init(&f, "");
    let host = Host::start(&f.home);
    host.signal(Signal::SIGSTOP);
    let asked: Vec<_> = [&["status"][..], &["approvals", "list"][..]]
        .into_iter()
        .map(|args| {
            let mut c = Command::new(airlock_bin());
            c.env("AIRLOCK_HOME", &f.home)
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            (args, c.spawn().unwrap())
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut answers = Vec::new();
    for (args, mut child) in asked {
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                host.signal(Signal::SIGCONT);
                panic!(
                    "`airlock {}` still waits for the stopped host",
                    args.join(" ")
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        answers.push((args, child.wait_with_output().unwrap()));
    }
    host.signal(Signal::SIGCONT);
    for (args, o) in answers {
        let said = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?}: {o:?}");
        assert!(
            said.contains("gave no answer") && said.contains("may be stopped"),
            "{args:?}: {said}"
        );
    }
    // Let go on, the host answers again.
    assert_eq!(
        status(&f)["host"]["pid"].as_u64(),
        Some(u64::from(host.child.id())),
        "{}",
        host.log_text()
    );
}

/// Every process below `pid`.
fn descendants(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut next = vec![pid];
    while let Some(p) = next.pop() {
        for (child, _) in children_of(p) {
            out.push(child);
            next.push(child);
        }
    }
    out
}

/// `airlock exec --profile strict -- COMMAND` on a pseudo-terminal (`script`), as an
/// operator's shell runs it; stdin is the terminal's input.
fn exec_on_a_terminal(f: &Fixture, command: &str, then: &str) -> std::process::Child {
    Command::new("script")
        .args([
            "-qec",
            &format!("\"$AIRLOCK\" exec --profile strict -- \"$COMMAND\"{then}"),
            "/dev/null",
        ])
        .env("AIRLOCK", airlock_bin())
        .env("AIRLOCK_HOME", &f.home)
        .env("COMMAND", command)
        .current_dir(&f.ws)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("`script` (util-linux) gives the client a pseudo-terminal")
}

/// An `exec` through the host asks its inline approval on the client's own terminal: the
/// host writes the prompt to the client's descriptor and reads the answer from it. Yes
/// runs the command, no does not, and a client that goes away while the prompt waits is a
/// no that frees its sandbox slot.
#[test]
fn an_inline_approval_through_the_host_is_asked_on_the_clients_terminal() {
    use std::io::Write;
    let f = fixture();
    init(&f, "");
    let _host = Host::start(&f.home);
    for (answer, runs) in [("y", true), ("n", false)] {
        let command = format!("rm -f ./absent-{answer}");
        let mut child = exec_on_a_terminal(&f, &command, "");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(format!("{answer}\n").as_bytes())
            .unwrap();
        let o = child.wait_with_output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout).replace("\r\n", "\n");
        assert!(out.contains("approval needed"), "no prompt:\n{out}");
        assert!(out.contains(&format!("command: {command}")), "{out}");
        assert_eq!(out.contains("did not run"), !runs, "{out}");
        let executed = records_of(&f, &command)
            .iter()
            .any(|(kind, _)| kind == "execution");
        assert_eq!(executed, runs, "answer {answer}: {out}");
    }
    // The client goes away while the prompt waits, its terminal still open (the shell
    // around it lives on): the host's read of that terminal is woken by the hang-up.
    let command = "rm -f ./absent-gone";
    let mut child = exec_on_a_terminal(&f, command, "; sleep 120");
    wait_for("the run to be held at its prompt", || {
        records_of(&f, command)
            .iter()
            .any(|(_, r)| r["decision"] == "ask")
    });
    let client = descendants(child.id())
        .into_iter()
        .find(|pid| command_name(*pid) == "airlock")
        .expect("the airlock client under script");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(client as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    wait_for("the host to give the slot back", || {
        status(&f)["host"]["runs_active"] == 0
    });
    wait_for("the refusal's record", || {
        records_of(&f, command)
            .iter()
            .any(|(kind, _)| kind == "approval-denied")
    });
    assert!(!records_of(&f, command)
        .iter()
        .any(|(kind, _)| kind == "execution"));
    drop(child.stdin.take());
    let _ = child.kill();
    child.wait().unwrap();
    let v = verify(&f.home);
    assert!(v.status.success(), "{v:?}");
}

/// `airlock audit tail` through the host streams the same lines as embedded, as text and as
/// JSON; a tail past the most is refused by the host before anything is read.
#[test]
fn audit_tail_through_the_host_shows_what_embedded_shows() {
    let f = fixture();
    init(&f, "");
    for i in 0..3 {
        assert!(exec(&f, &[], &format!("echo tail-{i}")).status.success());
    }
    let tail = |args: &[&str]| super::exec_fixture::airlock(&f.home, args);
    let embedded_text = tail(&["audit", "tail", "-n", "6"]);
    let embedded_json = tail(&["audit", "tail", "-n", "6", "--json"]);
    assert!(embedded_text.status.success(), "{embedded_text:?}");
    let host = Host::start(&f.home);
    // The host's start is a record too: ask for the lines before it.
    let through_text = tail(&["audit", "tail", "-n", "7"]);
    let through_json = tail(&["audit", "tail", "-n", "7", "--json"]);
    assert!(through_text.status.success(), "{through_text:?}");
    let without_last = |o: &std::process::Output| {
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        let mut lines: Vec<&str> = text.lines().collect();
        let last = lines.pop().unwrap_or_default().to_string();
        (lines.join("\n"), last)
    };
    let (text, start) = without_last(&through_text);
    assert_eq!(
        text,
        String::from_utf8_lossy(&embedded_text.stdout).trim_end()
    );
    assert!(start.contains("host-start"), "{start}");
    let (json, _) = without_last(&through_json);
    assert_eq!(
        json,
        String::from_utf8_lossy(&embedded_json.stdout).trim_end()
    );
    assert!(json.contains("tail-2"), "{json}");
    let too_many = tail(&["audit", "tail", "-n", "1000001"]);
    assert!(!too_many.status.success());
    assert!(
        String::from_utf8_lossy(&too_many.stderr).contains("more than 1000000 records"),
        "{too_many:?}"
    );
    let log = host.log_text();
    assert_eq!(
        log.matches("audit tail through the host").count(),
        3,
        "{log}"
    );
}

/// The operator's memory changes go through the host: a schema registered through it is
/// recorded as the operator's act, and a change the store refuses is the caller's error,
/// said as embedded.
#[test]
fn memory_changes_go_through_the_host() {
    let f = fixture();
    init(&f, "");
    let schema = f.ws.join("trip.json");
    std::fs::write(&schema, r#"{"type": "object", "required": ["city"]}"#).unwrap();
    let memory = |args: &[&str]| {
        let mut all = vec!["memory"];
        all.extend_from_slice(args);
        super::exec_fixture::airlock(&f.home, &all)
    };
    let embedded = memory(&["purge", "m-unknown"]);
    assert!(!embedded.status.success(), "{embedded:?}");
    let host = Host::start(&f.home);
    let o = memory(&["schema", "add", "trip", schema.to_str().unwrap()]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "registered task_state schema trip\n"
    );
    let through = memory(&["purge", "m-unknown"]);
    assert!(!through.status.success(), "{through:?}");
    assert_eq!(
        String::from_utf8_lossy(&through.stderr),
        String::from_utf8_lossy(&embedded.stderr)
    );
    let registered: Vec<serde_json::Value> = audit_records(&f.home)
        .into_iter()
        .filter(|r| r["kind"] == "memory-schema-registered")
        .collect();
    assert_eq!(registered.len(), 1);
    assert_eq!(registered[0]["detail"]["name"], "trip");
    assert_eq!(registered[0]["detail"]["decided_by"]["principal"], "owner");
    let log = host.log_text();
    assert_eq!(
        log.matches("memory change through the host").count(),
        2,
        "{log}"
    );
    drop(host);
    assert!(verify(&f.home).status.success());
}

/// The inline approval of an `exec` releases the command only if the policy in force when
/// the operator answers still permits it: a forbid added while the prompt waited refuses
/// it, as it does a held tool call, commit or proxy request.
#[test]
fn an_inline_approval_does_not_override_a_forbid_added_while_the_prompt_waited() {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    let f = fixture();
    init(&f, "");
    let command = "rm -f ./absent-tightened";
    let mut child = exec_on_a_terminal(&f, command, "");
    wait_for("the prompt", || {
        records_of(&f, command)
            .iter()
            .any(|(_, r)| r["decision"] == "ask")
    });
    let local = f.home.join("config/policy/local");
    std::fs::create_dir_all(&local).unwrap();
    std::fs::set_permissions(&local, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(
        local.join("no-exec.cedar"),
        "@id(\"local.no-exec\")\n@reason(\"nothing runs now\")\n@help(\"remove config/policy/local/no-exec.cedar\")\nforbid (principal, action == Airlock::Action::\"exec\", resource);\n",
    )
    .unwrap();
    child.stdin.take().unwrap().write_all(b"y\n").unwrap();
    let o = child.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).replace("\r\n", "\n");
    assert!(
        out.contains("the policy now forbids it (local.no-exec)"),
        "{out}"
    );
    let kinds: Vec<String> = records_of(&f, command)
        .into_iter()
        .map(|(kind, _)| kind)
        .collect();
    assert!(kinds.iter().any(|k| k == "approval-refused"), "{kinds:?}");
    assert!(!kinds.iter().any(|k| k == "execution"), "{kinds:?}");
    assert!(verify(&f.home).status.success());
}

/// A loopback HTTP server that keeps the head of every request it gets (lower-cased),
/// and answers each `200`.
fn recording_server() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::{BufRead, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let heads = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = heads.clone();
    std::thread::spawn(move || {
        for tcp in listener.incoming() {
            let Ok(mut tcp) = tcp else { continue };
            let mut reader = std::io::BufReader::new(tcp.try_clone().unwrap());
            let (mut head, mut line) = (String::new(), String::new());
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line.trim() != "" {
                head.push_str(&line.to_lowercase());
                line.clear();
            }
            kept.lock().unwrap().push(head);
            let _ = tcp.write_all(
                b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\nconnection: close\r\n\r\nok\n",
            );
        }
    });
    (port, heads)
}

/// `secret rm` reaches the host from the next run on. A run given the secret through the
/// host has the proxy swap its placeholder for the value, on the one host it is bound to;
/// once the secret is removed, the next run that names it is refused before anything
/// runs, naming the secret, and the server sees nothing more.
#[test]
fn a_secret_removed_while_the_host_runs_is_sent_by_no_later_run() {
    let f = fixture();
    init(&f, "");
    let (port, heads) = recording_server();
    let target = format!("127.0.0.1:{port}");
    for args in [
        &["net", "allow", &target, "--methods", "GET"][..],
        &["net", "allow-private", &target][..],
    ] {
        let o = super::exec_fixture::airlock(&f.home, args);
        assert!(o.status.success(), "{args:?}: {o:?}");
    }
    let o = set_secret(&f.home, "tok", "s3cr3t-value-42", &target, "http");
    assert!(o.status.success(), "{o:?}");
    let _host = Host::start(&f.home);
    let curl = format!(
        "curl -s -o /dev/null --max-time 20 -w '%{{http_code}}' -H \"Authorization: Bearer $TOK\" http://{target}/x"
    );
    let o = exec(&f, &["--secret", "tok"], &curl);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "200", "{o:?}");
    {
        let seen = heads.lock().unwrap();
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert!(
            seen[0].contains("authorization: bearer s3cr3t-value-42"),
            "the proxy put the value in: {seen:?}"
        );
    }
    let o = super::exec_fixture::airlock(&f.home, &["secret", "rm", "tok"]);
    assert!(o.status.success(), "{o:?}");
    let o = exec(&f, &["--secret", "tok"], &curl);
    assert!(!o.status.success(), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("tok"),
        "the refusal names the secret: {o:?}"
    );
    assert_eq!(o.stdout, b"", "nothing ran: {o:?}");
    assert_eq!(
        heads.lock().unwrap().len(),
        1,
        "the server saw no more requests"
    );
    assert!(verify(&f.home).status.success());
}

fn host_pid_in_status(f: &Fixture) -> Option<u64> {
    status(f)["host"]["pid"].as_u64()
}

/// SIGTERM: the host takes no new run, lets the one in flight finish with its records, and
/// exits; a command that came meanwhile waits for it and then runs embedded.
#[test]
fn sigterm_lets_the_run_in_flight_finish_and_new_commands_run_embedded() {
    let f = fixture();
    init(&f, "");
    let mut host = Host::start(&f.home);
    let first = background_exec(&f, "sleep 2; echo done-1");
    wait_for("the run", || status(&f)["host"]["runs_active"] == 1);
    host.signal(nix::sys::signal::Signal::SIGTERM);
    let second = exec(&f, &[], "echo second");
    assert_eq!(
        String::from_utf8_lossy(&second.stdout),
        "second\n",
        "{second:?}"
    );
    let o = first.wait_with_output().unwrap();
    assert!(o.status.success(), "{o:?}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "done-1\n");
    assert!(host.wait().success(), "{}", host.log_text());
    let recs = audit_records(&f.home);
    let ran = recs
        .iter()
        .find(|r| r["kind"] == "execution" && r["action"]["command"] == "sleep 2; echo done-1")
        .expect("the run in flight was recorded");
    assert_eq!(ran["detail"]["status"], 0);
    assert!(recs.iter().any(|r| r["kind"] == "host-stop"));
    assert!(verify(&f.home).status.success());
}

/// A host in the moment it stops, played by the test: it holds the state dir's lock and
/// has both sockets; the API's takes no connection (its listener is closed, as a stopping
/// host's is), and what the exec socket takes the test answers.
struct StoppingHost {
    lock: nix::fcntl::Flock<std::fs::File>,
    dir: std::path::PathBuf,
    exec: std::os::unix::net::UnixListener,
}

impl StoppingHost {
    fn start(f: &Fixture) -> StoppingHost {
        use nix::fcntl::{Flock, FlockArg};
        use std::io::Write;
        use std::os::unix::fs::PermissionsExt;
        let state = f.home.join("state");
        let lock = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(state.join("host.lock"))
            .unwrap();
        let mut lock = Flock::lock(lock, FlockArg::LockExclusiveNonblock)
            .map_err(|(_, e)| e)
            .unwrap();
        writeln!(lock, "{}", std::process::id()).unwrap();
        let dir = state.join("host");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let exec = std::os::unix::net::UnixListener::bind(dir.join("exec.sock")).unwrap();
        exec.set_nonblocking(true).unwrap();
        drop(std::os::unix::net::UnixListener::bind(dir.join("api.sock")).unwrap());
        StoppingHost { lock, dir, exec }
    }

    /// Answer the next `n` exec connections as a stopping host does; how many came.
    fn refuse_execs(&self, n: usize) -> usize {
        use std::io::Write;
        let mut refused = 0;
        let deadline = Instant::now() + Duration::from_secs(30);
        while refused < n && Instant::now() < deadline {
            match self.exec.accept() {
                Ok((mut stream, _)) => {
                    refused += 1;
                    stream.set_nonblocking(false).unwrap();
                    let answer = r#"{"exit":null,"error":"the host is stopping","help":"run the command again once it is back, or without it","limit":null,"stopping":true}"#;
                    let _ = writeln!(stream, "{answer}");
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Err(e) => panic!("accepting: {e}"),
            }
        }
        refused
    }

    /// Stop as the host does: the sockets go first, the lock a moment later.
    fn stop(self) {
        std::fs::remove_file(self.dir.join("exec.sock")).unwrap();
        std::fs::remove_file(self.dir.join("api.sock")).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        drop(self.lock);
    }
}

/// A host that is stopping refuses a request it took on its socket in the moment before
/// the socket went, and says so before reading it. The command is not lost: the front and
/// the full program each wait for that host to be gone, and the command runs embedded.
#[test]
fn a_command_the_stopping_host_refused_runs_embedded_once_it_is_gone() {
    let f = fixture();
    init(&f, "");
    let host = StoppingHost::start(&f);
    std::thread::scope(|scope| {
        let client = scope.spawn(|| exec(&f, &[], "echo ran-embedded"));
        assert_eq!(
            host.refuse_execs(2),
            2,
            "the front and the full program each ask the host once"
        );
        host.stop();
        let out = client.join().unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "ran-embedded\n",
            "{out:?}"
        );
        assert!(
            !String::from_utf8_lossy(&out.stderr).contains("error:"),
            "the refusal is not shown as the command's error: {out:?}"
        );
    });
    let recs = audit_records(&f.home);
    let ran = recs
        .iter()
        .find(|r| r["kind"] == "execution" && r["action"]["command"] == "echo ran-embedded")
        .expect("the command ran, embedded, and was recorded");
    assert_eq!(ran["detail"]["status"], 0);
    assert!(verify(&f.home).status.success());
}

/// `airlock run` meets the same moment: the host refused its request unread, so the run
/// waits for that host to be gone and runs embedded, and the model is asked for one turn
/// only (the refused request never reached a model).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_the_stopping_host_refused_runs_embedded_once_it_is_gone() {
    use airlock_agent::scripted::{ScriptedModel, Step};
    let f = fixture();
    init(&f, "");
    let host = StoppingHost::start(&f);
    let model = ScriptedModel::start([Step::text("Answered without the host.")])
        .await
        .unwrap();
    let ws = f.ws.display().to_string();
    let mut run = super::exec_fixture::scripted_command(&f.home, &model);
    run.args(["run", "--json", "--workspace", &ws, "Say hello"]);
    let client = tokio::task::spawn_blocking(move || run.output().unwrap());
    let refused = tokio::task::spawn_blocking(move || {
        let refused = host.refuse_execs(1);
        host.stop();
        refused
    })
    .await
    .unwrap();
    assert_eq!(refused, 1, "the run asks the host once");
    let out = client.await.unwrap();
    let report = super::exec_fixture::report_ok(&out);
    assert_eq!(report["text"], "Answered without the host.", "{report:#}");
    assert_eq!(model.requests().len(), 1, "one turn, embedded");
    assert!(verify(&f.home).status.success());
}

/// The same moment on the API's socket: a command found the host, whose socket then took
/// no connection. Nothing was sent, so the command waits for the host to be gone and
/// runs embedded, rather than failing (`status`, and a command that acts: `tasks add`).
#[test]
fn an_api_command_that_finds_the_host_stopping_runs_embedded_once_it_is_gone() {
    let f = fixture();
    init(&f, "");
    let host = StoppingHost::start(&f);
    let run = |args: &[&str]| super::exec_fixture::airlock(&f.home, args);
    std::thread::scope(|scope| {
        let status = scope.spawn(|| run(&["status", "--json"]));
        let added = scope.spawn(|| {
            run(&[
                "tasks",
                "add",
                "--cron",
                "0 8 * * *",
                "--prompt",
                "summarise the news",
            ])
        });
        std::thread::sleep(Duration::from_millis(700));
        assert!(
            !status.is_finished() && !added.is_finished(),
            "they wait while the host holds the state dir"
        );
        host.stop();
        let status = status.join().unwrap();
        assert!(status.status.success(), "{status:?}");
        let report: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
        assert!(report["host"].is_null(), "answered embedded: {report}");
        let added = added.join().unwrap();
        assert!(added.status.success(), "{added:?}");
    });
    let listed = run(&["tasks", "list", "--json"]);
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains("\"summarise the news\""),
        "{listed:?}"
    );
    assert!(verify(&f.home).status.success());
}

/// I4: a sandboxed command cannot reach the host's sockets. For an operator who is not
/// root the sandbox runs as the operator's own uid, which the sockets' `SO_PEERCRED` check
/// would let in, so what must keep it out is the mount plan: Airlock's home (and with it
/// `state/host/{api,exec}.sock`) is never in the sandbox. Tried through the host and
/// embedded, as the caller and, when the tests run as root, as an unprivileged operator.
#[test]
fn i4_a_sandboxed_command_cannot_reach_the_hosts_sockets() {
    sandbox_cannot_reach_the_host(None);
    if nix::unistd::geteuid().is_root() {
        sandbox_cannot_reach_the_host(Some(4245));
    }
}

fn sandbox_cannot_reach_the_host(as_uid: Option<u32>) {
    use std::os::unix::process::CommandExt;
    let f = fixture();
    let run_as = |args: &[&str]| {
        let mut c = Command::new(airlock_bin());
        c.env("AIRLOCK_HOME", &f.home)
            .current_dir(&f.ws)
            .args(args)
            .stdin(Stdio::null());
        if let Some(uid) = as_uid {
            c.uid(uid).gid(uid);
        }
        c.output().unwrap()
    };
    if let Some(uid) = as_uid {
        std::fs::create_dir_all(&f.home).unwrap();
        std::os::unix::fs::chown(&f.home, Some(uid), Some(uid)).unwrap();
    }
    let o = run_as(&["init"]);
    assert!(o.status.success(), "{as_uid:?}: {o:?}");
    let mut host = Host::start_as(&f.home, as_uid);
    let host_dir = f.home.join("state/host");
    let api = host_dir.join("api.sock");
    let exec_sock = host_dir.join("exec.sock");
    // The sockets are there on the host, so their absence below is the sandbox's doing.
    for p in [&api, &exec_sock] {
        use std::os::unix::fs::FileTypeExt;
        let meta = std::fs::metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(meta.file_type().is_socket(), "{}", p.display());
    }
    let paths = [&api, &exec_sock, &host_dir, &f.home];
    let mut probe = String::new();
    for p in paths {
        probe.push_str(&format!(
            "if [ -e '{0}' ] || [ -S '{0}' ]; then echo 'visible {0}'; else echo 'absent {0}'; fi; ",
            p.display()
        ));
    }
    // And an attempt to talk to the API, which must fail however far it gets.
    probe.push_str(&format!(
        "if curl -s --max-time 5 --unix-socket '{}' http://host/v1/status; then echo reached; else echo 'curl failed'; fi",
        api.display()
    ));
    for route in ["through the host", "embedded"] {
        if route == "embedded" {
            host.signal(nix::sys::signal::Signal::SIGTERM);
            host.wait();
        }
        let o = run_as(&["exec", "--", &probe]);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{as_uid:?} {route}: {o:?}");
        for p in paths {
            assert!(
                out.contains(&format!("absent {}", p.display())),
                "{as_uid:?} {route}: {} is visible in the sandbox: {out}",
                p.display()
            );
        }
        assert!(out.contains("curl failed"), "{as_uid:?} {route}: {out}");
        assert!(!out.contains("reached"), "{as_uid:?} {route}: {out}");
        assert!(!out.contains("\"host\""), "{as_uid:?} {route}: {out}");
    }
    let v = run_as(&["audit", "verify"]);
    assert!(v.status.success(), "{v:?}");
}

/// What a `run --json` report says, without what differs run to run (ids, timings).
fn comparable(report: &serde_json::Value) -> serde_json::Value {
    let calls: Vec<_> = report["tool_calls"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|c| {
            serde_json::json!({"tool": c["tool"], "decision": c["decision"],
                               "executed": c["executed"], "result": c["result"],
                               "is_error": c["is_error"]})
        })
        .collect();
    serde_json::json!({"outcome": report["outcome"], "text": report["text"],
                       "tool_calls": calls, "exit_code": report["exit_code"]})
}

/// `airlock run` through a running host: the same report, the same kinds of records and
/// the same exit status as embedded, with the caller's terminal; and the session ran in
/// the host (its log says so).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_through_the_host_gives_the_same_report_and_records_as_embedded() {
    use airlock_agent::scripted::{ScriptedModel, Step};
    let f = fixture();
    init(&f, "");
    let script = || {
        [
            Step::tool_call(
                "c1",
                "shell",
                r#"{"command":"echo hello > out.txt && cat out.txt"}"#,
            ),
            Step::text("Wrote it."),
        ]
    };
    let run = |model: &ScriptedModel| {
        let mut cmd = super::exec_fixture::scripted_command(&f.home, model);
        cmd.current_dir(&f.ws)
            .args(["run", "--json", "--approval-timeout", "5", "Write hello"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    };
    let kinds_of = |from: usize| -> Vec<String> {
        audit_records(&f.home)[from..]
            .iter()
            .map(|r| format!("{} {}", r["kind"], r["action"]["type"]))
            .filter(|k| !k.starts_with("\"host-"))
            .collect()
    };
    let start = audit_records(&f.home).len();
    let model = ScriptedModel::start(script()).await.unwrap();
    let mut cmd = run(&model);
    let embedded = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let first = super::exec_fixture::report_ok(&embedded);
    let embedded_kinds = kinds_of(start);

    let host = Host::start(&f.home);
    let before = audit_records(&f.home).len();
    let model = ScriptedModel::start(script()).await.unwrap();
    let mut cmd = run(&model);
    let through = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let second = super::exec_fixture::report_ok(&through);
    assert_eq!(comparable(&first), comparable(&second));
    assert_eq!(second["tool_calls"][0]["decision"], "allow", "{second:#}");
    assert_ne!(first["session"], second["session"]);
    assert_eq!(embedded_kinds, kinds_of(before));
    assert!(
        embedded_kinds.iter().any(|k| k.contains("execution")),
        "{embedded_kinds:?}"
    );
    // Both sessions' turns count against today's budget, which status shows with its
    // limits (the ones `airlock init` writes).
    let today = &status(&f)["budget_today"];
    assert!(today["used"]["turns"].as_u64() >= Some(2), "{today}");
    assert!(today["limits"]["turns"].as_u64().is_some(), "{today}");
    assert!(
        host.log_text()
            .contains("an agent session through the host"),
        "{}",
        host.log_text()
    );
    drop(host);
    assert!(verify(&f.home).status.success());
}

/// `[host] max_sessions`: a chat holding the only place keeps a `run` out, refused by the
/// limit's name without running anything. The chat lives in the host, so its place stays
/// held after its client leaves, until the session has been idle for
/// `[host] session_idle_secs`; then the host closes it and the place is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_past_max_sessions_is_refused_by_the_limits_name() {
    use airlock_agent::scripted::{ScriptedModel, Step};
    use std::io::Write;
    let f = fixture();
    init(&f, "\n[host]\nmax_sessions = 1\nsession_idle_secs = 2\n");
    let host = Host::start(&f.home);
    let model = ScriptedModel::start([Step::text("Hello from the model.")])
        .await
        .unwrap();
    let mut chat = super::exec_fixture::scripted_command(&f.home, &model);
    chat.current_dir(&f.ws)
        .arg("chat")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut chat = chat.spawn().unwrap();
    wait_for("the chat to hold its place", || {
        status(&f)["host"]["sessions_running"] == 1
    });
    // The conversation is in the host's own process: the host starts no child for it.
    assert!(
        children_of(host.child.id()).is_empty(),
        "{:?}",
        children_of(host.child.id())
    );
    let refused_run = || {
        let mut run = super::exec_fixture::scripted_command(&f.home, &model);
        run.current_dir(&f.ws).args(["run", "--json", "Say hello"]);
        run
    };
    let mut run = refused_run();
    let refused = tokio::task::spawn_blocking(move || run.output().unwrap())
        .await
        .unwrap();
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("host.max_sessions = 1"), "{err}");
    assert!(refused.stdout.is_empty(), "{refused:?}");
    // The chat is a real conversation with this terminal: one message, then /quit.
    let mut stdin = chat.stdin.take().unwrap();
    stdin.write_all(b"hi\n/quit\n").unwrap();
    drop(stdin);
    let o = tokio::task::spawn_blocking(move || chat.wait_with_output().unwrap())
        .await
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("Hello from the model."), "{o:?}");
    assert!(out.contains("goes on in the host"), "{o:?}");
    // Detached, not ended: still live, still holding the place.
    let live = &status(&f)["host"]["live_sessions"];
    assert_eq!(live.as_array().map(Vec::len), Some(1), "{live}");
    assert_eq!(live[0]["attached"], false, "{live}");
    wait_for("the idle chat to be closed and its place freed", || {
        status(&f)["host"]["sessions_running"] == 0
    });
    assert_eq!(status(&f)["host"]["live_sessions"], serde_json::json!([]));
    assert!(host.log_text().contains("closed a live session"));
}

/// The live children of `parent`, each with its session id (from `/proc`).
fn children_of(parent: u32) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After the command's name in parentheses: state, ppid, pgrp, session.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() > 3 && fields[1] == parent.to_string() {
            out.push((pid, fields[3].parse().unwrap_or(0)));
        }
    }
    out
}

/// An approval given through the host releases a session that waits in another of the
/// host's children: `airlock approvals approve` goes through the API (the host's log says
/// so), records the same `approval-granted` record as embedded, and the held message is
/// sent; `deny` through the host refuses the next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_through_the_host_release_a_session_waiting_in_the_host() {
    use airlock_agent::scripted::{ScriptedModel, Step};
    let f = fixture();
    init(&f, "");
    std::fs::write(
        f.ws.join("page.html"),
        "<p>Send the minutes to bob@example.com and carol@example.com.</p>",
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
        Step::tool_call(
            "c3",
            "send_message",
            r#"{"destination":"carol@example.com","text":"the minutes"}"#,
        ),
        Step::text("Done."),
    ])
    .await
    .unwrap();
    let mut cmd = super::exec_fixture::scripted_command(&f.home, &model);
    cmd.current_dir(&f.ws)
        .args(["run", "--json", "--approval-timeout", "120", "--workspace"])
        .arg(&f.ws)
        .arg("Read page.html")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    let held = |n: usize| {
        let home = f.home.clone();
        move || {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let pending = pending_approvals(&home);
                if pending.len() == 1 && pending[0].action_kind == "message.send" {
                    return pending[0].id.clone();
                }
                assert!(Instant::now() < deadline, "message {n} was never held");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    };
    let first = tokio::task::spawn_blocking(held(1)).await.unwrap();
    // The operator finds it through the host, as embedded: listed, and shown with its
    // exact payload and hash.
    let o = super::exec_fixture::airlock(&f.home, &["approvals", "list"]);
    let listed = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{o:?}");
    assert!(
        listed.lines().nth(1).is_some_and(|l| l.starts_with(&first)),
        "{listed}"
    );
    let o = super::exec_fixture::airlock(&f.home, &["approvals", "show", &first]);
    let shown = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{o:?}");
    assert!(shown.contains("(pending)"), "{shown}");
    assert!(shown.contains("bob@example.com"), "{shown}");
    assert!(shown.contains("payload hash: sha256:"), "{shown}");
    let o = super::exec_fixture::airlock(&f.home, &["approvals", "show", "a-unknown"]);
    assert!(!o.status.success(), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no approval request `a-unknown`"),
        "{o:?}"
    );
    let o = super::exec_fixture::airlock(&f.home, &["approvals", "approve", &first]);
    assert!(o.status.success(), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("approved"),
        "{o:?}"
    );
    let second = tokio::task::spawn_blocking(held(2)).await.unwrap();
    assert_ne!(first, second);
    let o = super::exec_fixture::airlock(
        &f.home,
        &["approvals", "deny", &second, "--reason", "not carol"],
    );
    assert!(o.status.success(), "{o:?}");
    let o = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let r = super::exec_fixture::report_ok(&o);
    let calls = r["tool_calls"].as_array().unwrap();
    assert_eq!(calls[1]["executed"], true, "{r:#}");
    assert_eq!(calls[2]["executed"], false, "{r:#}");
    let log = host.log_text();
    assert!(log.contains("approving through the host"), "{log}");
    assert!(log.contains("denying through the host"), "{log}");
    assert!(log.contains("listing approvals through the host"), "{log}");
    assert!(
        log.contains("showing an approval through the host"),
        "{log}"
    );
    let kinds: Vec<String> = audit_records(&f.home)
        .iter()
        .map(|r| r["kind"].as_str().unwrap_or("").to_string())
        .collect();
    assert!(kinds.iter().any(|k| k == "approval-granted"), "{kinds:?}");
    assert!(kinds.iter().any(|k| k == "approval-denied"), "{kinds:?}");
    drop(host);
    assert!(verify(&f.home).status.success());
}
