//! Locating the shared evaluation data (`../shared/eval` beside the repository).

use std::path::PathBuf;

/// Path of an eval data file. Fails the test with a clear message when the data set is
/// missing: a security test must never pass by skipping.
pub fn eval_file(rel: &str) -> PathBuf {
    let base = std::env::var_os("AIRLOCK_EVAL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/eval"));
    let p = base.join(rel);
    assert!(
        p.exists(),
        "evaluation data {} not found; the repository expects ../shared/eval beside it (or set AIRLOCK_EVAL_DIR)",
        p.display()
    );
    p
}
