//! `airlock exec` end to end: Gate, audit and the real sandbox.

use std::path::Path;
use std::process::{Command, Output, Stdio};

mod exec_fixture;
use exec_fixture::{airlock_bin, fixture, Fixture};

mod shell_differential;

mod host_exec;
mod host_fixture;
mod https_run_fixture;
mod loopback_collector;

fn exec(f: &Fixture, extra: &[&str], cmd: &str) -> Output {
    Command::new(airlock_bin())
        .env("AIRLOCK_HOME", &f.home)
        .current_dir(&f.ws)
        .arg("exec")
        .args(extra)
        .arg("--")
        .arg(cmd)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// A local policy that forbids any command running `touch` (`local.no-touch`); its
/// directory, `config/policy/local`.
fn forbid_touch(home: &Path) -> std::path::PathBuf {
    let local = home.join("config/policy/local");
    std::fs::create_dir_all(&local).unwrap();
    std::fs::write(
        local.join("no-touch.cedar"),
        "@id(\"local.no-touch\")\n@reason(\"touch is not allowed here\")\nforbid (principal, action == Airlock::Action::\"exec\", resource)\nwhen { context.shell.programs.contains(\"touch\") };\n",
    )
    .unwrap();
    local
}

fn verify(home: &Path) -> Output {
    Command::new(airlock_bin())
        .env("AIRLOCK_HOME", home)
        .args(["audit", "verify"])
        .output()
        .unwrap()
}

fn audit_records(home: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(home.join("state/audit/log.jsonl")).unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn runs_in_the_sandbox_and_passes_the_exit_status() {
    let f = fixture();
    let o = exec(&f, &[], "echo out; touch created; exit 7");
    assert_eq!(
        o.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&o.stdout), "out\n");
    assert!(f.ws.join("created").exists());
    let o = exec(&f, &[], "kill -TERM $$");
    assert_eq!(o.status.code(), Some(128 + 15));
    // The execution record carries the attestation.
    let recs = audit_records(&f.home);
    let exec_rec = recs.iter().find(|r| r["kind"] == "execution").unwrap();
    let att = &exec_rec["detail"]["attestation"];
    assert!(att.is_object(), "{exec_rec}");
    assert!(verify(&f.home).status.success());
}

/// I1: the decision that names the exact command is in the log file before the payload
/// starts. Each payload announces itself in its overlay layer and then waits; while it
/// waits, the test reads the log on the host (the sandbox cannot see it).
#[test]
fn i1_the_decision_is_in_the_log_while_the_payload_runs() {
    let f = fixture();
    // Commands of different shapes, each recorded verbatim: quoting, a pipeline, a
    // subshell.
    let payloads = [
        "echo 'quoted  words' > started-0",
        "echo piped | cat > started-1",
        "(echo sub; echo shell) > started-2",
    ];
    for (i, start) in payloads.iter().enumerate() {
        // The payload waits a while after announcing itself: the host cannot release it
        // through the workspace, since a file made on the host during the run does not
        // show through the run's overlay (its lookup is cached), nor does a FIFO (overlayfs
        // gives it an inode of its own).
        let cmd = format!("{start}; sleep 10; echo released-{i}");
        let mut child = Command::new(airlock_bin())
            .env("AIRLOCK_HOME", &f.home)
            .current_dir(&f.ws)
            .args(["exec", "--", &cmd])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The run writes into its own overlay layer (`<state>/runs/<run>/upper`); the
        // workspace gets the file only when the run's change set is committed.
        let name = format!("started-{i}");
        let started = || {
            std::fs::read_dir(f.home.join("state/runs"))
                .into_iter()
                .flatten()
                .flatten()
                .any(|e| e.path().join("upper").join(&name).exists())
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !started() {
            if let Some(status) = child.try_wait().unwrap() {
                let o = child.wait_with_output().unwrap();
                panic!(
                    "{cmd}: ended ({status}) before it started: {}",
                    String::from_utf8_lossy(&o.stderr)
                );
            }
            assert!(std::time::Instant::now() < deadline, "{cmd} never started");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // The payload is running and waiting: its decision is already in the file.
        let recs = audit_records(&f.home);
        let decisions: Vec<_> = recs
            .iter()
            .filter(|r| r["kind"] == "decision" && r["action"]["command"] == cmd.as_str())
            .collect();
        assert_eq!(decisions.len(), 1, "{cmd}: {recs:#?}");
        assert_eq!(decisions[0]["decision"], "allow", "{:#}", decisions[0]);
        // And it is still running: its execution record is not written yet.
        assert_eq!(
            recs.iter().filter(|r| r["kind"] == "execution").count(),
            i,
            "{cmd}: {recs:#?}"
        );
        let o = child.wait_with_output().unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "{cmd}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            String::from_utf8_lossy(&o.stdout).ends_with(&format!("released-{i}\n")),
            "{}",
            String::from_utf8_lossy(&o.stdout)
        );
        // The run's file was committed once it ended (an untainted, plain change).
        assert!(f.ws.join(&name).exists(), "{cmd}: not committed");
    }
    assert!(verify(&f.home).status.success());
}

#[test]
fn the_run_is_a_session_working_in_the_operators_workspace_and_leaves_nothing_behind() {
    let f = fixture();
    // An empty workspace: finishing the run must not take it for a directory of its own.
    let o = exec(&f, &[], "true");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(f.ws.is_dir(), "the operator's workspace is still there");
    assert_eq!(std::fs::read_dir(&f.ws).unwrap().count(), 0);
    let recs = audit_records(&f.home);
    let exec_rec = recs.iter().find(|r| r["kind"] == "execution").unwrap();
    let id = exec_rec["session"]
        .as_str()
        .expect("the record names its session");
    let store = airlock_store::SqliteStore::open(f.home.join("state")).unwrap();
    let session = airlock_store::SessionStore::get_session(&store, id).unwrap();
    assert_eq!(session.workspace, f.ws.canonicalize().unwrap());
    assert_eq!(session.status, airlock_store::SessionStatus::Finished);
    let sessions_dir = f.home.join("state/sessions");
    let leftovers: Vec<_> = std::fs::read_dir(&sessions_dir)
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn a_denied_command_does_not_run() {
    let f = fixture();
    // A first run leaves the compiled policy in the config dir's cache; the forbid written
    // after it must still apply to the next run (the cache is keyed by the sources).
    let o = exec(&f, &[], "touch before-the-policy");
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(f.home.join("config/cache/policy-default.json").exists());
    let local = forbid_touch(&f.home);
    let o = exec(&f, &[], "true && touch should-not-exist");
    assert_eq!(
        o.status.code(),
        Some(126),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("local.no-touch"));
    assert!(!f.ws.join("should-not-exist").exists());
    let recs = audit_records(&f.home);
    let denial = recs.iter().find(|r| r["decision"] == "deny").unwrap();
    // The sandbox built while the Gate decided is gone with its run dir, and the run's
    // session is over.
    let runs: Vec<_> = std::fs::read_dir(f.home.join("state/run"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(runs.is_empty(), "{runs:?}");
    let store = airlock_store::SqliteStore::open(f.home.join("state")).unwrap();
    let id = denial["session"].as_str().unwrap();
    let session = airlock_store::SessionStore::get_session(&store, id).unwrap();
    assert_eq!(session.status, airlock_store::SessionStatus::Finished);
    assert_eq!(
        recs.iter().filter(|r| r["kind"] == "execution").count(),
        1,
        "only the run before the policy executed"
    );
    // And without the file again, touch runs again.
    std::fs::remove_file(local.join("no-touch.cedar")).unwrap();
    let o = exec(&f, &[], "true && touch now-allowed");
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(f.ws.join("now-allowed").exists());
}

#[test]
fn an_ask_without_a_terminal_is_denied() {
    let f = fixture();
    let o = exec(&f, &["--profile", "strict"], "touch asked");
    assert_eq!(
        o.status.code(),
        Some(126),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("needs approval"));
    assert!(!f.ws.join("asked").exists());
}

#[test]
fn timeout_kills_the_tree() {
    let f = fixture();
    let o = exec(&f, &["--timeout", "1"], "sleep 30 & sleep 30; echo never");
    assert_eq!(
        o.status.code(),
        Some(137),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!String::from_utf8_lossy(&o.stdout).contains("never"));
}

fn sandbox_processes_with(marker: &str) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            if String::from_utf8_lossy(&cmd).contains(marker) {
                n += 1;
            }
        }
    }
    n
}

#[test]
fn fifty_concurrent_runs_succeed_and_keep_the_chain_valid() {
    let f = fixture();
    let marker = format!("conc-marker-{}", std::process::id());
    let children: Vec<_> = (0..50)
        .map(|i| {
            Command::new(airlock_bin())
                .env("AIRLOCK_HOME", &f.home)
                .current_dir(&f.ws)
                .args([
                    "exec",
                    "--",
                    // The loop left behind carries the marker in its own command line
                    // (`$0`), so a stray one is found on the host after the run.
                    &format!(
                        "echo {marker} {i} > out-{i}; \
                         sh -c 'while :; do sleep 1; done' {marker}-{i} </dev/null >/dev/null 2>&1 & \
                         sleep 0.2"
                    ),
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    for i in 0..50 {
        assert!(
            f.ws.join(format!("out-{i}")).exists(),
            "run {i} produced no output"
        );
    }
    assert_eq!(
        sandbox_processes_with(&marker),
        0,
        "stray processes left behind"
    );
    let v = verify(&f.home);
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
    let recs = audit_records(&f.home);
    assert_eq!(recs.iter().filter(|r| r["kind"] == "execution").count(), 50);
}

/// A workspace that is, contains or lies in Airlock's own directories, or a shared socket
/// directory, is refused before anything runs, however it is spelled: as the calling user
/// and, when the tests run as root, as an unprivileged one.
#[test]
fn i4_exec_refuses_workspaces_that_hold_the_operators_files() {
    refuse_operator_workspaces(None);
    if nix::unistd::geteuid().is_root() {
        refuse_operator_workspaces(Some(4244));
    }
}

fn refuse_operator_workspaces(as_uid: Option<u32>) {
    use std::os::unix::process::CommandExt;
    let f = fixture();
    if let Some(uid) = as_uid {
        std::fs::create_dir_all(&f.home).unwrap();
        for p in [&f.home, &f.ws] {
            std::os::unix::fs::chown(p, Some(uid), Some(uid)).unwrap();
        }
    }
    // The operator's runtime directory, and a directory that contains it.
    let xdg = tempfile::tempdir().unwrap();
    let runtime_dir = xdg.path().join("run/user/1000");
    std::fs::create_dir_all(&runtime_dir).unwrap();
    let exec_as = |extra: &[&str], cmd: &str| {
        let mut c = Command::new(airlock_bin());
        c.env("AIRLOCK_HOME", &f.home)
            .env("XDG_RUNTIME_DIR", &runtime_dir)
            .current_dir(&f.ws)
            .arg("exec")
            .args(extra)
            .arg("--")
            .arg(cmd)
            .stdin(Stdio::null());
        if let Some(uid) = as_uid {
            c.uid(uid).gid(uid);
        }
        c.output().unwrap()
    };
    // One ordinary run creates the config and state dirs.
    let first = exec_as(&[], "true");
    assert_eq!(
        first.status.code(),
        Some(0),
        "{as_uid:?}: {}",
        String::from_utf8_lossy(&first.stderr)
    );
    let policy = f.home.join("config/policy");
    std::fs::create_dir_all(&policy).unwrap();
    let link = f.ws.join("cfg-link");
    std::os::unix::fs::symlink(f.home.join("config"), &link).unwrap();
    let cases: Vec<(std::path::PathBuf, &str)> = vec![
        (f.home.join("config"), "config dir"),
        (policy, "config dir"),
        (link.clone(), "config dir"),
        (f.home.join("state/audit/../audit"), "state dir"),
        (f.home.join("state"), "state dir"),
        (f.home.clone(), "config dir"),
        ("/tmp".into(), "holds other programs' sockets"),
        ("/".into(), "holds other programs' sockets"),
        ("/etc".into(), "system directory"),
        ("/usr/share".into(), "system directory"),
        ("/dev/shm".into(), "system directory"),
        (runtime_dir.clone(), "holds other programs' sockets"),
        (xdg.path().join("run"), "holds other programs' sockets"),
    ];
    for (ws, why) in cases {
        let o = exec_as(
            &["--workspace", ws.to_str().unwrap()],
            "touch AIRLOCK_RAN_HERE",
        );
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_ne!(
            o.status.code(),
            Some(0),
            "{as_uid:?} {}: {stderr}",
            ws.display()
        );
        assert!(
            stderr.contains(why),
            "{as_uid:?} {}: {stderr}",
            ws.display()
        );
        assert!(stderr.contains("help:"), "{stderr}");
        assert!(
            !ws.join("AIRLOCK_RAN_HERE").exists(),
            "{} ran",
            ws.display()
        );
    }
    // A directory of its own in /tmp stays allowed.
    let o = exec_as(&["--workspace", f.ws.to_str().unwrap()], "true");
    assert_eq!(
        o.status.code(),
        Some(0),
        "{as_uid:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A bind mount of the config dir (or of a directory that contains it) is the same
/// directory by device and inode, so it is refused like the config dir itself. The mounts
/// are made in a private mount namespace of the test's own.
#[test]
fn i4_exec_refuses_a_bind_mount_of_the_config_dir() {
    if !nix::unistd::geteuid().is_root() {
        // Mounting needs root; the spelling checks above run unprivileged too.
        return;
    }
    let f = fixture();
    assert_eq!(exec(&f, &[], "true").status.code(), Some(0));
    let spot = tempfile::tempdir().unwrap();
    let config_view = spot.path().join("config-view");
    let home_view = spot.path().join("home-view");
    std::fs::create_dir_all(&config_view).unwrap();
    std::fs::create_dir_all(&home_view).unwrap();
    let script = format!(
        "mount --bind {config} {cv} && mount --bind {home} {hv} && \
         for ws in {cv} {hv}/config/.. {hv}; do \
           AIRLOCK_HOME={home} {bin} exec --workspace $ws -- touch AIRLOCK_RAN_HERE; echo status=$?; \
         done",
        config = f.home.join("config").display(),
        home = f.home.display(),
        cv = config_view.display(),
        hv = home_view.display(),
        bin = airlock_bin().display(),
    );
    let o = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .current_dir(&f.ws)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(stdout.matches("status=").count(), 3, "{stdout}\n{stderr}");
    assert!(!stdout.contains("status=0"), "{stdout}\n{stderr}");
    assert_eq!(
        stderr.matches("which holds its keys and policies").count(),
        3,
        "{stderr}"
    );
    assert!(!f.home.join("config/AIRLOCK_RAN_HERE").exists());
    assert!(!f.home.join("AIRLOCK_RAN_HERE").exists());
}

/// A comment hidden behind a control character, and other text bash reads differently from
/// the Gate, run for real: `rm` must not run, and the refusal
/// must say the command could not be parsed.
#[test]
fn i2_a_command_the_shell_reads_differently_does_not_run() {
    let f = fixture();
    for cmd in [
        "ls\r# ; rm -rf ./important",
        "ls\x0c# ; rm -rf ./important",
        "ls\x0b# ; rm -rf ./important",
        "ls\x1b# ; rm -rf ./important",
        "echo $'\\\\' ; rm -rf ./important ; # '",
        "sh -c \"echo \\$'\\\\' ; rm -rf ./important ; # '\"",
        "sh -c '[[ -n x && rm -rf ./important ]]'",
    ] {
        std::fs::write(f.ws.join("important"), "keep").unwrap();
        for profile in ["strict", "default"] {
            let o = exec(&f, &["--profile", profile], cmd);
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(126), "{profile} {cmd:?}: {err}");
            assert!(
                err.contains("could not be parsed"),
                "{profile} {cmd:?}: {err}"
            );
            assert!(
                f.ws.join("important").exists(),
                "{profile} {cmd:?} removed the file"
            );
        }
    }
}

/// What runs is bash, the grammar the Gate parsed, without startup files.
#[test]
fn i2_commands_run_in_bash() {
    let f = fixture();
    let o = exec(
        &f,
        &[],
        "[[ -n \"$BASH_VERSION\" ]] && echo \"bash ${BASH_VERSINFO[0]}\"; echo \"${BASH_ENV-unset} ${ENV-unset}\"",
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.starts_with("bash "), "{out}");
    assert!(out.contains("unset unset"), "{out}");
}

/// Several words after `--` are an argument vector, as under `sudo` or `bwrap`: each word
/// reaches the program whole, and the Gate decides (and the log records) the quoted line
/// it runs. Joined with plain spaces, `sh -c 'printf "<%s>" "$0"' 'a b'` would be a
/// different command.
#[test]
fn several_words_after_the_separator_are_an_argument_vector() {
    let f = fixture();
    let o = Command::new(airlock_bin())
        .env("AIRLOCK_HOME", &f.home)
        .current_dir(&f.ws)
        .args([
            "exec",
            "--",
            "sh",
            "-c",
            "printf '<%s>' \"$0\" \"$1\"",
            "a b",
            "$HOME",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "<a b><$HOME>");
    let line = r#"sh -c 'printf '\''<%s>'\'' "$0" "$1"' 'a b' '$HOME'"#;
    let recs = audit_records(&f.home);
    assert!(
        recs.iter()
            .any(|r| r["kind"] == "decision" && r["action"]["command"] == line),
        "{recs:#?}"
    );
}
