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
    // Resource limits are stated from what the probe run had applied, and the doctor
    // never calls a run fully confined when a resource is unbounded.
    assert!(!out.contains("full confinement"), "{out}");
    assert!(
        out.contains("== resource limits (as applied to the probe run)"),
        "{out}"
    );
    for resource in ["memory:", "processes:", "CPU:", "open files:", "disk:"] {
        assert!(out.contains(resource), "{resource} missing:\n{out}");
    }
    let verdict = out
        .lines()
        .find(|l| l.starts_with("resource limits: "))
        .unwrap_or_else(|| panic!("no resource verdict:\n{out}"));
    assert!(verdict.contains("disk in the workspace"), "{verdict}");
    if out.contains("cgroup:      NOT applied") {
        assert!(
            out.contains("memory:      NOT BOUNDED for the run"),
            "{out}"
        );
        assert!(verdict.contains("memory, CPU share"), "{verdict}");
    } else {
        assert!(out.contains("cgroup:      applied"), "{out}");
        assert!(out.contains("for the whole run"), "{out}");
    }
    // The probe run is in the audit log, and the chain verifies.
    let v = Command::new(&bin)
        .env("AIRLOCK_HOME", home.path())
        .args(["audit", "verify"])
        .output()
        .unwrap();
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
}
