//! The Slack adapter against a local fake of Slack (Socket Mode and the Web API, their
//! real wire formats, over TLS with a test CA).

use std::time::{Duration, Instant};

use airlock_channels::fake::slack::FakeSlack;
use airlock_channels::slack::Slack;
use airlock_channels::{Card, Channel, ChannelError, ChatId, Inbound};
use serde_json::{json, Value};

const APP: &str = "xapp-1-A0FAKE-1-app-secret-4242";
const BOT: &str = "xoxb-1-bot-secret-9898";

fn adapter(fake: &FakeSlack, app: &str, bot: &str) -> Slack {
    Slack::new(
        &fake.api_base(),
        app.to_string().into(),
        bot.to_string().into(),
        &[fake.ca_pem()],
    )
    .unwrap()
    .with_poll(Duration::from_secs(1))
}

/// Poll until `n` events came (or 30 s passed): everything handed out, in order.
async fn collect(slack: &Slack, n: usize) -> Vec<Inbound> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut all = Vec::new();
    while all.len() < n && Instant::now() < deadline {
        all.extend(slack.next_events().await.unwrap());
    }
    all
}

/// Wait (up to 30 s) until the fake holds an acknowledgement of each of `ids`.
async fn wait_acked(fake: &FakeSlack, ids: &[String]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let acked = fake.acked();
        let missing: Vec<&String> = ids.iter().filter(|i| !acked.contains(i)).collect();
        if missing.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "never acknowledged: {missing:?}");
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

/// A part's text without its `(k/n) ` marker.
fn unnumbered(part: &str) -> &str {
    part.split_once(") ").map_or(part, |(_, rest)| rest)
}

fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_come_in_once_and_every_envelope_is_acknowledged() {
    let fake = FakeSlack::start(APP, BOT);
    // No timed redelivery: only the adapter's own acknowledgements count.
    fake.set_ack_timeout(Duration::from_secs(600));
    let slack = adapter(&fake, APP, BOT);
    let mut ids = vec![fake.push_message("D0OWNER", "U0OWNER", "hello *there* <b> & co", true)];
    ids.push(fake.push_event(json!({
        "type": "message", "subtype": "bot_message", "bot_id": "B0OTHER", "channel": "C0TEAM",
        "text": "from a bot", "ts": "1700000000.000001", "channel_type": "channel"})));
    ids.push(fake.push_event(json!({
        "type": "message", "bot_id": "B0OTHER", "user": "U0BOTUSER", "channel": "C0TEAM",
        "text": "from a bot with a user", "ts": "1700000000.000002", "channel_type": "channel"})));
    ids.push(fake.push_event(json!({
        "type": "message", "subtype": "message_changed", "channel": "C0TEAM", "hidden": true,
        "message": {"type": "message", "user": "U0MALLORY", "text": "edited", "ts": "1"},
        "ts": "1700000000.000003", "channel_type": "channel"})));
    ids.push(fake.push_event(json!({
        "type": "message", "subtype": "channel_join", "user": "U0JOINER", "channel": "C0TEAM",
        "text": "<@U0JOINER> has joined the channel", "ts": "1700000000.000004",
        "channel_type": "channel"})));
    ids.push(fake.push_message("C0TEAM", "U0MEMBER", "in the channel", false));

    let events = collect(&slack, 2).await;
    assert_eq!(events.len(), 2, "{events:?}");
    match &events[0] {
        Inbound::Message {
            chat,
            private,
            from,
            text,
            passed_on_from: None,
        } => {
            assert_eq!(chat, &ChatId("D0OWNER".into()));
            assert!(*private);
            assert_eq!(from.id, "U0OWNER");
            // Slack sent it escaped; the host gets what was typed.
            assert_eq!(text, "hello *there* <b> & co");
        }
        other => panic!("{other:?}"),
    }
    match &events[1] {
        Inbound::Message {
            chat,
            private,
            from,
            text,
            passed_on_from: None,
        } => {
            assert_eq!(chat, &ChatId("C0TEAM".into()));
            assert!(!*private);
            assert_eq!(from.id, "U0MEMBER");
            assert_eq!(text, "in the channel");
        }
        other => panic!("{other:?}"),
    }
    // The next call acknowledges them and hands out nothing twice.
    let again = slack.next_events().await.unwrap();
    assert!(again.is_empty(), "{again:?}");
    wait_acked(&fake, &ids).await;
    assert!(!fake.calls_of("apps.connections.open").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_frames_are_survived_and_pings_answered() {
    let fake = FakeSlack::start(APP, BOT);
    fake.set_ack_timeout(Duration::from_secs(600));
    let slack = adapter(&fake, APP, BOT);
    fake.push_raw("not json at all {");
    fake.push_raw(r#"{"type": "events_api"}"#);
    fake.push_raw(r#"{"envelope_id": 42, "payload": {}}"#);
    fake.push_raw(r#"{"envelope_id": "junk-1", "type": "events_api", "payload": "nonsense"}"#);
    fake.push_raw(r#"{"envelope_id": "junk-2", "type": "interactive", "payload": {"type": "block_actions", "actions": "x"}}"#);
    fake.push_raw(r#"{"envelope_id": "junk-3", "type": "events_api", "payload": {"event": {"type": "message", "channel": "C1/x", "user": "U1", "text": "bad channel"}}}"#);
    fake.push_raw(r#"{"envelope_id": "junk-4", "type": "slash_commands", "payload": {}}"#);
    let last = fake.push_message("D0OWNER", "U0OWNER", "still here", true);
    let events = collect(&slack, 1).await;
    assert_eq!(texts(&events), ["still here"]);
    let junk: Vec<String> = (1..=4).map(|k| format!("junk-{k}")).collect();
    // What carries nothing for the host is acknowledged at once, before any next call.
    wait_acked(&fake, &junk).await;
    assert!(!fake.acked().contains(&last));
    fake.ping();
    let deadline = Instant::now() + Duration::from_secs(30);
    while fake.pongs() == 0 {
        assert!(Instant::now() < deadline, "the ping was never answered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(slack.next_events().await.unwrap().is_empty());
    wait_acked(&fake, &[last]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_press_comes_in_and_is_answered_to_the_presser_alone() {
    let fake = FakeSlack::start(APP, BOT);
    fake.set_ack_timeout(Duration::from_secs(600));
    let slack = adapter(&fake, APP, BOT);
    let chat = ChatId("D0OWNER".into());
    let card = Card {
        text: "approve?".into(),
        buttons: vec![
            ("Approve".into(), "a:req:1".into()),
            ("Deny".into(), "d:req:1".into()),
        ],
    };
    let ts = slack.send_card(&chat, &card).await.unwrap();
    assert!(!ts.is_empty());
    let env = fake.push_press("D0OWNER", &ts, "U0OWNER", "d:req:1");
    let events = collect(&slack, 1).await;
    let Some(Inbound::Press {
        press_id,
        chat: pressed_in,
        message_id,
        from,
        data,
    }) = events.first()
    else {
        panic!("{events:?}");
    };
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(pressed_in, &chat);
    assert_eq!(message_id, &ts);
    assert_eq!(from.id, "U0OWNER");
    assert_eq!(data, "d:req:1");
    slack
        .answer_press(press_id, "denied <!here> *now*")
        .await
        .unwrap();
    let answer = fake.wait_for("chat.postEphemeral", |_| true);
    assert_eq!(answer["channel"], "D0OWNER");
    assert_eq!(answer["user"], "U0OWNER");
    assert_eq!(answer["text"], "denied &lt;!here&gt; *now*");
    assert!(answer.get("thread_ts").is_none(), "{answer}");
    assert!(slack.next_events().await.unwrap().is_empty());
    wait_acked(&fake, &[env]).await;
    // A press id the adapter did not make is refused, not guessed at.
    let err = slack.answer_press("U0OWNER", "hi").await.unwrap_err();
    assert!(matches!(err, ChannelError::Refused { .. }), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_socket_loses_nothing_and_repeats_nothing() {
    let fake = FakeSlack::start(APP, BOT);
    let slack = adapter(&fake, APP, BOT);
    fake.push_message("D0OWNER", "U0OWNER", "m1", true);
    fake.push_message("D0OWNER", "U0OWNER", "m2", true);
    let mut seen = collect(&slack, 2).await;
    // m3 is handed out and not yet acknowledged when the socket goes.
    let m3 = fake.push_message("D0OWNER", "U0OWNER", "m3", true);
    seen.extend(collect(&slack, 1).await);
    fake.drop_connections();
    fake.push_message("D0OWNER", "U0OWNER", "m4", true);
    fake.push_message("D0OWNER", "U0OWNER", "m5", true);
    // Once the adapter is back, m3's acknowledgement (due with the next call) can no
    // longer reach the old connection before the cut: Slack redelivers m3.
    let deadline = Instant::now() + Duration::from_secs(30);
    while fake.connections() < 2 {
        assert!(Instant::now() < deadline, "the adapter did not reconnect");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    seen.extend(collect(&slack, 2).await);
    // Give a wrongly repeated m3 the chance to come out.
    seen.extend(slack.next_events().await.unwrap());
    assert_eq!(texts(&seen), ["m1", "m2", "m3", "m4", "m5"]);
    assert!(fake.connections() >= 2, "{}", fake.connections());
    assert!(
        fake.deliveries()
            .iter()
            .any(|(id, retry)| id == &m3 && *retry >= 1),
        "m3 was never redelivered: {:?}",
        fake.deliveries()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnect_request_loses_nothing_and_repeats_nothing() {
    let fake = FakeSlack::start(APP, BOT);
    let slack = adapter(&fake, APP, BOT);
    fake.push_message("C0TEAM", "U0MEMBER", "m1", false);
    let mut seen = collect(&slack, 1).await;
    fake.push_message("C0TEAM", "U0MEMBER", "m2", false);
    seen.extend(collect(&slack, 1).await);
    fake.send_disconnect();
    fake.push_message("C0TEAM", "U0MEMBER", "m3", false);
    fake.push_message("C0TEAM", "U0MEMBER", "m4", false);
    seen.extend(collect(&slack, 2).await);
    seen.extend(slack.next_events().await.unwrap());
    assert_eq!(texts(&seen), ["m1", "m2", "m3", "m4"]);
    assert!(fake.connections() >= 2, "{}", fake.connections());
    // The new connection opened before the old one was left, not after Slack cut it.
    let deadline = Instant::now() + Duration::from_secs(5);
    while fake.handovers() == 0 {
        assert!(
            Instant::now() < deadline,
            "the old connection was not handed over"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redeliveries_of_a_slow_host_are_not_handed_out_twice() {
    let fake = FakeSlack::start(APP, BOT);
    // Slack resends what is not acknowledged in time; this host is slow.
    fake.set_ack_timeout(Duration::from_millis(200));
    let slack = adapter(&fake, APP, BOT);
    let m1 = fake.push_message("D0OWNER", "U0OWNER", "m1", true);
    let mut seen = collect(&slack, 1).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    fake.push_message("D0OWNER", "U0OWNER", "m2", true);
    seen.extend(collect(&slack, 1).await);
    seen.extend(slack.next_events().await.unwrap());
    assert_eq!(texts(&seen), ["m1", "m2"]);
    assert!(
        fake.deliveries()
            .iter()
            .any(|(id, retry)| id == &m1 && *retry >= 1),
        "{:?}",
        fake.deliveries()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_is_held_back_at_the_socket_and_comes_through_whole() {
    let fake = FakeSlack::start(APP, BOT);
    // Only the flood's pressure, no timed redeliveries.
    fake.set_ack_timeout(Duration::from_secs(600));
    let slack = adapter(&fake, APP, BOT);
    assert!(slack.next_events().await.unwrap().is_empty());
    let n = 6_000;
    let filler = "z".repeat(3000);
    for k in 0..n {
        fake.push_message("C0TEAM", "U0MEMBER", &format!("m{k} {filler}"), false);
    }
    // Nobody asks for events: the adapter's queue fills, it stops reading, and the
    // sockets' buffers fill until Slack cannot send more.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let sent = fake.deliveries().len();
    assert!(sent < n, "all {n} envelopes were read with nobody asking");
    let mut seen = collect(&slack, n).await;
    seen.extend(slack.next_events().await.unwrap());
    let want: Vec<String> = (0..n).map(|k| format!("m{k} {filler}")).collect();
    assert!(
        texts(&seen) == want,
        "{} of {n} events, or out of order",
        seen.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_goes_out_plain_and_split_and_cards_carry_their_buttons() {
    let fake = FakeSlack::start(APP, BOT);
    let slack = adapter(&fake, APP, BOT);
    let chat = ChatId("C0TEAM".into());
    let payload = "*bold* <!channel> <@U1> <https://evil|click> & co";
    slack.send(&chat, payload).await.unwrap();
    let sent = fake.calls_of("chat.postMessage").pop().unwrap();
    assert_eq!(
        sent["text"],
        "*bold* &lt;!channel&gt; &lt;@U1&gt; &lt;https://evil|click&gt; &amp; co"
    );
    assert_eq!(sent["mrkdwn"], false);
    assert_eq!(
        sent["blocks"],
        json!([{"type": "section", "text": {"type": "plain_text", "text": payload, "emoji": false}}])
    );

    // Long texts: numbered parts that Slack takes and that hold every character, also
    // when escaping makes them longer.
    for long in [
        (0..1000)
            .map(|i| format!("line {i} <&>\n"))
            .collect::<String>(),
        "&".repeat(10_000),
        "x".repeat(10_000),
    ] {
        let before = fake.calls_of("chat.postMessage").len();
        slack.send(&chat, &long).await.unwrap();
        let parts: Vec<Value> = fake.calls_of("chat.postMessage")[before..].to_vec();
        assert!(parts.len() > 1);
        let n = parts.len();
        let mut joined = String::new();
        for (k, p) in parts.iter().enumerate() {
            let text = p["text"].as_str().unwrap();
            assert!(text.chars().count() <= 3000, "{}", text.len());
            assert!(text.starts_with(&format!("({}/{n}) ", k + 1)), "{text}");
            assert_eq!(
                p["blocks"][0]["text"]["text"].as_str().unwrap(),
                unescape(text)
            );
            joined.push_str(&unescape(unnumbered(text)));
        }
        assert_eq!(joined, long);
    }

    let card = Card {
        text: "y".repeat(7000),
        buttons: vec![
            ("Approve".into(), "a:req:7".into()),
            ("Deny".into(), "d:req:7".into()),
        ],
    };
    let before = fake.calls_of("chat.postMessage").len();
    let ts = slack.send_card(&chat, &card).await.unwrap();
    let posts = fake.calls_of("chat.postMessage")[before..].to_vec();
    assert_eq!(posts.len(), 3, "{posts:?}");
    for leading in &posts[..2] {
        assert_eq!(leading["blocks"].as_array().unwrap().len(), 1, "{leading}");
    }
    let last = &posts[2];
    assert!(last["text"].as_str().unwrap().starts_with("(3/3) "));
    let actions = &last["blocks"][1];
    assert_eq!(actions["type"], "actions");
    assert_eq!(actions["elements"][0]["value"], "a:req:7");
    assert_eq!(actions["elements"][1]["value"], "d:req:7");
    assert_ne!(
        actions["elements"][0]["action_id"],
        actions["elements"][1]["action_id"]
    );

    slack
        .close_card(&chat, &ts, "approved <by> *someone*")
        .await
        .unwrap();
    let update = fake.calls_of("chat.update").pop().unwrap();
    assert_eq!(update["ts"], ts.as_str());
    assert_eq!(update["channel"], "C0TEAM");
    assert_eq!(update["text"], "approved &lt;by&gt; *someone*");
    let blocks = update["blocks"].as_array().unwrap();
    assert_eq!(blocks.len(), 1, "{update}");
    assert_eq!(blocks[0]["type"], "section");
    assert_eq!(blocks[0]["text"]["type"], "plain_text");

    // A card without buttons is a message Slack takes (no empty actions block).
    let bare = Card {
        text: "nothing to press".into(),
        buttons: vec![],
    };
    slack.send_card(&chat, &bare).await.unwrap();

    // Data Slack would not carry is refused, not cut, and nothing is posted.
    let before = fake.calls().len();
    let too_long = Card {
        text: "approve?".into(),
        buttons: vec![("Approve".into(), "a".repeat(2001))],
    };
    let err = slack.send_card(&chat, &too_long).await.unwrap_err();
    assert!(matches!(err, ChannelError::Refused { .. }), "{err:?}");
    assert_eq!(fake.calls().len(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_tokens_are_errors_that_do_not_carry_them() {
    let fake = FakeSlack::start(APP, BOT);
    let chat = ChatId("C0TEAM".into());
    let wrong_bot = "xoxb-1-wrong-bot-secret-777";
    let slack = adapter(&fake, APP, wrong_bot);
    let err = slack.send(&chat, "hi").await.unwrap_err();
    assert!(matches!(err, ChannelError::Refused { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("invalid_auth"), "{text}");
    assert!(!text.contains("wrong-bot-secret"), "{text}");
    assert!(!format!("{err:?}").contains("wrong-bot-secret"));

    let wrong_app = "xapp-1-A0FAKE-1-wrong-app-secret-555";
    let slack = adapter(&fake, wrong_app, BOT);
    for _ in 0..2 {
        match slack.next_events().await {
            Ok(events) => assert!(events.is_empty(), "{events:?}"),
            Err(e) => {
                let text = format!("{e} {e:?}");
                assert!(text.contains("invalid_auth"), "{text}");
                assert!(!text.contains("wrong-app-secret"), "{text}");
            }
        }
    }
    assert!(slack.next_events().await.is_err());
    assert_eq!(fake.connections(), 0);

    // The tokens are not interchangeable.
    let swapped = adapter(&fake, BOT, APP);
    let err = swapped.send(&chat, "hi").await.unwrap_err().to_string();
    assert!(err.contains("not_allowed_token_type"), "{err}");
    assert!(
        !err.contains("bot-secret") && !err.contains("app-secret"),
        "{err}"
    );

    // Rate limits are a "try later", with Slack's wait.
    let slack = adapter(&fake, APP, BOT);
    fake.rate_limit(1);
    let err = slack.send(&chat, "hi").await.unwrap_err();
    assert!(
        matches!(err, ChannelError::RateLimited { retry_after: Some(d), .. } if d.as_secs() == 7),
        "{err:?}"
    );
    slack.send(&chat, "hi").await.unwrap();

    // No https, no tokens sent.
    assert!(Slack::new(
        "http://127.0.0.1:9/api",
        APP.to_string().into(),
        BOT.to_string().into(),
        &[]
    )
    .is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_is_a_chat_of_its_own() {
    let fake = FakeSlack::start(APP, BOT);
    let slack = adapter(&fake, APP, BOT);
    let parent = "1700000000.000050";
    fake.push_thread_message("C0TEAM", parent, "U0MEMBER", "in the thread");
    // The thread's parent itself is a message of the channel.
    fake.push_event(json!({
        "type": "message", "channel": "C0TEAM", "user": "U0MEMBER", "text": "the parent",
        "ts": parent, "thread_ts": parent, "channel_type": "channel"}));
    let events = collect(&slack, 2).await;
    let thread = ChatId(format!("C0TEAM/{parent}"));
    match &events[..] {
        [Inbound::Message {
            chat: a, private, ..
        }, Inbound::Message { chat: b, .. }] => {
            assert_eq!(a, &thread);
            assert!(!*private);
            assert_eq!(b, &ChatId("C0TEAM".into()));
        }
        other => panic!("{other:?}"),
    }
    slack.send(&thread, "a reply").await.unwrap();
    let sent = fake.calls_of("chat.postMessage").pop().unwrap();
    assert_eq!(sent["channel"], "C0TEAM");
    assert_eq!(sent["thread_ts"], parent);

    // A card in the thread: its press belongs to the thread, and so does the answer.
    let card = Card {
        text: "approve?".into(),
        buttons: vec![("Approve".into(), "a:req:9".into())],
    };
    let ts = slack.send_card(&thread, &card).await.unwrap();
    fake.push_press("C0TEAM", &ts, "U0MEMBER", "a:req:9");
    let events = collect(&slack, 1).await;
    let Some(Inbound::Press {
        press_id,
        chat,
        message_id,
        ..
    }) = events.first()
    else {
        panic!("{events:?}");
    };
    assert_eq!(chat, &thread);
    assert_eq!(message_id, &ts);
    slack.answer_press(press_id, "noted").await.unwrap();
    let answer = fake.wait_for("chat.postEphemeral", |_| true);
    assert_eq!(answer["thread_ts"], parent);
    slack.close_card(&thread, &ts, "approved").await.unwrap();
    assert_eq!(
        fake.calls_of("chat.update").pop().unwrap()["channel"],
        "C0TEAM"
    );
}

/// A file goes out in Slack's three steps (an upload URL for its name and length, the
/// bytes there, the upload completed into the chat's thread); the bot learns its own user
/// id (from `auth.test`) for mentions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_is_uploaded_into_the_thread_and_the_bot_knows_its_mention() {
    let fake = FakeSlack::start(APP, BOT);
    let slack = adapter(&fake, APP, BOT);
    let _ = slack.next_events().await.unwrap();
    assert_eq!(
        slack.mention_forms(),
        vec![format!("<@{}>", airlock_channels::fake::slack::BOT_USER_ID)]
    );
    let bytes: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    slack
        .send_file(
            &ChatId("C0TEAM/1700000000.000100".into()),
            "data.bin",
            &bytes,
        )
        .await
        .unwrap();
    let files = fake.files();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].0, "C0TEAM/1700000000.000100");
    assert_eq!(files[0].1, "data.bin");
    assert_eq!(files[0].2, bytes);
}
