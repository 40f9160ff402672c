//! `airlock doctor` runs the escape probes inside a real sandbox, decided and audited like
//! any other command, and every probe must fail to escape for the right reason.

use std::process::Command;

#[test]
fn doctor_runs_every_probe_and_all_pass() {
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_airlock"));
    for helper in ["airlock-sandbox-init", "airlock-probes"] {
        assert!(
            bin.with_file_name(helper).exists(),
            "{helper} is missing next to {}: build the workspace's binaries first (cargo build --workspace --bins)",
            bin.display()
        );
    }
    let home = tempfile::tempdir().unwrap();
    let o = Command::new(&bin)
        .env("AIRLOCK_HOME", home.path())
        .arg("doctor")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let passed = out.lines().filter(|l| l.starts_with("  pass ")).count();
    assert!(passed >= 40, "only {passed} probes passed:\n{out}");
    assert!(!out.lines().any(|l| l.starts_with("  FAIL")), "{out}");
    assert!(
        out.contains("user namespaces") && out.contains("landlock"),
        "host support table missing"
    );
    // The probe run is in the audit log, and the chain verifies.
    let v = Command::new(&bin)
        .env("AIRLOCK_HOME", home.path())
        .args(["audit", "verify"])
        .output()
        .unwrap();
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
}
