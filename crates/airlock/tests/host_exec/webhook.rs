//! Signed webhooks in a running host: the listener takes only fresh, correctly signed
//! requests, once each (every refusal recorded); what it takes is a turn of untrusted
//! content from its sender; the reply goes out signed the same way. A listener off
//! loopback is refused at `channel add`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use airlock_agent::provider::ProviderKind;
use airlock_agent::scripted::{ScriptedModel, Step, SCRIPTED_MODEL_NAME};
use airlock_channels::webhook::{signature, INBOUND_PATH};

use super::super::exec_fixture::{airlock, fixture};
use super::super::host_fixture::Host;
use super::super::{audit_records, verify};
use super::{init, wait_for};

const KEY: &str = "hook-signing-key-0123456789";

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One HTTP/1.1 request to `port`: its status code.
fn post(port: u16, headers: &[(&str, String)], body: &[u8]) -> u16 {
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut req = format!(
        "POST {INBOUND_PATH} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    tcp.write_all(req.as_bytes()).unwrap();
    tcp.write_all(body).unwrap();
    let mut answer = String::new();
    let _ = tcp.read_to_string(&mut answer);
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// The value of header `name` in an HTTP head.
fn header(head: &str, name: &str) -> String {
    head.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
        .unwrap_or_default()
}

/// A loopback receiver of the host's outbound posts: (timestamp, signature, body) each.
type Received = Arc<Mutex<Vec<(String, String, String)>>>;

fn receiver() -> (u16, Received) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let got: Received = Arc::new(Mutex::new(Vec::new()));
    let to = got.clone();
    std::thread::spawn(move || {
        for tcp in listener.incoming() {
            let Ok(mut tcp) = tcp else { continue };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            let (head, body) = loop {
                let n = tcp.read(&mut chunk).unwrap_or(0);
                if n == 0 {
                    break (String::new(), String::new());
                }
                buf.extend_from_slice(&chunk[..n]);
                let text = String::from_utf8_lossy(&buf).into_owned();
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let len: usize = header(head, "content-length").parse().unwrap_or(0);
                    if body.len() >= len {
                        break (head.to_string(), body[..len].to_string());
                    }
                }
            };
            to.lock().unwrap().push((
                header(&head, "x-airlock-timestamp"),
                header(&head, "x-airlock-signature"),
                body,
            ));
            let _ =
                tcp.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    (port, got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_webhook_is_taken_once_as_untrusted_content_and_answered_signed() {
    let f = fixture();
    let model = ScriptedModel::start([Step::text("Noted the doorbell.")])
        .await
        .unwrap();
    init(
        &f,
        &format!(
            "\n[provider]\nkind = \"openai\"\nmodel = \"{SCRIPTED_MODEL_NAME}\"\nbase_url = \"{}\"\n",
            model.base_url(ProviderKind::Openai)
        ),
    );
    let o = super::set_secret(&f.home, "hook", KEY, "localhost", "https");
    assert!(o.status.success(), "{o:?}");
    let o = airlock(
        &f.home,
        &[
            "channel",
            "add",
            "webhook",
            "--token-secret",
            "hook",
            "--listen",
            "0.0.0.0:8787",
        ],
    );
    assert!(!o.status.success(), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("is not a loopback address"),
        "{o:?}"
    );
    let port = free_port();
    let (out_port, got) = receiver();
    let listen = format!("127.0.0.1:{port}");
    let outbound = format!("http://127.0.0.1:{out_port}/hook");
    let o = airlock(
        &f.home,
        &[
            "channel",
            "add",
            "webhook",
            "--token-secret",
            "hook",
            "--listen",
            &listen,
            "--outbound-url",
            &outbound,
        ],
    );
    assert!(o.status.success(), "{o:?}");
    let host = Host::start(&f.home);
    wait_for("the webhook listener", || {
        host.log_text().contains("taking signed webhooks")
    });
    let body = br#"{"chat":"hall","from":"doorbell","text":"someone rang the bell"}"#;
    let ts = airlock_channels::webhook::now_for_tests();
    let good = signature(KEY.as_bytes(), ts, body);
    let signed = |sig: &str| {
        vec![
            ("X-Airlock-Timestamp", ts.to_string()),
            ("X-Airlock-Signature", sig.to_string()),
        ]
    };
    assert_eq!(post(port, &[], body), 401, "unsigned");
    assert_eq!(
        post(port, &signed(&signature(b"wrong-key", ts, body)), body),
        401,
        "wrong key"
    );
    assert_eq!(post(port, &signed(&good), body), 202, "signed");
    assert_eq!(post(port, &signed(&good), body), 401, "replayed");
    // The same tag in capitals is the same signature: a replay too.
    let shouted = format!("sha256={}", good["sha256=".len()..].to_uppercase());
    assert_eq!(
        post(port, &signed(&shouted), body),
        401,
        "replayed, respelled"
    );
    wait_for("the signed reply", || !got.lock().unwrap().is_empty());
    let (rts, rsig, rbody) = got.lock().unwrap()[0].clone();
    assert!(
        rbody.contains("Noted the doorbell.") && rbody.contains("\"chat\":\"hall\""),
        "{rbody}"
    );
    assert_eq!(
        rsig,
        signature(KEY.as_bytes(), rts.parse().unwrap(), rbody.as_bytes()),
        "the reply is not signed with the key"
    );
    let asked = model.requests()[0].json().unwrap().to_string();
    assert!(
        asked.contains("webhook:doorbell") && asked.contains("not the person you work for"),
        "{asked}"
    );
    assert_eq!(model.requests().len(), 1, "the replay ran a second turn");
    let dropped = || -> Vec<String> {
        audit_records(&f.home)
            .iter()
            .filter(|r| r["kind"] == "channel-message-dropped")
            .map(|r| r["detail"]["reason"].as_str().unwrap_or("").to_string())
            .collect()
    };
    wait_for("the refusals' records", || dropped().len() == 4);
    assert_eq!(
        dropped(),
        ["Unsigned", "BadSignature", "Replayed", "Replayed"]
    );
    // A flood of unsigned posts, which anyone who reaches the port can send, leaves a log
    // of records (the 2nd, 4th, 8th, 16th and 32nd), not one each.
    for _ in 0..40 {
        assert_eq!(post(port, &[], body), 401, "unsigned");
    }
    wait_for("the flood's records", || dropped().len() == 9);
    let counts: Vec<u64> = audit_records(&f.home)
        .iter()
        .filter(|r| r["kind"] == "channel-message-dropped" && r["detail"]["reason"] == "Unsigned")
        .map(|r| r["detail"]["count"].as_u64().unwrap())
        .collect();
    assert_eq!(counts, [1, 2, 4, 8, 16, 32]);
    assert!(!host.log_text().contains(KEY));
    drop(host);
    assert!(verify(&f.home).status.success());
}
