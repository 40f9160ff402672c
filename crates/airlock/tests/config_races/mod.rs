//! Operator commands that edit the same config file at once lose nothing: every
//! read-modify-write of `net-rules.toml` and of the secrets store holds the file's lock.
//! Each test starts many real `airlock` processes together.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};

fn spawn(home: &Path, args: &[&str], stdin: Option<&str>) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_airlock"));
    cmd.env("AIRLOCK_HOME", home)
        .env("RUST_BACKTRACE", "0")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
    let mut child = cmd.spawn().unwrap();
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    child
}

/// Wait for every child; each must have succeeded.
fn all_succeed(children: Vec<(String, Child)>) {
    for (what, child) in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{what} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn listing(home: &Path, args: &[&str]) -> String {
    let out = spawn(home, args, None).wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn i3_thirty_parallel_net_allows_all_land() {
    let home = tempfile::tempdir().unwrap();
    let hosts: Vec<String> = (0..30).map(|i| format!("host{i}.example")).collect();
    let children = hosts
        .iter()
        .map(|h| {
            (
                format!("net allow {h}"),
                spawn(home.path(), &["net", "allow", h], None),
            )
        })
        .collect();
    all_succeed(children);
    let list = listing(home.path(), &["net", "list"]);
    let rules: Vec<&str> = list
        .lines()
        .filter(|l| l.starts_with("net.rule."))
        .collect();
    assert_eq!(rules.len(), 30, "{list}");
    for h in &hosts {
        assert!(
            rules.iter().any(|l| l.ends_with(&format!(" {h}"))),
            "{h} lost:\n{list}"
        );
    }
    let mut ids: Vec<&str> = rules
        .iter()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 30, "rule numbers must be distinct:\n{list}");
}

#[test]
fn i3_a_revoke_racing_an_allow_is_never_undone() {
    for trial in 0..20 {
        let home = tempfile::tempdir().unwrap();
        all_succeed(vec![(
            "net allow evil".into(),
            spawn(home.path(), &["net", "allow", "evil.example"], None),
        )]);
        let children = vec![
            (
                "net revoke evil".to_string(),
                spawn(home.path(), &["net", "revoke", "evil.example"], None),
            ),
            (
                "net allow good".to_string(),
                spawn(home.path(), &["net", "allow", "good.example"], None),
            ),
            (
                "net allow-private".to_string(),
                spawn(home.path(), &["net", "allow-private", "127.0.0.1:9"], None),
            ),
        ];
        all_succeed(children);
        let list = listing(home.path(), &["net", "list"]);
        assert!(
            !list.contains("evil.example"),
            "trial {trial}: evil came back:\n{list}"
        );
        assert!(
            list.contains("good.example"),
            "trial {trial}: good lost:\n{list}"
        );
        assert!(
            list.contains("127.0.0.1:9"),
            "trial {trial}: allow-private lost:\n{list}"
        );
    }
}

#[test]
fn i3_parallel_secret_edits_all_land_and_removed_secrets_stay_removed() {
    let home = tempfile::tempdir().unwrap();
    let names: Vec<String> = (0..20).map(|i| format!("S{i}")).collect();
    let children = names
        .iter()
        .map(|n| {
            (
                format!("secret set {n}"),
                spawn(
                    home.path(),
                    &["secret", "set", n, "--host", "api.example"],
                    Some(&format!("value-of-{n}-0123456789")),
                ),
            )
        })
        .collect();
    all_succeed(children);
    let list = listing(home.path(), &["secret", "list"]);
    for n in &names {
        assert!(
            list.lines().any(|l| l.starts_with(&format!("{n} "))),
            "{n} lost:\n{list}"
        );
    }
    for trial in 0..20 {
        let gone = format!("S{trial}");
        let added = format!("N{trial}");
        let children = vec![
            (
                format!("secret rm {gone}"),
                spawn(home.path(), &["secret", "rm", &gone], None),
            ),
            (
                format!("secret set {added}"),
                spawn(
                    home.path(),
                    &["secret", "set", &added, "--host", "api.example"],
                    Some("another-value-0123456789"),
                ),
            ),
        ];
        all_succeed(children);
        let list = listing(home.path(), &["secret", "list"]);
        assert!(
            !list.lines().any(|l| l.starts_with(&format!("{gone} "))),
            "trial {trial}: removed {gone} came back:\n{list}"
        );
        assert!(
            list.lines().any(|l| l.starts_with(&format!("{added} "))),
            "trial {trial}: {added} lost:\n{list}"
        );
    }
}
