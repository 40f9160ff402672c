//! I3: the sandbox reaches the network only through the proxy, and the proxy denies by
//! default. Real curl in the real sandbox, a real per-run proxy, a real HTTPS upstream on
//! loopback; every request is a Gate decision recorded in the same audit log as the
//! command.

mod i3_common;

use i3_common::*;

#[test]
fn an_allowed_get_works_from_inside_the_sandbox() {
    let f = fixture();
    let (text, out) = f.curl(&f.url("api.test", "/hello"), &[]);
    assert!(
        text.starts_with(&format!(
            "hello from api.test:{} GET /hello\n",
            f.upstream.port
        )),
        "{text}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.ends_with("HTTP 200"), "{text}");
    assert_eq!(out.status, 0);
    // The run was routed through the attested relay.
    let relay = out.attestation.relay.expect("relay attested");
    assert_eq!(relay.listen, "127.0.0.1:3128");
    // The proxy's decision sits in the same log as the command's, and the chain verifies.
    let records = f.audit_records();
    let ex: Vec<_> = records
        .iter()
        .filter(|r| r["kind"] == "net.exchange" && r["detail"]["path"] == "/hello")
        .collect();
    assert_eq!(ex.len(), 1, "{records:#?}");
    assert_eq!(ex[0]["detail"]["decision"], "allow");
    assert_eq!(ex[0]["detail"]["status"], 200);
    f.assert_audit_verifies();
}

#[test]
fn a_post_to_a_get_only_host_is_denied_with_the_explanation() {
    let f = fixture();
    let (text, _) = f.curl(
        &format!("-X POST -d data {}", f.url("api.test", "/hello")),
        &[],
    );
    assert!(text.ends_with("HTTP 403"), "{text}");
    assert!(text.contains("POST"), "{text}");
    assert!(
        text.contains("help:"),
        "the denial must say how to allow it: {text}"
    );
    assert!(text.contains("airlock net allow"), "{text}");
    assert!(
        f.seen().iter().all(|s| s.method != "POST"),
        "the upstream saw the POST: {:?}",
        f.seen()
    );
    // A POST to a host allowed for any method goes through: the denial was the method.
    let (text, _) = f.curl(
        &format!("-X POST -d data {}", f.url("other.test", "/p")),
        &[],
    );
    assert!(text.ends_with("HTTP 200"), "{text}");
    f.assert_audit_verifies();
}

#[test]
fn a_host_not_on_the_allowlist_gets_403_with_the_explanation() {
    let f = fixture();
    let (text, _) = f.curl(&f.url("nope.test", "/x"), &[]);
    assert!(text.ends_with("HTTP 403"), "{text}");
    assert!(text.contains("nope.test"), "{text}");
    assert!(text.contains("help:"), "{text}");
    assert!(f.seen().iter().all(|s| !s.host.starts_with("nope.test")));
    let records = f.audit_records();
    assert!(
        records.iter().any(|r| r["kind"] == "net.exchange"
            && r["detail"]["host"] == "nope.test"
            && r["detail"]["decision"] == "deny"),
        "no deny record: {records:#?}"
    );
    f.assert_audit_verifies();
}

#[test]
fn a_direct_connection_that_bypasses_the_proxy_fails() {
    let f = fixture();
    let port = f.upstream.port;
    // curl told to ignore the proxy: Landlock refuses the connect to any port but the
    // relay's (EACCES), so curl cannot connect (exit 7).
    let out = f.run(
        &format!("curl -sS --noproxy '*' --max-time 10 -k https://127.0.0.1:{port}/direct; echo \"curl exit $?\""),
        &[],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("curl exit 7"), "{text}\n{err}");
    // The same with bash's /dev/tcp shows the errno: permission denied, not a missing tool.
    let out = f.run(
        &format!("/bin/bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' 2>&1; echo \"exit $?\""),
        &[],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Permission denied"), "{text}");
    assert!(text.contains("exit 1"), "{text}");
    assert!(
        f.seen().iter().all(|s| s.path != "/direct"),
        "the upstream was reached directly: {:?}",
        f.seen()
    );
}

#[test]
fn the_payload_environment_names_the_relay_and_the_ca_only() {
    let f = fixture();
    let out = f.run(
        "env | sort; echo ---; cat \"$SSL_CERT_FILE\"; ls /run/airlock",
        &[],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for var in airlock::egress::PROXY_VARS {
        assert!(
            text.contains(&format!("{var}=http://127.0.0.1:3128\n")),
            "{var} missing: {text}"
        );
    }
    assert!(
        text.contains("\nNO_PROXY=\n") && text.contains("\nno_proxy=\n"),
        "{text}"
    );
    for var in airlock::egress::CA_VARS {
        assert!(
            text.contains(&format!("{var}=/run/airlock/ca.pem\n")),
            "{var} missing: {text}"
        );
    }
    let ca = std::fs::read_to_string(f.home.config.join("ca.pem")).unwrap();
    assert!(
        text.contains(&ca),
        "the CA certificate is not the operator's: {text}"
    );
    assert!(!text.contains("PRIVATE KEY"), "{text}");
    assert!(
        text.trim_end().ends_with("ca.pem"),
        "only ca.pem in /run/airlock: {text}"
    );
}

/// `airlock exec` itself: a proxy per run, the CA made on first use, `--secret` checked.
mod cli {
    use std::path::PathBuf;
    use std::process::{Command, Output, Stdio};

    fn exec(home: &std::path::Path, ws: &std::path::Path, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_airlock"))
            .env("AIRLOCK_HOME", home)
            .current_dir(ws)
            .arg("exec")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn dirs() -> (tempfile::TempDir, PathBuf, PathBuf) {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        std::fs::set_permissions(&ws, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let home = tmp.path().join("home");
        (tmp, home, ws)
    }

    #[test]
    fn exec_routes_the_payload_through_its_own_proxy() {
        let (_t, home, ws) = dirs();
        // Not on the allowlist (a loopback literal, so nothing could leave even if the
        // proxy resolved it): the payload's curl, using only the environment, gets 403.
        let o = exec(
            &home,
            &ws,
            &[
                "--",
                "echo $HTTPS_PROXY; grep -c 'BEGIN CERTIFICATE' $SSL_CERT_FILE; curl -sS --max-time 20 -w '\\nHTTP %{http_code}\\n' http://127.0.0.1:9/x",
            ],
        );
        let out = String::from_utf8_lossy(&o.stdout);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
        // The CA file is the bundle: Airlock's CA and the system roots (for pass-through
        // hosts), so more than one certificate.
        let mut lines = out.lines();
        assert_eq!(lines.next(), Some("http://127.0.0.1:3128"), "{out}");
        let certs: usize = lines.next().and_then(|l| l.parse().ok()).unwrap_or(0);
        assert!(
            certs > 1,
            "the sandbox's CA file holds {certs} certificates: {out}"
        );
        assert!(out.contains("HTTP 403"), "{out}");
        assert!(out.contains("help:"), "{out}");
        // The CA was created on first use; the run's socket directory is gone again.
        assert!(home.join("config/ca.pem").is_file() && home.join("config/ca.key").is_file());
        let run_dir = home.join("state/run");
        assert_eq!(std::fs::read_dir(&run_dir).unwrap().count(), 0);
        // The execution record names the relay and the proxy; the chain verifies.
        let log = std::fs::read_to_string(home.join("state/audit/log.jsonl")).unwrap();
        assert!(log.contains("\"net.exchange\""), "{log}");
        assert!(log.contains("\"relay\":{"), "{log}");
        let v = Command::new(env!("CARGO_BIN_EXE_airlock"))
            .env("AIRLOCK_HOME", &home)
            .args(["audit", "verify"])
            .output()
            .unwrap();
        assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stdout));
    }

    #[test]
    fn an_unknown_secret_stops_the_run_with_help() {
        let (_t, home, ws) = dirs();
        let o = exec(&home, &ws, &["--secret", "nope", "--", "touch ran"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_ne!(o.status.code(), Some(0));
        assert!(err.contains("no secret named \"nope\""), "{err}");
        assert!(err.contains("help: `airlock secret list`"), "{err}");
        assert!(!ws.join("ran").exists());
    }
}
