//! Invariant I2 for the sandbox helper itself: Airlock starts only the
//! `airlock-sandbox-init` that was installed. A helper elsewhere, one whose bytes differ
//! from the pinned hash, and one that someone else could write are refused before any
//! sandbox starts; pinning a new one is an explicit command that the audit log records.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use super::{assert_no_panic, text};

struct Home {
    tmp: tempfile::TempDir,
    ws: PathBuf,
}

fn installed_helper() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_airlock")).with_file_name("airlock-sandbox-init")
}

impl Home {
    fn new() -> Home {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&ws, std::fs::Permissions::from_mode(0o777)).unwrap();
        let h = Home { tmp, ws };
        let o = h.run(&["init"], None);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        assert!(h.pin().contains("sha256"), "init pinned nothing");
        h
    }

    fn path(&self) -> &Path {
        self.tmp.path()
    }

    fn pin(&self) -> String {
        std::fs::read_to_string(self.path().join("config/sandbox-helper.pin")).unwrap()
    }

    fn run(&self, args: &[&str], init_env: Option<&Path>) -> Output {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_airlock"));
        cmd.env("AIRLOCK_HOME", self.path())
            .env_remove("AIRLOCK_SANDBOX_INIT")
            .args(args)
            .stdin(std::process::Stdio::null());
        if let Some(p) = init_env {
            cmd.env("AIRLOCK_SANDBOX_INIT", p);
        }
        let o = cmd.output().unwrap();
        assert_no_panic(&o);
        o
    }

    fn exec_marker(&self, init_env: Option<&Path>) -> Output {
        let ws = self.ws.to_str().unwrap();
        self.run(&["exec", "--workspace", ws, "--", "touch ran"], init_env)
    }

    fn ran(&self) -> bool {
        self.ws.join("ran").exists()
    }

    /// `[sandbox] helper = PATH` in airlock.toml.
    fn configure_helper(&self, helper: &Path) {
        let cfg = self.path().join("config/airlock.toml");
        let text = std::fs::read_to_string(&cfg).unwrap().replace(
            "[sandbox]\n",
            &format!("[sandbox]\nhelper = \"{}\"\n", helper.display()),
        );
        std::fs::write(&cfg, text).unwrap();
    }

    /// A copy of the installed helper in a private directory, with `mode`.
    fn copy_helper(&self, name: &str, mode: u32) -> PathBuf {
        let dir = self.path().join(format!("helpers-{name}"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let p = dir.join("airlock-sandbox-init");
        std::fs::copy(installed_helper(), &p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }
}

fn flip_last_byte(p: &Path) {
    let mut bytes = std::fs::read(p).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::write(p, bytes).unwrap();
}

#[test]
fn i2_the_pinned_helper_runs_and_an_identical_copy_at_the_configured_path_too() {
    let h = Home::new();
    let o = h.exec_marker(None);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(h.ran());
    std::fs::remove_file(h.ws.join("ran")).unwrap();
    // The same bytes, installed elsewhere and named in the config: accepted.
    let copy = h.copy_helper("same", 0o755);
    h.configure_helper(&copy);
    let o = h.exec_marker(Some(&copy));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(h.ran());
}

#[test]
fn i2_a_helper_with_one_byte_changed_is_refused() {
    let h = Home::new();
    let copy = h.copy_helper("changed", 0o755);
    flip_last_byte(&copy);

    // Named only by the environment, it is not where a helper may be.
    let o = h.exec_marker(Some(&copy));
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("neither beside airlock nor at helper under [sandbox]")
            && text(&o).contains("help: "),
        "{}",
        text(&o)
    );
    assert!(!h.ran());

    // Named by the config, its hash is not the pinned one.
    h.configure_helper(&copy);
    for env in [None, Some(copy.as_path())] {
        let o = h.exec_marker(env);
        assert_ne!(o.status.code(), Some(0), "{}", text(&o));
        assert!(
            text(&o).contains("is not the helper that was installed")
                && text(&o).contains("airlock sandbox pin-helper"),
            "{}",
            text(&o)
        );
        assert!(!h.ran(), "the changed helper ran");
    }

    // The pinned helper itself, changed in place after pinning, is refused the same way,
    // even with its size and modification time put back: the pin remembers the file's
    // identity so runs need not re-read it, and only the change time (which no write can
    // keep) tells the bytes changed.
    let h2 = Home::new();
    let beside = h2.copy_helper("inplace", 0o755);
    h2.configure_helper(&beside);
    let o = h2.run(&["sandbox", "pin-helper"], None);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = h2.exec_marker(None);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let modified = std::fs::metadata(&beside).unwrap().modified().unwrap();
    flip_last_byte(&beside);
    std::fs::File::options()
        .write(true)
        .open(&beside)
        .unwrap()
        .set_modified(modified)
        .unwrap();
    std::fs::remove_file(h2.ws.join("ran")).unwrap();
    let o = h2.exec_marker(None);
    assert!(
        text(&o).contains("is not the helper that was installed"),
        "{}",
        text(&o)
    );
    assert!(!h2.ran());
}

#[test]
fn i2_a_helper_others_could_write_is_refused() {
    let h = Home::new();
    // Each is byte-identical to the pinned helper: only who could change it differs.
    for (name, mode) in [
        ("group-writable", 0o775),
        ("world-writable", 0o757),
        ("setuid", 0o4755),
    ] {
        let copy = h.copy_helper(name, mode);
        h.configure_helper(&copy);
        let o = h.exec_marker(None);
        assert_ne!(o.status.code(), Some(0), "{name}: {}", text(&o));
        assert!(
            text(&o).contains("no one else can write") && text(&o).contains("help: "),
            "{name}: {}",
            text(&o)
        );
        assert!(!h.ran(), "{name}: it ran");
        // Reset the config for the next case.
        let cfg = h.path().join("config/airlock.toml");
        let t = std::fs::read_to_string(&cfg).unwrap();
        let t = t.replace(&format!("helper = \"{}\"\n", copy.display()), "");
        std::fs::write(&cfg, t).unwrap();
    }
    // Owned by another user (not root, not the one airlock runs as).
    let copy = h.copy_helper("other-owner", 0o755);
    std::os::unix::fs::chown(&copy, Some(4242), Some(4242)).unwrap();
    h.configure_helper(&copy);
    let o = h.exec_marker(None);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("owned by uid 4242"), "{}", text(&o));
    assert!(!h.ran());
}

#[test]
fn i2_re_pinning_the_helper_leaves_an_audit_record() {
    let h = Home::new();
    let before = h.pin();
    let copy = h.copy_helper("new", 0o755);
    flip_last_byte(&copy);
    h.configure_helper(&copy);
    let o = h.run(&["sandbox", "pin-helper"], None);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let after = h.pin();
    assert_ne!(before, after);

    let log = std::fs::read_to_string(h.path().join("state/audit/log.jsonl")).unwrap();
    let rec: serde_json::Value = log
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|r| r["kind"] == "sandbox-helper-pinned")
        .unwrap_or_else(|| panic!("no pin record in {log}"));
    let old: serde_json::Value = serde_json::from_str(&before).unwrap();
    let new: serde_json::Value = serde_json::from_str(&after).unwrap();
    assert_eq!(rec["detail"]["previous"]["sha256"], old["sha256"], "{rec}");
    assert_eq!(rec["detail"]["sha256"], new["sha256"], "{rec}");
    assert_eq!(rec["detail"]["path"], copy.display().to_string(), "{rec}");
    let o = h.run(&["audit", "verify"], None);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// The same checks when airlock runs unprivileged (uid 65534 through `setpriv`): the
/// environment cannot point it at another binary, a helper the operator owns runs only
/// with the pinned bytes, and an identical one the operator owns is accepted.
#[test]
fn i2_an_unprivileged_airlock_runs_only_the_pinned_helper() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (home, ws) = (tmp.path().join("home"), tmp.path().join("ws"));
    std::fs::create_dir(&ws).unwrap();
    let own = |p: &Path| std::os::unix::fs::chown(p, Some(65534), Some(65534)).unwrap();
    own(&ws);
    own(tmp.path());
    let helper = |name: &str, change: bool| {
        let p = tmp.path().join(name);
        std::fs::copy(installed_helper(), &p).unwrap();
        if change {
            flip_last_byte(&p);
        }
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        own(&p);
        p
    };
    let (same, changed) = (helper("same-init", false), helper("changed-init", true));
    let airlock = |args: &[&str], init_env: Option<&Path>| {
        let mut cmd = std::process::Command::new("setpriv");
        cmd.args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_airlock"))
            .args(args)
            .env("AIRLOCK_HOME", &home)
            .env_remove("AIRLOCK_SANDBOX_INIT")
            .stdin(std::process::Stdio::null());
        if let Some(p) = init_env {
            cmd.env("AIRLOCK_SANDBOX_INIT", p);
        }
        let o = cmd.output().unwrap();
        assert_no_panic(&o);
        o
    };
    let o = airlock(&["init"], None);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let ws_arg = ws.to_str().unwrap();
    let exec = |init_env: Option<&Path>| {
        airlock(
            &["exec", "--workspace", ws_arg, "--", "touch ran"],
            init_env,
        )
    };

    let o = exec(Some(&changed));
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("neither beside airlock"), "{}", text(&o));
    assert!(!ws.join("ran").exists());

    let cfg = home.join("config/airlock.toml");
    let set_helper = |p: &Path| {
        let t = std::fs::read_to_string(&cfg).unwrap();
        let t = t
            .lines()
            .filter(|l| !l.starts_with("helper = "))
            .collect::<Vec<_>>()
            .join("\n")
            .replace(
                "[sandbox]\n",
                &format!("[sandbox]\nhelper = \"{}\"\n", p.display()),
            );
        std::fs::write(&cfg, t + "\n").unwrap();
    };
    set_helper(&changed);
    let o = exec(None);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("is not the helper that was installed"),
        "{}",
        text(&o)
    );
    assert!(!ws.join("ran").exists());

    set_helper(&same);
    let o = exec(Some(&same));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(ws.join("ran").exists());
}
