//! Configuration changes leave audit records naming the operator: `init`, `net allow`,
//! `net allow-private`, `net revoke`, `secret set` (name and binding, never the value),
//! `secret rm`, and policy files edited between runs, with old and new hashes. An edit
//! that makes any probe action more permissive is warned about and flagged as loosening;
//! `policy diff` shows the comparison before the edit loads.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use super::{run, text};

const SECRET_VALUE: &str = "ghp_Zq81valueThatMustNeverBeLogged";

fn records(home: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(home.join("state/audit/log.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn of_kind<'a>(records: &'a [serde_json::Value], kind: &str) -> Vec<&'a serde_json::Value> {
    records.iter().filter(|r| r["kind"] == kind).collect()
}

fn ok(home: &Path, args: &[&str]) -> String {
    let o = run(home, args);
    assert!(o.status.success(), "{args:?}: {}", text(&o));
    text(&o)
}

fn secret_set(home: &Path, name: &str, host: &str) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .env("AIRLOCK_HOME", home)
        .args(["secret", "set", name, "--host", host])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(SECRET_VALUE.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
}

fn assert_by_operator(r: &serde_json::Value) {
    assert_eq!(r["principal"], "owner", "{r}");
    assert_eq!(r["on_behalf_of"], "owner", "{r}");
    assert_eq!(r["via"], "cli", "{r}");
}

#[test]
fn i1_every_config_command_leaves_a_record_and_no_secret_value() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    ok(h, &["init"]);
    ok(h, &["net", "allow", "api.example.org", "--methods", "GET"]);
    ok(h, &["net", "allow-private", "127.0.0.1:8443"]);
    ok(h, &["net", "revoke", "127.0.0.1:8443"]);
    ok(h, &["net", "revoke", "1"]);
    secret_set(h, "GH", "api.github.com");
    ok(h, &["secret", "rm", "GH"]);

    let all = records(h);
    let init = of_kind(&all, "config-init");
    assert_eq!(init.len(), 1, "{all:#?}");
    assert!(init[0]["detail"]["wrote"].as_array().unwrap().len() > 1);
    let allow = of_kind(&all, "config-net-allow");
    assert_eq!(allow.len(), 1);
    assert_eq!(allow[0]["detail"]["target"], "api.example.org");
    let private = of_kind(&all, "config-net-allow-private");
    assert_eq!(private[0]["detail"]["addr"], "127.0.0.1:8443");
    let revoked = of_kind(&all, "config-net-revoke");
    assert_eq!(revoked.len(), 2, "{all:#?}");
    assert!(revoked[1]["detail"]["removed"][0]
        .as_str()
        .unwrap()
        .contains("api.example.org"));
    let set = of_kind(&all, "config-secret-set");
    assert_eq!(set.len(), 1);
    assert_eq!(set[0]["detail"]["name"], "GH");
    assert!(set[0]["detail"]["binding"]
        .as_str()
        .unwrap()
        .contains("api.github.com"));
    assert_eq!(of_kind(&all, "config-secret-rm")[0]["detail"]["name"], "GH");
    for r in init
        .iter()
        .chain(&allow)
        .chain(&private)
        .chain(&revoked)
        .chain(&set)
    {
        assert_by_operator(r);
    }
    let raw = std::fs::read_to_string(h.join("state/audit/log.jsonl")).unwrap();
    assert!(
        !raw.contains(SECRET_VALUE),
        "a secret value reached the log"
    );
    assert!(
        !raw.contains("ghp_Zq81"),
        "part of a secret value reached the log"
    );
    ok(h, &["audit", "verify"]);
}

const PERMIT_ALL_EXEC: &str =
    "@id(\"local.any_exec\")\npermit (principal, action == Airlock::Action::\"exec\", resource);\n";
const FORBID_WRITES: &str =
    "@id(\"local.no_writes\")\nforbid (principal, action == Airlock::Action::\"fs.write\", resource);\n";

#[test]
fn i4_a_policy_edit_permitting_rm_rf_is_flagged_as_loosening() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    ok(h, &["init"]);
    // The strict profile asks before `rm -rf`; the edit below permits every command.
    // The first load sets the baseline: no change recorded.
    ok(h, &["policy", "check", "--profile", "strict"]);
    assert!(of_kind(&records(h), "policy-changed").is_empty());
    let file = h.join("config/policy/local/allow-exec.cedar");
    std::fs::write(&file, PERMIT_ALL_EXEC).unwrap();

    // Before it loads: `policy diff` shows the loosening, names the probe, exits 3, and
    // records nothing.
    let o = run(h, &["policy", "diff", "--profile", "strict"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let shown = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(shown.contains("allow-exec.cedar"), "{shown}");
    assert!(shown.contains("loosens  exec rm -rf"), "{shown}");
    assert!(of_kind(&records(h), "policy-changed").is_empty());

    // On load: a warning naming the probe, and a record with the hashes, flagged.
    let o = run(h, &["check", "--profile", "strict", "--", "ls"]);
    let stderr = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(
        stderr.contains("warning") && stderr.contains("exec rm -rf"),
        "{stderr}"
    );
    let changed = of_kind(&records(h), "policy-changed")
        .into_iter()
        .cloned()
        .collect::<Vec<_>>();
    assert_eq!(changed.len(), 1, "{changed:#?}");
    let d = &changed[0]["detail"];
    assert_eq!(d["loosens"], true, "{d}");
    let f = d["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"].as_str().unwrap().ends_with("allow-exec.cedar"))
        .expect("the new file is named");
    assert!(f["old"].is_null());
    assert!(f["new"].as_str().unwrap().starts_with("sha256:"));
    assert!(d["loosened"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["probe"].as_str().unwrap().starts_with("exec rm -rf")));
    assert_by_operator(&changed[0]);

    // Loaded: nothing left to show, nothing recorded again.
    let o = run(h, &["policy", "diff", "--profile", "strict"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    ok(h, &["check", "--profile", "strict", "--", "ls"]);
    assert_eq!(of_kind(&records(h), "policy-changed").len(), 1);

    // Editing the file again records its old and new hash.
    std::fs::write(&file, format!("{PERMIT_ALL_EXEC}// reviewed\n")).unwrap();
    run(h, &["check", "--profile", "strict", "--", "ls"]);
    let all = records(h);
    let changed = of_kind(&all, "policy-changed");
    assert_eq!(changed.len(), 2);
    let f = &changed[1]["detail"]["files"][0];
    assert!(f["old"].as_str().unwrap().starts_with("sha256:"), "{f}");
    assert_ne!(f["old"], f["new"]);
    assert_eq!(changed[1]["detail"]["loosens"], false);
    ok(h, &["audit", "verify"]);
}

#[test]
fn i4_a_tightening_policy_edit_is_recorded_but_not_flagged() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    ok(h, &["init"]);
    ok(h, &["policy", "check"]);
    std::fs::write(h.join("config/policy/local/no-writes.cedar"), FORBID_WRITES).unwrap();
    let o = run(h, &["policy", "diff"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let shown = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(shown.contains("tightens fs.write"), "{shown}");
    assert!(!shown.contains("loosens"), "{shown}");
    let o = run(h, &["policy", "check"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("warning"),
        "{}",
        text(&o)
    );
    let all = records(h);
    let changed = of_kind(&all, "policy-changed");
    assert_eq!(changed.len(), 1);
    assert_eq!(changed[0]["detail"]["loosens"], false);
    assert!(changed[0]["detail"]["loosened"]
        .as_array()
        .unwrap()
        .is_empty());
    assert!(!changed[0]["detail"]["tightened"]
        .as_array()
        .unwrap()
        .is_empty());
}

/// One edit, loaded by many processes at once (the host, running sessions and commands
/// all reload it), is recorded once: the comparison with the last loaded set and the move
/// of that baseline happen under one lock.
#[test]
fn one_policy_edit_loaded_by_many_processes_at_once_is_recorded_once() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    ok(h, &["init"]);
    ok(h, &["policy", "check"]);
    std::fs::write(h.join("config/policy/local/no-writes.cedar"), FORBID_WRITES).unwrap();
    let children: Vec<_> = (0..8)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_airlock"))
                .env("AIRLOCK_HOME", h)
                .args(["policy", "check"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let all = records(h);
    assert_eq!(of_kind(&all, "policy-changed").len(), 1, "{all:#?}");
}

#[test]
fn i4_net_allow_shows_as_a_loosening_for_the_listed_host() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    ok(h, &["init"]);
    ok(h, &["policy", "check"]);
    ok(h, &["net", "allow", "api.example.org", "--methods", "GET"]);
    let o = run(h, &["policy", "diff"]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let shown = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        shown.contains("net GET https://api.example.org/"),
        "{shown}"
    );
    // A host no rule names stays as it was.
    assert!(
        !shown.contains("attacker.example/ (untainted): deny -> allow"),
        "{shown}"
    );
}

/// `net revoke ADDR` on an address that both `allow-private` and a rule name takes back
/// both: a rule left behind would come back into force the next time the address is
/// allowed, which the owner who revoked it did not ask for.
#[test]
fn revoking_an_address_takes_back_its_rule_and_its_private_allowance() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    ok(h, &["init"]);
    ok(h, &["net", "allow", "127.0.0.1:8443"]);
    ok(h, &["net", "allow", "api.example.org"]);
    ok(h, &["net", "allow-private", "127.0.0.1:8443"]);
    let out = ok(h, &["net", "revoke", "127.0.0.1:8443"]);
    assert!(out.contains("allow-private 127.0.0.1:8443"), "{out}");
    assert!(out.contains("net.rule.1"), "{out}");
    let listed = ok(h, &["net", "list"]);
    assert!(!listed.contains("127.0.0.1"), "{listed}");
    assert!(listed.contains("api.example.org"), "{listed}");
    let revoked = of_kind(&records(h), "config-net-revoke")
        .into_iter()
        .cloned()
        .collect::<Vec<_>>();
    assert_eq!(revoked.len(), 1, "{revoked:#?}");
    assert_eq!(
        revoked[0]["detail"]["removed"].as_array().map(Vec::len),
        Some(2),
        "{revoked:#?}"
    );
    // Nothing left to take back is an error that names what was asked.
    let again = run(h, &["net", "revoke", "127.0.0.1:8443"]);
    assert!(!again.status.success(), "{}", text(&again));
    assert!(text(&again).contains("127.0.0.1:8443"), "{}", text(&again));
}
