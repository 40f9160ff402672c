//! Store benchmark: prints latency of the hot writes and the memory cost of idle sessions.
//! Figures only, no assertions. Run with
//! `cargo bench -p airlock-store --bench store`.
//!
//! Every write is a durable commit (WAL, `synchronous=FULL`), so the figures are
//! dominated by the disk's flush latency; on tmpfs they show the CPU cost alone.

use std::time::{Duration, Instant};

use airlock_core::Action;
use airlock_store::*;
use serde_json::json;

fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.50), at(0.99))
}

fn report(name: &str, samples: Vec<Duration>) {
    let n = samples.len();
    let (p50, p99) = percentiles(samples);
    println!(
        "{name:<34} n={n:<5} p50={:>8.3} ms  p99={:>8.3} ms",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3
    );
}

fn time<T>(f: impl FnOnce() -> T) -> Duration {
    let start = Instant::now();
    std::hint::black_box(f());
    start.elapsed()
}

/// Resident set size of this process, from /proc.
fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    println!("database: {}", dir.path().display());
    let store = SqliteStore::open(dir.path()).expect("open store");
    let now = Timestamp::now();
    let session = store
        .create_session(&NewSession::owner(), now)
        .expect("session");
    let id = session.id().to_string();

    let message = [TranscriptEvent::Message {
        role: MessageRole::Assistant,
        content: json!([{"type": "text", "text": "I read the three files and wrote the summary to notes.md."}]),
    }];
    let samples = (0..1000)
        .map(|_| {
            time(|| {
                store
                    .record_turn(
                        &id,
                        &TurnUpdate {
                            events: &message,
                            taint: None,
                        },
                        now,
                    )
                    .expect("write")
            })
        })
        .collect();
    report("write one message", samples);

    let limits = BudgetLimits::default();
    let usage = Usage {
        turns: 1,
        input_tokens: 1500,
        output_tokens: 200,
        cost_micros: 3000,
        wall_ms: 800,
        tool_calls: 1,
    };
    let samples = (0..1000)
        .map(|_| time(|| store.charge(&id, &usage, &limits, now).expect("charge")))
        .collect();
    report("charge budget", samples);

    let approval_limits = ApprovalLimits {
        max_pending_per_session: u32::MAX,
        max_created_per_minute: u32::MAX,
    };
    let samples = (0..300)
        .map(|i| {
            let action = Action::from_json(
                &json!({"type": "exec", "command": format!("git push origin b{i}"), "cwd": ""})
                    .to_string(),
            )
            .expect("action");
            time(|| {
                let req = store
                    .create_approval(
                        &NewApproval {
                            session_id: &id,
                            action: &action,
                            preview: ApprovalPreview::Command {
                                command: format!("git push origin b{i}"),
                                cwd: String::new(),
                            },
                            reasons: vec!["egress".into()],
                            policies: vec!["ask-egress".into()],
                            expires_at: now.plus(Duration::from_secs(300)),
                        },
                        &approval_limits,
                        now,
                    )
                    .expect("create");
                store
                    .approve(
                        &req.id,
                        &ApproveRequest {
                            approver: "owner",
                            payload_hash: &req.payload_hash,
                            grant: None,
                        },
                        now,
                    )
                    .expect("approve")
            })
        })
        .collect();
    report("create + approve approval", samples);

    // 100 sessions with a short conversation each, then a fresh store that loads them all,
    // as a restarted host would.
    let turn: Vec<TranscriptEvent> = (0..10)
        .map(|i| TranscriptEvent::Message {
            role: MessageRole::User,
            content: json!(format!("message number {i} of a short conversation")),
        })
        .collect();
    for _ in 0..100 {
        let s = store
            .create_session(&NewSession::owner(), now)
            .expect("session");
        let mut gate = s.gate.clone();
        gate.observe_trusted("please summarize the report and send it to alice@example.com");
        store
            .record_turn(
                s.id(),
                &TurnUpdate {
                    events: &turn,
                    taint: Some(&gate.taint),
                },
                now,
            )
            .expect("turn");
    }
    drop(store);
    let before = rss_kib();
    let store = SqliteStore::open(dir.path()).expect("reopen");
    let ids: Vec<String> = store
        .list_sessions(None)
        .expect("list")
        .items
        .into_iter()
        .map(|s| s.id)
        .collect();
    let start = Instant::now();
    let loaded: Vec<ResumedSession> = ids
        .iter()
        .map(|id| store.resume_session(id, now).expect("resume"))
        .collect();
    let load_time = start.elapsed();
    let after = rss_kib();
    match (before, after) {
        (Some(b), Some(a)) => println!(
            "100 idle sessions loaded            {} sessions in {:.1} ms, RSS {:.1} MiB -> {:.1} MiB (+{:.2} MiB)",
            loaded.len(),
            load_time.as_secs_f64() * 1e3,
            b as f64 / 1024.0,
            a as f64 / 1024.0,
            a.saturating_sub(b) as f64 / 1024.0
        ),
        _ => println!("100 idle sessions loaded in {:.1} ms (RSS unavailable)", load_time.as_secs_f64() * 1e3),
    }
    std::hint::black_box(loaded);
}
