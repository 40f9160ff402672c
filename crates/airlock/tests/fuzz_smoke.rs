//! CI smoke run of every fuzz target, inside the main workspace's build (no second build):
//! each target's seeds, then mutated inputs for `FUZZ_SMOKE_SECS` seconds (default 30).
//! The libFuzzer binaries live in `crates/airlock-core/fuzz` and `crates/airlock/fuzz`.

#[path = "../fuzz/src/lib.rs"]
mod airlock_targets;
#[path = "../../airlock-core/fuzz/src/lib.rs"]
mod core_targets;
#[path = "../../airlock-core/fuzz/src/smoke_driver.rs"]
mod smoke_driver;

use std::path::Path;

fn root(rel: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

#[test]
fn shell_normalize_smoke() {
    let corpus = root("../../benches/corpus/commands.txt");
    let seeds = smoke_driver::seeds(
        &root("../airlock-core/fuzz/seeds"),
        "shell_normalize",
        Some(&corpus),
    );
    smoke_driver::smoke("shell_normalize", seeds, core_targets::shell_normalize);
}

#[test]
fn action_json_smoke() {
    let seeds = smoke_driver::seeds(&root("../airlock-core/fuzz/seeds"), "action_json", None);
    smoke_driver::smoke("action_json", seeds, core_targets::action_json);
}

#[test]
fn trace_parse_smoke() {
    let seeds = smoke_driver::seeds(&root("fuzz/seeds"), "trace_parse", None);
    smoke_driver::smoke("trace_parse", seeds, airlock_targets::trace_parse);
}
