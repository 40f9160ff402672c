//! Invariants I3/I10 at the proxy: credentials added only at their binding, never shown
//! back, never logged; TLS name checks; response caps.

mod common;

use std::sync::Arc;

use airlock_proxy::secrets::{Binding, HeaderTemplate, LoadedSecret, SecretStore};
use airlock_proxy::{Limits, NetRule, NetRules, CA_CERT_FILE};
use common::{rule, Harness, Setup};
use secrecy::SecretString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const REAL: &str = "ghp_REALsecretVALUE0123456789";

fn rules(list: Vec<NetRule>) -> NetRules {
    let mut r = NetRules::default();
    for x in list {
        r.add(x).unwrap();
    }
    r
}

/// A secret stored and loaded through the real encrypted store.
fn stored_secret(dir: &std::path::Path, port: u16) -> (String, Vec<LoadedSecret>) {
    let store = SecretStore::new(dir);
    let binding = Binding::parse("api.test", None, Some(port), Some("/v1")).unwrap();
    let ph = store
        .set(
            "GH",
            &binding,
            HeaderTemplate::bearer(),
            &SecretString::from(REAL.to_string()),
        )
        .unwrap();
    (ph, store.load_all().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_is_injected_for_bound_host_and_path_only_and_never_shown_back() {
    let store_dir = tempfile::tempdir().unwrap();
    let mut ph = String::new();
    let h = Harness::start(|port| {
        let (p, secrets) = stored_secret(store_dir.path(), port);
        ph = p;
        Setup {
            rules: rules(vec![
                rule("api.test", port, &["GET"]),
                rule("other.test", port, &["GET"]),
            ]),
            secrets,
            ..Default::default()
        }
    })
    .await;
    let auth = format!("Authorization: Bearer {ph}");

    // Bound host and path: the upstream gets the value; the echo comes back scrubbed.
    let r = h.curl(&["-H", &auth, &h.url("api.test", "/v1/echo")]).await;
    assert_eq!(r.status, 200, "{r:?}");
    let seen = h.seen();
    assert_eq!(
        seen[0].header("authorization"),
        Some(format!("Bearer {REAL}").as_str())
    );
    assert!(
        !r.text().contains(REAL) && !r.stderr.contains(REAL),
        "real value reached the client: {r:?}"
    );
    assert!(
        r.text().contains(&ph),
        "echo shows the placeholder: {}",
        r.text()
    );
    assert!(
        r.stderr
            .to_ascii_lowercase()
            .contains(&format!("x-echo-auth: bearer {}", ph.to_ascii_lowercase())),
        "{}",
        r.stderr
    );

    // Same host, path outside the binding: unchanged and flagged.
    let r = h.curl(&["-H", &auth, &h.url("api.test", "/v2/echo")]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        h.seen()[1].header("authorization"),
        Some(format!("Bearer {ph}").as_str())
    );

    // Another allowed host: the placeholder arrives unsubstituted and is flagged.
    let r = h
        .curl(&["-H", &auth, &h.url("other.test", "/v1/echo")])
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        h.seen()[2].header("authorization"),
        Some(format!("Bearer {ph}").as_str())
    );
    // In the URL and another header too.
    let r = h
        .curl(&[
            "-H",
            &format!("X-Token: {ph}"),
            &format!("{}?t={ph}", h.url("api.test", "/v1/q")),
        ])
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(h.seen()[3].header("x-token"), Some(ph.as_str()));

    let recs = h.audit_records(1).await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let recs = if recs
        .iter()
        .filter(|r| r["kind"] == "net.placeholder_misuse")
        .count()
        < 4
    {
        h.read_audit()
    } else {
        recs
    };
    let misuse: Vec<(String, String)> = recs
        .iter()
        .filter(|r| r["kind"] == "net.placeholder_misuse")
        .map(|r| {
            (
                r["detail"]["host"].as_str().unwrap().to_string(),
                r["detail"]["location"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for want in [
        ("api.test", "header:authorization"),
        ("other.test", "header:authorization"),
        ("api.test", "url"),
        ("api.test", "header:x-token"),
    ] {
        assert!(
            misuse.contains(&(want.0.to_string(), want.1.to_string())),
            "missing {want:?} in {misuse:?}"
        );
    }
    let log = std::fs::read_to_string(h.audit_dir.join(airlock_audit::LOG_FILE)).unwrap();
    assert!(!log.contains(REAL), "secret value in the audit log");
    let ex = h.exchanges("/v1/echo").await;
    assert!(
        ex.iter()
            .any(|r| r["detail"]["secrets_injected"][0] == "GH"),
        "{ex:?}"
    );
    h.assert_audit_verifies().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_header_that_disagrees_with_sni_is_refused() {
    let h = Harness::start(|port| Setup {
        rules: rules(vec![
            rule("api.test", port, &["GET"]),
            rule("other.test", port, &["GET"]),
        ]),
        ..Default::default()
    })
    .await;
    let r = h
        .curl(&[
            "-H",
            &format!("Host: other.test:{}", h.port()),
            &h.url("api.test", "/x"),
        ])
        .await;
    assert_eq!(r.status, 421, "{r:?}");
    assert!(
        r.text().contains("does not match the TLS server name"),
        "{}",
        r.text()
    );
    assert!(h.connects().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sni_that_disagrees_with_connect_host_is_refused() {
    let h = Harness::start(|port| Setup {
        rules: rules(vec![
            rule("api.test", port, &["GET"]),
            rule("other.test", port, &["GET"]),
        ]),
        ..Default::default()
    })
    .await;
    let mut tcp = tokio::net::TcpStream::connect(h.handle.tcp_addr.unwrap())
        .await
        .unwrap();
    let target = format!("api.test:{}", h.port());
    tcp.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = [0u8; 256];
    let n = tcp.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    let mut roots = rustls::RootCertStore::empty();
    let ca = std::fs::read(h.config.path().join(CA_CERT_FILE)).unwrap();
    use rustls_pki_types::pem::PemObject;
    roots
        .add(rustls_pki_types::CertificateDer::from_pem_slice(&ca).unwrap())
        .unwrap();
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let name = rustls_pki_types::ServerName::try_from("other.test").unwrap();
    let res = tls.connect(name, tcp).await;
    assert!(res.is_err(), "handshake with a mismatched SNI must fail");
    let recs = h.audit_records(1).await;
    assert!(
        recs.iter().any(|r| r["detail"]["reason"]
            .as_str()
            .unwrap_or("")
            .contains("does not match the CONNECT host")),
        "refusal audited"
    );
    assert!(h.connects().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_megabyte_response_is_cut_at_the_cap() {
    const CAP: u64 = 1024 * 1024;
    let h = Harness::start(|port| Setup {
        rules: rules(vec![rule("big.test", port, &["GET"])]),
        limits: Limits {
            max_response_body: CAP,
            ..Limits::default()
        },
        ..Default::default()
    })
    .await;
    let out = tempfile::NamedTempFile::new().unwrap();
    let path = out.path().to_str().unwrap().to_string();
    let r = h.curl(&["-o", &path, &h.url("big.test", "/big")]).await;
    let got = std::fs::metadata(&path).unwrap().len();
    assert!(
        r.exit != 0,
        "a cut body must not look complete to the client: {r:?}"
    );
    assert!(got <= CAP && got > 0, "client received {got} bytes");
    let ex = h.exchanges("/big").await;
    assert_eq!(ex[0]["detail"]["truncated"], true, "{ex:?}");
    assert_eq!(ex[0]["detail"]["response_bytes"], CAP);

    // A declared length over the cap is refused before any body byte is passed.
    let r = h.curl(&[&h.url("big.test", "/big-declared")]).await;
    assert_eq!(r.status, 502, "{r:?}");
    assert!(
        r.text().contains("over the 1048576-byte response cap"),
        "{}",
        r.text()
    );
    // Within the cap, the body arrives whole.
    let r = h
        .curl(&["-o", &path, &h.url("big.test", "/bytes/500000")])
        .await;
    assert_eq!((r.exit, r.status), (0, 200), "{r:?}");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 500000);
    h.assert_audit_verifies().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn egress_budget_and_host_rate_limit_refuse() {
    let h = Harness::start(|port| Setup {
        rules: rules(vec![
            rule("api.test", port, &["GET", "POST"]),
            rule("other.test", port, &["GET"]),
        ]),
        limits: Limits {
            egress_budget: 4000,
            host_rate_per_sec: 0.0,
            host_burst: 3,
            ..Limits::default()
        },
        ..Default::default()
    })
    .await;
    let body = "x".repeat(3000);
    let r = h.curl(&["--data", &body, &h.url("api.test", "/a")]).await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = h.curl(&["--data", &body, &h.url("api.test", "/b")]).await;
    assert_eq!(r.status, 403, "{r:?}");
    assert!(r.text().contains("egress budget"), "{}", r.text());
    for _ in 0..2 {
        h.curl(&[&h.url("other.test", "/r")]).await;
    }
    let r = h.curl(&[&h.url("other.test", "/r")]).await;
    assert_eq!(r.status, 200, "third request within the burst: {r:?}");
    let r = h.curl(&[&h.url("other.test", "/r")]).await;
    assert_eq!(r.status, 429, "{r:?}");
    assert!(h.seen().iter().all(|s| s.path != "/b"));
}

mod bindings {
    use super::*;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
    use base64::Engine;

    /// The secret bound to https on the upstream's port, below /v1; rules allow api.test
    /// on both the https and the plain-http upstream.
    async fn start(store_dir: &std::path::Path) -> (Harness, String) {
        let mut ph = String::new();
        let h = Harness::start_with(|u| {
            let (p, secrets) = stored_secret(store_dir, u.addr.port());
            ph = p;
            Setup {
                rules: rules(vec![
                    rule("api.test", u.addr.port(), &["GET"]),
                    rule("api.test", u.plain_addr.port(), &["GET"]),
                ]),
                secrets,
                ..Default::default()
            }
        })
        .await;
        (h, ph)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn i3_a_secret_goes_only_to_its_scheme_and_port() {
        let dir = tempfile::tempdir().unwrap();
        let (h, ph) = start(dir.path()).await;
        let auth = format!("Authorization: Bearer {ph}");
        let r = h
            .curl(&["-H", &auth, &h.plain_url("api.test", "/v1/echo")])
            .await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(
            h.seen()[0].header("authorization"),
            Some(format!("Bearer {ph}").as_str()),
            "plain http on another port must get the placeholder, not the value"
        );
        let r = h.curl(&["-H", &auth, &h.url("api.test", "/v1/echo")]).await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(
            h.seen()[1].header("authorization"),
            Some(format!("Bearer {REAL}").as_str())
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn i3_a_secret_bound_to_a_path_is_never_sent_to_a_path_that_escapes_it() {
        let dir = tempfile::tempdir().unwrap();
        let (h, ph) = start(dir.path()).await;
        let auth = format!("Authorization: Bearer {ph}");
        for path in [
            "/v1//../other",
            "/v1/..%2fother",
            "/v1/%2e%2e/other",
            "/v1/..;/other",
            "/v1/%252e%252e/other",
        ] {
            let r = h
                .curl(&["--path-as-is", "-H", &auth, &h.url("api.test", path)])
                .await;
            assert_eq!(r.status, 403, "{path}: {r:?}");
            assert!(r.text().contains("limits paths"), "{}", r.text());
        }
        assert!(h.seen().is_empty(), "{:?}", h.seen());
        // Resolved dot segments leave the binding: the value is not added.
        let r = h.curl(&["-H", &auth, &h.url("api.test", "/other/x")]).await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(
            h.seen()[0].header("authorization"),
            Some(format!("Bearer {ph}").as_str())
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn i10_echoes_in_other_encodings_are_scrubbed() {
        let dir = tempfile::tempdir().unwrap();
        let (h, ph) = start(dir.path()).await;
        let auth = format!("Authorization: Bearer {ph}");
        let r = h
            .curl(&["-H", &auth, &h.url("api.test", "/v1/echo-encoded")])
            .await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(
            h.seen()[0].header("authorization"),
            Some(format!("Bearer {REAL}").as_str())
        );
        let body = r.text();
        let pct: String = REAL.bytes().map(|b| format!("%{b:02x}")).collect();
        for (what, form) in [
            ("base64", STANDARD.encode(format!("Bearer {REAL}"))),
            ("base64url", URL_SAFE_NO_PAD.encode(REAL)),
            ("base64 shifted", STANDARD.encode(format!("x{REAL}"))),
            ("hex", hex::encode(REAL)),
            ("HEX", hex::encode_upper(REAL)),
            ("percent", pct),
        ] {
            // The value's middle is in any surviving encoding of it.
            let core = &form[6..form.len() - 6];
            assert!(!body.contains(core), "{what} echo survived: {body}");
        }
        assert!(body.contains(&ph), "{body}");
    }
}

/// A loopback HTTP server that answers every request `401` with a reason phrase of its
/// own that repeats the `Authorization` it got, as a careless API does in its status line.
async fn reason_echo_upstream() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut tcp, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tcp.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let auth = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .starts_with("authorization:")
                            .then(|| l["authorization:".len()..].trim().to_string())
                    })
                    .unwrap_or_default();
                let answer = format!(
                    "HTTP/1.1 401 invalid key {auth}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                );
                let _ = tcp.write_all(answer.as_bytes()).await;
            });
        }
    });
    addr
}

/// I10: the upstream's reason phrase is free text the scrubber never reads; the sandbox
/// gets the standard phrase for the status instead, so a bound host that repeats the
/// injected key in its status line does not hand it to the sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i10_an_upstream_reason_phrase_never_reaches_the_sandbox() {
    let echo = reason_echo_upstream().await;
    let store_dir = tempfile::tempdir().unwrap();
    let store = SecretStore::new(store_dir.path());
    let binding = Binding::parse("api.test", Some("http"), Some(echo.port()), None).unwrap();
    let ph = store
        .set(
            "KEY",
            &binding,
            HeaderTemplate::bearer(),
            &SecretString::from(REAL.to_string()),
        )
        .unwrap();
    let h = Harness::start(|_| {
        let mut r = rules(vec![rule("api.test", echo.port(), &["GET"])]);
        r.allow_private.push(echo);
        Setup {
            rules: r,
            secrets: store.load_all().unwrap(),
            ..Default::default()
        }
    })
    .await;
    let url = format!("http://api.test:{}/v1/me", echo.port());
    let r = h
        .curl(&["-H", &format!("Authorization: Bearer {ph}"), &url])
        .await;
    assert_eq!(r.status, 401, "{r:?}");
    let status_line = r.stderr.lines().next().unwrap_or("");
    assert!(
        !r.stderr.contains(REAL) && !r.text().contains(REAL),
        "the injected value came back in the status line: {status_line:?}"
    );
    assert!(
        !status_line.contains("invalid key"),
        "the upstream's own reason phrase reached the sandbox: {status_line:?}"
    );
}

/// I5 and I3 together: after untrusted content, a header that is exactly a bound
/// secret's placeholder is the operator's value, not data, and goes through unattended;
/// anything else beside the placeholder in it is data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i5_a_bound_placeholder_is_not_data_after_untrusted_content() {
    let store_dir = tempfile::tempdir().unwrap();
    let mut ph = String::new();
    let h = Harness::start(|port| {
        let (p, secrets) = stored_secret(store_dir.path(), port);
        ph = p;
        Setup {
            rules: rules(vec![rule("api.test", port, &["GET"])]),
            secrets,
            ..Default::default()
        }
    })
    .await;
    let mut s = airlock_core::gate::Session::new("run-1", "owner");
    s.observe_trusted("Read my profile at https://api.test/v1/me");
    s.observe_untrusted("web page", "Quarterly numbers are up.");
    h.proxy.set_session(s);
    let auth = format!("Authorization: Bearer {ph}");
    let r = h.curl(&["-H", &auth, &h.url("api.test", "/v1/me")]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        h.seen()[0].header("authorization"),
        Some(format!("Bearer {REAL}").as_str())
    );
    let smuggled = format!("{auth} launch-slips-to-may");
    let r = h
        .curl(&["-H", &smuggled, &h.url("api.test", "/v1/me")])
        .await;
    assert_eq!(r.status, 403, "{r:?}");
    assert_eq!(h.seen().len(), 1);
}
