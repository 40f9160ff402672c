//! I2 with the workspace overlay: a run's writes land in its upper layer in the format
//! `airlock_sandbox::overlay` documents, the real workspace never changes, and the
//! attestation refuses a sandbox whose workspace is not that overlay.

use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use airlock_sandbox::attestation::{FileId, HostView, OverlayReport};
use airlock_sandbox::overlay::{is_whiteout, OPAQUE_XATTR};
use airlock_sandbox::{MountPlan, OutputMode, SandboxProfile, WorkspaceOverlay};

use crate::common::*;

/// Every entry below `dir`: kind, mode and contents (or link target), not following links.
pub fn snapshot(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let what = if meta.is_dir() {
                todo.push(path.clone());
                "dir".to_string()
            } else if meta.file_type().is_symlink() {
                format!("link -> {}", std::fs::read_link(&path).unwrap().display())
            } else if meta.is_file() {
                format!(
                    "file {:?}",
                    std::fs::read_to_string(&path).unwrap_or_default()
                )
            } else {
                format!("special {:o} rdev {}", meta.mode(), meta.rdev())
            };
            let rel = path.strip_prefix(dir).unwrap().to_path_buf();
            out.insert(rel, format!("{what} mode {:o}", meta.mode() & 0o7777));
        }
    }
    out
}

/// Hand everything below `dir` to the sandbox uid (a root host's sandbox runs as 65534).
fn give_to_sandbox(dir: &Path) {
    if !is_root() {
        return;
    }
    std::os::unix::fs::lchown(dir, Some(65534), Some(65534)).unwrap();
    for path in snapshot(dir).keys() {
        std::os::unix::fs::lchown(dir.join(path), Some(65534), Some(65534)).unwrap();
    }
}

/// The value of the extended attribute `name` of `path` itself.
fn xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    let p = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    let mut buf = vec![0u8; 256];
    // SAFETY: valid NUL-terminated strings and a buffer of the length passed.
    let len =
        unsafe { libc::lgetxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    (len >= 0).then(|| {
        buf.truncate(len as usize);
        buf
    })
}

/// A workspace holding `files` (path, contents) and a fresh overlay for one run on it.
fn workspace_with(files: &[(&str, &str)]) -> (Vec<tempfile::TempDir>, PathBuf, WorkspaceOverlay) {
    let (ws_dir, ws) = workspace();
    for (path, contents) in files {
        let path = ws.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, contents).unwrap();
    }
    give_to_sandbox(&ws);
    let runs = tempfile::Builder::new()
        .prefix("airlock-runs-")
        .tempdir_in("/tmp")
        .unwrap();
    let overlay =
        WorkspaceOverlay::create(&runs.path().join("runs"), "run-1", 65534, 65534).unwrap();
    (vec![ws_dir, runs], ws, overlay)
}

fn overlay_profile(ws: &Path, overlay: &WorkspaceOverlay) -> SandboxProfile {
    let mut p = SandboxProfile::new(ws);
    p.workspace_overlay = Some(overlay.clone());
    p
}

fn run_overlay(ws: &Path, overlay: &WorkspaceOverlay, command: &str) -> String {
    let out = run_in(ws, &overlay_profile(ws, overlay), command)
        .unwrap_or_else(|e| panic!("run failed: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status, 0, "{text}");
    text
}

fn assert_whiteout(path: &Path) {
    let meta = std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("no whiteout at {}: {e}", path.display()));
    assert!(
        meta.file_type().is_char_device() && is_whiteout(&meta),
        "{} is not a whiteout: {meta:?}",
        path.display()
    );
}

#[test]
fn i2_overlay_writes_deletes_and_renames_land_in_the_upper_layer_only() {
    let (_d, ws, o) = workspace_with(&[
        ("a", "hello\n"),
        ("keep", "k\n"),
        ("gone", "g\n"),
        ("d/sub/b", "b\n"),
        ("d2/c", "c\n"),
        ("f", "moved\n"),
    ]);
    let before = snapshot(&ws);
    let text = run_overlay(
        &ws,
        &o,
        "echo new > n && echo more >> a && rm gone && rm -rf d2 && mkdir d2 && echo y > d2/y \
         && chmod 600 keep && mv f f2 \
         && perl -e 'rename(\"d\", \"d4\") or print \"rename: $!\\n\"' && mv d d3 \
         && cat a d3/sub/b && ls -A",
    );
    // Inside, the run saw its own changes on top of the workspace.
    assert!(text.contains("hello\nmore\nb\n"), "{text}");
    assert!(text.contains("rename: Invalid cross-device link"), "{text}");
    // The real workspace is exactly as it was.
    assert_eq!(snapshot(&ws), before);
    // The upper layer holds the changes, in the documented format.
    let up = &o.upper;
    assert_eq!(std::fs::read_to_string(up.join("n")).unwrap(), "new\n");
    assert_eq!(
        std::fs::read_to_string(up.join("a")).unwrap(),
        "hello\nmore\n"
    );
    assert_whiteout(&up.join("gone"));
    assert_eq!(
        xattr(&up.join("d2"), OPAQUE_XATTR).as_deref(),
        Some(&b"y"[..])
    );
    assert_eq!(std::fs::read_to_string(up.join("d2/y")).unwrap(), "y\n");
    assert!(!up.join("d2/c").exists());
    let keep = std::fs::metadata(up.join("keep")).unwrap();
    assert_eq!(keep.mode() & 0o777, 0o600);
    assert_eq!(std::fs::read_to_string(up.join("keep")).unwrap(), "k\n");
    // A file renamed: whiteout at the old name, the whole file at the new one.
    assert_whiteout(&up.join("f"));
    assert_eq!(std::fs::read_to_string(up.join("f2")).unwrap(), "moved\n");
    // A directory of the workspace cannot be renamed (EXDEV): mv copied it.
    assert_whiteout(&up.join("d"));
    assert_eq!(std::fs::read_to_string(up.join("d3/sub/b")).unwrap(), "b\n");
    assert!(xattr(&up.join("d3"), OPAQUE_XATTR).is_none());
    // Untouched paths are not in the upper layer.
    assert!(!up.join("d4").exists());
    // Everything in it belongs to the sandbox uid.
    for (path, _) in snapshot(up) {
        let meta = std::fs::symlink_metadata(up.join(&path)).unwrap();
        assert_eq!(meta.uid(), sandbox_uid(), "{}", path.display());
    }
    o.remove().unwrap();
    assert!(!o.upper.exists() && !o.work.exists());
}

/// A root host's workspace is root's: its files show to the sandbox as the sandbox uid's
/// (an id-mapped lower layer), so a run can change and delete them, not only add files.
/// Files of any other owner stay unchangeable (overlayfs cannot copy them up).
#[test]
fn i2_overlay_root_owned_workspace_files_can_be_changed_and_deleted_by_a_root_hosts_run() {
    if !is_root() {
        eprintln!(
            "skipped: the id mapping is a root host's (an ordinary user's sandbox runs as itself)"
        );
        return;
    }
    let (_d, ws, o) = workspace_with(&[]);
    std::os::unix::fs::chown(&ws, Some(0), Some(0)).unwrap();
    for (name, text) in [
        ("a", "hello\n"),
        ("gone", "g\n"),
        ("src/lib.rs", "// lib\n"),
        ("theirs", "t\n"),
    ] {
        let p = ws.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
    }
    std::os::unix::fs::chown(ws.join("theirs"), Some(4242), Some(4242)).unwrap();
    let before = snapshot(&ws);
    let text = run_overlay(
        &ws,
        &o,
        "echo more >> a && rm gone && echo '// more' >> src/lib.rs && echo n > src/new \
         && stat -c '%u:%g' a && (echo x >> theirs 2>&1 || echo 'theirs refused')",
    );
    assert!(
        text.contains("65534:65534"),
        "root's files show as the sandbox's: {text}"
    );
    assert!(text.contains("theirs refused"), "{text}");
    assert_eq!(snapshot(&ws), before, "the workspace itself is untouched");
    let up = &o.upper;
    assert_eq!(
        std::fs::read_to_string(up.join("a")).unwrap(),
        "hello\nmore\n"
    );
    assert_whiteout(&up.join("gone"));
    assert_eq!(
        std::fs::read_to_string(up.join("src/lib.rs")).unwrap(),
        "// lib\n// more\n"
    );
    assert!(
        !up.join("theirs").exists(),
        "another owner's file was not copied up"
    );
    for (path, _) in snapshot(up) {
        let meta = std::fs::symlink_metadata(up.join(&path)).unwrap();
        assert_eq!(meta.uid(), 65534, "{}", path.display());
    }
    // The workspace's files are still root's.
    assert_eq!(std::fs::metadata(ws.join("a")).unwrap().uid(), 0);
    o.remove().unwrap();
}

#[test]
fn i2_overlay_rm_rf_everything_leaves_the_workspace_intact() {
    let (_d, ws, o) = workspace_with(&[
        ("src/main.rs", "fn main() {}\n"),
        ("README", "read me\n"),
        (".hidden", "h\n"),
        ("deep/a/b/c", "c\n"),
    ]);
    let before = snapshot(&ws);
    let text = run_overlay(&ws, &o, "rm -rf ./* ./.[!.]* && echo left=$(ls -A | wc -l)");
    assert!(text.contains("left=0"), "{text}");
    assert_eq!(snapshot(&ws), before, "the workspace changed");
    for top in ["src", "README", ".hidden", "deep"] {
        assert_whiteout(&o.upper.join(top));
    }
    o.remove().unwrap();
}

#[test]
fn i2_overlay_git_metadata_writes_land_in_the_upper_layer() {
    // An existing repository: its hooks and config are not bound read-only under the
    // overlay; a write to them lands in the upper layer for the commit decision to hold.
    let (_d, ws, o) = workspace_with(&[(".git/config", "[core]\n"), (".git/hooks/.keep", "")]);
    let before = snapshot(&ws);
    run_overlay(
        &ws,
        &o,
        "echo evil > .git/hooks/pre-commit && echo x >> .git/config && mkdir sub && cd sub && git init -q && echo hook > .git/hooks/post-checkout",
    );
    assert_eq!(snapshot(&ws), before);
    assert_eq!(
        std::fs::read_to_string(o.upper.join(".git/hooks/pre-commit")).unwrap(),
        "evil\n"
    );
    assert_eq!(
        std::fs::read_to_string(o.upper.join(".git/config")).unwrap(),
        "[core]\nx\n"
    );
    assert!(
        o.upper.join("sub/.git/HEAD").is_file(),
        "git init wrote nothing"
    );
    assert!(o.upper.join("sub/.git/hooks/post-checkout").is_file());
    // The plan says why nothing of .git is bound read-only.
    let text = airlock_sandbox::describe_profile(&overlay_profile(&ws, &o)).unwrap();
    assert!(
        text.contains("overlay") && text.contains(o.upper.to_str().unwrap()),
        "{text}"
    );
    assert!(text.contains("commit decision holds them"), "{text}");
    assert!(!text.contains(".git/hooks"), "{text}");
}

/// What the host knows of an overlay run, to check a real attestation again.
fn host_view(a: &airlock_sandbox::Attestation, ws: &Path, o: &WorkspaceOverlay) -> HostView {
    HostView {
        namespaces: a.host_namespaces.clone(),
        uid: sandbox_uid(),
        gid: a.gid.effective,
        landlock_abi: airlock_sandbox::host_support::usable_landlock_abi(),
        relay_socket: None,
        overlay: Some(OverlayReport {
            lower: FileId::of(ws).unwrap(),
            upper: FileId::of(&o.upper).unwrap(),
            work: FileId::of(&o.work).unwrap(),
        }),
        attached: None,
    }
}

#[test]
fn i2_overlay_attestation_refuses_a_missing_or_wrong_overlay() {
    let (_d, ws, o) = workspace_with(&[("a", "a\n")]);
    let profile = overlay_profile(&ws, &o);
    let prepared = sandbox()
        .prepare(&profile, "", OutputMode::Capture)
        .unwrap_or_else(|e| panic!("{e}"));
    let real = prepared.attestation().clone();
    drop(prepared);
    let plan = MountPlan::for_profile(&profile, &ws).unwrap();
    let host = host_view(&real, &ws, &o);
    // The real attestation passes the very check the launcher made.
    assert_eq!(real.verify(&profile, &plan, &host), vec![]);
    let refused = |a: &airlock_sandbox::Attestation, what: &str| {
        let found = a.verify(&profile, &plan, &host);
        assert!(
            found
                .iter()
                .any(|s| s.feature == "workspace overlay" && s.detail.contains(what)),
            "{what}: {found:?}"
        );
    };
    // The workspace mounted as something else than the overlay.
    let mut tampered = real.clone();
    let at_ws = tampered
        .mounts
        .iter()
        .rposition(|m| m.mount_point == ws)
        .unwrap();
    assert_eq!(tampered.mounts[at_ws].fs_type, "overlay");
    tampered.mounts[at_ws].fs_type = "ext4".into();
    refused(&tampered, "not the overlay");
    // An overlay on another upper layer.
    let mut tampered = real.clone();
    tampered.overlay.as_mut().unwrap().upper.ino ^= 1;
    refused(&tampered, "upper layer is inode");
    // A writable bind of the real workspace next to the overlay.
    let mut tampered = real.clone();
    let mut bind = tampered.mounts[at_ws].clone();
    bind.mount_point = "/tmp/ws".into();
    bind.fs_type = "ext4".into();
    bind.device = FileId::of(&ws).unwrap().device_text();
    tampered.mounts.push(bind);
    refused(&tampered, "writable mount of the workspace's file system");
    // A sandbox built without the overlay (today's read-write bind) does not pass for one.
    let (_d2, plain_ws) = workspace();
    let plain = run(&plain_ws, "true").attestation;
    let mut without = plain.clone();
    for m in &mut without.mounts {
        if m.mount_point == plain_ws {
            m.mount_point = ws.clone();
        }
    }
    refused(&without, "reports none");
    without.overlay = real.overlay;
    refused(&without, "not the overlay");
}

/// A run whose upper layer cannot be written is refused while the sandbox is built, with
/// the reason and a help line, and nothing reaches the workspace. (A read-only layers
/// mount in a private mount namespace stands in for a file system overlayfs cannot use.)
#[test]
fn i2_overlay_that_cannot_be_mounted_refuses_the_run_and_never_writes_through() {
    if !is_root() {
        eprintln!("skipped: needs root to make a read-only bind in a private mount namespace (CI runs as root)");
        return;
    }
    let (_d, ws, o) = workspace_with(&[("a", "a\n")]);
    let before = snapshot(&ws);
    let layers = o.upper.parent().unwrap();
    let runner = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples/sandbox-run");
    let profile = serde_json::to_string(&overlay_profile(&ws, &o)).unwrap();
    let out = std::process::Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c"])
        .arg(r#"mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@""#)
        .arg("sh")
        .arg(layers)
        .arg(&runner)
        .arg("--init")
        .arg(env!("CARGO_BIN_EXE_airlock-sandbox-init"))
        .arg("--profile")
        .arg(&profile)
        .arg("--capture")
        .arg(&ws)
        .arg("--")
        .arg("echo through > a; echo ran > b")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(70), "{stderr}");
    assert!(
        stderr.contains("workspace overlay") && stderr.contains("help:"),
        "{stderr}"
    );
    assert!(stderr.contains("overlayfs"), "{stderr}");
    assert_eq!(
        snapshot(&ws),
        before,
        "the run wrote through to the workspace"
    );
    assert_eq!(snapshot(&o.upper).len(), 0);
    // The same profile runs once the layers are writable.
    let text = run_overlay(&ws, &o, "echo ok > b");
    assert!(text.is_empty(), "{text}");
    assert!(o.upper.join("b").exists());
}
