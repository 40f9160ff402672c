//! How long computing an empty change set takes (the overlay's cost for a run that writes
//! nothing): `cargo run -p airlock-workspace --example change_set_latency --release [DIR]`.
//! Prints the median of 1,000 computations over DIR (default: a fresh directory with 1,000
//! files) and an empty upper layer.

use std::time::Instant;

use airlock_workspace::{ChangeSet, ChangeSetOptions};

fn main() {
    let tmp = std::env::temp_dir().join(format!("airlock-cs-latency-{}", std::process::id()));
    let upper = tmp.join("upper");
    std::fs::create_dir_all(&upper).expect("create upper");
    let ws = match std::env::args().nth(1) {
        Some(dir) => std::path::PathBuf::from(dir),
        None => {
            let ws = tmp.join("ws");
            std::fs::create_dir_all(&ws).expect("create workspace");
            for i in 0..1000 {
                std::fs::write(ws.join(format!("f{i}")), b"x").expect("write");
            }
            ws
        }
    };
    let opts = ChangeSetOptions::default();
    let mut times = Vec::with_capacity(1000);
    for _ in 0..1000 {
        let t = Instant::now();
        let cs = ChangeSet::compute(&ws, &upper, &opts).expect("compute");
        times.push(t.elapsed());
        assert!(cs.is_empty());
    }
    times.sort();
    println!(
        "empty change set: median {:?}, p99 {:?}",
        times[times.len() / 2],
        times[times.len() * 99 / 100]
    );
    let _ = std::fs::remove_dir_all(&tmp);
}
