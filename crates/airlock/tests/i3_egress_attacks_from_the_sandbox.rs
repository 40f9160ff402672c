//! I3 attacks on the egress proxy, made from inside the real sandbox through the relay:
//! names that resolve to internal addresses, a DNS answer that changes between check and
//! connect, a mismatched TLS server name or Host header, a 100 MB response, and an *ask*
//! rule that must hold the request until a human answers.
//!
//! The proxy's connector records every connection attempt and never connects beyond
//! loopback, so a refusal is proven to come before any connect and no packet can leave
//! for another address even if the proxy were broken.

mod i3_common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock_core::gate::Approval;
use airlock_proxy::{ChannelApprovals, Limits};
use i3_common::*;

/// A loopback port that is open (so a wrong connect would succeed) and must never be used.
fn decoy_listener() -> std::net::TcpListener {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    l
}

fn assert_never_accepted(l: &std::net::TcpListener) {
    match l.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the decoy port was connected to: {other:?}"),
    }
}

#[test]
fn names_resolving_to_internal_addresses_are_refused_before_any_connect() {
    let decoy = decoy_listener();
    let decoy_port = decoy.local_addr().unwrap().port();
    let f = fixture_with(|rules, port| {
        // The operator allows these hosts; what they resolve to is the attack.
        rules.add(rule("loop.test", decoy_port, &[])).unwrap();
        rules.add(rule("private.test", port, &[])).unwrap();
        rules.add(rule("meta.test", port, &[])).unwrap();
        rules.add(rule("meta.test", 80, &[])).unwrap();
    });
    f.resolver.script("private.test", &[&["10.0.0.5"]]);
    f.resolver.script("meta.test", &[&["169.254.169.254"]]);
    let port = f.upstream.port;
    let cases = [
        (
            format!("https://loop.test:{decoy_port}/x"),
            "loopback",
            "127.0.0.1",
        ),
        (
            format!("https://private.test:{port}/x"),
            "private",
            "10.0.0.5",
        ),
        (
            format!("https://meta.test:{port}/x"),
            "metadata",
            "169.254.169.254",
        ),
        (
            "http://meta.test/latest/meta-data/".to_string(),
            "metadata",
            "169.254.169.254",
        ),
    ];
    let script: Vec<String> = cases
        .iter()
        .map(|(url, _, _)| {
            format!("curl -sS --max-time 20 -w '\\nHTTP %{{http_code}}\\n' {url}; echo '=='")
        })
        .collect();
    let out = f.run(&script.join("; "), &[]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let answers: Vec<&str> = text.split("==\n").collect();
    for (i, (url, category, addr)) in cases.iter().enumerate() {
        let a = answers.get(i).copied().unwrap_or("");
        assert!(a.contains("HTTP 403"), "{url}: {a}\nall: {text}");
        assert!(
            a.contains(category) && a.contains(addr) && a.contains("allow_private"),
            "{url}: the refusal must name the address, its kind and how to allow it: {a}"
        );
    }
    assert!(
        f.connects().is_empty(),
        "refusals must come before any connect: {:?}",
        f.connects()
    );
    assert_never_accepted(&decoy);
    assert!(
        f.seen().is_empty(),
        "the upstream was reached: {:?}",
        f.seen()
    );
    f.assert_audit_verifies();
}

#[test]
fn only_the_exact_address_and_port_the_operator_allows_is_connected_to() {
    let f = fixture_with(|rules, port| {
        rules.add(rule("private.test", port, &[])).unwrap();
        rules.add(rule("private.test", port + 1, &[])).unwrap();
        rules.add(rule("meta.test", 80, &[])).unwrap();
        rules.add(rule("loop.test", port, &["GET"])).unwrap();
        // Exceptions for exactly these address:port pairs.
        rules
            .allow_private
            .push(format!("10.0.0.5:{port}").parse().unwrap());
        rules
            .allow_private
            .push("169.254.169.254:80".parse().unwrap());
    });
    f.resolver.script("private.test", &[&["10.0.0.5"]]);
    f.resolver.script("meta.test", &[&["169.254.169.254"]]);
    let port = f.upstream.port;
    let out = f.run(
        &format!(
            "for u in https://private.test:{port}/a https://private.test:{}/b http://meta.test/c https://loop.test:{port}/d; do \
             curl -sS --max-time 20 -o /dev/null -w \"$u %{{http_code}}\\n\" $u; done",
            port + 1
        ),
        &[],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // Allowed exceptions reach the connector, which refuses anything beyond loopback
    // (so the proxy answers 502); the other port of the same address is refused first.
    assert!(
        text.contains(&format!("private.test:{port}/a 502")),
        "{text}"
    );
    assert!(
        text.contains(&format!("private.test:{}/b 403", port + 1)),
        "{text}"
    );
    assert!(text.contains("meta.test/c 502"), "{text}");
    assert!(text.contains(&format!("loop.test:{port}/d 200")), "{text}");
    let expected: Vec<std::net::SocketAddr> = vec![
        format!("10.0.0.5:{port}").parse().unwrap(),
        "169.254.169.254:80".parse().unwrap(),
        format!("127.0.0.1:{port}").parse().unwrap(),
    ];
    assert_eq!(f.connects(), expected, "connect attempts");
    let a = f.exchanges("/a");
    assert!(
        a[0]["detail"]["reason"]
            .as_str()
            .unwrap_or("")
            .contains(REFUSED_NON_LOOPBACK),
        "{a:?}"
    );
    assert_eq!(
        f.seen().iter().map(|s| s.path.as_str()).collect::<Vec<_>>(),
        vec!["/d"]
    );
}

#[test]
fn a_dns_answer_that_changes_between_check_and_connect_cannot_redirect() {
    let f = fixture_with(|rules, port| {
        rules.add(rule("rebind.test", port, &["GET"])).unwrap();
    });
    // The first answer passes the check (the excepted loopback address); every later
    // answer is private. A proxy that resolved again to connect would hand 10.0.0.7 to
    // the connector, which records it.
    f.resolver
        .script("rebind.test", &[&["127.0.0.1"], &["10.0.0.7"]]);
    let port = f.upstream.port;
    let out = f.run(
        &format!(
            "curl -sS --max-time 20 -w '\\nHTTP %{{http_code}}\\n' https://rebind.test:{port}/first; \
             curl -sS --max-time 20 -w '\\nHTTP %{{http_code}}\\n' https://rebind.test:{port}/second"
        ),
        &[],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let (first, second) = text
        .split_once("HTTP 200\n")
        .unwrap_or_else(|| panic!("{text}"));
    assert!(first.contains("GET /first"), "{text}");
    assert!(
        second.contains("HTTP 403") && second.contains("10.0.0.7"),
        "{text}"
    );
    assert_eq!(
        f.resolver.calls("rebind.test"),
        2,
        "one resolution per request"
    );
    assert_eq!(
        f.connects(),
        vec![format!("127.0.0.1:{port}").parse().unwrap()],
        "only the checked address was connected to"
    );
    assert_eq!(
        f.exchanges("/first")[0]["detail"]["upstream_addr"],
        format!("127.0.0.1:{port}")
    );
}

#[test]
fn a_mismatched_tls_server_name_or_host_header_is_refused() {
    let f = fixture();
    let port = f.upstream.port;
    // CONNECT api.test, then TLS naming other.test (curl's --connect-to sends the CONNECT
    // for the substitute host and the TLS server name for the URL's host).
    let out = f.run(
        &format!(
            "curl -sS --max-time 20 --connect-to other.test:{port}:api.test:{port} https://other.test:{port}/sni; echo \"curl exit $?\"; \
             curl -sS --max-time 20 -w '\\nHTTP %{{http_code}}\\n' -H 'Host: other.test:{port}' https://api.test:{port}/host"
        ),
        &[],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    // The proxy drops the TLS handshake: curl fails with a TLS error (35), not an HTTP one.
    assert!(text.contains("curl exit 35"), "{text}\n{err}");
    let records = f.audit_records();
    assert!(
        records.iter().any(|r| r["kind"] == "net.exchange"
            && r["detail"]["decision"] == "refused"
            && r["detail"]["host"] == "api.test"
            && r["detail"]["reason"].as_str().unwrap_or("").contains(
                "TLS server name \"other.test\" does not match the CONNECT host \"api.test\""
            )),
        "no SNI refusal record: {records:#?}"
    );
    // A Host header naming another host than the connection's: 421, with the reason.
    assert!(text.contains("HTTP 421"), "{text}");
    assert!(
        text.contains("does not match the TLS server name"),
        "{text}"
    );
    let host = f.exchanges("/host");
    assert_eq!(host[0]["detail"]["decision"], "refused", "{host:?}");
    assert!(
        f.seen()
            .iter()
            .all(|s| s.path != "/sni" && s.path != "/host"),
        "the upstream was reached: {:?}",
        f.seen()
    );
    assert!(f.connects().is_empty(), "{:?}", f.connects());
    f.assert_audit_verifies();
}

#[test]
fn a_100_mb_response_is_cut_at_the_cap() {
    const CAP: u64 = 1024 * 1024;
    let f = fixture_with(|rules, port| {
        rules.add(rule("big.test", port, &["GET"])).unwrap();
    });
    let opts = RunOptions {
        limits: Some(Limits {
            max_response_body: CAP,
            ..Limits::default()
        }),
        ..Default::default()
    };
    let port = f.upstream.port;
    let out = f.run_with(
        &format!(
            "curl -sS --max-time 60 -o big.bin https://big.test:{port}/big; echo \"curl exit $?\"; stat -c 'size %s' big.bin"
        ),
        &[],
        &opts,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let size: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("size "))
        .unwrap_or_else(|| panic!("{text}"))
        .parse()
        .unwrap();
    assert!(size <= CAP, "the sandbox received {size} bytes: {text}");
    assert!(size > 0, "{text}");
    // The body ended early: curl reports the transfer as broken, not complete.
    assert!(!text.contains("curl exit 0"), "{text}");
    let ex = f.exchanges("/big");
    assert_eq!(ex.len(), 1, "{ex:?}");
    let d = &ex[0]["detail"];
    assert_eq!(d["truncated"], true, "{d}");
    assert!(d["response_bytes"].as_u64().unwrap() <= CAP, "{d}");
    assert!(
        d["reason"]
            .as_str()
            .unwrap()
            .contains(&format!("cut at the {CAP}-byte cap")),
        "{d}"
    );
    // The upstream was cut off long before its 100 MB.
    assert!(
        f.upstream
            .big_sent
            .load(std::sync::atomic::Ordering::SeqCst)
            < BIG_BODY_BYTES,
        "the upstream sent everything"
    );
    f.assert_audit_verifies();
}

#[test]
fn an_ask_rule_holds_the_request_until_approved_and_denies_on_timeout() {
    let f = fixture_with(|rules, port| {
        let mut r = rule("ask.test", port, &["GET"]);
        r.ask = true;
        rules.add(r).unwrap();
    });
    let (hook, mut rx) = ChannelApprovals::new(4);
    // The approver: approves the first request after a visible hold, never answers the
    // second.
    let approver = std::thread::spawn(move || {
        let first = rx.blocking_recv().expect("first approval request");
        let url = first.request.action.url.clone();
        std::thread::sleep(Duration::from_millis(800));
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
        let second = rx.blocking_recv().expect("second approval request");
        let url2 = second.request.action.url.clone();
        std::thread::sleep(Duration::from_secs(4));
        drop(second);
        (url, url2)
    });
    let opts = RunOptions {
        approvals: Some(Arc::new(hook)),
        limits: Some(Limits {
            ask_timeout: Duration::from_secs(2),
            ..Limits::default()
        }),
        ..Default::default()
    };
    let port = f.upstream.port;
    let started = Instant::now();
    let out = f.run_with(
        &format!(
            "s=$(date +%s%N); curl -sS --max-time 20 -w '\\nHTTP %{{http_code}}\\n' https://ask.test:{port}/approved; \
             echo \"held $(( ($(date +%s%N) - s) / 1000000 )) ms\"; \
             curl -sS --max-time 20 -w '\\nHTTP %{{http_code}}\\n' https://ask.test:{port}/never"
        ),
        &[],
        &opts,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let (first, second) = text
        .split_once("HTTP 200\n")
        .unwrap_or_else(|| panic!("{text}"));
    assert!(first.contains("GET /approved"), "{text}");
    let held: u64 = second
        .lines()
        .find_map(|l| l.strip_prefix("held ").and_then(|l| l.strip_suffix(" ms")))
        .unwrap_or_else(|| panic!("{text}"))
        .parse()
        .unwrap();
    assert!(
        held >= 800,
        "the request was not held for the approver: {held} ms"
    );
    assert!(second.contains("HTTP 403"), "{text}");
    assert!(second.contains("no approval arrived within 2 s"), "{text}");
    assert!(started.elapsed() >= Duration::from_secs(2));
    let (url1, url2) = approver.join().unwrap();
    assert_eq!(url1, format!("https://ask.test:{port}/approved"));
    assert_eq!(url2, format!("https://ask.test:{port}/never"));
    assert_eq!(
        f.seen().iter().map(|s| s.path.as_str()).collect::<Vec<_>>(),
        vec!["/approved"],
        "only the approved request reached the upstream"
    );
    assert_eq!(
        f.exchanges("/approved")[0]["detail"]["decision"],
        "ask-approved"
    );
    assert_eq!(
        f.exchanges("/never")[0]["detail"]["decision"],
        "ask-timeout"
    );
    f.assert_audit_verifies();
}
