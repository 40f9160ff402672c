//! CI smoke run of the binary's fuzz targets, inside the main workspace's build (no second build):
//! each target's seeds, then mutated inputs for `FUZZ_SMOKE_SECS` seconds (default 30).
//! The libFuzzer binaries live in `crates/airlock-core/fuzz` and `crates/airlock/fuzz`.
//! `scripts/fuzz-ci` runs the airlock-core targets coverage-guided; the decoders of the
//! files the CLI reads (in `crates/airlock/fuzz`) need an instrumented build of the whole
//! binary, too slow for CI, so this smoke run is what CI gives them.

#[path = "../fuzz/src/lib.rs"]
mod airlock_targets;
#[path = "../../airlock-core/fuzz/src/smoke_driver.rs"]
mod smoke_driver;

use std::path::Path;

fn root(rel: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

#[test]
fn trace_parse_smoke() {
    let seeds = smoke_driver::seeds(&root("fuzz/seeds"), "trace_parse", None);
    smoke_driver::smoke("trace_parse", seeds, airlock_targets::trace_parse);
}

#[test]
fn config_file_smoke() {
    let seeds = smoke_driver::seeds(&root("fuzz/seeds"), "config_file", None);
    smoke_driver::smoke("config_file", seeds, airlock_targets::config_file);
}

#[test]
fn net_rules_smoke() {
    let seeds = smoke_driver::seeds(&root("fuzz/seeds"), "net_rules", None);
    smoke_driver::smoke("net_rules", seeds, airlock_targets::net_rules);
}

#[test]
fn secrets_file_smoke() {
    let seeds = smoke_driver::seeds(&root("fuzz/seeds"), "secrets_file", None);
    smoke_driver::smoke("secrets_file", seeds, airlock_targets::secrets_file);
}

#[test]
fn helper_pin_smoke() {
    let seeds = smoke_driver::seeds(&root("fuzz/seeds"), "helper_pin", None);
    smoke_driver::smoke("helper_pin", seeds, airlock_targets::helper_pin);
}

#[test]
fn audit_files_smoke() {
    let seeds = smoke_driver::seeds(&root("fuzz/seeds"), "audit_files", None);
    smoke_driver::smoke("audit_files", seeds, airlock_targets::audit_files);
}
