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
                approver: "owner".into(),
                approver_role: "owner".into(),
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
