//! `airlock serve` as a real process on a temporary state dir: one host per state dir, the
//! socket's two walls (a 0700 directory and the peer's uid), the CLI through the host
//! deciding exactly as it does embedded, live policy reload, and stopping (SIGTERM, and
//! `kill -9` followed by a restart).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::host_fixture::{socket, Host};
use super::{run, text};

fn init_home() -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    let o = run(home.path(), &["init"]);
    assert!(o.status.success(), "{}", text(&o));
    home
}

fn records(home: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(home.join("state/audit/log.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn kinds(home: &Path) -> Vec<String> {
    records(home)
        .iter()
        .map(|r| r["kind"].as_str().unwrap_or("").to_string())
        .collect()
}

/// `curl` over the host's socket as `uid` (root tests only): status code and body.
fn curl_as(uid: u32, sock: &Path, path: &str) -> (String, String) {
    let o = Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={uid}"),
            "--clear-groups",
            "curl",
            "-s",
            "--unix-socket",
        ])
        .arg(sock)
        .args(["-w", "\n%{http_code}", &format!("http://airlock{path}")])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let (body, code) = out.rsplit_once('\n').unwrap_or((&out, ""));
    (code.to_string(), body.to_string())
}

#[test]
fn host_socket_answers_the_operator_and_refuses_every_other_uid() {
    let home = init_home();
    let h = home.path();
    let host = Host::start(h);
    let sock = socket(h);
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = std::fs::metadata(sock.parent().unwrap()).unwrap();
    assert_eq!(
        dir.mode() & 0o777,
        0o700,
        "the socket's directory is private"
    );
    assert_eq!(std::fs::metadata(&sock).unwrap().mode() & 0o777, 0o600);
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped the other-uid half: it needs root to connect as another uid");
        return;
    }
    let me = nix::unistd::geteuid().as_raw();
    let (code, body) = curl_as(me, &sock, "/v1/status");
    assert_eq!(code, "200", "{body}");
    // Get past the first wall on purpose (every directory down to the socket opened up),
    // so the second is what refuses.
    for dir in [h, &h.join("state"), sock.parent().unwrap()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (code, body) = curl_as(65534, &sock, "/v1/status");
    assert_eq!(code, "403", "{body}");
    assert!(
        body.contains("uid 65534 is not this host's operator"),
        "{body}"
    );
    assert!(
        !body.contains("sessions"),
        "nothing of the status leaked: {body}"
    );
    let (code, body) = curl_as(65534, &sock, "/v1/check");
    assert_eq!(code, "403", "{body}");
    assert!(
        host.log_text().contains("refused a caller"),
        "{}",
        host.log_text()
    );
    // And a host will not start with its socket's directory loosened.
    drop(host);
    let o = run(h, &["serve"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("mode 0700"), "{}", text(&o));
}

#[test]
fn a_second_host_on_the_same_state_dir_is_refused() {
    let home = init_home();
    let h = home.path();
    let host = Host::start(h);
    let o = run(h, &["serve"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("another airlock host (pid {})", host.child.id())),
        "{}",
        text(&o)
    );
    // The first one still serves.
    let o = run(h, &["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["host"]["pid"], host.child.id());
}

/// `airlock replay --json` of a corpus, and every `check --json` of a sample of commands.
fn decisions(h: &Path, profile: &str, commands: &[String]) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for corpus in ["agentdojo/dev.jsonl", "injecagent/dev.jsonl"] {
        let file = crate::common_eval::eval_file(corpus);
        let o = run(
            h,
            &[
                "replay",
                "--json",
                "--profile",
                profile,
                file.to_str().unwrap(),
            ],
        );
        assert!(o.status.success(), "{}", text(&o));
        out.push((
            corpus.to_string(),
            String::from_utf8_lossy(&o.stdout).to_string(),
            String::from_utf8_lossy(&o.stderr).to_string(),
        ));
    }
    for c in commands {
        let o = run(
            h,
            &[
                "check",
                "--json",
                "--profile",
                profile,
                "--workspace",
                "/workspace",
                "--",
                c,
            ],
        );
        out.push((
            c.clone(),
            String::from_utf8_lossy(&o.stdout).to_string(),
            format!("{:?}", o.status.code()),
        ));
    }
    out
}

#[test]
fn the_cli_through_the_host_decides_exactly_as_embedded_on_the_dev_corpora() {
    let home = init_home();
    let h = home.path();
    let gtfo =
        std::fs::read_to_string(crate::common_eval::eval_file("gtfobins/dev.jsonl")).unwrap();
    // Every third command: all of its kinds, at a third of the processes.
    let commands: Vec<String> = gtfo
        .lines()
        .step_by(3)
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["command"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(commands.len() > 100);
    let mut all = Vec::new();
    for profile in ["default", "strict"] {
        // The commands under strict, where they get asks as well as allows.
        let commands = if profile == "strict" {
            &commands[..]
        } else {
            &[]
        };
        let embedded = decisions(h, profile, commands);
        let host = Host::start(h);
        let through = decisions(h, profile, commands);
        drop(host);
        assert_eq!(embedded.len(), through.len());
        for (e, t) in embedded.iter().zip(&through) {
            assert_eq!(e, t, "{profile}: {} differs through the host", e.0);
        }
        all.extend(embedded.into_iter().map(|d| d.1));
    }
    // Not vacuous: the corpora gave decisions of every kind.
    let all = all.concat();
    for kind in ["\"allow\"", "\"ask\""] {
        assert!(all.contains(kind), "no {kind} decision at all");
    }
}

const PERMIT_ALL_EXEC: &str =
    "@id(\"local.any_exec\")\npermit (principal, action == Airlock::Action::\"exec\", resource);\n";

fn check_decision(h: &Path, profile: &str, command: &str) -> String {
    let o = run(h, &["check", "--json", "--profile", profile, "--", command]);
    let v: serde_json::Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o)));
    v["decision"].as_str().unwrap().to_string()
}

fn host_policy(h: &Path, profile: &str) -> serde_json::Value {
    let o = run(h, &["status", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["host"]["policies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["profile"] == profile)
        .cloned()
        .unwrap_or_else(|| panic!("no {profile} in {v}"))
}

/// Wait until the host's `profile` satisfies `done`.
fn wait_policy(
    h: &Path,
    profile: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let p = host_policy(h, profile);
        if done(&p) {
            return p;
        }
        assert!(Instant::now() < deadline, "the host never reloaded: {p}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_broken_policy_edit_is_refused_while_the_old_policy_keeps_deciding_and_a_loosening_one_is_flagged(
) {
    let home = init_home();
    let h = home.path();
    let _host = Host::start(h);
    // The host decides `rm -rf` under strict: it asks.
    assert_eq!(check_decision(h, "strict", "rm -rf build"), "ask");
    let before = host_policy(h, "strict");

    let local = h.join("config/policy/local");
    std::fs::create_dir_all(&local).unwrap();
    std::fs::write(
        local.join("broken.cedar"),
        "permit (principal, action, resource) when { 1 == };\n",
    )
    .unwrap();
    let refused = wait_policy(h, "strict", |p| !p["refused_edit"].is_null());
    let why = refused["refused_edit"].as_str().unwrap();
    assert!(
        why.contains("broken.cedar:1:"),
        "the error names the file and line: {why}"
    );
    assert_eq!(
        refused["hash"], before["hash"],
        "the old set is still in force"
    );
    assert_eq!(check_decision(h, "strict", "rm -rf build"), "ask");
    assert!(
        kinds(h).iter().any(|k| k == "reload-refused"),
        "{:?}",
        kinds(h)
    );

    // A loosening edit loads, swaps in whole, and its record says it loosens.
    std::fs::remove_file(local.join("broken.cedar")).unwrap();
    std::fs::write(local.join("allow-exec.cedar"), PERMIT_ALL_EXEC).unwrap();
    let loaded = wait_policy(h, "strict", |p| {
        p["hash"] != before["hash"] && p["refused_edit"].is_null()
    });
    assert_ne!(loaded["hash"], before["hash"]);
    assert_eq!(check_decision(h, "strict", "rm -rf build"), "allow");
    let changed: Vec<serde_json::Value> = records(h)
        .into_iter()
        .filter(|r| r["kind"] == "policy-changed")
        .collect();
    let last = changed.last().expect("the reload was recorded");
    assert_eq!(last["detail"]["loosens"], true, "{last}");
    assert!(
        last["detail"]["files"]
            .to_string()
            .contains("allow-exec.cedar"),
        "{last}"
    );
    let o = run(h, &["audit", "verify"]);
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn sigterm_stops_the_host_and_kill_9_leaves_the_state_dir_to_the_next_one() {
    let home = init_home();
    let h = home.path();
    let mut host = Host::start(h);
    host.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(host.wait().success(), "{}", host.log_text());
    assert!(!socket(h).exists(), "the socket was removed");
    let k = kinds(h);
    assert!(
        k.iter().any(|k| k == "host-start") && k.iter().any(|k| k == "host-stop"),
        "{k:?}"
    );
    // With no host, commands run embedded.
    let o = run(h, &["status"]);
    assert!(text(&o).contains("host: not running"), "{}", text(&o));

    let mut host = Host::start(h);
    host.signal(nix::sys::signal::Signal::SIGKILL);
    host.wait();
    assert!(socket(h).exists(), "a killed host leaves its socket behind");
    // The kernel dropped its lock: commands run embedded, and a new host takes over.
    let o = run(h, &["status"]);
    assert!(text(&o).contains("host: not running"), "{}", text(&o));
    let again = Host::start(h);
    assert_eq!(check_decision(h, "default", "ls"), "allow");
    drop(again);
    let o = run(h, &["audit", "verify"]);
    assert!(o.status.success(), "{}", text(&o));
}

/// Bad requests get an error naming what to fix, never a panic or a hang.
#[test]
fn bad_requests_get_clear_errors() {
    let home = init_home();
    let h = home.path();
    let host = Host::start(h);
    let sock = socket(h);
    let post = |path: &str, body: &str| {
        let o = Command::new("curl")
            .args(["-s", "--unix-socket"])
            .arg(&sock)
            .args([
                "-w",
                "\n%{http_code}",
                "-X",
                "POST",
                "-H",
                "content-type: application/json",
                "--data-binary",
                body,
            ])
            .arg(format!("http://airlock{path}"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    let out = post("/v1/check", "{not json");
    assert!(
        out.ends_with("\n400") && out.contains("not a valid request"),
        "{out}"
    );
    let out = post(
        "/v1/check",
        r#"{"action":{"type":"exec","command":"ls","cwd":"/w","env":[]},"workspace":"relative"}"#,
    );
    assert!(
        out.ends_with("\n400") && out.contains("not an absolute path"),
        "{out}"
    );
    let out = post(
        "/v1/check",
        r#"{"action":{"type":"exec","command":"ls","cwd":"/w","env":[]},"workspace":"/w","profile":"lax"}"#,
    );
    assert!(
        out.ends_with("\n400") && out.contains("unknown profile"),
        "{out}"
    );
    let out = post("/v1/nothing", "{}");
    assert!(
        out.ends_with("\n404") && out.contains("docs/api.md"),
        "{out}"
    );
    let out = post("/v1/replay", r#"{"traces":"/nonexistent/traces.jsonl"}"#);
    assert!(
        out.ends_with("\n400") && out.contains("/nonexistent/traces.jsonl"),
        "{out}"
    );
    assert!(!host.log_text().contains("panicked"), "{}", host.log_text());
}

/// `airlock service install` writes a unit that runs the full program's `serve` (the
/// small `airlock` front would only hand it over) with the
/// hardening directives, which `systemd-analyze verify` accepts where it exists;
/// `uninstall` removes it.
#[test]
fn service_install_writes_a_unit_systemd_accepts_and_uninstall_removes_it() {
    let home = init_home();
    let h = home.path();
    let units = tempfile::tempdir().unwrap();
    let dir = units.path().to_str().unwrap();
    let o = run(h, &["service", "install", "--unit-dir", dir, "--no-reload"]);
    assert!(o.status.success(), "{}", text(&o));
    let unit = units.path().join("airlock.service");
    let body = std::fs::read_to_string(&unit).unwrap();
    let exe = std::fs::canonicalize(env!("CARGO_BIN_EXE_airlock-full")).unwrap();
    assert!(
        body.contains(&format!("ExecStart=\"{}\" serve", exe.display())),
        "{body}"
    );
    assert!(
        body.contains(&format!("Environment=\"AIRLOCK_HOME={}\"", h.display())),
        "{body}"
    );
    for line in [
        "NoNewPrivileges=yes",
        "ProtectSystem=full",
        "KillMode=mixed",
        "Delegate=yes",
    ] {
        assert!(body.lines().any(|l| l == line), "{line} missing: {body}");
    }
    // Nothing that would stop the sandbox from working.
    for breaks in [
        "RestrictNamespaces=",
        "SystemCallFilter=",
        "MemoryDenyWriteExecute=",
        "PrivateUsers=",
    ] {
        assert!(
            !body.lines().any(|l| l.starts_with(breaks)),
            "{breaks} would break the sandbox: {body}"
        );
    }
    if let Ok(o) = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&unit)
        .output()
    {
        let said = String::from_utf8_lossy(&o.stderr).to_string();
        // Only what it says of this unit counts (a container without a running systemd
        // also complains about the machine).
        let about_unit: Vec<&str> = said
            .lines()
            .filter(|l| l.contains("airlock.service"))
            .collect();
        assert!(about_unit.is_empty(), "systemd-analyze verify: {said}");
    } else {
        eprintln!("systemd-analyze is not installed; the unit was checked by its text only");
    }
    let o = run(h, &["service", "status", "--unit-dir", dir]);
    assert!(text(&o).contains("airlock.service"), "{}", text(&o));
    let o = run(
        h,
        &["service", "uninstall", "--unit-dir", dir, "--no-reload"],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(!unit.exists());
    let o = run(h, &["service", "status", "--unit-dir", dir]);
    assert!(text(&o).contains("not installed"), "{}", text(&o));
}

/// Past `[host] requests_per_minute` a principal's requests are refused at once with the
/// limit's name (429), on the API and by the command line alike.
#[test]
fn requests_past_the_rate_limit_are_refused_by_the_limits_name() {
    let home = init_home();
    let h = home.path();
    let cfg = h.join("config/airlock.toml");
    let mut config = std::fs::read_to_string(&cfg).unwrap();
    config.push_str("\n[host]\nrequests_per_minute = 5\n");
    std::fs::write(&cfg, config).unwrap();
    let _host = Host::start(h);
    let sock = socket(h);
    let codes: Vec<String> = (0..8)
        .map(|_| {
            let o = Command::new("curl")
                .args([
                    "-s",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                    "--unix-socket",
                ])
                .arg(&sock)
                .arg("http://airlock/v1/status")
                .output()
                .unwrap();
            String::from_utf8_lossy(&o.stdout).to_string()
        })
        .collect();
    let ok = codes.iter().filter(|c| *c == "200").count();
    assert!((1..=5).contains(&ok), "{codes:?}");
    assert!(codes.iter().any(|c| c == "429"), "{codes:?}");
    let o = run(h, &["status"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("host.requests_per_minute = 5"),
        "{}",
        text(&o)
    );
}
