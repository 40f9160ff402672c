//! `memory_search` against the plain ranked query it replaces: the same records in the
//! same order (up to near-ties of bm25's clamped common words), only the caller's
//! namespace even when another namespace has far more matches, and a database written
//! by the previous schema version searched after its upgrade.

mod common;

use std::collections::HashMap;

use airlock_store::*;
use common::{at, open, raw};

const LIMIT: usize = 10;

fn ns(user: &str) -> Namespace {
    Namespace::new("airlock", user).unwrap()
}

fn save(s: &SqliteStore, ns: &Namespace, text: &str) -> String {
    let by = WriteProvenance {
        session_id: "s-1".into(),
        principal: "owner".into(),
        tainted: false,
        tool_call_id: "call-1".into(),
    };
    let write = MemoryWrite {
        id: None,
        tier: Tier::Recall,
        change: MemoryChange::Put(MemoryRecord::Note(Note { text: text.into() })),
    };
    s.memory_write(ns, &write, &by, at(0)).unwrap().record_id
}

/// A small deterministic generator, so every run builds the same corpus.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) as usize) % below
    }
}

/// Notes of varied length: "the" in about three notes in four, "note" in every one, a
/// word list where earlier words are more frequent, and a number that names the note.
fn corpus_note(rng: &mut Lcg, i: usize) -> String {
    const WORDS: &[&str] = &[
        "invoice", "kernel", "cargo", "deploy", "garden", "recipe", "coffee", "budget", "travel",
        "doctor", "bicycle", "library", "password", "calendar", "printer",
    ];
    let mut words = vec!["note".to_string(), format!("n{i}")];
    let len = 2 + rng.next(24);
    for _ in 0..len {
        // Squaring skews the pick towards the front of the list.
        let a = rng.next(WORDS.len());
        let b = rng.next(WORDS.len());
        words.push(WORDS[a.min(b)].to_string());
        if rng.next(4) != 0 {
            words.push("the".into());
        }
    }
    words.join(" ")
}

/// Record id and bm25 score of every match of the plain OR query in one namespace, best
/// first: the query `memory_search` ran before it left out common words.
fn plain_or(db: &rusqlite::Connection, ns: &Namespace, query: &str) -> Vec<(String, f64)> {
    let expr = query
        .split_whitespace()
        .map(|w| format!("\"{w}\""))
        .collect::<Vec<_>>()
        .join(" OR ");
    let mut stmt = db
        .prepare(
            "SELECT r.id, memory_fts.rank FROM memory_fts
             JOIN memory_records r ON r.rowid = memory_fts.rowid
             WHERE memory_fts MATCH ?1 AND memory_fts.namespace = ?2
             ORDER BY memory_fts.rank",
        )
        .unwrap();
    let rows = stmt
        .query_map(rusqlite::params![expr, ns.key()], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    rows.collect::<Result<_, _>>().unwrap()
}

/// Check `memory_search` against the plain query: at each place the same record, or one
/// whose full score differs from the expected one by no more than the clamped words can
/// add. Returns how many hits carry a score that left out some common word.
fn assert_same_as_plain(
    s: &SqliteStore,
    db: &rusqlite::Connection,
    ns: &Namespace,
    query: &str,
) -> usize {
    let expected = plain_or(db, ns, query);
    let full: HashMap<&str, f64> = expected.iter().map(|(id, s)| (id.as_str(), *s)).collect();
    let got = s.memory_search(ns, query, LIMIT).unwrap();
    assert!(got.corrupt.is_empty(), "{:?}", got.corrupt);
    assert_eq!(
        got.items.len(),
        expected.len().min(LIMIT),
        "{query:?}: {got:?}"
    );
    // Each clamped word adds less than 1e-6 · 2.2 to a score.
    let slack = 16.0 * 2.2e-6;
    let mut partial = 0;
    for (place, hit) in got.items.iter().enumerate() {
        assert_eq!(hit.entry.namespace, *ns);
        let id = hit.entry.record_id.as_str();
        let full_score = *full
            .get(id)
            .unwrap_or_else(|| panic!("{query:?}: {id} does not match the plain query"));
        if hit.score != full_score {
            partial += 1;
            assert!(
                (hit.score - full_score).abs() <= slack,
                "{query:?}: {id} scored {} against {full_score}",
                hit.score
            );
        }
        let (want_id, want_score) = &expected[place];
        assert!(
            id == want_id || (full_score - want_score).abs() <= slack,
            "{query:?} place {place}: got {id} ({full_score}), expected {want_id} ({want_score})"
        );
    }
    partial
}

#[test]
fn search_ranks_like_the_plain_or_query() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    let (a, b) = (ns("alice"), ns("bob"));
    let mut rng = Lcg(7);
    let mut alice = Vec::new();
    for i in 0..900 {
        let text = corpus_note(&mut rng, i);
        // One note in three goes to Bob, so the index is shared by two namespaces.
        if i % 3 == 0 {
            save(&s, &b, &text);
        } else {
            alice.push(save(&s, &a, &text));
        }
    }
    // Forgetting records changes the index's row count and term counts.
    let by = WriteProvenance {
        session_id: "s-1".into(),
        principal: "owner".into(),
        tainted: false,
        tool_call_id: "call-1".into(),
    };
    for id in alice.iter().step_by(7) {
        let forget = MemoryWrite {
            id: Some(id.clone()),
            tier: Tier::Recall,
            change: MemoryChange::Forget,
        };
        s.memory_write(&a, &forget, &by, at(1)).unwrap();
    }
    let db = raw(dir.path());

    // Common words next to rarer ones: the rarer ones are searched alone.
    let mut partial = 0;
    for q in [
        "the invoice",
        "note kernel",
        "the note printer calendar",
        "THE Printer",
    ] {
        partial += assert_same_as_plain(&s, &db, &a, q);
    }
    assert!(
        partial > 0,
        "no hit left out a common word: the shortcut never ran"
    );
    // Rarer words with fewer than LIMIT hits, or none: the full query decides.
    for q in [
        "note n4",
        "the n17 n20",
        "the zebra",
        "note",
        "the note",
        "invoice kernel cargo",
        "printer",
    ] {
        assert_eq!(assert_same_as_plain(&s, &db, &a, q), 0, "{q:?}");
    }
}

#[test]
fn another_namespace_with_far_more_matches_never_crowds_out_the_callers() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(dir.path());
    let (a, b) = (ns("alice"), ns("bob"));
    // Bob's notes are short, so they outrank Alice's longer ones for "cargo".
    for i in 0..600 {
        save(&s, &b, &format!("cargo build {i}"));
    }
    let mut mine = Vec::new();
    for i in 0..12 {
        mine.push(save(
            &s,
            &a,
            &format!("cargo {} notes of alice number {i}", "long ".repeat(i + 3)),
        ));
    }
    let db = raw(dir.path());
    let hits = s.memory_search(&a, "cargo", LIMIT).unwrap();
    assert_eq!(hits.items.len(), LIMIT, "{hits:?}");
    assert!(hits.items.iter().all(|h| h.entry.namespace == a));
    // The shortest of Alice's notes rank first.
    let ids: Vec<&str> = hits
        .items
        .iter()
        .map(|h| h.entry.record_id.as_str())
        .collect();
    let want: Vec<&str> = mine[..LIMIT].iter().map(String::as_str).collect();
    assert_eq!(ids, want);
    assert_same_as_plain(&s, &db, &a, "cargo");
    assert_same_as_plain(&s, &db, &a, "cargo build");
    // Fewer matches than the limit in Alice's namespace: all of them, none of Bob's.
    let few = s.memory_search(&a, "alice 3", LIMIT).unwrap();
    assert!(!few.items.is_empty());
    assert!(few.items.iter().all(|h| h.entry.namespace == a));
    let bobs = s.memory_search(&b, "alice", LIMIT).unwrap();
    assert!(bobs.items.is_empty(), "{bobs:?}");
}

#[test]
fn a_version_2_database_is_searched_after_its_upgrade() {
    let dir = tempfile::tempdir().unwrap();
    let a = ns("alice");
    let mut ids = Vec::new();
    {
        let s = open(dir.path());
        for i in 0..40 {
            let extra = if i % 4 == 0 { " invoice" } else { "" };
            ids.push(save(&s, &a, &format!("the note {i}{extra}")));
        }
    }
    // Take the file back to schema version 2, which had no term counts (nor the
    // approvals' waiter columns of version 4, nor the grants' use counts of version 5).
    {
        let db = raw(dir.path());
        db.execute_batch(
            "DROP TABLE memory_fts_terms;
             ALTER TABLE approvals DROP COLUMN waiter_pid;
             ALTER TABLE approvals DROP COLUMN waiter_start;
             ALTER TABLE grants DROP COLUMN uses;
             ALTER TABLE grants DROP COLUMN last_used_at;
             ALTER TABLE sessions DROP COLUMN agent_workspace;
             DROP INDEX sessions_by_parent;
             ALTER TABLE sessions DROP COLUMN parent;
             PRAGMA user_version = 2;",
        )
        .unwrap();
        let tables: i64 = db
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE name = 'memory_fts_terms'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(tables, 0);
    }
    let s = open(dir.path());
    let db = raw(dir.path());
    let version: i64 = db
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let docs: i64 = db
        .query_row(
            "SELECT doc FROM memory_fts_terms WHERE term = 'note'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(docs, 40);
    let hits = s.memory_search(&a, "the invoice", LIMIT).unwrap();
    assert_eq!(hits.items.len(), LIMIT, "{hits:?}");
    assert_same_as_plain(&s, &db, &a, "the invoice");
    assert_same_as_plain(&s, &db, &a, "note 13");
    // New writes after the upgrade are found too.
    let new = save(&s, &a, "quartz invoice");
    let hits = s.memory_search(&a, "quartz", LIMIT).unwrap();
    assert_eq!(hits.items[0].entry.record_id, new);
}
