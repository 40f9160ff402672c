//! `airlock-sandbox-init-weakened`: the sandbox helper with one confinement layer left out,
//! for tests only (`crates/airlock-sandbox/tests/suite/forced_shortfalls.rs`). Which layer
//! is read from `<this binary's path>.weakened.json`; without it the helper refuses to start.
//! The shipped helper is `airlock-sandbox-init`, built from `airlock-sandbox` without the
//! `airlock_weakened` cfg, and cannot leave anything out.
#![forbid(unsafe_code)]

fn main() {
    airlock_sandbox_weakened::init::main()
}
