//! The host's pool of prepared sandboxes (`[host] sandbox_pool`): each pooled sandbox
//! serves one run, gets the run's own workspace, working directory and environment
//! (attested), is discarded when the config changes its confinement, and dies with the
//! host.

use std::process::{Command, Stdio};

use super::super::exec_fixture::{airlock, airlock_bin, fixture, Fixture};
use super::super::host_fixture::Host;
use super::super::{audit_records, exec, forbid_touch, verify};
use super::{children_of, descendants, init, processes_with, status, wait_for};

/// Wait until the pool holds `n` built sandboxes.
fn wait_for_pool(f: &Fixture, n: u64) {
    wait_for(&format!("{n} pooled sandboxes"), || {
        status(f)["host"]["pool"]["ready"].as_u64() == Some(n)
    });
}

fn pool_count(f: &Fixture, what: &str) -> u64 {
    status(f)["host"]["pool"][what].as_u64().unwrap_or(0)
}

/// The execution records of `command`, in order.
fn executions_of(f: &Fixture, command: &str) -> Vec<serde_json::Value> {
    audit_records(&f.home)
        .into_iter()
        .filter(|r| r["kind"] == "execution" && r["action"]["command"] == command)
        .collect()
}

#[test]
fn i2_a_pooled_sandbox_serves_one_run_and_the_next_sees_nothing_of_it() {
    let f = fixture();
    init(&f, "");
    let _host = Host::start(&f.home);
    // The first run shows the pool what to build for, and builds its own.
    let o = exec(&f, &[], "true");
    assert!(o.status.success(), "{o:?}");
    wait_for_pool(&f, 2);
    let taken = pool_count(&f, "taken");
    let leave =
        "echo left > /tmp/left-behind; (setsid sleep 271 </dev/null >/dev/null 2>&1 &); echo ok";
    let o = exec(&f, &[], leave);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "ok\n", "{o:?}");
    assert!(
        processes_with("sleep 271").is_empty(),
        "the run's process outlived its sandbox"
    );
    let look = "test -e /tmp/left-behind && echo seen; echo looked";
    let o = exec(&f, &[], look);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "looked\n", "{o:?}");
    assert_eq!(
        pool_count(&f, "taken"),
        taken + 2,
        "both runs took a pooled sandbox"
    );
    // Two sandboxes, not one used twice: their namespaces differ.
    let (a, b) = (&executions_of(&f, leave)[0], &executions_of(&f, look)[0]);
    for ns in ["mnt", "pid", "net", "user"] {
        let (x, y) = (
            &a["detail"]["attestation"]["namespaces"][ns],
            &b["detail"]["attestation"]["namespaces"][ns],
        );
        assert!(x.is_u64() && x != y, "{ns}: {x} and {y}");
    }
}

#[test]
fn i2_a_pooled_sandbox_gets_the_runs_own_workspace_and_cwd_and_attests_them() {
    let f = fixture();
    init(&f, "");
    let other = f.ws.parent().unwrap().join("other-ws");
    std::fs::create_dir_all(other.join("sub")).unwrap();
    std::fs::write(other.join("theirs"), "b").unwrap();
    std::fs::write(f.ws.join("mine"), "a").unwrap();
    use std::os::unix::fs::PermissionsExt;
    for d in [&other, &other.join("sub")] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let _host = Host::start(&f.home);
    // Pooled for the first workspace's runs.
    assert!(exec(&f, &[], "true").status.success());
    wait_for_pool(&f, 2);
    let taken = pool_count(&f, "taken");
    let command = "pwd; ls; ls /proc/1/root 2>&1 | head -1";
    let o = Command::new(airlock_bin())
        .env("AIRLOCK_HOME", &f.home)
        .current_dir(other.join("sub"))
        .args(["exec", "--workspace"])
        .arg(&other)
        .args(["--", command])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{o:?}");
    let other = other.canonicalize().unwrap();
    assert!(
        out.starts_with(&format!("{}\n", other.join("sub").display())),
        "{out}"
    );
    assert!(!out.contains("mine") && !out.contains("theirs"), "{out}");
    assert_eq!(
        pool_count(&f, "taken"),
        taken + 1,
        "the run took a pooled sandbox"
    );
    let rec = &executions_of(&f, command)[0];
    let attached = &rec["detail"]["attestation"]["attached"];
    assert_eq!(
        attached["cwd"],
        other.join("sub").display().to_string(),
        "{rec}"
    );
    // The other workspace itself, seen in the run from its own root.
    let o = Command::new(airlock_bin())
        .env("AIRLOCK_HOME", &f.home)
        .current_dir(&other)
        .args(["exec", "--workspace"])
        .arg(&other)
        .args(["--", "ls"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&o.stdout);
    assert!(
        listed.contains("theirs") && !listed.contains("mine"),
        "{listed}"
    );
}

#[test]
fn i2_a_config_change_discards_the_pooled_sandboxes_and_the_next_run_has_the_new_confinement() {
    let f = fixture();
    init(&f, "");
    let _host = Host::start(&f.home);
    assert!(exec(&f, &[], "true").status.success());
    wait_for_pool(&f, 2);
    let root = nix::unistd::geteuid().is_root();
    let before = String::from_utf8_lossy(&exec(&f, &[], "id -u").stdout).into_owned();
    // The sandbox's uid is part of what a pooled sandbox is built with.
    let path = f.home.join("config/airlock.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\nuid = 65534\n"), "{text}");
    std::fs::write(
        &path,
        text.replacen("\nuid = 65534\n", "\nuid = 65533\n", 1),
    )
    .unwrap();
    let discarded = pool_count(&f, "discarded");
    let staged_taken = pool_count(&f, "staged_taken");
    let after = String::from_utf8_lossy(&exec(&f, &[], "id -u").stdout).into_owned();
    // The run staged under the old confinement was not the one that ran.
    assert_eq!(pool_count(&f, "staged_taken"), staged_taken);
    if root {
        assert_eq!(before, "65534\n");
        assert_eq!(after, "65533\n", "the run after the edit has the new uid");
    }
    wait_for("the stale sandboxes to be discarded", || {
        pool_count(&f, "discarded") > discarded
    });
    // The pool refills for the new confinement, and its runs have it.
    wait_for_pool(&f, 2);
    let taken = pool_count(&f, "taken");
    let again = String::from_utf8_lossy(&exec(&f, &[], "id -u").stdout).into_owned();
    assert_eq!(pool_count(&f, "taken"), taken + 1);
    assert_eq!(again, after);
}

/// One profile's part of the pool in `airlock status` (`null` when it has none).
fn profile_pool(f: &Fixture, profile: &str) -> serde_json::Value {
    status(f)["host"]["pool"]["profiles"]
        .as_array()
        .and_then(|all| all.iter().find(|p| p["profile"] == profile).cloned())
        .unwrap_or_default()
}

#[test]
fn i2_runs_under_two_profiles_each_take_their_own_pooled_sandbox_and_none_is_used_twice() {
    let f = fixture();
    init(&f, "");
    let _host = Host::start(&f.home);
    let strict: &[&str] = &["--profile", "strict"];
    // The first run of each profile shows the pool what to build for, and builds its own.
    assert!(exec(&f, &[], "true").status.success());
    assert!(exec(&f, strict, "true").status.success());
    // The default size (2) is split between the two: one each.
    let both_ready =
        || profile_pool(&f, "default")["ready"] == 1 && profile_pool(&f, "strict")["ready"] == 1;
    for i in 0..3 {
        for (profile, extra) in [("default", &[][..]), ("strict", strict)] {
            // A run under the other profile kept this one's sandbox.
            wait_for("a pooled sandbox for each profile", both_ready);
            let pool = status(&f)["host"]["pool"].clone();
            assert_eq!(pool["size"], 2, "{pool}");
            assert!(pool["ready"].as_u64() <= Some(2), "over the size: {pool}");
            let taken = profile_pool(&f, profile)["taken"].as_u64().unwrap();
            // A default run leaves a mark in its sandbox's /tmp (strict may not write);
            // every later run lists /tmp and would show it.
            let command = match profile {
                "default" => format!("ls /tmp; echo m > /tmp/mark-{i}; echo ran-{i}"),
                _ => format!("ls /tmp; echo ran-{i}"),
            };
            let o = exec(&f, extra, &command);
            assert_eq!(
                String::from_utf8_lossy(&o.stdout),
                format!("ran-{i}\n"),
                "a {profile} run saw an earlier run's sandbox: {o:?}"
            );
            assert_eq!(
                profile_pool(&f, profile)["taken"].as_u64(),
                Some(taken + 1),
                "the {profile} run took a pooled sandbox"
            );
        }
    }
    // Only each profile's first run built its own.
    for profile in ["default", "strict"] {
        assert_eq!(profile_pool(&f, profile)["missed"], 1, "{profile}");
    }
    let text = airlock(&f.home, &["status"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("  profile strict: "), "{text}");
    let v = verify(&f.home);
    assert!(v.status.success(), "{v:?}");
}

#[test]
fn kill_9_of_the_host_with_a_full_pool_leaves_no_sandbox_process() {
    let f = fixture();
    init(&f, "");
    let mut host = Host::start(&f.home);
    assert!(exec(&f, &[], "true").status.success());
    wait_for_pool(&f, 2);
    // The pooled sandboxes: helpers and the PID 1 each started, waiting for a run.
    let helpers: Vec<u32> = children_of(host.child.id())
        .into_iter()
        .map(|(pid, _)| pid)
        .collect();
    assert_eq!(helpers.len(), 2, "the host's children: {helpers:?}");
    let sandboxed: Vec<u32> = helpers
        .iter()
        .flat_map(|h| children_of(*h).into_iter().map(|(pid, _)| pid))
        .chain(helpers.iter().copied())
        .collect();
    assert_eq!(
        sandboxed.len(),
        4,
        "helpers and their PID 1s: {sandboxed:?}"
    );
    host.signal(nix::sys::signal::Signal::SIGKILL);
    host.wait();
    wait_for("every pooled sandbox's processes to be gone", || {
        let ps = Command::new("ps")
            .args(["-e", "-o", "pid="])
            .output()
            .unwrap();
        let alive: Vec<u32> = String::from_utf8_lossy(&ps.stdout)
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        sandboxed.iter().all(|p| !alive.contains(p))
    });
    let _again = Host::start(&f.home);
    let v = verify(&f.home);
    assert!(v.status.success(), "{v:?}");
}

#[test]
fn with_the_pool_off_every_run_builds_its_own_sandbox() {
    let f = fixture();
    init(&f, "\n[host]\nsandbox_pool = 0\n");
    let _host = Host::start(&f.home);
    for _ in 0..2 {
        let o = exec(&f, &[], "echo hi");
        assert_eq!(String::from_utf8_lossy(&o.stdout), "hi\n", "{o:?}");
    }
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(status(&f)["host"]["pool"]["ready"], 0);
    assert_eq!(pool_count(&f, "taken"), 0);
}

/// Wait until the pool holds a run staged ahead.
fn wait_for_staged(f: &Fixture) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while status(f)["host"]["pool"]["staged"].as_u64() != Some(1) {
        assert!(
            std::time::Instant::now() < deadline,
            "no run was staged ahead: {}\n{}",
            status(f)["host"]["pool"],
            std::fs::read_to_string(f.home.join("serve.log")).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// `airlock exec -- command` from `dir` (inside the fixture's workspace).
fn exec_from(f: &Fixture, dir: &std::path::Path, command: &str) -> std::process::Output {
    Command::new(airlock_bin())
        .env("AIRLOCK_HOME", &f.home)
        .current_dir(dir)
        .args(["exec", "--workspace"])
        .arg(&f.ws)
        .args(["--", command])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// No run's socket dir or layers are left in the state dir, and the audit log verifies.
fn no_run_left_and_the_log_verifies(f: &Fixture) {
    for dir in ["run", "runs"] {
        let left = state_entries(f, dir);
        assert!(left.is_empty(), "state/{dir}: {left:?}");
    }
    let v = verify(&f.home);
    assert!(v.status.success(), "{v:?}");
}

/// The entries of one of the state dir's directories (`run`, `runs`).
fn state_entries(f: &Fixture, dir: &str) -> Vec<std::ffi::OsString> {
    std::fs::read_dir(f.home.join("state").join(dir))
        .map(|rd| rd.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default()
}

#[test]
fn i2_the_next_run_in_a_workspace_takes_a_run_staged_ahead_and_is_a_run_like_any_other() {
    let f = fixture();
    init(&f, "");
    let ws = f.ws.canonicalize().unwrap();
    let sub = ws.join("sub");
    std::fs::create_dir(&sub).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o777)).unwrap();
    let _host = Host::start_with_env(&f.home, &[("RUST_LOG", "airlock=debug")]);
    assert!(exec_from(&f, &ws, "true").status.success());
    wait_for_staged(&f);
    let staged_taken = pool_count(&f, "staged_taken");

    // Its own streams, status, working directory and commit, as any run's.
    let cmd = "echo out; echo err >&2; pwd; echo m > /tmp/mark; echo kept > written; exit 3";
    let o = exec_from(&f, &ws, cmd);
    assert_eq!(o.status.code(), Some(3), "{o:?}");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!("out\n{}\n", ws.display()),
        "{o:?}"
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("err\n"),
        "{o:?}"
    );
    assert_eq!(
        pool_count(&f, "staged_taken"),
        staged_taken + 1,
        "the run took the run staged ahead"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("written")).unwrap(),
        "kept\n"
    );
    // Decided and recorded under one session, with the staged sandbox's attestation.
    let rec = &executions_of(&f, cmd)[0];
    assert_eq!(
        rec["detail"]["attestation"]["attached"]["cwd"],
        ws.display().to_string(),
        "{rec}"
    );
    let decided = audit_records(&f.home)
        .into_iter()
        .find(|r| r["kind"] == "decision" && r["action"]["command"] == cmd)
        .expect("the decision record");
    assert_eq!(decided["session"], rec["session"]);

    // The next takes another, staged anew: nothing of the last run is left in it.
    wait_for_staged(&f);
    let look = "test -e /tmp/mark && echo seen; echo looked";
    let o = exec_from(&f, &ws, look);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "looked\n", "{o:?}");
    assert_eq!(pool_count(&f, "staged_taken"), staged_taken + 2);
    let (a, b) = (&executions_of(&f, cmd)[0], &executions_of(&f, look)[0]);
    for ns in ["mnt", "pid", "net", "user"] {
        let (x, y) = (
            &a["detail"]["attestation"]["namespaces"][ns],
            &b["detail"]["attestation"]["namespaces"][ns],
        );
        assert!(x.is_u64() && x != y, "{ns}: {x} and {y}");
    }

    // A run of another shape (another working directory) does not take it, and what is
    // staged next is of the new shape.
    wait_for_staged(&f);
    let discarded = pool_count(&f, "discarded");
    let o = exec_from(&f, &sub, "pwd");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!("{}\n", sub.display()),
        "{o:?}"
    );
    assert_eq!(pool_count(&f, "staged_taken"), staged_taken + 2);
    wait_for("the staged run to be replaced", || {
        pool_count(&f, "discarded") > discarded
    });
    wait_for_staged(&f);
    let o = exec_from(&f, &sub, "pwd");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!("{}\n", sub.display()),
        "{o:?}"
    );
    assert_eq!(pool_count(&f, "staged_taken"), staged_taken + 3);

    // The working directory removed and made again under the same path is another
    // directory: the run staged for the old one is not taken.
    wait_for_staged(&f);
    std::fs::remove_dir(&sub).unwrap();
    std::fs::create_dir(&sub).unwrap();
    std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = exec_from(&f, &sub, "pwd; ls -a | wc -l");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!("{}\n2\n", sub.display()),
        "{o:?}"
    );
    assert_eq!(pool_count(&f, "staged_taken"), staged_taken + 3);

    // A refused command tears the staged run down unused: no socket dir, no layers.
    forbid_touch(&f.home);
    wait_for_staged(&f);
    let o = exec_from(&f, &sub, "touch refused-file");
    assert_eq!(o.status.code(), Some(126), "{o:?}");
    assert!(!sub.join("refused-file").exists());
    assert_eq!(pool_count(&f, "staged_taken"), staged_taken + 4);
    assert_eq!(status(&f)["host"]["pool"]["staged"], 0);
    no_run_left_and_the_log_verifies(&f);
}

#[test]
fn a_staged_run_that_died_is_not_taken_and_a_stopping_host_leaves_none_behind() {
    let f = fixture();
    init(&f, "\n[host]\nsandbox_pool = 1\n");
    let mut host = Host::start(&f.home);
    assert!(exec(&f, &[], "true").status.success());
    wait_for_staged(&f);
    // A pool of one holds only the staged run: its helper is the host's one child (once
    // the first run's own helper, which is reaped aside, is gone).
    wait_for("the host's one child", || {
        children_of(host.child.id()).len() == 1
    });
    let helpers = children_of(host.child.id());
    let staged_taken = pool_count(&f, "staged_taken");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(helpers[0].0 as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    wait_for("the killed helper to be gone", || {
        !std::path::Path::new(&format!("/proc/{}/stat", helpers[0].0)).exists()
            || std::fs::read_to_string(format!("/proc/{}/stat", helpers[0].0))
                .is_ok_and(|s| s.contains(") Z "))
    });
    let o = exec(&f, &[], "echo alive");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "alive\n", "{o:?}");
    assert_eq!(
        pool_count(&f, "staged_taken"),
        staged_taken,
        "a dead staged run was taken"
    );
    assert!(pool_count(&f, "discarded") >= 1);

    // A stopping host ends the staged run: its processes, socket dir and layers go.
    wait_for_staged(&f);
    let staged: Vec<u32> = descendants(host.child.id());
    assert!(
        staged.len() >= 2,
        "the staged sandbox's processes: {staged:?}"
    );
    assert_eq!(state_entries(&f, "run").len(), 1);
    assert_eq!(state_entries(&f, "runs").len(), 1);
    host.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(host.wait().success());
    for pid in staged {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        assert!(stat.is_empty(), "process {pid} outlived its host: {stat}");
    }
    no_run_left_and_the_log_verifies(&f);
}

#[test]
fn what_a_killed_host_had_staged_is_swept_at_the_next_start_and_nothing_younger() {
    let f = fixture();
    init(&f, "");
    let mut host = Host::start(&f.home);
    assert!(exec(&f, &[], "true").status.success());
    wait_for_staged(&f);
    assert_eq!(state_entries(&f, "run").len(), 1);
    assert_eq!(state_entries(&f, "runs").len(), 1);
    host.signal(nix::sys::signal::Signal::SIGKILL);
    host.wait();
    // What the killed host staged, aged past the sweep's threshold; and a dir made just
    // now, as a run another process is setting up would be, which must stay.
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(600);
    for dir in ["run", "runs"] {
        for name in state_entries(&f, dir) {
            let path = f.home.join("state").join(dir).join(name);
            std::fs::File::open(&path)
                .unwrap()
                .set_modified(old)
                .unwrap();
        }
    }
    let young = f.home.join("state/run/exec-being-set-up");
    std::fs::create_dir(&young).unwrap();
    let _again = Host::start(&f.home);
    assert_eq!(
        state_entries(&f, "run"),
        vec![std::ffi::OsString::from("exec-being-set-up")]
    );
    assert!(
        state_entries(&f, "runs").is_empty(),
        "{:?}",
        state_entries(&f, "runs")
    );
    let v = verify(&f.home);
    assert!(v.status.success(), "{v:?}");
}

/// `net revoke` reaches the host's runs from the next request on, a run staged before the
/// revoke included: a staged run's proxy serves with the net rules as they are when the
/// request takes it, not as they were when it was staged. Both halves of a rule are taken
/// back in turn: the SSRF exception the proxy holds (`allow-private`), then the allow rule
/// the Gate decides by. Real curl in the sandbox, to a loopback server that counts every
/// connection it accepts.
#[test]
fn i3_a_net_revoke_holds_from_the_next_run_on_a_run_staged_before_it_included() {
    let f = fixture();
    init(&f, "");
    let collector = super::super::loopback_collector::Collector::start();
    let target = format!("127.0.0.1:{}", collector.port);
    let ok = |args: &[&str]| {
        let o = airlock(&f.home, args);
        assert!(o.status.success(), "{args:?}: {o:?}");
    };
    ok(&["net", "allow", &target, "--methods", "GET"]);
    ok(&["net", "allow-private", &target]);
    let mut host = Host::start(&f.home);
    let curl = |path: &str| {
        let cmd = format!(
            "curl -s -o /dev/null --max-time 20 -w '%{{http_code}}' {}",
            collector.url(path)
        );
        let o = exec(&f, &[], &cmd);
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let exchange = |path: &str| {
        audit_records(&f.home)
            .into_iter()
            .find(|r| r["kind"] == "net.exchange" && r["detail"]["path"] == path)
            .unwrap_or_else(|| panic!("the proxy recorded the request for {path}"))
    };
    assert_eq!(curl("/before"), "200", "the rule lets the GET out");
    assert_eq!(collector.hits(), 1);

    // Staged while the proxy may reach the address; the exception alone is then taken
    // back, as an edit of the rules file (`net revoke` of the address would take back
    // the allow rule with it, and the Gate would refuse before the proxy is asked).
    wait_for_staged(&f);
    let staged_taken = pool_count(&f, "staged_taken");
    airlock_proxy::NetRules::update(&f.home.join("config"), |rules| {
        rules.allow_private.clear();
        Ok::<_, airlock_proxy::RulesError>(())
    })
    .unwrap();
    assert_eq!(curl("/private"), "403", "the proxy no longer reaches it");
    assert_eq!(
        pool_count(&f, "staged_taken"),
        staged_taken + 1,
        "the run after the revoke was the one staged before it"
    );
    assert_eq!(
        collector.hits(),
        1,
        "nothing reached the server after the revoke"
    );
    let refused = exchange("/private");
    assert!(
        refused["detail"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("allow_private")),
        "refused for the exception taken back: {refused}"
    );

    // The same with the allow rule, which the Gate decides by.
    ok(&["net", "allow-private", &target]);
    assert_eq!(curl("/again"), "200");
    assert_eq!(collector.hits(), 2);
    wait_for_staged(&f);
    ok(&["net", "revoke", "net.rule.1"]);
    assert_eq!(curl("/after"), "403", "the revoked rule lets nothing out");
    assert_eq!(pool_count(&f, "staged_taken"), staged_taken + 3);
    assert_eq!(
        collector.hits(),
        2,
        "nothing reached the server after the revoke"
    );
    assert_eq!(exchange("/after")["detail"]["decision"], "deny");

    host.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(host.wait().success());
    no_run_left_and_the_log_verifies(&f);
}

/// The kill switch and a run staged ahead. A staged run whose session is killed by name
/// (its id is its run dir's) is never taken: the next command runs, in a run of its own,
/// rather than failing as killed. `kill --all` discards what is staged: it is no session
/// anyone started, so it is not reported as one killed, and nothing waits to be taken
/// after it.
#[test]
fn i7_a_killed_staged_run_is_never_taken_and_kill_all_leaves_none_staged() {
    let f = fixture();
    init(&f, "");
    let _host = Host::start(&f.home);
    assert!(exec(&f, &[], "true").status.success());
    wait_for_staged(&f);
    let staged = state_entries(&f, "run");
    assert_eq!(staged.len(), 1, "{staged:?}");
    let id = staged[0].to_string_lossy().into_owned();
    let o = airlock(&f.home, &["kill", &id]);
    assert!(o.status.success(), "{o:?}");
    let taken = pool_count(&f, "staged_taken");
    let o = exec(&f, &[], "echo ran");
    assert!(o.status.success(), "{o:?}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "ran\n");
    assert_eq!(
        pool_count(&f, "staged_taken"),
        taken,
        "the killed one was not taken"
    );
    assert_ne!(executions_of(&f, "echo ran")[0]["session"], id.as_str());

    wait_for_staged(&f);
    let o = airlock(&f.home, &["kill", "--all"]);
    assert!(o.status.success(), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("\n0 session(s) killed"),
        "{o:?}"
    );
    assert_eq!(status(&f)["host"]["pool"]["staged"], 0);
    let o = exec(&f, &[], "echo again");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "again\n", "{o:?}");
    let v = verify(&f.home);
    assert!(v.status.success(), "{v:?}");
}
