//! I8 end to end: stored memory is data. A pickle payload comes back as the same inert
//! string; a session cannot read another namespace even when the model names it; a row
//! edited into a foreign shape is quarantined with a clear error while the rest works.
//! The real `airlock` binary and store, with the scripted model on loopback.

use std::path::Path;

use airlock_agent::scripted::{ScriptedModel, Step};
use airlock_store::{
    MemoryChange, MemoryRecord, MemoryStore, MemoryWrite, Namespace, Note, SqliteStore, Tier,
    Timestamp, WriteProvenance,
};
use serde_json::Value;

mod exec_fixture;
use exec_fixture::{airlock, fixture, report_ok};

/// `airlock run --json PROMPT` against `model`, which must succeed; its report.
async fn airlock_run(home: &Path, model: &ScriptedModel, prompt: &str) -> Value {
    let args = ["--approval-timeout", "1", prompt];
    report_ok(&exec_fixture::airlock_run(home, model, &args).await)
}

/// The JSON body of the first `<memory-data>` block in a tool result.
fn first_block_body(result: &str) -> Value {
    let mut lines = result.lines();
    let header = lines.next().unwrap_or_default();
    assert!(header.starts_with("<memory-data "), "{result}");
    serde_json::from_str(lines.next().unwrap()).unwrap()
}

fn write_direct(home: &Path, ns: &Namespace, tier: Tier, text: &str) -> String {
    let store = SqliteStore::open(home.join("state")).unwrap();
    store
        .memory_write(
            ns,
            &MemoryWrite {
                id: None,
                tier,
                change: MemoryChange::Put(MemoryRecord::Note(Note { text: text.into() })),
            },
            &WriteProvenance {
                session_id: "s-setup".into(),
                principal: ns.user().into(),
                tainted: false,
                tool_call_id: "setup".into(),
            },
            Timestamp::now(),
        )
        .unwrap()
        .record_id
}

/// Pickle payloads whose `__reduce__` would run `touch <marker>`: protocol 0 (ASCII) and
/// protocol 2 (binary, carried as one character per byte).
fn pickle_payloads(marker: &Path) -> Vec<String> {
    let script = format!(
        "import os, pickle, sys, json\n\
         class P:\n    def __reduce__(self):\n        return (os.system, ('touch {}',))\n\
         print(json.dumps([pickle.dumps(P(), 0).decode('latin-1'), pickle.dumps(P(), 2).decode('latin-1')]))",
        marker.display()
    );
    let o = std::process::Command::new("python3")
        .args(["-c", &script])
        .output()
        .expect("python3 is needed to build the pickle payloads");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let payloads: Vec<String> = serde_json::from_slice(&o.stdout).unwrap();
    assert!(payloads[0].contains("system") && payloads[1].starts_with('\u{80}'));
    payloads
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pickle_payload_comes_back_as_the_same_inert_string() {
    let f = fixture();
    let marker = f.ws.join("pwned");
    let payloads = pickle_payloads(&marker);
    for (i, payload) in payloads.iter().enumerate() {
        let text = format!("pickled{i} {payload}");
        let model = ScriptedModel::start([
            Step::tool_call(
                "s1",
                "memory_save",
                serde_json::json!({"tier": "recall", "kind": "note", "record": {"text": text}})
                    .to_string(),
            ),
            Step::tool_call(
                "s2",
                "memory_search",
                format!(r#"{{"query":"pickled{i}"}}"#),
            ),
            Step::text("Done."),
        ])
        .await
        .unwrap();
        let r = airlock_run(&f.home, &model, "Keep this note").await;
        let calls = r["tool_calls"].as_array().unwrap();
        assert_eq!(calls[0]["decision"], "allow", "{r:#}");
        let found = calls[1]["result"].as_str().unwrap();
        assert_eq!(
            first_block_body(found)["text"],
            Value::String(text.clone()),
            "{found}"
        );
        // The model got the same bytes back as data.
        let third = model.requests()[2].json().unwrap().to_string();
        assert!(third.contains("memory-data"), "{third}");

        // The operator's export returns it byte for byte too.
        let export = airlock(&f.home, &["memory", "export", "--json"]);
        assert!(export.status.success());
        let all: Value = serde_json::from_slice(&export.stdout).unwrap();
        assert!(
            all["versions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v["record"]["text"] == Value::String(text.clone())),
            "{all:#}"
        );
        // So does the store's own reader.
        let store = SqliteStore::open(f.home.join("state")).unwrap();
        let ns = Namespace::new("airlock", "owner").unwrap();
        let hits = store.memory_search(&ns, &format!("pickled{i}"), 5).unwrap();
        assert_eq!(
            hits.items[0].entry.record,
            Some(MemoryRecord::Note(Note { text: text.clone() }))
        );
    }
    assert!(!marker.exists(), "a stored pickle payload was executed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_cannot_read_another_namespace_even_by_naming_it() {
    let f = fixture();
    let bob = Namespace::new("airlock", "bob").unwrap();
    let secret = "bob's locker code is 4711";
    let bob_id = write_direct(&f.home, &bob, Tier::Recall, secret);
    write_direct(&f.home, &bob, Tier::Pinned, "bob pinned: locker 4711");

    let model = ScriptedModel::start([
        Step::tool_call("g1", "memory_get", format!(r#"{{"id":"{bob_id}"}}"#)),
        Step::tool_call(
            "g2",
            "memory_get",
            format!(r#"{{"id":"{bob_id}","namespace":"airlock/bob"}}"#),
        ),
        Step::tool_call("g3", "memory_search", r#"{"query":"bob locker code"}"#),
        Step::tool_call(
            "g4",
            "memory_search",
            r#"{"query":"locker","namespace":"airlock/bob"}"#,
        ),
        Step::tool_call("g5", "memory_forget", format!(r#"{{"id":"{bob_id}"}}"#)),
        Step::text("Nothing found."),
    ])
    .await
    .unwrap();
    let r = airlock_run(&f.home, &model, "What is bob's locker code?").await;
    let calls = r["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 5, "{r:#}");
    assert!(
        calls[0]["result"]
            .as_str()
            .unwrap()
            .contains("no memory record"),
        "{r:#}"
    );
    assert!(
        calls[1]["result"]
            .as_str()
            .unwrap()
            .contains("unknown field `namespace`"),
        "{r:#}"
    );
    assert!(
        calls[2]["result"]
            .as_str()
            .unwrap()
            .contains("no memory records matched"),
        "{r:#}"
    );
    assert!(
        calls[3]["result"]
            .as_str()
            .unwrap()
            .contains("unknown field `namespace`"),
        "{r:#}"
    );
    assert!(
        calls[4]["result"]
            .as_str()
            .unwrap()
            .contains("no memory record"),
        "{r:#}"
    );
    for req in model.requests() {
        let text = req.json().unwrap().to_string();
        assert!(
            !text.contains("4711"),
            "another namespace reached the model: {text}"
        );
    }
    // Bob's memory is untouched.
    let store = SqliteStore::open(f.home.join("state")).unwrap();
    assert!(store.memory_get(&bob, &bob_id).is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_row_is_quarantined_and_the_rest_keeps_working() {
    let f = fixture();
    let owner = Namespace::new("airlock", "owner").unwrap();
    let good = write_direct(&f.home, &owner, Tier::Pinned, "keep replies short");
    let bad = write_direct(&f.home, &owner, Tier::Pinned, "to be corrupted");
    let odd = write_direct(&f.home, &owner, Tier::Pinned, "to get an extra field");
    // Edit the database directly: 10 MB of text, and a field this build does not know.
    let db = f.home.join("state").join(airlock_store::DATABASE_FILE);
    let script = format!(
        "import sqlite3\n\
         c = sqlite3.connect({db:?})\n\
         c.execute(\"UPDATE memory_versions SET body = ? WHERE record_id = ?\", ('{{\"text\":\"' + 'A' * (10 * 1024 * 1024) + '\"}}', {bad:?}))\n\
         c.execute(\"UPDATE memory_versions SET body = ? WHERE record_id = ?\", ('{{\"text\":\"x\",\"py/object\":\"os.system\"}}', {odd:?}))\n\
         c.commit()",
        db = db.display().to_string(),
    );
    let o = std::process::Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let list = airlock(&f.home, &["memory", "list"]);
    assert!(
        list.status.success(),
        "{}",
        String::from_utf8_lossy(&list.stderr)
    );
    let (stdout, stderr) = (
        String::from_utf8_lossy(&list.stdout),
        String::from_utf8_lossy(&list.stderr),
    );
    assert!(stdout.contains(&good) && !stdout.contains(&bad), "{stdout}");
    assert!(
        stderr.contains(&format!(
            "row `{bad}@1` of table `memory_versions` is malformed"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("byte limit") && stderr.contains("unknown field `py/object`"),
        "{stderr}"
    );
    assert!(stderr.contains("quarantine"), "{stderr}");
    let show = airlock(&f.home, &["memory", "show", &bad]);
    assert_eq!(show.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&show.stderr).contains("help:"));

    // A session still starts, with the good pin and without the foreign rows.
    let model = ScriptedModel::start([Step::text("Hi.")]).await.unwrap();
    airlock_run(&f.home, &model, "Hello").await;
    let ctx = model.requests()[0].json().unwrap().to_string();
    assert!(ctx.contains("keep replies short"), "{ctx}");
    assert!(
        !ctx.contains("AAAAAAAA") && !ctx.contains("py/object"),
        "a foreign row was loaded"
    );

    let store = SqliteStore::open(f.home.join("state")).unwrap();
    let q = airlock_store::OperatorControls::quarantined_rows(&store).unwrap();
    assert!(q.iter().any(|r| r.row == format!("{bad}@1")), "{q:?}");
    assert!(q.iter().any(|r| r.row == format!("{odd}@1")), "{q:?}");
}

/// Recall written after untrusted content taints the session that reads it back, like any
/// untrusted content; recall written by a clean session does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_recall_taints_the_reader_and_trusted_recall_does_not() {
    use airlock_store::SessionStore;
    let f = fixture();
    let owner = Namespace::new("airlock", "owner").unwrap();
    write_direct(&f.home, &owner, Tier::Recall, "trusted fact about gardens");
    let store = SqliteStore::open(f.home.join("state")).unwrap();
    store
        .memory_write(
            &owner,
            &MemoryWrite {
                id: None,
                tier: Tier::Recall,
                change: MemoryChange::Put(MemoryRecord::Note(Note {
                    text: "untrusted claim about invoices".into(),
                })),
            },
            &WriteProvenance {
                session_id: "s-earlier".into(),
                principal: "owner".into(),
                tainted: true,
                tool_call_id: "c9".into(),
            },
            Timestamp::now(),
        )
        .unwrap();

    for (query, tainted) in [("gardens", false), ("invoices", true)] {
        let model = ScriptedModel::start([
            Step::tool_call("q", "memory_search", format!(r#"{{"query":"{query}"}}"#)),
            Step::text("Found it."),
        ])
        .await
        .unwrap();
        let r = airlock_run(&f.home, &model, "What do you remember?").await;
        let result = r["tool_calls"][0]["result"].as_str().unwrap().to_string();
        assert!(
            result.contains(&format!("tainted=\"{tainted}\"")),
            "{result}"
        );
        let session = store.get_session(r["session"].as_str().unwrap()).unwrap();
        assert_eq!(
            session.gate.taint.is_tainted(),
            tainted,
            "{query}: {result}"
        );
    }
}

/// Memory does not live for ever, through the real binary: a recall record a tainted
/// session wrote twenty days ago has expired (tainted recall lives 14 days by default), so
/// `memory_search` no longer finds it and `memory list` says so; a fresh one is found and
/// listed with its expiry. `[memory.retention]` takes no unknown keys.
mod expiry {
    use super::*;

    fn write_at(home: &Path, ns: &Namespace, text: &str, tainted: bool, at: Timestamp) -> String {
        let store = SqliteStore::open(home.join("state")).unwrap();
        store
            .memory_write(
                ns,
                &MemoryWrite {
                    id: None,
                    tier: Tier::Recall,
                    change: MemoryChange::Put(MemoryRecord::Note(Note { text: text.into() })),
                },
                &WriteProvenance {
                    session_id: "s-setup".into(),
                    principal: ns.user().into(),
                    tainted,
                    tool_call_id: "setup".into(),
                },
                at,
            )
            .unwrap()
            .record_id
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn i8_expired_recall_is_not_recalled_and_list_shows_expiry() {
        let f = fixture();
        let owner = Namespace::new("airlock", "owner").unwrap();
        let twenty_days_ago = Timestamp::now().minus(std::time::Duration::from_secs(20 * 86_400));
        let old = write_at(
            &f.home,
            &owner,
            "harbor code is 9182",
            true,
            twenty_days_ago,
        );
        let fresh = write_at(
            &f.home,
            &owner,
            "harbor opens at nine",
            false,
            Timestamp::now(),
        );

        let model = ScriptedModel::start([
            Step::tool_call("q1", "memory_search", r#"{"query":"harbor"}"#),
            Step::tool_call("q2", "memory_get", format!(r#"{{"id":"{old}"}}"#)),
            Step::text("Done."),
        ])
        .await
        .unwrap();
        let r = airlock_run(&f.home, &model, "What do I know about the harbor?").await;
        let calls = r["tool_calls"].as_array().unwrap();
        let search = calls[0]["result"].as_str().unwrap();
        assert!(search.contains(&fresh), "{search}");
        assert!(
            !search.contains(&old) && !search.contains("9182"),
            "{search}"
        );
        let get = calls[1]["result"].as_str().unwrap();
        assert!(get.contains("no memory record"), "{get}");

        let o = airlock(&f.home, &["memory", "list"]);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(out.contains("EXPIRES"), "{out}");
        let line = |id: &str| {
            out.lines()
                .find(|l| l.starts_with(id))
                .unwrap_or_else(|| panic!("{id}: {out}"))
                .to_string()
        };
        assert!(line(&old).contains("expired"), "{out}");
        assert!(line(&fresh).contains("in 179d"), "{out}");

        // A shorter limit in airlock.toml applies to records already kept.
        std::fs::create_dir_all(f.home.join("config")).unwrap();
        std::fs::write(
            f.home.join("config/airlock.toml"),
            "[memory.retention]\nnote_days = 1\n",
        )
        .unwrap();
        let o = airlock(&f.home, &["memory", "list"]);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(
            out.lines()
                .find(|l| l.starts_with(&fresh))
                .unwrap()
                .contains("in 23h"),
            "{out}"
        );

        std::fs::write(
            f.home.join("config/airlock.toml"),
            "[memory.retention]\nnotes_days = 1\n",
        )
        .unwrap();
        let o = airlock(&f.home, &["memory", "list"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains("notes_days"), "{err}");
        std::fs::write(
            f.home.join("config/airlock.toml"),
            "[memory.retention]\nnote_days = 0\n",
        )
        .unwrap();
        let o = airlock(&f.home, &["memory", "list"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains("note_days") && err.contains("help:"),
            "{err}"
        );
    }
}
