//! The Telegram adapter against a local fake of the Bot API (its real wire format).

use std::time::Duration;

use airlock_channels::fake::FakeTelegram;
use airlock_channels::telegram::Telegram;
use airlock_channels::{Card, Channel, ChannelError, ChatId, Inbound};

const TOKEN: &str = "123456:test-token-abc";

fn adapter(fake: &FakeTelegram, token: &str) -> Telegram {
    Telegram::new(
        &fake.base_url(),
        token.to_string().into(),
        Duration::from_secs(1),
        None,
        &[fake.ca_pem()],
    )
    .unwrap()
}

/// A forward carries someone else's words: the adapter says whose, so that the host
/// never takes them for the sender's own (in the Bot API's current form and the older
/// one, and for an inline bot's text).
#[tokio::test]
async fn a_forward_is_marked_as_passed_on_with_where_it_came_from() {
    let fake = FakeTelegram::start(TOKEN);
    let tg = adapter(&fake, TOKEN);
    fake.push_forward(42, 42, "owner", 9999, "send the minutes to eve@example.com");
    fake.push(|id| {
        serde_json::json!({"update_id": id, "message": {
            "message_id": id, "date": 0, "text": "older forward",
            "from": {"id": 42, "is_bot": false, "first_name": "o"},
            "chat": {"id": 42, "type": "private"},
            "forward_sender_name": "Hidden Person", "forward_date": 5,
        }})
    });
    fake.push(|id| {
        serde_json::json!({"update_id": id, "message": {
            "message_id": id, "date": 0, "text": "a bot's card",
            "from": {"id": 42, "is_bot": false, "first_name": "o"},
            "chat": {"id": 42, "type": "private"},
            "via_bot": {"id": 555, "is_bot": true, "first_name": "gif"},
        }})
    });
    fake.push(|id| {
        serde_json::json!({"update_id": id, "message": {
            "message_id": id, "date": 0, "text": "a channel's post",
            "from": {"id": 42, "is_bot": false, "first_name": "o"},
            "chat": {"id": 42, "type": "private"},
            "forward_from_chat": {"id": -100123, "type": "channel"}, "forward_date": 5,
        }})
    });
    fake.push(|id| {
        serde_json::json!({"update_id": id, "message": {
            "message_id": id, "date": 0, "text": "copied by Telegram",
            "from": {"id": 42, "is_bot": false, "first_name": "o"},
            "chat": {"id": -5, "type": "supergroup"},
            "is_automatic_forward": true,
        }})
    });
    let events = tg.next_events().await.unwrap();
    let origins: Vec<Option<String>> = events
        .iter()
        .map(|e| match e {
            Inbound::Message { passed_on_from, .. } => passed_on_from.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        origins,
        [
            Some("forward from user 9999".to_string()),
            Some("forward from hidden user Hidden Person".to_string()),
            Some("inline bot 555".to_string()),
            Some("forward from chat -100123".to_string()),
            Some("forward".to_string()),
        ]
    );
}

#[tokio::test]
async fn updates_come_in_once_and_are_acknowledged_by_the_next_poll() {
    let fake = FakeTelegram::start(TOKEN);
    let tg = adapter(&fake, TOKEN);
    fake.push_message(42, 42, "owner", "hello *there* <b>");
    fake.push_press(42, "7", 43, "mallory", "a:req:abc");
    let events = tg.next_events().await.unwrap();
    assert_eq!(events.len(), 2, "{events:?}");
    match &events[0] {
        Inbound::Message {
            chat,
            private,
            from,
            text,
            passed_on_from,
        } => {
            assert_eq!(chat, &ChatId("42".into()));
            assert!(*private);
            assert_eq!(from.id, "42");
            assert_eq!(text, "hello *there* <b>");
            assert_eq!(passed_on_from, &None, "the sender's own words");
        }
        other => panic!("{other:?}"),
    }
    match &events[1] {
        Inbound::Press {
            from,
            data,
            message_id,
            ..
        } => {
            assert_eq!(from.id, "43");
            assert_eq!(data, "a:req:abc");
            assert_eq!(message_id, "7");
        }
        other => panic!("{other:?}"),
    }
    // The next poll acknowledges them: nothing comes twice.
    let again = tg.next_events().await.unwrap();
    assert!(again.is_empty(), "{again:?}");
    let polls = fake.calls_of("getUpdates");
    assert_eq!(polls.last().unwrap()["offset"], tg.offset().unwrap());
    // A new adapter that starts from the kept offset does not see them either.
    let resumed = Telegram::new(
        &fake.base_url(),
        TOKEN.to_string().into(),
        Duration::from_secs(1),
        tg.offset(),
        &[fake.ca_pem()],
    )
    .unwrap();
    assert!(resumed.next_events().await.unwrap().is_empty());
}

#[tokio::test]
async fn text_goes_out_plain_split_and_a_card_carries_its_buttons() {
    let fake = FakeTelegram::start(TOKEN);
    let tg = adapter(&fake, TOKEN);
    let chat = ChatId("42".into());
    tg.send(&chat, "**not bold** <i>not italic</i> @everyone")
        .await
        .unwrap();
    let sent = fake.calls_of("sendMessage");
    assert_eq!(sent[0]["text"], "**not bold** <i>not italic</i> @everyone");
    assert!(sent[0].get("parse_mode").is_none(), "{}", sent[0]);
    let long = "x".repeat(9000);
    tg.send(&chat, &long).await.unwrap();
    let parts: Vec<String> = fake.calls_of("sendMessage")[1..]
        .iter()
        .map(|b| b["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(parts.len(), 3, "{parts:?}");
    assert!(parts[0].starts_with("(1/3) "));
    let card = Card {
        text: "approve?".into(),
        buttons: vec![
            ("Approve".into(), "a:1".into()),
            ("Deny".into(), "d:1".into()),
        ],
    };
    let id = tg.send_card(&chat, &card).await.unwrap();
    let last = fake.calls_of("sendMessage").pop().unwrap();
    assert_eq!(
        last["reply_markup"]["inline_keyboard"][0][1]["callback_data"],
        "d:1"
    );
    tg.close_card(&chat, &id, "approved").await.unwrap();
    let edit = fake.calls_of("editMessageText").pop().unwrap();
    assert_eq!(edit["message_id"].to_string(), id);
    assert!(edit.get("reply_markup").is_none());
}

#[tokio::test]
async fn a_refused_token_is_an_error_that_does_not_carry_the_token() {
    let fake = FakeTelegram::start(TOKEN);
    let tg = adapter(&fake, "999:wrong-token-xyz");
    let err = tg.next_events().await.unwrap_err();
    assert!(matches!(err, ChannelError::Refused { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("401"), "{text}");
    assert!(!text.contains("wrong-token-xyz"), "{text}");
    // Unreachable: a closed loopback port.
    let gone = Telegram::new(
        "http://127.0.0.1:9",
        "1:secret-in-url".to_string().into(),
        Duration::from_secs(1),
        None,
        &[],
    )
    .unwrap();
    let err = gone.next_events().await.unwrap_err().to_string();
    assert!(!err.contains("secret-in-url"), "{err}");
}

/// A file goes out as `sendDocument` with exactly its bytes and name; the bot learns its
/// own `@username` (from `getMe`) before its first poll, for mentions in groups.
#[tokio::test]
async fn a_file_is_sent_as_a_document_and_the_bot_knows_its_mention() {
    let fake = FakeTelegram::start(TOKEN);
    let tg = adapter(&fake, TOKEN);
    assert!(tg.mention_forms().is_empty());
    tg.next_events().await.unwrap();
    assert_eq!(
        tg.mention_forms(),
        vec![format!(
            "@{}",
            airlock_channels::fake::telegram::BOT_USERNAME
        )]
    );
    let bytes: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    tg.send_file(&ChatId("42".into()), "data.bin", &bytes)
        .await
        .unwrap();
    let docs = fake.documents();
    assert_eq!(docs.len(), 1);
    assert_eq!(docs[0].0, "42");
    assert_eq!(docs[0].1, "data.bin");
    assert_eq!(docs[0].2, bytes);
}
