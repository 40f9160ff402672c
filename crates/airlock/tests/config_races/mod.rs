//! Operator commands that edit config: hosts and bindings are spelled as requests are, and
//! commands that edit the same config file at once lose nothing: every
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

/// `net allow` spells hosts as the request parser does, or refuses with help.
#[test]
fn i3_net_allow_spells_hosts_as_requests_are_spelled() {
    let home = tempfile::tempdir().unwrap();
    for (typed, listed) in [
        ("2130706433", " 127.0.0.1"),
        ("0x7f000001:8443", " 127.0.0.1:8443"),
        ("[::1]:8080", " [::1]:8080"),
        ("API.Example.COM.", " api.example.com"),
        ("bücher.example", " xn--bcher-kva.example"),
    ] {
        let out = spawn(home.path(), &["net", "allow", typed], None)
            .wait_with_output()
            .unwrap();
        assert!(out.status.success(), "{typed}: {out:?}");
        let list = listing(home.path(), &["net", "list"]);
        assert!(
            list.lines().any(|l| l.ends_with(listed)),
            "{typed} not listed as{listed}:\n{list}"
        );
    }
    for bad in [
        "user@api.example",
        "api.example:0",
        "api.example:65536",
        "::1:8080",
        "https://api.example/",
    ] {
        let out = spawn(home.path(), &["net", "allow", bad], None)
            .wait_with_output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("help:"),
            "{bad}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
    assert_eq!(
        listing(home.path(), &["net", "list"])
            .lines()
            .filter(|l| l.starts_with("net.rule."))
            .count(),
        5
    );
}

/// `secret set` binds scheme and port: https:443 unless told otherwise.
#[test]
fn i3_secret_set_binds_a_scheme_and_port() {
    let home = tempfile::tempdir().unwrap();
    for (args, shown) in [
        (vec!["--host", "api.example"], "https://api.example:443"),
        (
            vec!["--host", "api.example", "--scheme", "http"],
            "http://api.example:80",
        ),
        (vec!["--host", "127.0.0.1:8443"], "https://127.0.0.1:8443"),
        (
            vec![
                "--host",
                "api.example",
                "--port",
                "8080",
                "--path-prefix",
                "/v1",
            ],
            "https://api.example:8080/v1",
        ),
    ] {
        let mut all = vec!["secret", "set", "S"];
        all.extend(args.iter().copied());
        let out = spawn(home.path(), &all, Some("value-0123456789"))
            .wait_with_output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        let list = listing(home.path(), &["secret", "list"]);
        assert!(list.contains(shown), "{args:?}: {list}");
    }
    for args in [
        vec!["--host", "api.example", "--scheme", "ftp"],
        vec!["--host", "api.example:80", "--port", "81"],
        vec!["--host", "api.example", "--path-prefix", "/v1//../x"],
    ] {
        let mut all = vec!["secret", "set", "T"];
        all.extend(args.iter().copied());
        let out = spawn(home.path(), &all, Some("value-0123456789"))
            .wait_with_output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("help:"),
            "{args:?}: {err}"
        );
    }
}
