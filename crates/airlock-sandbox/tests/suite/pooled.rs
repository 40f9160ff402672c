//! I2 through a pool: a sandbox built ahead of its run ([`Sandbox::build_pooled`]) serves
//! one run, gets that run's own workspace, working directory and environment attached
//! before its confinement is checked, and the check covers them.

use airlock_core::action::ExecAction;
use airlock_core::testing::authorize_for_tests;
use airlock_sandbox::attestation::FileId;
use airlock_sandbox::{OutputMode, PooledSandbox, RunOutcome, SandboxError, SandboxProfile};

use super::common::*;

fn pooled(profile: &SandboxProfile) -> PooledSandbox {
    sandbox()
        .build_pooled(profile)
        .unwrap_or_else(|e| panic!("building a pooled sandbox: {e}"))
}

/// Attach `profile`'s run to `sandbox` and run `command` in `cwd` (relative to the
/// workspace).
fn run_pooled(
    sandbox: PooledSandbox,
    profile: &SandboxProfile,
    cwd: &str,
    command: &str,
) -> Result<RunOutcome, SandboxError> {
    let prepared = sandbox.attach(profile, cwd, OutputMode::Capture, |_| {})?;
    prepared.run(&authorize_for_tests(ExecAction {
        command: command.into(),
        cwd: cwd.into(),
        env: vec![],
    }))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn i2_a_pooled_sandbox_serves_one_run_and_the_next_run_sees_nothing_of_it() {
    let (_d, ws) = workspace();
    let profile = SandboxProfile::new(&ws);
    let (first, second) = (pooled(&profile), pooled(&profile));
    let (pid1, pid2) = (first.pid(), second.pid());
    assert_ne!(pid1, pid2, "two pooled sandboxes are two helpers");
    // The first run leaves a file in its /tmp and a process behind.
    let out = run_pooled(
        first,
        &profile,
        "",
        "echo left > /tmp/left-behind; (setsid sleep 300 </dev/null >/dev/null 2>&1 &); echo ok",
    )
    .expect("first run");
    assert_eq!(out.status, 0, "{}", text(&out.stderr));
    assert!(
        processes_with("sleep 300").is_empty(),
        "the first run's process outlived its sandbox: {:?}",
        processes_with("sleep 300")
    );
    let first_ns = out.attestation.namespaces.clone();
    let out = run_pooled(
        second,
        &profile,
        "",
        "test -e /tmp/left-behind && echo seen; ps -e -o comm= 2>/dev/null | grep -c sleep; echo done",
    )
    .expect("second run");
    assert_eq!(out.status, 0, "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(!stdout.contains("seen"), "{stdout}");
    assert!(stdout.starts_with("0\n"), "a sleep is visible: {stdout}");
    for ns in ["mnt", "pid", "net"] {
        assert_ne!(
            first_ns.get(ns),
            out.attestation.namespaces.get(ns),
            "the two runs share the {ns} namespace"
        );
    }
    // Both helpers are gone.
    for pid in [pid1, pid2] {
        assert!(gone_soon(pid), "helper {pid} is still there");
    }
}

/// The helper is reaped after the run returns (its exit tears down the namespaces), so
/// the run must not return before the output is whole and the sandbox's processes are
/// gone: a payload that writes a lot on both streams just before it ends, and leaves a
/// process behind that holds both, gets every byte, and nothing of it outlives the run.
/// Both ways a sandbox is had: taken from the pool, and built for the run.
#[test]
fn i2_the_output_is_whole_and_the_tree_gone_when_the_run_returns() {
    let (_d, ws) = workspace();
    let profile = SandboxProfile::new(&ws);
    let marker = format!("held-{}", std::process::id());
    let command = format!(
        "(exec -a {marker} sleep 300 &); head -c 300000 /dev/zero | tr '\\0' o; head -c 200000 /dev/zero | tr '\\0' e >&2"
    );
    let pooled_run = run_pooled(pooled(&profile), &profile, "", &command).expect("pooled run");
    let built_run = run_in(&ws, &profile, &command).expect("run");
    for (how, out) in [("pooled", pooled_run), ("built", built_run)] {
        assert_eq!(out.status, 0, "{how}: {}", text(&out.stderr));
        assert!(!out.truncated, "{how}");
        assert_eq!(out.stdout.len(), 300_000, "{how}");
        assert!(out.stdout.iter().all(|b| *b == b'o'), "{how}");
        assert_eq!(out.stderr.len(), 200_000, "{how}");
        assert!(
            processes_with(&marker).is_empty(),
            "{how}: a process of the run outlived it: {:?}",
            processes_with(&marker)
        );
    }
}

#[test]
fn i2_a_pooled_sandbox_gets_the_runs_own_workspace_cwd_and_environment() {
    let (_a, ws_a) = workspace();
    let (_b, ws_b) = workspace();
    std::fs::write(ws_a.join("mine"), "a").unwrap();
    std::fs::write(ws_b.join("theirs"), "b").unwrap();
    std::fs::create_dir(ws_a.join("sub")).unwrap();
    if is_root() {
        std::os::unix::fs::chown(ws_a.join("sub"), Some(65534), Some(65534)).unwrap();
    }
    // Built for B's profile: the base holds nothing of either workspace.
    let mut profile_b = SandboxProfile::new(&ws_b);
    profile_b.env.insert("RUN_MARK".into(), "b".into());
    let sandbox = pooled(&profile_b);
    let mut profile_a = SandboxProfile::new(&ws_a);
    profile_a.env.insert("RUN_MARK".into(), "a".into());
    let out = run_pooled(
        sandbox,
        &profile_a,
        "sub",
        &format!(
            "pwd; echo \"$RUN_MARK\"; ls {a}; ls {b} 2>&1 || echo no-b",
            a = ws_a.display(),
            b = ws_b.display()
        ),
    )
    .expect("run");
    let stdout = text(&out.stdout);
    assert_eq!(out.status, 0, "{stdout}{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], ws_a.join("sub").display().to_string());
    assert_eq!(lines[1], "a");
    assert!(
        lines.contains(&"mine") && !stdout.contains("theirs"),
        "{stdout}"
    );
    assert!(stdout.contains("no-b"), "{stdout}");
    // The attestation says so, and the host checked it.
    let attached = out
        .attestation
        .attached
        .expect("the attached parts are attested");
    assert_eq!(attached.cwd, ws_a.join("sub"));
    assert_eq!(attached.workspace, FileId::of(&ws_a).unwrap());
    assert_eq!(
        attached.env_sha256,
        airlock_sandbox::payload_env::digest(&profile_a.env)
    );
}

#[test]
fn i2_a_pooled_sandbox_for_another_confinement_is_refused_and_leaves_no_process() {
    let (_d, ws) = workspace();
    let old = SandboxProfile::new(&ws);
    let sandbox = pooled(&old);
    let pid = sandbox.pid();
    assert!(sandbox.is_alive());
    let mut new = old.clone();
    new.rlimits.processes = 77;
    assert_ne!(
        airlock_sandbox::pool_key(&old).unwrap(),
        airlock_sandbox::pool_key(&new).unwrap()
    );
    assert_eq!(
        sandbox.key().unwrap(),
        airlock_sandbox::pool_key(&old).unwrap()
    );
    let err = run_pooled(sandbox, &new, "", "echo ran").expect_err("must be refused");
    assert!(matches!(err, SandboxError::PoolMismatch(_)), "{err}");
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the refused pooled sandbox's helper is still alive"
    );
    // A sandbox built for the new profile runs under it.
    let out = run_pooled(pooled(&new), &new, "", "ulimit -u").expect("run");
    assert_eq!(text(&out.stdout), "77\n");
}

#[test]
fn i2_a_pooled_sandbox_that_died_is_seen_dead_and_an_unused_one_leaves_no_process() {
    let (_d, ws) = workspace();
    let profile = SandboxProfile::new(&ws);
    let sandbox = pooled(&profile);
    let pid = sandbox.pid();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while sandbox.is_alive() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        !sandbox.is_alive(),
        "a killed pooled sandbox still looks alive"
    );
    let err =
        run_pooled(sandbox, &profile, "", "echo ran").expect_err("a dead sandbox runs nothing");
    assert!(!matches!(err, SandboxError::PoolMismatch(_)), "{err}");

    let unused = pooled(&profile);
    let pid = unused.pid();
    drop(unused);
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    assert!(processes_with("airlock-sandbox-init")
        .iter()
        .all(|p| *p != pid));
}
