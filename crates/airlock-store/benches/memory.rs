//! Memory benchmark: `memory_search` latency (p50/p99) over many recall notes, and the
//! cost of one write with and without its audit record. Figures only, no assertions.
//! Run with `cargo bench -p airlock-store --bench memory`; `AIRLOCK_BENCH_NOTES` sets the
//! number of notes (default 100000) and `AIRLOCK_BENCH_DIR` where the database goes
//! (default a temporary directory; put it on the disk you want to measure).
//!
//! Every write is a durable commit (WAL, `synchronous=FULL`) and every audit record is
//! synced, so write figures are dominated by the disk's flush latency.

use std::time::{Duration, Instant};

use airlock_audit::{AuditEvent, AuditLog, AuditOptions, CheckpointSigner};
use airlock_store::*;

const WORDS: &[&str] = &[
    "cargo", "build", "deploy", "invoice", "meeting", "garden", "python", "release", "budget",
    "travel", "recipe", "kernel", "sandbox", "policy", "network", "backup", "printer", "tax",
    "music", "doctor", "bicycle", "coffee", "library", "report", "password", "calendar",
];

fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.50), at(0.99))
}

fn report(name: &str, samples: Vec<Duration>) {
    let n = samples.len();
    let (p50, p99) = percentiles(samples);
    println!(
        "{name:<40} n={n:<6} p50={:>8.3} ms  p99={:>8.3} ms",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3
    );
}

fn note(i: usize) -> MemoryRecord {
    // A few words from a fixed list plus a unique token, so queries match many notes.
    let w = |k: usize| WORDS[(i * 7 + k * 13) % WORDS.len()];
    MemoryRecord::Note(Note {
        text: format!("{} {} {} note {i} about {}", w(0), w(1), w(2), w(3)),
    })
}

fn main() {
    let n: usize = std::env::var("AIRLOCK_BENCH_NOTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = std::env::var_os("AIRLOCK_BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| tmp.path().to_path_buf());
    println!("database: {}  notes: {n}", dir.display());
    let store = SqliteStore::open(&dir).expect("open store");
    let ns = Namespace::new("airlock", "owner").unwrap();
    let by = WriteProvenance {
        session_id: "s-bench".into(),
        principal: "owner".into(),
        tainted: false,
        tool_call_id: "call".into(),
    };
    let now = Timestamp::now();
    let write = |i: usize| {
        store
            .memory_write(
                &ns,
                &MemoryWrite {
                    id: None,
                    tier: Tier::Recall,
                    change: MemoryChange::Put(note(i)),
                },
                &by,
                now,
            )
            .expect("write")
    };

    let mut writes = Vec::with_capacity(n);
    let fill = Instant::now();
    for i in 0..n {
        let start = Instant::now();
        write(i);
        writes.push(start.elapsed());
    }
    println!("filled in {:.1} s", fill.elapsed().as_secs_f64());
    report("memory_write (durable commit)", writes);

    // Each word of the fixed list is in about one note in nine; "note 4242" is one word
    // that is in every note and one that is in a single note.
    let queries = [
        "invoice",
        "kernel",
        "cargo deploy",
        "note 4242",
        "garden recipe coffee",
    ];
    let mut all = Vec::new();
    for q in queries {
        let mut searches = Vec::new();
        for _ in 0..40 {
            let start = Instant::now();
            let hits = store.memory_search(&ns, q, 10).expect("search");
            searches.push(start.elapsed());
            std::hint::black_box(hits);
        }
        all.extend(searches.iter().copied());
        report(&format!("  memory_search {q:?}"), searches);
    }
    report(&format!("memory_search over {n} notes (top 10)"), all);

    // Not in the mix above: a word that is in every note next to one in about one note in
    // nine. The common word carries no bm25 weight, so the rarer one is searched alone.
    let mut searches = Vec::new();
    for _ in 0..40 {
        let start = Instant::now();
        let hits = store
            .memory_search(&ns, "note invoice", 10)
            .expect("search");
        searches.push(start.elapsed());
        std::hint::black_box(hits);
    }
    report("  memory_search \"note invoice\" (extra)", searches);

    let signer = CheckpointSigner::load_or_create(&dir.join("bench-audit-key")).expect("signer");
    let mut audit =
        AuditLog::open(&dir.join("bench-audit"), signer, AuditOptions::default()).expect("audit");
    let mut with_audit = Vec::new();
    for i in 0..500 {
        let start = Instant::now();
        let v = write(n + i);
        audit
            .append(
                AuditEvent::new("execution", "s-bench", "owner").with_detail(serde_json::json!({
                    "tool": "memory_save", "record": v.record_id, "version": v.version,
                })),
            )
            .expect("audit append");
        with_audit.push(start.elapsed());
    }
    report("memory_write + audit record (both synced)", with_audit);
    audit.close().expect("close audit");
}
