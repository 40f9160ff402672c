//! Compile this package's copy of the airlock-sandbox sources with `cfg(airlock_weakened)`,
//! which adds the code that leaves one confinement layer out. `cargo:rustc-cfg` from a
//! build script applies to this package's targets only, never to `airlock-sandbox` itself
//! (which the shipped `airlock-sandbox-init` is built from).

fn main() {
    println!("cargo::rustc-check-cfg=cfg(airlock_weakened)");
    println!("cargo:rustc-cfg=airlock_weakened");
}
