//! The stable-toolchain fuzz smoke driver, shared (by `#[path]`) by this crate's
//! `tests/smoke.rs` and the main workspace's `crates/airlock/tests/fuzz_smoke.rs`, which is
//! how CI runs it without a second build. Every seed runs, then random mutations for a
//! bounded time (`FUZZ_SMOKE_SECS` per target, default 30).

use std::path::Path;
use std::time::{Duration, Instant};

/// xorshift64*: a small deterministic generator, so a failure can be replayed from the
/// printed seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Seeds of `target` under `seed_root`, plus the lines of `extra_corpus` if given.
pub fn seeds(seed_root: &Path, target: &str, extra_corpus: Option<&Path>) -> Vec<Vec<u8>> {
    let dir = seed_root.join(target);
    let mut out: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("seed directory {} is missing: {e}", dir.display()))
        .map(|entry| std::fs::read(entry.expect("seed entry").path()).expect("seed file"))
        .collect();
    if let Some(corpus) = extra_corpus {
        if let Ok(text) = std::fs::read_to_string(corpus) {
            out.extend(text.lines().map(|l| l.replace("\\n", "\n").into_bytes()));
        }
    }
    assert!(!out.is_empty(), "no seeds for {target}");
    out
}

pub fn budget() -> Duration {
    let secs = std::env::var("FUZZ_SMOKE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    Duration::from_secs(secs)
}

/// Mutate a seed: byte flips, insertions of shell-significant bytes, splices, truncation.
fn mutate(rng: &mut Rng, seed: &[u8], other: &[u8]) -> Vec<u8> {
    const SPECIAL: &[u8] = b"'\"`$(){}[];&|<>\\\n#*?~=- \t!%@";
    let mut data = seed.to_vec();
    for _ in 0..=rng.below(4) {
        match rng.below(5) {
            0 if !data.is_empty() => {
                let i = rng.below(data.len());
                data[i] = SPECIAL[rng.below(SPECIAL.len())];
            }
            1 => {
                let i = rng.below(data.len() + 1);
                data.insert(i, SPECIAL[rng.below(SPECIAL.len())]);
            }
            2 if !other.is_empty() => {
                let i = rng.below(data.len() + 1);
                let j = rng.below(other.len());
                data.splice(i..i, other[j..].iter().copied().take(64));
            }
            3 if !data.is_empty() => data.truncate(rng.below(data.len())),
            _ => {
                let i = rng.below(data.len() + 1);
                data.insert(i, (rng.next() & 0xff) as u8);
            }
        }
    }
    data
}

/// Run `body` on every seed, then on mutated inputs until the time budget is spent.
pub fn smoke(target: &str, seeds: Vec<Vec<u8>>, body: fn(&[u8])) {
    for seed in &seeds {
        body(seed);
    }
    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | 1;
    println!("{target}: random seed {start}");
    let mut rng = Rng(start);
    let deadline = Instant::now() + budget();
    let mut runs = 0u64;
    while Instant::now() < deadline {
        let a = &seeds[rng.below(seeds.len())];
        let b = &seeds[rng.below(seeds.len())];
        let input = mutate(&mut rng, a, b);
        body(&input);
        runs += 1;
    }
    println!("{target}: {} seeds, {runs} mutated inputs", seeds.len());
    assert!(runs > 0, "the time budget allowed no runs");
}
