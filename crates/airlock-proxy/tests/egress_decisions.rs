//! Invariant I3 at the proxy: deny by default, method/host rules, asks that wait for a
//! human, and SSRF/rebinding refusals that happen before any connect.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use airlock_core::gate::Approval;
use airlock_proxy::{ChannelApprovals, Limits, NetRule, NetRules};
use common::{rule, Harness, Setup};

fn rules(list: Vec<NetRule>) -> NetRules {
    let mut r = NetRules::default();
    for x in list {
        r.add(x).unwrap();
    }
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_get_works_and_post_to_get_only_host_is_denied() {
    let h = Harness::start(|port| Setup {
        rules: rules(vec![rule("api.test", port, &["GET"])]),
        ..Default::default()
    })
    .await;
    let ok = h.curl(&[&h.url("api.test", "/hello")]).await;
    assert_eq!((ok.exit, ok.status), (0, 200), "{ok:?}");
    assert!(
        ok.text().starts_with("hello from api.test"),
        "{}",
        ok.text()
    );

    let post = h
        .curl(&["-X", "POST", "--data", "x=1", &h.url("api.test", "/hello")])
        .await;
    assert_eq!(post.status, 403, "{post:?}");
    let body = post.text();
    assert!(
        body.contains("POST https://api.test") && body.contains("denied"),
        "{body}"
    );
    assert!(
        body.contains("help:") && body.contains("airlock net allow api.test"),
        "{body}"
    );
    let methods: Vec<String> = h.seen().iter().map(|s| s.method.clone()).collect();
    assert_eq!(
        methods,
        vec!["GET"],
        "the POST must never reach the upstream"
    );
    let ex = h.exchanges("/hello").await;
    assert!(ex
        .iter()
        .any(|r| r["detail"]["decision"] == "allow" && r["detail"]["status"] == 200));
    h.assert_audit_verifies().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_not_on_the_allowlist_gets_403_and_no_connection() {
    let h = Harness::start(|port| Setup {
        rules: rules(vec![rule("api.test", port, &["GET"])]),
        ..Default::default()
    })
    .await;
    let r = h.curl(&[&h.url("other.test", "/")]).await;
    assert_eq!(r.status, 403, "{r:?}");
    assert!(
        r.text()
            .contains("no policy permits this net.request action"),
        "{}",
        r.text()
    );
    assert!(
        r.text()
            .contains("help: an operator can allow it with `airlock net allow other.test:"),
        "{}",
        r.text()
    );
    assert!(
        h.connects().is_empty(),
        "denied request connected: {:?}",
        h.connects()
    );
    // Plain http:// requests are decided the same way.
    let r = h.curl(&["http://other.test/x"]).await;
    assert_eq!(r.status, 403, "{r:?}");
    assert!(h.connects().is_empty());
    h.assert_audit_verifies().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_loopback_and_metadata_answers_are_refused_before_connect() {
    let h = Harness::start(|port| Setup {
        rules: rules(vec![
            rule("loop.test", port, &[]),
            rule("rebind.test", port, &[]),
            rule("big.test", port, &[]),
        ]),
        allow_upstream: false,
        ..Default::default()
    })
    .await;
    h.resolver.set("rebind.test", vec![vec!["10.1.2.3"]]);
    h.resolver.set("big.test", vec![vec!["169.254.169.254"]]);
    for (host, category) in [
        ("loop.test", "loopback"),
        ("rebind.test", "private"),
        ("big.test", "cloud metadata"),
    ] {
        let r = h.curl(&[&h.url(host, "/")]).await;
        assert_eq!(r.status, 403, "{host}: {r:?}");
        assert!(
            r.text().contains(category) && r.text().contains("allow_private"),
            "{host}: {}",
            r.text()
        );
    }
    // Metadata through an IP literal in the URL, and through IPv4-mapped IPv6.
    let r = h.curl(&["http://169.254.169.254/latest/meta-data/"]).await;
    assert_eq!(r.status, 403, "{r:?}");
    assert!(
        h.connects().is_empty(),
        "refusal must come before any connect: {:?}",
        h.connects()
    );
    h.assert_audit_verifies().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_addr_port_exception_lets_loopback_through() {
    let h = Harness::start(|port| Setup {
        rules: rules(vec![rule("loop.test", port, &["GET"])]),
        ..Default::default()
    })
    .await;
    let r = h.curl(&[&h.url("loop.test", "/ok")]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(h.connects(), vec![h.upstream.addr]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_answer_changing_between_check_and_connect_cannot_redirect() {
    let h = Harness::start(|port| Setup {
        rules: rules(vec![rule("rebind.test", port, &["GET"])]),
        ..Default::default()
    })
    .await;
    // First answer passes the check (excepted loopback); every later answer is private.
    // Were the proxy to resolve again to connect, the connector would see 10.0.0.7 and
    // fail the test.
    h.resolver
        .set("rebind.test", vec![vec!["127.0.0.1"], vec!["10.0.0.7"]]);
    let calls_before = h.resolver.calls.load(Ordering::SeqCst);
    let r = h.curl(&[&h.url("rebind.test", "/first")]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(
        h.resolver.calls.load(Ordering::SeqCst) - calls_before,
        1,
        "resolved once per request"
    );
    assert_eq!(
        h.connects(),
        vec![h.upstream.addr],
        "connected to exactly the checked address"
    );
    let r = h.curl(&[&h.url("rebind.test", "/second")]).await;
    assert_eq!(r.status, 403, "{r:?}");
    assert!(r.text().contains("10.0.0.7"), "{}", r.text());
    assert_eq!(h.connects().len(), 1, "no connect for the rebound answer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_rule_holds_until_approved_and_denies_on_timeout() {
    let (hook, mut rx) = ChannelApprovals::new(4);
    let h = Harness::start(|port| {
        let mut r = rule("ask.test", port, &["GET"]);
        r.ask = true;
        Setup {
            rules: rules(vec![r]),
            approvals: Some(Arc::new(hook)),
            limits: Limits {
                ask_timeout: Duration::from_secs(2),
                ..Limits::default()
            },
            ..Default::default()
        }
    })
    .await;
    // Approver: approves the first request (after a visible hold), ignores the second.
    let approver = tokio::spawn(async move {
        let first = rx.recv().await.unwrap();
        assert_eq!(
            first.request.action.url.as_str().split('/').nth(3),
            Some("approved")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        let hash = first.request.action_hash.clone();
        first
            .reply
            .send(Approval {
                approver: airlock_core::Principal::Owner,
                via: airlock_core::Via::cli(),
                payload_hash: hash,
                expires_at: u64::MAX,
            })
            .unwrap();
        let second = rx.recv().await.unwrap();
        tokio::time::sleep(Duration::from_secs(4)).await;
        drop(second);
    });
    let t = std::time::Instant::now();
    let r = h.curl(&[&h.url("ask.test", "/approved")]).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        t.elapsed() >= Duration::from_millis(500),
        "the request was not held"
    );
    let r = h.curl(&[&h.url("ask.test", "/never")]).await;
    assert_eq!(r.status, 403, "{r:?}");
    assert!(
        r.text().contains("no approval arrived within 2 s"),
        "{}",
        r.text()
    );
    assert_eq!(
        h.seen().iter().map(|s| s.path.as_str()).collect::<Vec<_>>(),
        vec!["/approved"]
    );
    approver.abort();
    let recs = h.audit_records(1).await;
    assert!(
        recs.iter().any(|r| r["kind"] == "approval"),
        "approval recorded"
    );
    let ex = h.exchanges("/never").await;
    assert_eq!(ex[0]["detail"]["decision"], "ask-timeout");
    h.assert_audit_verifies().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_request_shows_its_body_and_binds_its_hash() {
    let (hook, mut rx) = ChannelApprovals::new(4);
    let h = Harness::start(|port| {
        let mut r = rule("ask.test", port, &["POST"]);
        r.ask = true;
        Setup {
            rules: rules(vec![r]),
            approvals: Some(Arc::new(hook)),
            limits: Limits {
                ask_timeout: Duration::from_secs(5),
                ..Limits::default()
            },
            ..Default::default()
        }
    })
    .await;
    // The approver sees the body and refuses.
    let approver = tokio::spawn(async move {
        let held = rx.recv().await.unwrap();
        let req = held.request.clone();
        drop(held);
        req
    });
    let r = h
        .curl(&["-X", "POST", "-d", "amount=100", &h.url("ask.test", "/pay")])
        .await;
    assert_eq!(r.status, 403, "{r:?}");
    let req = approver.await.unwrap();
    assert_eq!(req.body_preview.as_deref(), Some("amount=100"));
    assert_eq!(
        req.action.body_sha256.as_deref(),
        Some(airlock_core::canonical::sha256_hex(b"amount=100").as_str()),
        "the approval must bind the body's bytes"
    );
    assert!(
        h.seen().is_empty(),
        "a refused request reached the upstream"
    );
}

/// Send `head` (a whole request head) to the proxy over plain TCP, exactly as written,
/// and return the status code of the answer.
async fn raw_status(h: &Harness, head: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(h.handle.tcp_addr.unwrap())
        .await
        .unwrap();
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tcp.read(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
    text.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

mod forwarded_path {
    use super::*;

    /// `/allowed` on api.test over https and over plain http.
    fn prefixed(u: &common::Upstream) -> NetRules {
        let mut limited = rule("api.test", u.addr.port(), &["GET"]);
        limited.path_prefix = Some("/allowed".into());
        let mut plain = rule("api.test", u.plain_addr.port(), &["GET"]);
        plain.path_prefix = Some("/allowed".into());
        rules(vec![limited, plain])
    }

    const ATTACKS: &[&str] = &[
        "/allowed//../secret.txt",
        "/allowed/..%2fsecret.txt",
        "/allowed/%2e%2e%2fsecret.txt",
        "/allowed/%2E%2E/secret.txt",
        "/allowed/..;/secret.txt",
        "/allowed/%252e%252e/secret.txt",
        "/allowed/x%00.txt",
        "/allowed/..%5csecret.txt",
        "/allowed/.%2e/secret.txt",
        "/allowed//secret.txt",
        "/allowed/./../secret.txt",
    ];

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn i3_paths_servers_read_differently_are_refused_under_a_path_prefix() {
        let h = Harness::start_with(|u| Setup {
            rules: prefixed(u),
            ..Default::default()
        })
        .await;
        for path in ATTACKS {
            for url in [h.url("api.test", path), h.plain_url("api.test", path)] {
                let r = h.curl(&["--path-as-is", &url]).await;
                assert_eq!(r.status, 403, "{url}: {r:?}");
                assert!(
                    r.text().contains("limits paths") && r.text().contains("help:"),
                    "{url}: {}",
                    r.text()
                );
            }
        }
        // A raw backslash, as a client that does not normalize would send it.
        let plain = h.upstream.plain_addr.port();
        let status = raw_status(
            &h,
            &format!("GET http://api.test:{plain}/allowed\\..\\secret.txt HTTP/1.1\r\nHost: api.test:{plain}\r\n\r\n"),
        )
        .await;
        assert!(
            status == 400 || status == 403,
            "backslash answered {status}"
        );
        assert!(
            h.seen().is_empty(),
            "no ambiguous path may reach the upstream: {:?}",
            h.seen()
        );
        // An ordinary path under the prefix passes, query and all, byte for byte.
        let ok = h
            .curl(&[&h.url("api.test", "/allowed/file.txt?a=1&b=%41")])
            .await;
        assert_eq!(ok.status, 200, "{ok:?}");
        assert_eq!(h.seen()[0].target, "/allowed/file.txt?a=1&b=%41");
        // A fragment never goes upstream (absolute form over plain http, as sent raw).
        let status = raw_status(
            &h,
            &format!("GET http://api.test:{plain}/allowed/f#/../../secret HTTP/1.1\r\nHost: api.test:{plain}\r\n\r\n"),
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(h.seen()[1].target, "/allowed/f");
        // A dot segment that leaves the prefix is resolved, decided and denied.
        let r = h
            .curl(&["--path-as-is", &h.url("api.test", "/secret/../allowed/x")])
            .await;
        assert_eq!(r.status, 403, "{r:?}");
        assert_eq!(h.seen().len(), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn i3_the_upstream_gets_exactly_the_decided_request_target() {
        let h = Harness::start(|port| Setup {
            rules: rules(vec![rule("other.test", port, &["GET"])]),
            ..Default::default()
        })
        .await;
        // No rule limits paths here, so dot segments are resolved as the Gate resolved
        // them, and the upstream is sent that path, not the raw one.
        for (sent, forwarded) in [
            ("/x/../y//z", "/y//z"),
            ("/a/./b/%2e%2e/c?q=1", "/a/c?q=1"),
            ("/p?", "/p?"),
            ("/q?x=a/../b", "/q?x=a/../b"),
        ] {
            let before = h.seen().len();
            let r = h.curl(&["--path-as-is", &h.url("other.test", sent)]).await;
            assert_eq!(r.status, 200, "{sent}: {r:?}");
            let seen = h.seen();
            assert_eq!(seen.len(), before + 1);
            assert_eq!(seen[before].target, forwarded, "{sent}");
            let path = forwarded.split('?').next().unwrap();
            let ex = h.exchanges(path).await;
            assert!(
                !ex.is_empty(),
                "the audit record names the forwarded path {path}"
            );
        }
        // Absolute form inside an intercepted tunnel must name the tunnel's own host.
        let r = h
            .curl(&[
                "--request-target",
                &format!("https://api.test:{}/x", h.port()),
                &h.url("other.test", "/x"),
            ])
            .await;
        assert_eq!(r.status, 421, "{r:?}");
        // Asterisk form is not a path.
        let r = h
            .curl(&[
                "-X",
                "OPTIONS",
                "--request-target",
                "*",
                &h.url("other.test", "/"),
            ])
            .await;
        assert_eq!(r.status, 400, "{r:?}");
        assert_eq!(h.seen().len(), 4, "{:?}", h.seen());
    }
}

mod methods {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn i3_method_names_are_case_sensitive() {
        let h = Harness::start(|port| Setup {
            rules: rules(vec![
                rule("api.test", port, &["GET"]),
                rule("other.test", port, &[]),
            ]),
            ..Default::default()
        })
        .await;
        for m in ["get", "Get", "delete", "pOST"] {
            for host in ["api.test", "other.test"] {
                let r = h.curl(&["-X", m, &h.url(host, "/m")]).await;
                assert_eq!(r.status, 400, "{m} {host}: {r:?}");
                assert!(r.text().contains("case-sensitive"), "{}", r.text());
            }
        }
        assert!(h.seen().is_empty(), "{:?}", h.seen());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn i3_method_overrides_never_reach_the_upstream() {
        // A method-limited rule, and a rule for any method (whose after-taint ask still
        // depends on the method).
        let h = Harness::start(|port| Setup {
            rules: rules(vec![
                rule("api.test", port, &["GET", "POST"]),
                rule("other.test", port, &[]),
            ]),
            ..Default::default()
        })
        .await;
        for host in ["api.test", "other.test"] {
            let before = h.seen().len();
            let r = h
                .curl(&[
                    "-H",
                    "X-HTTP-Method-Override: DELETE",
                    "-H",
                    "X-HTTP-Method: DELETE",
                    "-H",
                    "X-Method-Override: PUT",
                    &h.url(host, "/o"),
                ])
                .await;
            assert_eq!(r.status, 200, "{r:?}");
            let seen = h.seen();
            assert_eq!(seen.len(), before + 1);
            for name in [
                "x-http-method-override",
                "x-http-method",
                "x-method-override",
            ] {
                assert_eq!(seen[before].header(name), None, "{name} reached {host}");
            }
            for url in [
                h.url(host, "/o?_method=DELETE"),
                h.url(host, "/o?a=1&%5Fmethod=DELETE"),
            ] {
                let r = h.curl(&[&url]).await;
                assert_eq!(r.status, 403, "{url}: {r:?}");
                assert!(r.text().contains("_method"), "{}", r.text());
            }
            let r = h
                .curl(&["--data", "a=1&_method=DELETE", &h.url(host, "/o")])
                .await;
            assert_eq!(r.status, 403, "{r:?}");
            // Every body a framework reads a method from: Rack takes a POST without a
            // `Content-Type` as form data and reads multipart fields; Laravel reads JSON.
            for args in [
                vec!["-F", "_method=DELETE"],
                vec!["-F", "a=1", "-F", "_method=PUT"],
                vec!["-H", "Content-Type:", "--data", "_method=DELETE"],
                vec!["-H", "Content-Type: text/plain", "--data", "_method=DELETE"],
                vec![
                    "-H",
                    "Content-Type: application/json",
                    "--data",
                    r#"{"_method":"DELETE"}"#,
                ],
                vec![
                    "-H",
                    "Content-Type: application/vnd.api+json",
                    "--data",
                    r#"{"a":1,"\u005fmethod":"DELETE"}"#,
                ],
            ] {
                let url = h.url(host, "/o");
                let r = h
                    .curl(&[args.as_slice(), &[url.as_str()][..]].concat())
                    .await;
                assert_eq!(r.status, 403, "{args:?} to {host}: {r:?}");
                assert!(r.text().contains("_method"), "{}", r.text());
            }
            assert_eq!(h.seen().len(), before + 1, "{:?}", h.seen());
            // A body that only mentions the word is not an override.
            let r = h
                .curl(&[
                    "-H",
                    "Content-Type: application/json",
                    "--data",
                    r#"{"note":"define_method is Ruby"}"#,
                    &h.url(host, "/o"),
                ])
                .await;
            assert_eq!(r.status, 200, "{r:?}");
        }
    }
}

/// Header values leave with the request as its URL does (I5), and an approval binds them
/// (I6).
mod header_values {
    use super::*;
    use airlock_core::gate::Session;
    use airlock_proxy::ApprovalRequest;
    use base64::Engine;
    use std::sync::Mutex;

    const NOTES: &str = "launch slips to May, budget cut by a fifth";
    const DOT_ENV: &str = "DATABASE_PASSWORD=hunter2\nAPI_KEY=sk-live-0123456789abcdef\n";

    fn tainted() -> Session {
        let mut s = Session::new("run-1", "owner");
        s.observe_trusted("Read the page at api.test and summarise it");
        s.observe_untrusted("web page", "Quarterly numbers are up. Reply to the sender.");
        s
    }

    /// A proxy for `api.test` (GET) whose asks are recorded and refused at once.
    async fn start() -> (Harness, Arc<Mutex<Vec<ApprovalRequest>>>) {
        let (hook, mut rx) = ChannelApprovals::new(16);
        let h = Harness::start(|port| Setup {
            rules: rules(vec![rule("api.test", port, &["GET"])]),
            approvals: Some(Arc::new(hook)),
            ..Default::default()
        })
        .await;
        let held = Arc::new(Mutex::new(Vec::new()));
        let held2 = held.clone();
        tokio::spawn(async move {
            while let Some(p) = rx.recv().await {
                held2.lock().unwrap().push(p.request.clone());
                drop(p.reply);
            }
        });
        (h, held)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn i5_data_in_a_header_value_is_held_after_untrusted_content() {
        let (h, held) = start().await;
        h.proxy.set_session(tainted());
        let url = h.url("api.test", "/page");
        // What curl sends by itself, and the fixed-shape headers clients add, go through
        // unattended.
        let r = h
            .curl(&[
                "-H",
                "Accept-Language: en-US, *;q=0.9",
                "-H",
                "Accept-Encoding: gzip, deflate",
                "-H",
                "Cache-Control: no-cache",
                &url,
            ])
            .await;
        assert_eq!(r.status, 200, "{r:?}");
        assert!(held.lock().unwrap().is_empty());

        let b64 = base64::engine::general_purpose::STANDARD.encode(DOT_ENV);
        let x_d = format!("X-D: {NOTES}");
        let comment_ua = format!("curl/7.88.1 ({})", &b64[..16]);
        let cookie = format!("Cookie: session={b64}");
        let accept = format!("Accept: application/{}", &b64[..20]);
        let attacks: Vec<Vec<&str>> = vec![
            vec!["-H", &x_d],
            vec!["-A", &b64],
            vec!["-A", &comment_ua],
            vec!["-H", &cookie],
            vec!["-H", &accept],
            // A header of its own name and no value: the name is the data.
            vec!["-H", "X-launch-slips-to-May;"],
        ];
        for (i, args) in attacks.iter().enumerate() {
            let r = h
                .curl(&[args.as_slice(), &[url.as_str()][..]].concat())
                .await;
            assert_eq!(r.status, 403, "{args:?}: {r:?}");
            let held = held.lock().unwrap();
            assert_eq!(held.len(), i + 1, "{args:?} was not held");
            let why = held[i].reasons.join("; ");
            assert!(why.contains("header `"), "{args:?}: {why}");
        }
        assert_eq!(h.seen().len(), 1, "a held request reached the upstream");
        // The approver sees the value itself, not only the header's name.
        let held = held.lock().unwrap();
        let shown = airlock_proxy::approval::header_preview(&held[0].action.headers);
        assert!(
            shown.iter().any(|(n, v)| n == "x-d" && v == NOTES),
            "{shown:?}"
        );
    }

    /// An approval names the payload hash, and the hash covers header values: one for
    /// `X-D: a` is not one for `X-D: b`, on a rule that asks for every request.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn i6_an_approval_binds_the_header_values() {
        let (hook, mut rx) = ChannelApprovals::new(16);
        let h = Harness::start(|port| {
            let mut r = rule("ask.test", port, &["GET"]);
            r.ask = true;
            Setup {
                rules: rules(vec![r]),
                approvals: Some(Arc::new(hook)),
                ..Default::default()
            }
        })
        .await;
        let held = Arc::new(Mutex::new(Vec::new()));
        let held2 = held.clone();
        tokio::spawn(async move {
            while let Some(p) = rx.recv().await {
                held2.lock().unwrap().push(p.request.clone());
                drop(p.reply);
            }
        });
        let url = h.url("ask.test", "/page");
        for v in ["X-D: first secret plan", "X-D: second secret plan"] {
            let r = h.curl(&["-H", v, &url]).await;
            assert_eq!(r.status, 403, "{r:?}");
        }
        let held = held.lock().unwrap();
        assert_eq!(held.len(), 2);
        let names = |r: &ApprovalRequest| -> Vec<String> {
            r.action.headers.iter().map(|f| f.name.clone()).collect()
        };
        assert_eq!(names(&held[0]), names(&held[1]));
        assert_ne!(
            held[0].action_hash, held[1].action_hash,
            "the same header names with other values must need their own approval"
        );
    }
}

mod hosts {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn i3_a_rule_for_a_numeric_host_matches_its_requests_in_every_spelling() {
        let h = Harness::start_with(|u| {
            let typed = format!("2130706433:{}", u.plain_addr.port());
            let (host, port) = NetRule::parse_target(&typed).unwrap();
            let mut r = NetRule::for_host(&host);
            r.port = port;
            Setup {
                rules: rules(vec![r]),
                ..Default::default()
            }
        })
        .await;
        let plain = h.upstream.plain_addr.port();
        for host in [
            "127.0.0.1",
            "2130706433",
            "0x7f000001",
            "0x7f.1",
            "127.1",
            "0177.0.0.1",
        ] {
            let status = raw_status(
                &h,
                &format!("GET http://{host}:{plain}/n HTTP/1.1\r\nHost: {host}:{plain}\r\n\r\n"),
            )
            .await;
            assert_eq!(status, 200, "{host}");
        }
        assert_eq!(h.seen().len(), 6);
        // Another host on the same port is still denied.
        let status = raw_status(
            &h,
            &format!("GET http://127.0.0.2:{plain}/n HTTP/1.1\r\nHost: x\r\n\r\n"),
        )
        .await;
        assert_eq!(status, 403);
        assert_eq!(h.seen().len(), 6);
    }
}
