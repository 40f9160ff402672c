//! I2 for the `/etc` files the sandbox gets as copies in its read-only root rather than as
//! binds: they hold the host's bytes (symlinks resolved in the host root), the payload
//! cannot change them, and no mount exists at their paths while the binds still do.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use airlock_sandbox::attestation::parse_mountinfo;
use airlock_sandbox::mount_plan::MountStep;
use airlock_sandbox::{MountPlan, SandboxProfile};

/// The targets this host's plan copies, keeping those every uid may read (the host test
/// process may be root; the sandbox uid reads only world-readable files for sure).
fn world_readable_copies(ws: &Path) -> Vec<PathBuf> {
    let plan = MountPlan::for_profile(&SandboxProfile::new(ws), ws).unwrap();
    let copies: Vec<PathBuf> = plan
        .steps
        .iter()
        .filter(|s| matches!(s, MountStep::Copy { .. }))
        .map(|s| s.target())
        .filter(|t| {
            std::fs::metadata(t)
                .map(|m| m.permissions().mode() & 0o004 != 0)
                .unwrap_or(false)
        })
        .collect();
    assert!(
        copies.iter().any(|c| c == Path::new("/etc/passwd")),
        "this host's /etc/passwd should be a copy: {copies:?}"
    );
    copies
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn copies_hold_the_hosts_bytes_even_through_host_symlinks() {
    let (_d, ws) = common::workspace();
    let copies = world_readable_copies(&ws);
    let names: Vec<String> = copies.iter().map(|c| c.display().to_string()).collect();
    // sha256sum follows a host symlink such as /etc/localtime -> /usr/share/zoneinfo/...
    // on the host; inside, the copy must hold the bytes of the same target.
    let host = Command::new("sha256sum").args(&names).output().unwrap();
    assert!(host.status.success(), "{}", text(&host.stderr));
    let inside = common::run(&ws, &format!("sha256sum {}", names.join(" ")));
    assert_eq!(inside.status, 0, "{}", text(&inside.stderr));
    assert_eq!(text(&inside.stdout), text(&host.stdout));

    // Inside they are plain read-only files, never links back into the host's layout.
    let linked: Vec<&String> = names
        .iter()
        .filter(|n| {
            std::fs::symlink_metadata(n)
                .map(|m| m.file_type().is_symlink())
                .unwrap_or(false)
        })
        .collect();
    let stat = common::run(&ws, &format!("stat -c '%n %a %F' {}", names.join(" ")));
    assert_eq!(stat.status, 0, "{}", text(&stat.stderr));
    for (name, line) in names.iter().zip(text(&stat.stdout).lines()) {
        assert_eq!(line, format!("{name} 444 regular file"));
    }
    if std::fs::symlink_metadata("/etc/localtime").is_ok_and(|m| m.file_type().is_symlink()) {
        assert!(linked.iter().any(|n| *n == "/etc/localtime"), "{names:?}");
    }
}

#[test]
fn the_payload_cannot_change_a_copy() {
    let (_d, ws) = common::workspace();
    assert!(
        Path::new("/usr/bin/python3").exists(),
        "the test needs python3"
    );
    let script = r#"
import errno, os
def attempt(name, f):
    try:
        f()
        print(name, "SUCCEEDED")
    except OSError as e:
        print(name, errno.errorcode[e.errno])
attempt("open-write", lambda: os.open("/etc/passwd", os.O_WRONLY | os.O_APPEND))
attempt("chmod", lambda: os.chmod("/etc/passwd", 0o666))
attempt("unlink", lambda: os.unlink("/etc/passwd"))
attempt("rename", lambda: os.rename("/etc/hosts", "/etc/passwd"))
attempt("create", lambda: os.open("/etc/passwd.new", os.O_WRONLY | os.O_CREAT, 0o644))
attempt("utime", lambda: os.utime("/etc/passwd", (0, 0)))
"#;
    std::fs::write(ws.join("attack.py"), script).unwrap();
    std::fs::set_permissions(ws.join("attack.py"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = common::run(&ws, "python3 attack.py");
    let stdout = text(&out.stdout);
    assert_eq!(out.status, 0, "{stdout}\n{}", text(&out.stderr));
    // Mode 0444 answers the open for writing before the read-only mount does; the
    // operations that do not depend on the mode meet the read-only root.
    let expected =
        "open-write EACCES\nchmod EROFS\nunlink EROFS\nrename EROFS\ncreate EROFS\nutime EROFS\n";
    assert_eq!(stdout, expected);
}

#[test]
fn copied_paths_are_not_mounts_and_binds_still_are() {
    let (_d, ws) = common::workspace();
    let out = common::run(&ws, "cat /proc/self/mountinfo");
    assert_eq!(out.status, 0, "{}", text(&out.stderr));
    let inside = parse_mountinfo(&text(&out.stdout));
    // The attestation the host verified carries the same view.
    let attested = &out.attestation.mounts;
    for mounts in [&inside, attested] {
        let at = |p: &str| mounts.iter().any(|m| m.mount_point == Path::new(p));
        assert!(!at("/etc/passwd"), "{mounts:#?}");
        assert!(!at("/etc/hosts"), "{mounts:#?}");
        assert!(at("/usr"), "{mounts:#?}");
        if Path::new("/etc/ssl").is_dir() {
            assert!(at("/etc/ssl"), "directories stay binds: {mounts:#?}");
        }
    }
    for copy in world_readable_copies(&ws) {
        assert!(
            !inside.iter().any(|m| m.mount_point == copy),
            "{} is mounted",
            copy.display()
        );
    }
}
