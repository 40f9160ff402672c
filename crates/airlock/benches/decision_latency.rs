//! Decision latency of the Gate: parse, normalize and evaluate one `exec` action, over a
//! corpus of real-world commands (`benches/corpus/commands.txt`), for both profiles.
//! Prints p50, p99 and max, and the ratio of p99 to the 1 ms target. Never asserts.

use std::time::{Duration, Instant};

use airlock_core::action::{Action, ExecAction};
use airlock_core::facts::GateConfig;
use airlock_core::gate::{Gate, Session};
use airlock_core::policy::{PolicyEngine, Profile};

const PASSES: usize = 5;
const TARGET_P99: Duration = Duration::from_millis(1);

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

fn main() {
    let corpus_path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../benches/corpus/commands.txt");
    let corpus = match std::fs::read_to_string(&corpus_path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cannot read {}: {e}", corpus_path.display());
            std::process::exit(1);
        }
    };
    let commands: Vec<String> = corpus
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.replace("\\n", "\n"))
        .collect();
    println!(
        "decision latency over {} commands x {PASSES} passes",
        commands.len()
    );
    println!(
        "{:<9} {:>10} {:>10} {:>10} {:>14} {:>22}",
        "profile", "p50", "p99", "max", "p99/target", "allow/ask/deny"
    );
    for profile in Profile::all() {
        let gate = Gate::new(
            PolicyEngine::builtin(profile).expect("built-in policy"),
            GateConfig::new("/work/ws"),
        );
        let session = Session::new("bench", "owner");
        let mut times = Vec::with_capacity(commands.len() * PASSES);
        let mut counts = [0usize; 3];
        for pass in 0..PASSES {
            for c in &commands {
                let action = Action::Exec(ExecAction {
                    command: c.clone(),
                    cwd: "/work/ws".into(),
                    env: vec![],
                });
                let t0 = Instant::now();
                let e = gate.evaluate(&session, &action);
                times.push(t0.elapsed());
                if pass == 0 {
                    counts[e.decision as usize] += 1;
                }
            }
        }
        times.sort_unstable();
        let p50 = percentile(&times, 0.50);
        let p99 = percentile(&times, 0.99);
        let max = *times.last().unwrap_or(&Duration::ZERO);
        println!(
            "{:<9} {:>10.3?} {:>10.3?} {:>10.3?} {:>13.2}x {:>22}",
            profile.name(),
            p50,
            p99,
            max,
            p99.as_secs_f64() / TARGET_P99.as_secs_f64(),
            format!("{}/{}/{}", counts[0], counts[1], counts[2])
        );
    }
}
