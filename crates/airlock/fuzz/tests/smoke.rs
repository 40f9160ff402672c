//! Stable-toolchain smoke run of the trace parser target.

#[path = "../../../airlock-core/fuzz/src/smoke_driver.rs"]
mod smoke_driver;

#[test]
fn trace_parse_smoke() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    smoke_driver::smoke("trace_parse", smoke_driver::seeds(&root, "trace_parse", None), airlock_fuzz::trace_parse);
}
