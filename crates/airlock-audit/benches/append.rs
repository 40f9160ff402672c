//! Append throughput and latency of the audit log, with fsync on and off.
//!
//! `cargo bench -p airlock-audit` (or `-- <records>` to change the count). Prints
//! records/s and p50/p99/max latency; nothing is asserted.

use std::time::{Duration, Instant};

use airlock_audit::{verify, AuditEvent, AuditLog, AuditOptions, CheckpointSigner};
use airlock_core::DecisionKind;
use ed25519_dalek::SigningKey;
use serde_json::json;

fn event(i: usize) -> AuditEvent {
    AuditEvent::new("decision", "bench-session", "agent")
        .with_action(
            json!({"type": "exec", "command": format!("git status --short {i}"), "cwd": "/w", "env": []}),
            format!("sha256:{i:064x}"),
        )
        .with_decision(DecisionKind::Allow)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

fn run(records: usize, fsync: bool) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("audit");
    let signer = CheckpointSigner::from_signing_key(SigningKey::from_bytes(&[1; 32]));
    let key = signer.verifying_key();
    let opts = AuditOptions {
        checkpoint_every: 256,
        fsync,
    };
    let mut log = AuditLog::open(&dir, signer, opts).expect("open");
    let mut latencies = Vec::with_capacity(records);
    let start = Instant::now();
    for i in 0..records {
        let t = Instant::now();
        log.append(event(i)).expect("append");
        latencies.push(t.elapsed());
    }
    let total = start.elapsed();
    log.close().expect("close");
    let verify_start = Instant::now();
    let report = verify(&dir, &key).expect("verify");
    let verify_time = verify_start.elapsed();
    latencies.sort();
    println!(
        "fsync={fsync:<5} records={records:<6} {:>9.0} records/s  p50={:>9.1?}  p99={:>9.1?}  max={:>9.1?}  verify={:.0} records/s (ok={})",
        records as f64 / total.as_secs_f64(),
        percentile(&latencies, 0.50),
        percentile(&latencies, 0.99),
        latencies.last().copied().unwrap_or_default(),
        report.records as f64 / verify_time.as_secs_f64(),
        report.is_ok(),
    );
}

fn main() {
    // `cargo bench` passes `--bench`; a bare number sets the record count.
    let records = std::env::args()
        .skip(1)
        .find_map(|a| a.parse::<usize>().ok())
        .unwrap_or(2000);
    println!(
        "audit append benchmark in {}",
        std::env::temp_dir().display()
    );
    run(records, false);
    run(records.min(2000), true);
}
