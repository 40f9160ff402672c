//! Stable-toolchain smoke run of the fuzz targets (see `src/smoke_driver.rs`).

#[path = "../src/smoke_driver.rs"]
mod smoke_driver;

use std::path::Path;

fn seeds(target: &str) -> Vec<Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../benches/corpus/commands.txt");
    let extra = (target == "shell_normalize").then_some(corpus.as_path());
    smoke_driver::seeds(&root, target, extra)
}

#[test]
fn shell_normalize_smoke() {
    smoke_driver::smoke("shell_normalize", seeds("shell_normalize"), airlock_core_fuzz::shell_normalize);
}

#[test]
fn action_json_smoke() {
    smoke_driver::smoke("action_json", seeds("action_json"), airlock_core_fuzz::action_json);
}

#[test]
fn untrusted_text_smoke() {
    smoke_driver::smoke("untrusted_text", seeds("untrusted_text"), airlock_core_fuzz::untrusted_text);
}
