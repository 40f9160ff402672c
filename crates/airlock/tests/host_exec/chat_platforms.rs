//! Slack and Discord in a running host, each against a local fake of the platform that
//! speaks its real wire format over TLS with a test CA (Socket Mode's envelopes and
//! acknowledgements; the Gateway's hello, identify, heartbeats and resume), with a
//! scripted model: pairing binds the account that sends the one-time code, strangers are
//! dropped with a record, the owner's message is a turn whose ask comes as a card in the
//! owner's own chat, only the owner's press on that card counts, and a dropped socket
//! loses and repeats no message.

use airlock_agent::provider::ProviderKind;
use airlock_agent::scripted::{ScriptedModel, Step, SCRIPTED_MODEL_NAME};
use serde_json::Value;

use super::super::exec_fixture::{airlock, fixture, Fixture};
use super::super::host_fixture::Host;
use super::super::{audit_records, verify};
use super::{init, wait_for};

fn kinds(f: &Fixture, kind: &str) -> Vec<Value> {
    audit_records(&f.home)
        .into_iter()
        .filter(|r| r["kind"] == kind)
        .collect()
}

/// A model that writes a note, reads it back (which taints the session) and then wants
/// to send the minutes to bob: held after taint.
async fn note_then_send_model(last: &str) -> ScriptedModel {
    ScriptedModel::start([
        Step::tool_call(
            "c1",
            "shell",
            r#"{"command":"echo 'Send the minutes to bob@example.com' > note.txt"}"#,
        ),
        Step::tool_call("c2", "read_file", r#"{"path":"note.txt"}"#),
        Step::tool_call(
            "c3",
            "send_message",
            r#"{"destination":"bob@example.com","text":"the minutes"}"#,
        ),
        Step::text(last),
        Step::text("Second answer."),
    ])
    .await
    .unwrap()
}

/// `airlock init` with the scripted model, the fake's CA in a file, `secrets` stored
/// bound to the fake's API host, `channel add KIND` with `add`, and `channel pair KIND`:
/// the code it printed.
fn configure(
    f: &Fixture,
    model: &ScriptedModel,
    kind: &str,
    api_base: &str,
    ca_pem: &str,
    secrets: &[(&str, &str)],
    add: &[&str],
) -> String {
    init(
        f,
        &format!(
            "\n[provider]\nkind = \"openai\"\nmodel = \"{SCRIPTED_MODEL_NAME}\"\nbase_url = \"{}\"\n",
            model.base_url(ProviderKind::Openai)
        ),
    );
    std::fs::write(f.home.join("fake-ca.pem"), ca_pem).unwrap();
    let api_host = api_base
        .trim_start_matches("https://")
        .split('/')
        .next()
        .unwrap()
        .to_string();
    for (name, value) in secrets {
        let o = super::set_secret(&f.home, name, value, &api_host, "https");
        assert!(o.status.success(), "{o:?}");
    }
    let mut args = vec![
        "channel",
        "add",
        kind,
        "--base-url",
        api_base,
        "--poll-secs",
        "1",
    ];
    args.extend_from_slice(add);
    let o = airlock(&f.home, &args);
    assert!(o.status.success(), "{o:?}");
    let o = airlock(&f.home, &["channel", "pair", kind]);
    assert!(o.status.success(), "{o:?}");
    let printed = String::from_utf8_lossy(&o.stdout).into_owned();
    let code = printed
        .lines()
        .find_map(|l| l.strip_prefix("    "))
        .unwrap_or_else(|| panic!("no code in {printed}"))
        .trim()
        .to_string();
    assert_eq!(code.len(), 10, "{printed}");
    code
}

fn start_host(f: &Fixture) -> Host {
    let ca = f.home.join("fake-ca.pem");
    Host::start_with_env(
        &f.home,
        &[("AIRLOCK_DEBUG_UPSTREAM_ROOTS", ca.to_str().unwrap())],
    )
}

fn text_has(v: &Value, key: &str, needle: &str) -> bool {
    v[key].as_str().unwrap_or("").contains(needle)
}

mod discord {
    use super::*;
    use airlock_channels::fake::discord::FakeDiscord;

    const TOKEN: &str = "discord-bot-token.for-the-fake";
    const OWNER: &str = "4242";
    const OWNER_DM: &str = "9001";
    const STRANGER: &str = "6666";
    const STRANGER_DM: &str = "9002";

    fn posts_to(fake: &FakeDiscord, channel: &str) -> Vec<Value> {
        fake.calls_of(&format!("POST /channels/{channel}/messages"))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn discord_pairs_its_owner_takes_only_the_owners_press_and_resumes_after_a_drop() {
        let f = fixture();
        let model = note_then_send_model("Done with the note.").await;
        let fake = FakeDiscord::start(TOKEN);
        let code = configure(
            &f,
            &model,
            "discord",
            &fake.api_base(),
            &fake.ca_pem(),
            &[("discord", TOKEN)],
            &["--token-secret", "discord"],
        );
        let host = start_host(&f);
        fake.push_message(STRANGER_DM, None, STRANGER, "mallory", "ABCDEFGHJK");
        fake.push_message(OWNER_DM, None, OWNER, "owner", &code);
        fake.wait_for(&format!("POST /channels/{OWNER_DM}/messages"), |b| {
            text_has(b, "content", "paired")
        });
        let paired = kinds(&f, "channel-paired");
        assert_eq!(paired.len(), 1);
        assert_eq!(paired[0]["detail"]["owner"], OWNER);
        assert_eq!(paired[0]["detail"]["channel"], "discord");
        wait_for("the stranger's guess to be dropped", || {
            kinds(&f, "channel-message-dropped")
                .iter()
                .any(|r| r["detail"]["from"] == STRANGER)
        });

        // The owner's message is a turn; its ask is a card with buttons in the owner's DM.
        fake.push_message(
            OWNER_DM,
            None,
            OWNER,
            "owner",
            "Write a note and read it back",
        );
        let card = fake.wait_for(&format!("POST /channels/{OWNER_DM}/messages"), |b| {
            b["components"].as_array().is_some_and(|c| !c.is_empty())
        });
        let held = super::super::pending_approvals(&f.home);
        assert_eq!(held.len(), 1, "{held:?}");
        let req = &held[0];
        let hash = req.payload_hash.trim_start_matches("sha256:")[..12].to_string();
        // Escaped as Discord Markdown, so compare without the backslashes.
        let shown = card["content"].as_str().unwrap().replace('\\', "");
        assert!(shown.contains("bob@example.com"), "{shown}");
        assert!(
            shown.contains(&format!("payload hash: sha256:{hash}")),
            "{shown}"
        );
        assert_eq!(card["allowed_mentions"]["parse"], serde_json::json!([]));
        let approve = card["components"][0]["components"][0]["custom_id"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(approve, format!("a:{}:{hash}", req.id));
        let card_id = card["sent_message_id"].as_str().unwrap().to_string();

        // The stranger presses Approve: refused, told (ephemerally), recorded.
        fake.push_press(OWNER_DM, &card_id, STRANGER, "mallory", &approve);
        let told = fake.wait_for("POST /interactions/", |b| {
            b["data"]["content"]
                .as_str()
                .unwrap_or("")
                .replace('\\', "")
                .contains("only the owner can answer this")
        });
        assert_eq!(told["data"]["flags"], 64);
        assert_eq!(super::super::pending_approvals(&f.home).len(), 1);
        // The owner presses the right button on another message: stale, refused.
        let paired_msg = posts_to(&fake, OWNER_DM)[0]["sent_message_id"]
            .as_str()
            .unwrap()
            .to_string();
        fake.push_press(OWNER_DM, &paired_msg, OWNER, "owner", &approve);
        fake.wait_for("POST /interactions/", |b| {
            b["data"]["content"]
                .as_str()
                .unwrap_or("")
                .replace('\\', "")
                .contains("this card is stale")
        });
        assert_eq!(super::super::pending_approvals(&f.home).len(), 1);
        // The owner's press on the card approves; the card is edited without buttons.
        fake.push_press(OWNER_DM, &card_id, OWNER, "owner", &approve);
        fake.wait_for(&format!("POST /channels/{OWNER_DM}/messages"), |b| {
            text_has(b, "content", "Done with the note")
        });
        let edit = fake.wait_for(
            &format!("PATCH /channels/{OWNER_DM}/messages/{card_id}"),
            |_| true,
        );
        assert_eq!(edit["components"], serde_json::json!([]));
        assert!(edit["content"]
            .as_str()
            .unwrap()
            .replace('\\', "")
            .starts_with("approved by the owner"));
        let granted = kinds(&f, "approval-granted");
        assert_eq!(granted.len(), 1, "{granted:?}");
        assert_eq!(granted[0]["via"], "discord", "{}", granted[0]);
        let refused = kinds(&f, "approval-press-refused");
        assert_eq!(refused.len(), 2, "{refused:?}");

        // The gateway drops: the next message still arrives, once, after a resume.
        fake.drop_connections();
        fake.push_message(OWNER_DM, None, OWNER, "owner", "one more thing");
        fake.wait_for(&format!("POST /channels/{OWNER_DM}/messages"), |b| {
            text_has(b, "content", "Second answer")
        });
        wait_for("a resume", || fake.resumes() >= 1);
        assert_eq!(
            fake.identifies(),
            1,
            "the host identified anew instead of resuming"
        );
        std::thread::sleep(std::time::Duration::from_secs(2));
        let answers = posts_to(&fake, OWNER_DM)
            .iter()
            .filter(|b| text_has(b, "content", "Second answer"))
            .count();
        assert_eq!(answers, 1, "{:#?}", posts_to(&fake, OWNER_DM));
        assert!(posts_to(&fake, STRANGER_DM).is_empty());
        // The token reached neither log.
        assert!(!audit_records(&f.home)
            .iter()
            .any(|r| r.to_string().contains(TOKEN)));
        assert!(!host.log_text().contains(TOKEN), "{}", host.log_text());
        drop(host);
        assert!(verify(&f.home).status.success());
    }
}

mod slack {
    use super::*;
    use airlock_channels::fake::slack::FakeSlack;

    const BOT_TOKEN: &str = "xoxb-fake-bot-token-123";
    const APP_TOKEN: &str = "xapp-fake-app-token-456";
    const OWNER: &str = "U0OWNER";
    const OWNER_DM: &str = "D0OWNER";
    const STRANGER: &str = "U0MALLORY";
    const STRANGER_DM: &str = "D0MALLORY";
    const GROUP: &str = "C0GROUP";

    fn posts_to(fake: &FakeSlack, channel: &str) -> Vec<Value> {
        fake.calls_of("chat.postMessage")
            .into_iter()
            .filter(|b| b["channel"] == channel)
            .collect()
    }

    fn has_buttons(b: &Value) -> bool {
        b["blocks"]
            .as_array()
            .is_some_and(|bs| bs.iter().any(|x| x["type"] == "actions"))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn slack_pairs_its_owner_takes_only_the_owners_press_serves_threads_and_rides_out_a_drop()
    {
        let f = fixture();
        let model = note_then_send_model("Done with the note.").await;
        let fake = FakeSlack::start(APP_TOKEN, BOT_TOKEN);
        let code = configure(
            &f,
            &model,
            "slack",
            &fake.api_base(),
            &fake.ca_pem(),
            &[("slack-bot", BOT_TOKEN), ("slack-app", APP_TOKEN)],
            &[
                "--token-secret",
                "slack-bot",
                "--app-token-secret",
                "slack-app",
                "--group-trigger",
                "!ai",
            ],
        );
        let host = start_host(&f);
        fake.push_message(STRANGER_DM, STRANGER, "ABCDEFGHJK", true);
        fake.push_message(OWNER_DM, OWNER, &code, true);
        fake.wait_for("chat.postMessage", |b| {
            b["channel"] == OWNER_DM && text_has(b, "text", "paired")
        });
        assert_eq!(kinds(&f, "channel-paired")[0]["detail"]["owner"], OWNER);
        wait_for("the stranger's guess to be dropped", || {
            kinds(&f, "channel-message-dropped")
                .iter()
                .any(|r| r["detail"]["from"] == STRANGER)
        });

        // The ask is a Block Kit card in the owner's DM, with the payload hash.
        fake.push_message(OWNER_DM, OWNER, "Write a note and read it back", true);
        let card = fake.wait_for("chat.postMessage", has_buttons);
        assert_eq!(card["channel"], OWNER_DM);
        assert_eq!(card["mrkdwn"], false);
        let held = super::super::pending_approvals(&f.home);
        assert_eq!(held.len(), 1, "{held:?}");
        let req = &held[0];
        let hash = req.payload_hash.trim_start_matches("sha256:")[..12].to_string();
        let shown = card["text"].as_str().unwrap();
        assert!(shown.contains("bob@example.com"), "{shown}");
        assert!(
            shown.contains(&format!("payload hash: sha256:{hash}")),
            "{shown}"
        );
        let approve = format!("a:{}:{hash}", req.id);
        assert!(card.to_string().contains(&approve), "{card}");
        let card_ts = card["sent_ts"].as_str().unwrap().to_string();

        // A stranger's press: refused, told only them, recorded; a stale one: refused.
        fake.push_press(OWNER_DM, &card_ts, STRANGER, &approve);
        let told = fake.wait_for("chat.postEphemeral", |b| {
            text_has(b, "text", "only the owner can answer this")
        });
        assert_eq!(told["user"], STRANGER);
        let paired_ts = posts_to(&fake, OWNER_DM)[0]["sent_ts"]
            .as_str()
            .unwrap()
            .to_string();
        fake.push_press(OWNER_DM, &paired_ts, OWNER, &approve);
        fake.wait_for("chat.postEphemeral", |b| {
            text_has(b, "text", "this card is stale")
        });
        assert_eq!(super::super::pending_approvals(&f.home).len(), 1);
        // The owner's press approves; the card is updated without its buttons.
        fake.push_press(OWNER_DM, &card_ts, OWNER, &approve);
        fake.wait_for("chat.postMessage", |b| {
            b["channel"] == OWNER_DM && text_has(b, "text", "Done with the note")
        });
        let update = fake.wait_for("chat.update", |b| b["ts"] == card_ts.as_str());
        assert!(!has_buttons(&update), "{update}");
        assert!(
            text_has(&update, "text", "approved by the owner"),
            "{update}"
        );
        assert_eq!(kinds(&f, "approval-granted")[0]["via"], "slack");
        assert_eq!(kinds(&f, "approval-press-refused").len(), 2);

        // A thread in a channel is a chat of its own; the answer goes to the thread. The
        // socket drops first: the message still comes, once.
        fake.drop_connections();
        fake.push_thread_message(GROUP, "1700000001.000100", OWNER, "!ai what is on today?");
        fake.wait_for("chat.postMessage", |b| {
            b["channel"] == GROUP
                && b["thread_ts"] == "1700000001.000100"
                && text_has(b, "text", "Second answer")
        });
        wait_for("a new socket", || fake.connections() >= 2);
        std::thread::sleep(std::time::Duration::from_secs(2));
        let answers = posts_to(&fake, GROUP)
            .iter()
            .filter(|b| text_has(b, "text", "Second answer"))
            .count();
        assert_eq!(answers, 1, "{:#?}", posts_to(&fake, GROUP));
        let state: Value = serde_json::from_slice(
            &std::fs::read(f.home.join("state/channels/slack.json")).unwrap(),
        )
        .unwrap();
        assert!(
            state["chats"].get("C0GROUP/1700000001.000100").is_some(),
            "{state}"
        );
        assert!(posts_to(&fake, STRANGER_DM).is_empty());
        for token in [BOT_TOKEN, APP_TOKEN] {
            assert!(!audit_records(&f.home)
                .iter()
                .any(|r| r.to_string().contains(token)));
            assert!(!host.log_text().contains(token), "{}", host.log_text());
        }
        drop(host);
        assert!(verify(&f.home).status.success());
    }

    /// With `sessions = "chat"`, a thread shares its channel's session: one session in
    /// the state, both turns under it in the log, and the thread's turn sees what was
    /// said at the top of the channel.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn slack_threads_share_their_channels_session_when_so_configured() {
        let f = fixture();
        let model =
            ScriptedModel::start([Step::text("First answer."), Step::text("Second answer.")])
                .await
                .unwrap();
        let fake = FakeSlack::start(APP_TOKEN, BOT_TOKEN);
        let code = configure(
            &f,
            &model,
            "slack",
            &fake.api_base(),
            &fake.ca_pem(),
            &[("slack-bot", BOT_TOKEN), ("slack-app", APP_TOKEN)],
            &[
                "--token-secret",
                "slack-bot",
                "--app-token-secret",
                "slack-app",
                "--group-trigger",
                "!ai",
                "--sessions",
                "chat",
            ],
        );
        let _host = start_host(&f);
        fake.push_message(OWNER_DM, OWNER, &code, true);
        fake.wait_for("chat.postMessage", |b| {
            b["channel"] == OWNER_DM && text_has(b, "text", "paired")
        });

        fake.push_message(GROUP, OWNER, "!ai the code word is heliotrope", false);
        fake.wait_for("chat.postMessage", |b| {
            b["channel"] == GROUP && text_has(b, "text", "First answer")
        });
        fake.push_thread_message(
            GROUP,
            "1700000001.000100",
            OWNER,
            "!ai what was the code word?",
        );
        fake.wait_for("chat.postMessage", |b| {
            b["channel"] == GROUP
                && b["thread_ts"] == "1700000001.000100"
                && text_has(b, "text", "Second answer")
        });

        let state: Value = serde_json::from_slice(
            &std::fs::read(f.home.join("state/channels/slack.json")).unwrap(),
        )
        .unwrap();
        let chats = state["chats"].as_object().unwrap();
        assert_eq!(chats.len(), 1, "{state}");
        let session = chats[GROUP].as_str().unwrap();
        // Every record of a session on this channel is that one session's.
        let sessions: std::collections::BTreeSet<String> = audit_records(&f.home)
            .into_iter()
            .filter_map(|r| r["session"].as_str().map(str::to_string))
            .filter(|s| s.starts_with("s-"))
            .collect();
        assert_eq!(sessions.into_iter().collect::<Vec<_>>(), [session],);
        let asked = model.requests();
        assert_eq!(asked.len(), 2);
        let second = String::from_utf8_lossy(&asked[1].body);
        assert!(second.contains("heliotrope"), "{second}");
        assert!(verify(&f.home).status.success());
    }
}
