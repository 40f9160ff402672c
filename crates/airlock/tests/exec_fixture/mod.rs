//! Shared set-up for tests that run the real `airlock` binary with the real sandbox: the
//! binary (with its helpers next to it), and a home plus a workspace the sandbox uid can use.

use std::path::PathBuf;

/// The `airlock` binary under test; fails clearly when its sandbox helper was not built.
pub fn airlock_bin() -> PathBuf {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_airlock"));
    let init = bin.with_file_name("airlock-sandbox-init");
    assert!(
        init.exists(),
        "{} is missing: build the workspace's binaries first (cargo build --workspace --bins)",
        init.display()
    );
    bin
}

/// A temporary `AIRLOCK_HOME` and workspace.
pub struct Fixture {
    pub _tmp: tempfile::TempDir,
    pub home: PathBuf,
    pub ws: PathBuf,
}

pub fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    // When the tests run as root the sandbox runs as 65534, which must be able to enter
    // and write the workspace.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&ws, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    Fixture {
        _tmp: tmp,
        home,
        ws,
    }
}
