//! The probe binary run *outside* any sandbox: probes whose attack works on an unconfined host
//! must report `pass: false`, with the real outcome. This proves the probes can fail, so a
//! passing run inside the sandbox means something.

use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::process::{Command, Output};

use serde_json::Value;

const PROBES: &str = env!("CARGO_BIN_EXE_airlock-probes");

/// Descriptor number the test hands the probe process to find.
const LEAKED_FD: i32 = 7;

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

fn results(output: &Output) -> (Vec<Value>, Value) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line {l:?}: {e}")))
        .collect();
    let summary = lines.pop().expect("summary line")["summary"].clone();
    (lines, summary)
}

fn result<'a>(results: &'a [Value], probe: &str) -> &'a Value {
    results
        .iter()
        .find(|r| r["probe"] == probe)
        .unwrap_or_else(|| panic!("no result for {probe}"))
}

#[test]
fn attacks_that_work_on_the_host_are_reported_as_failures() {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    let outside = dir.path().join("outside");
    std::fs::write(&outside, "outside\n").unwrap();
    let leaked = std::fs::File::open("/dev/null").unwrap();

    let mut probes = vec![
        "tcp_host_loopback",
        "env_minimal",
        "env_no_secrets",
        "no_inherited_fds",
        "symlink_outside_read",
        "hardlink_outside",
        "chmod_setuid",
        "open_creat_setuid",
        "fchmod_setgid",
        "unix_dgram_pair",
    ];
    if is_root() {
        probes.extend([
            "caps_effective_zero",
            "setuid_root",
            "etc_shadow_read",
            "ptrace_attach_pid1",
        ]);
    }
    let mut command = Command::new(PROBES);
    command
        .args(["--json", "--only", &probes.join(",")])
        .arg("--host-tcp")
        .arg(port.to_string())
        .arg("--outside-path")
        .arg(&outside)
        .arg("--workspace")
        .arg(&workspace)
        .env("AIRLOCK_PROBE_TEST_TOKEN", "not-a-real-token");
    let source_fd = std::os::fd::AsRawFd::as_raw_fd(&leaked);
    // SAFETY: dup2 and fcntl are async-signal-safe; between fork and exec they only place
    // an open descriptor without close-on-exec at LEAKED_FD. When the file already has that
    // number, dup2 would do nothing and leave close-on-exec set, so the flag is cleared.
    unsafe {
        command.pre_exec(move || {
            let placed = if source_fd == LEAKED_FD {
                libc::fcntl(LEAKED_FD, libc::F_SETFD, 0)
            } else {
                libc::dup2(source_fd, LEAKED_FD)
            };
            if placed < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let output = command.output().unwrap();
    let (results, summary) = results(&output);

    assert_eq!(
        output.status.code(),
        Some(1),
        "exit status must report failures"
    );
    assert_eq!(results.len(), probes.len());
    assert_eq!(summary["failed"], probes.len(), "{summary}");
    for r in &results {
        assert_eq!(r["pass"], false, "{r} passed on an unconfined host");
    }

    // Each failure carries the real outcome, not a skip.
    let got = |probe: &str| result(&results, probe)["got"].as_str().unwrap().to_string();
    assert_eq!(
        got("tcp_host_loopback"),
        format!("success (connected to 127.0.0.1:{port})")
    );
    listener.set_nonblocking(true).unwrap();
    assert!(
        listener.accept().is_ok(),
        "the TCP probe did not really connect"
    );
    assert!(
        got("env_minimal").contains("AIRLOCK_PROBE_TEST_TOKEN"),
        "{}",
        got("env_minimal")
    );
    assert!(got("env_no_secrets").contains("AIRLOCK_PROBE_TEST_TOKEN"));
    assert!(
        !got("env_no_secrets").contains("not-a-real-token"),
        "a value was printed"
    );
    assert!(
        got("no_inherited_fds").contains(&format!("{LEAKED_FD} -> /dev/null")),
        "{}",
        got("no_inherited_fds")
    );
    assert_eq!(got("symlink_outside_read"), "success (read 8 bytes)");
    assert!(got("hardlink_outside").starts_with("success (linked "));
    // Unconfined, the bits really are set (the probe removes its file again).
    for (setid, bits) in [
        ("chmod_setuid", "4755"),
        ("open_creat_setuid", "4755"),
        ("fchmod_setgid", "2755"),
    ] {
        assert!(
            got(setid).starts_with("success (") && got(setid).ends_with(&format!("{bits})")),
            "{setid}: {}",
            got(setid)
        );
    }
    assert_eq!(got("unix_dgram_pair"), "success (returned 0)");
    if is_root() {
        assert!(got("caps_effective_zero").starts_with("CapEff="));
        assert_eq!(got("setuid_root"), "success (returned 0)");
        assert!(got("etc_shadow_read").starts_with("success (read "));
        // Not host-safe: skipped when privileged, and a skip is never a pass.
        assert!(got("ptrace_attach_pid1").starts_with("not run: "));
    }

    // The planted links were removed again; the outside file is intact.
    assert_eq!(std::fs::read_dir(&workspace).unwrap().count(), 0);
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "outside\n");
    drop(leaked);
}

#[test]
fn list_prints_at_least_forty_unique_probes() {
    let output = Command::new(PROBES)
        .args(["--list", "--json"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let names: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["probe"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(names.len() >= 40, "{} probes", names.len());
    let unique: std::collections::HashSet<_> = names.iter().collect();
    assert_eq!(unique.len(), names.len());
}

#[test]
fn unknown_probe_names_are_refused_with_help() {
    let output = Command::new(PROBES)
        .args(["--only", "no_such_probe"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("unknown probe `no_such_probe`"), "{stderr}");
    assert!(
        stderr.contains("help: run `airlock-probes --list`"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty());
}
