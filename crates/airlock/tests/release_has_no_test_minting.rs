//! `Authorized` tokens can be minted without a Gate only through airlock-core's `testing`
//! feature, which exists for executor crates' own tests. The shipped binary must never
//! enable it: resolve the binary's normal (non-dev) dependency features and check.

#[test]
fn the_airlock_binary_does_not_enable_test_minting() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let o = std::process::Command::new(cargo)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "tree",
            "--offline",
            "-p",
            "airlock",
            "-e",
            "features,normal",
            "-i",
            "airlock-core",
            "--prefix",
            "none",
        ])
        .output()
        .expect("cargo tree runs");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.contains("airlock-core"),
        "unexpected cargo tree output: {out}"
    );
    assert!(
        !out.contains("feature \"testing\""),
        "the airlock binary enables airlock-core/testing, which lets code mint Authorized tokens without the Gate:\n{out}"
    );
}

/// The test-only helper that leaves a confinement layer out (`airlock-sandbox-weakened`)
/// is no dependency of the shipped binary, in any role: the shipped helper is built from
/// `airlock-sandbox` alone.
#[test]
fn the_airlock_binary_does_not_depend_on_the_weakened_helper() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let o = std::process::Command::new(cargo)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "tree",
            "--offline",
            "-p",
            "airlock",
            "-e",
            "normal,build",
            "--prefix",
            "none",
        ])
        .output()
        .expect("cargo tree runs");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.lines().any(|l| l.starts_with("airlock-sandbox v")),
        "unexpected cargo tree output: {out}"
    );
    assert!(
        !out.contains("airlock-sandbox-weakened"),
        "the airlock binary depends on the test-only weakened helper:\n{out}"
    );
}
