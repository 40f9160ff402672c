//! The Discord adapter against a local fake of Discord (its REST API and its Gateway, in
//! the real wire format over TLS with a test CA).

use std::time::{Duration, Instant};

use airlock_channels::discord::{Discord, INTENTS, MESSAGE_LIMIT};
use airlock_channels::fake::discord::FakeDiscord;
use airlock_channels::{Card, Channel, ChannelError, ChatId, Inbound};
use serde_json::json;

const TOKEN: &str = "MTAwMDAwMDAwMDAwMDAwMDAwMQ.fake-bot-token.s3cr3t";

fn fake() -> FakeDiscord {
    let fake = FakeDiscord::start(TOKEN);
    fake.set_heartbeat_interval(Duration::from_millis(300));
    fake
}

fn adapter(fake: &FakeDiscord, token: &str) -> Discord {
    Discord::new(&fake.api_base(), token.to_string().into(), &[fake.ca_pem()])
        .unwrap()
        .with_poll(Duration::from_secs(1))
}

/// Events until there are `n`, for up to 30 s.
async fn collect(dc: &Discord, n: usize) -> Vec<Inbound> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut events = Vec::new();
    while events.len() < n {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} events came: {events:?}",
            events.len()
        );
        events.extend(dc.next_events().await.unwrap());
    }
    events
}

async fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn texts(events: &[Inbound]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e {
            Inbound::Message { text, .. } => text.clone(),
            other => panic!("not a message: {other:?}"),
        })
        .collect()
}

/// Nothing more is handed out (one poll's worth of waiting).
async fn nothing_more(dc: &Discord) {
    let more = dc.next_events().await.unwrap();
    assert!(more.is_empty(), "handed out again: {more:?}");
}

/// Whether `pat` occurs in `s` other than right after a backslash (which escapes it).
fn bare(s: &str, pat: &str) -> bool {
    s.match_indices(pat).any(|(i, _)| !s[..i].ends_with('\\'))
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            out.extend(chars.next());
        } else {
            out.push(c);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identifies_once_heartbeats_and_hands_out_peoples_messages() {
    let fake = fake();
    let dc = adapter(&fake, TOKEN);
    fake.push_message("100", None, "7", "owner", "hi **there**");
    fake.push_bot_message("200", Some("9"), "8", "otherbot", "beep");
    fake.push_message("200", Some("9"), "7", "owner", "in a server");
    let events = collect(&dc, 2).await;
    assert_eq!(
        events,
        vec![
            Inbound::Message {
                chat: ChatId("100".into()),
                private: true,
                from: airlock_channels::Sender {
                    id: "7".into(),
                    display: "owner".into()
                },
                text: "hi **there**".into(),
                passed_on_from: None,
            },
            Inbound::Message {
                chat: ChatId("200".into()),
                private: false,
                from: airlock_channels::Sender {
                    id: "7".into(),
                    display: "owner".into()
                },
                text: "in a server".into(),
                passed_on_from: None,
            },
        ]
    );
    wait_until("two heartbeats", || fake.heartbeats() >= 2).await;
    // The bot's message never comes.
    nothing_more(&dc).await;
    assert_eq!(fake.identifies(), 1);
    assert_eq!(fake.resumes(), 0);
    let identify = &fake.calls_of("GATEWAY identify")[0];
    assert_eq!(identify["path"], "/gateway");
    assert_eq!(identify["d"]["intents"], INTENTS);
    assert_eq!(INTENTS, 512 | 4096 | 32768);
    assert!(identify["d"]["properties"]["os"].is_string());
    assert_eq!(fake.calls_of("GET /gateway/bot").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_press_comes_in_and_is_answered_ephemerally() {
    let fake = fake();
    let dc = adapter(&fake, TOKEN);
    fake.push_press("100", "555", "7", "owner", "a:req:abc");
    fake.push_guild_press("9", "200", "556", "8", "member", "d:req:def");
    let events = collect(&dc, 2).await;
    let Inbound::Press {
        press_id,
        chat,
        message_id,
        from,
        data,
    } = &events[0]
    else {
        panic!("{events:?}")
    };
    assert_eq!(chat, &ChatId("100".into()));
    assert_eq!(message_id, "555");
    assert_eq!((from.id.as_str(), from.display.as_str()), ("7", "owner"));
    assert_eq!(data, "a:req:abc");
    match &events[1] {
        Inbound::Press { from, data, .. } => {
            assert_eq!(from.id, "8");
            assert_eq!(data, "d:req:def");
        }
        other => panic!("{other:?}"),
    }

    dc.answer_press(press_id, "**Approved** @everyone")
        .await
        .unwrap();
    let (id, token) = press_id.split_once(':').unwrap();
    let answer = fake.wait_for(&format!("POST /interactions/{id}/{token}/callback"), |_| {
        true
    });
    assert_eq!(answer["type"], 4);
    assert_eq!(answer["data"]["flags"], 64);
    assert_eq!(answer["data"]["allowed_mentions"], json!({"parse": []}));
    let content = answer["data"]["content"].as_str().unwrap();
    assert!(
        !bare(content, "**") && !bare(content, "@everyone"),
        "{content}"
    );
    assert_eq!(unescape(content), "**Approved** @everyone");

    // A second answer is refused by Discord, and the error does not carry the
    // interaction's token.
    let err = dc.answer_press(press_id, "again").await.unwrap_err();
    assert!(matches!(err, ChannelError::Refused { .. }), "{err}");
    assert!(!err.to_string().contains(token), "{err}");
    // A press id that would reach another endpoint is refused before any request.
    let before = fake.calls().len();
    for forged in [
        "1/../../channels/1/messages:t",
        "1:../x",
        "1:..",
        "nocolon",
        "1:",
    ] {
        assert!(dc.answer_press(forged, "x").await.is_err(), "{forged}");
    }
    assert_eq!(fake.calls().len(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_drop_or_a_reconnect_the_session_resumes_and_nothing_is_lost_or_repeated() {
    let fake = fake();
    let dc = adapter(&fake, TOKEN);
    fake.push_message("100", None, "7", "owner", "m1");
    assert_eq!(texts(&collect(&dc, 1).await), ["m1"]);

    // Dropped: what comes meanwhile is replayed on resume.
    fake.drop_connections();
    wait_until("the connection to drop", || fake.connected() == 0).await;
    for m in ["m2", "m3", "m4", "m5"] {
        fake.push_message("100", None, "7", "owner", m);
    }
    assert_eq!(texts(&collect(&dc, 4).await), ["m2", "m3", "m4", "m5"]);
    assert!(fake.resumes() >= 1);
    assert_eq!(fake.identifies(), 1);
    nothing_more(&dc).await;
    let resume = &fake.calls_of("GATEWAY resume")[0];
    // Resumed at the address READY gave, with the session and the last sequence number.
    assert_eq!(resume["path"], "/gateway-resume");
    assert_eq!(resume["d"]["session_id"], "session1");
    assert_eq!(resume["d"]["seq"], 2);

    // Discord asks for a reconnect (op 7).
    let resumes = fake.resumes();
    fake.send_reconnect();
    for m in ["m6", "m7", "m8"] {
        fake.push_message("100", None, "7", "owner", m);
    }
    assert_eq!(texts(&collect(&dc, 3).await), ["m6", "m7", "m8"]);
    wait_until("a resume after op 7", || fake.resumes() > resumes).await;
    assert_eq!(fake.identifies(), 1);

    // A replay that repeats dispatches the client had: each is handed out once.
    fake.set_replay_overlap(3);
    let resumes = fake.resumes();
    fake.drop_connections();
    wait_until("the connection to drop", || fake.connected() == 0).await;
    fake.push_message("100", None, "7", "owner", "m9");
    assert_eq!(texts(&collect(&dc, 1).await), ["m9"]);
    assert!(fake.resumes() > resumes);
    nothing_more(&dc).await;
    assert_eq!(fake.identifies(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_whose_heartbeats_go_unanswered_is_closed_and_resumed() {
    let fake = fake();
    let dc = adapter(&fake, TOKEN);
    fake.push_message("100", None, "7", "owner", "m1");
    assert_eq!(texts(&collect(&dc, 1).await), ["m1"]);
    fake.stop_heartbeat_acks(true);
    fake.push_message("100", None, "7", "owner", "m2");
    fake.push_message("100", None, "7", "owner", "m3");
    wait_until("a resume of the zombie connection", || fake.resumes() >= 1).await;
    fake.stop_heartbeat_acks(false);
    fake.push_message("100", None, "7", "owner", "m4");
    assert_eq!(texts(&collect(&dc, 3).await), ["m2", "m3", "m4"]);
    nothing_more(&dc).await;
    assert_eq!(fake.identifies(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_session_is_replaced_by_a_new_one() {
    let fake = fake();
    let dc = adapter(&fake, TOKEN);
    fake.push_message("100", None, "7", "owner", "m1");
    assert_eq!(texts(&collect(&dc, 1).await), ["m1"]);
    fake.invalidate_session();
    let mut later = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while fake.identifies() < 2 {
        assert!(Instant::now() < deadline, "no second Identify");
        later.extend(dc.next_events().await.unwrap());
    }
    assert!(later.is_empty(), "{later:?}");
    assert_eq!(fake.identifies(), 2);
    fake.push_message("100", None, "7", "owner", "m2");
    assert_eq!(texts(&collect(&dc, 1).await), ["m2"]);
    // The new session was identified at the Gateway's address, not resumed.
    let identifies = fake.calls_of("GATEWAY identify");
    assert_eq!(identifies[1]["path"], "/gateway");
    assert_eq!(fake.resumes(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_goes_out_escaped_without_mentions_split_and_cards_carry_buttons() {
    let fake = fake();
    let dc = adapter(&fake, TOKEN);
    let chat = ChatId("100".into());
    let raw = "**bold** ||x|| [t](http://evil) <@123> @everyone # h";
    let id = dc.send(&chat, raw).await.unwrap();
    assert!(!id.is_empty());
    let sent = fake.calls_of("POST /channels/100/messages");
    let content = sent[0]["content"].as_str().unwrap();
    for markup in ["**", "||", "](", "<@", "@everyone", "://", "# h"] {
        assert!(!bare(content, markup), "{markup} in {content}");
    }
    assert_eq!(unescape(content), raw);
    assert_eq!(sent[0]["allowed_mentions"], json!({"parse": []}));

    // A long text: numbered parts, each within the limit after escaping, nothing lost.
    let long: String = (0..400).map(|i| format!("{i}. *x* <@1>\n")).collect();
    assert!(long.chars().count() >= 5000);
    let before = sent.len();
    dc.send(&chat, &long).await.unwrap();
    let parts: Vec<String> = fake.calls_of("POST /channels/100/messages")[before..]
        .iter()
        .map(|b| b["content"].as_str().unwrap().to_string())
        .collect();
    let n = parts.len();
    assert!(n > 2, "{n}");
    let mut joined = String::new();
    for (k, p) in parts.iter().enumerate() {
        assert!(p.chars().count() <= MESSAGE_LIMIT, "{}", p.chars().count());
        let plain = unescape(p);
        let marker = format!("({}/{n}) ", k + 1);
        joined.push_str(plain.strip_prefix(&marker).expect("numbered"));
    }
    assert_eq!(joined, long);

    // A card: the text's leading parts plain, the buttons on the last part.
    let card = Card {
        text: format!("{}\nRun `rm -rf /`?", "x".repeat(2500)),
        buttons: vec![
            ("Approve".into(), "a:req:1".into()),
            ("Deny".into(), "d:req:1".into()),
        ],
    };
    let before = fake.calls_of("POST /channels/100/messages").len();
    let card_id = dc.send_card(&chat, &card).await.unwrap();
    let posted = fake.calls_of("POST /channels/100/messages")[before..].to_vec();
    assert_eq!(posted.len(), 2);
    assert!(posted[0].get("components").is_none());
    let row = &posted[1]["components"][0];
    assert_eq!(row["type"], 1);
    let ids: Vec<&str> = row["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["custom_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["a:req:1", "d:req:1"]);
    assert_eq!(row["components"][0]["type"], 2);
    assert_eq!(row["components"][0]["label"], "Approve");

    dc.close_card(&chat, &card_id, "Approved by <@7>")
        .await
        .unwrap();
    let patch = fake.wait_for(&format!("PATCH /channels/100/messages/{card_id}"), |_| true);
    assert_eq!(patch["components"], json!([]));
    assert_eq!(
        unescape(patch["content"].as_str().unwrap()),
        "Approved by <@7>"
    );
    assert!(!bare(patch["content"].as_str().unwrap(), "<@"));

    // Button data Discord would cut is refused, and nothing is sent.
    let before = fake.calls().len();
    let too_long = Card {
        text: "?".into(),
        buttons: vec![("Approve".into(), "a".repeat(101))],
    };
    let err = dc.send_card(&chat, &too_long).await.unwrap_err();
    assert!(matches!(err, ChannelError::Refused { .. }), "{err}");
    assert_eq!(fake.calls().len(), before);
    // Six buttons take two rows.
    let many = Card {
        text: "?".into(),
        buttons: (0..6).map(|i| (format!("b{i}"), format!("d{i}"))).collect(),
    };
    dc.send_card(&chat, &many).await.unwrap();
    let last = fake.calls_of("POST /channels/100/messages").pop().unwrap();
    assert_eq!(
        last["components"][0]["components"]
            .as_array()
            .unwrap()
            .len(),
        5
    );
    assert_eq!(
        last["components"][1]["components"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // An id that is not a Discord id never becomes a path.
    assert!(dc.send(&ChatId("1/../2".into()), "x").await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_errors_are_refusals_or_outages_as_the_answer_says() {
    let fake = fake();
    let dc = adapter(&fake, TOKEN);
    let chat = ChatId("100".into());
    fake.rate_limit_next(1);
    let err = dc.send(&chat, "x").await.unwrap_err();
    assert!(
        matches!(err, ChannelError::RateLimited { retry_after: Some(d), .. } if d.as_millis() == 1500),
        "{err}"
    );
    fake.break_next(1);
    let err = dc.send(&chat, "x").await.unwrap_err();
    assert!(matches!(err, ChannelError::Unreachable { .. }), "{err}");
    let err = dc.close_card(&chat, "12345", "x").await.unwrap_err();
    match &err {
        ChannelError::Refused { why, .. } => assert!(why.contains("10008"), "{why}"),
        other => panic!("{other}"),
    }
    let err = dc.send(&chat, "").await.unwrap_err();
    assert!(matches!(err, ChannelError::Refused { .. }), "{err}");
    dc.send(&chat, "x").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_is_refused_and_never_shown() {
    let fake = fake();
    let wrong = "MTIz.wrong-token.SECRET-VALUE";
    let dc = adapter(&fake, wrong);
    let err = dc.next_events().await.unwrap_err();
    assert!(matches!(err, ChannelError::Refused { .. }), "{err}");
    assert!(!format!("{err} {err:?}").contains(wrong), "{err}");
    // It stays refused, without reconnecting.
    assert!(dc.next_events().await.is_err());
    assert_eq!(fake.identifies(), 0);
    let err = dc.send(&ChatId("100".into()), "x").await.unwrap_err();
    assert!(matches!(err, ChannelError::Refused { .. }), "{err}");
    assert!(!format!("{err} {err:?}").contains(wrong), "{err}");

    // The right token but an intent the bot may not have: the Gateway closes with 4014.
    fake.close_next_identify_with(4014);
    let dc = adapter(&fake, TOKEN);
    let deadline = Instant::now() + Duration::from_secs(30);
    let err = loop {
        assert!(Instant::now() < deadline, "no refusal");
        match dc.next_events().await {
            Err(e) => break e,
            Ok(events) => assert!(events.is_empty()),
        }
    };
    assert!(matches!(err, ChannelError::Refused { .. }), "{err}");
    assert!(err.to_string().contains("4014"), "{err}");
    assert!(!err.to_string().contains(TOKEN), "{err}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(fake.calls_of("GATEWAY identify").len(), 1, "it reconnected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_waits_in_a_bounded_queue_and_comes_out_whole() {
    let fake = fake();
    let dc = adapter(&fake, TOKEN);
    fake.push_message("100", None, "7", "owner", "start");
    assert_eq!(texts(&collect(&dc, 1).await), ["start"]);
    let n = 3000;
    for i in 0..n {
        fake.push_message("100", None, "7", "owner", &format!("m{i}"));
    }
    // The host is slow: the queue fills and the reader waits, heartbeating meanwhile,
    // without taking its own stall for a dead connection.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let got = texts(&collect(&dc, n).await);
    let want: Vec<String> = (0..n).map(|i| format!("m{i}")).collect();
    assert_eq!(got, want);
    nothing_more(&dc).await;
    assert_eq!(fake.resumes(), 0);
    assert_eq!(fake.identifies(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_gateway_makes_next_events_fail_in_time() {
    // A port with nothing listening.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dc = Discord::new(
        &format!("https://127.0.0.1:{port}/api/v10"),
        TOKEN.to_string().into(),
        &[],
    )
    .unwrap()
    .with_poll(Duration::from_secs(1));
    let mut unreachable = false;
    for _ in 0..10 {
        let started = Instant::now();
        let r = dc.next_events().await;
        assert!(started.elapsed() < Duration::from_secs(3), "{r:?}");
        match r {
            Ok(events) => assert!(events.is_empty()),
            Err(ChannelError::Unreachable { why, .. }) => {
                assert!(!why.contains(TOKEN));
                unreachable = true;
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(unreachable);
    // A base that is not https is refused outright: the token would travel in the clear.
    let err = Discord::new("http://discord.com/api/v10", TOKEN.to_string().into(), &[])
        .err()
        .expect("refused");
    assert!(err.to_string().contains("https"), "{err}");
}

#[test]
fn the_constructor_needs_no_runtime_and_makes_a_channel() {
    let fake = FakeDiscord::start(TOKEN);
    let dc = Discord::new(&fake.api_base(), TOKEN.to_string().into(), &[fake.ca_pem()]).unwrap();
    let channel: Box<dyn Channel> = Box::new(dc);
    assert_eq!(channel.name(), "discord");
}

/// A file goes out as a message whose form carries it as `files[0]`, named in its
/// `payload_json`; the bot learns its own id (from `READY`) for mentions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_is_sent_as_an_attachment_and_the_bot_knows_its_mention() {
    let fake = fake();
    let dc = adapter(&fake, TOKEN);
    fake.push_message("100", None, "7", "owner", "hi");
    collect(&dc, 1).await;
    let id = airlock_channels::fake::discord::BOT_ID;
    assert!(dc.mention_forms().contains(&format!("<@{id}>")));
    let bytes: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    dc.send_file(&ChatId("100".into()), "data.bin", &bytes)
        .await
        .unwrap();
    let files = fake.files();
    assert_eq!(files.len(), 1);
    assert_eq!(
        (files[0].0.as_str(), files[0].1.as_str()),
        ("100", "data.bin")
    );
    assert_eq!(files[0].2, bytes);
}
