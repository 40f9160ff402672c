//! I1 end to end: `airlock exec`, the egress proxy and `airlock run` on an audit log that
//! cannot take another record. Each test first does the same thing on a healthy log and
//! sees it run and send (a marker file appears, the loopback collector counts a
//! request), then breaks the log and sees nothing run, nothing leave, and the operator
//! told: a failing exit status and a message that names the audit log and says what to do.
//!
//! The ways a log breaks, each one that stops root too:
//! - the log file is a directory (a path that makes every append fail);
//! - the audit directory is read-only (a read-only bind mount in a private mount namespace);
//! - the disk is full (a small tmpfs over the audit directory, filled to the last page, in a
//!   private mount namespace; the records tried are longer than a page, so none fits in
//!   the slack of the log's last page);
//! - the chain is broken at its tail (the last record's hash, or its content, no longer
//!   what the last signed checkpoint covers).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::exec_fixture::airlock_bin;
use crate::loopback_collector::Collector;

mod exec;
mod proxy;
mod run;

/// A home with an initialised config, a collector on loopback, and the operator's rules
/// that let the proxy reach it (so that only the broken log can stop a request).
pub struct Home {
    _tmp: tempfile::TempDir,
    pub home: PathBuf,
    pub ws: PathBuf,
    pub collector: Collector,
}

impl Home {
    pub fn new() -> Home {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        // As root the sandbox runs as 65534, which must reach and write the workspace.
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&ws, std::fs::Permissions::from_mode(0o777)).unwrap();
        let collector = Collector::start();
        let h = Home {
            _tmp: tmp,
            home,
            ws,
            collector,
        };
        let target = format!("127.0.0.1:{}", h.collector.port);
        for args in [
            &["init"][..],
            &["net", "allow", &target, "--methods", "GET"][..],
            &["net", "allow-private", &target][..],
        ] {
            let o = h.airlock(args);
            assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o));
        }
        h
    }

    pub fn airlock(&self, args: &[&str]) -> Output {
        Command::new(airlock_bin())
            .env("AIRLOCK_HOME", &self.home)
            .current_dir(&self.ws)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    pub fn audit_dir(&self) -> PathBuf {
        self.home.join("state/audit")
    }

    pub fn log(&self) -> PathBuf {
        self.audit_dir().join("log.jsonl")
    }

    /// A collector URL whose path is longer than a memory page, so that a record that
    /// names it never fits in the slack of the log's last page on a full tmpfs.
    pub fn long_url(&self, tag: &str) -> String {
        self.collector.url(&format!("/{tag}/{}", "p".repeat(5000)))
    }

    pub fn assert_verifies(&self) {
        let o = self.airlock(&["audit", "verify"]);
        assert_eq!(o.status.code(), Some(0), "audit verify: {}", text(&o));
    }
}

/// How the log is broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Breakage {
    LogIsADirectory,
    ReadOnly,
    DiskFull,
    TailHashForged,
    TailRewritten,
}

impl Breakage {
    pub const ALL: [Breakage; 5] = [
        Breakage::LogIsADirectory,
        Breakage::ReadOnly,
        Breakage::DiskFull,
        Breakage::TailHashForged,
        Breakage::TailRewritten,
    ];

    /// Whether this breakage needs a private mount namespace (and so root).
    pub fn needs_mounts(self) -> bool {
        matches!(self, Breakage::ReadOnly | Breakage::DiskFull)
    }

    /// What the operator must be told, besides the log's path and a `help:` line.
    pub fn told(self) -> &'static [&'static str] {
        match self {
            Breakage::LogIsADirectory => &["Is a directory", "not a regular file"],
            Breakage::ReadOnly => &["Read-only file system"],
            Breakage::DiskFull => &["No space left on device"],
            Breakage::TailHashForged | Breakage::TailRewritten => {
                &["does not match its last signed checkpoint", "damaged"]
            }
        }
    }

    /// Break the log of `h` before the command starts. Returns the shell set-up to run in a
    /// private mount namespace first, for the breakages that need one.
    pub fn apply(self, h: &Home) -> Option<String> {
        match self {
            Breakage::LogIsADirectory => {
                std::fs::rename(h.log(), h.audit_dir().join("log.aside")).unwrap();
                std::fs::create_dir(h.log()).unwrap();
                None
            }
            Breakage::TailHashForged | Breakage::TailRewritten => {
                rewrite_last_record(&h.log(), self == Breakage::TailHashForged);
                None
            }
            Breakage::ReadOnly | Breakage::DiskFull => {
                Some(self.mount_script(&h.audit_dir(), true))
            }
        }
    }

    /// The mount set-up of a mount breakage, for the audit directory `dir`; a full disk
    /// is filled only if `fill`, otherwise it is left for [`fill_command`].
    pub fn mount_script(self, dir: &Path, fill: bool) -> String {
        let dir = dir.display();
        match self {
            Breakage::ReadOnly => {
                format!("mount --bind {dir} {dir} && mount -o remount,bind,ro {dir}")
            }
            Breakage::DiskFull => format!(
                "stash=$(mktemp -d) && cp -a {dir}/. $stash/ && \
                 mount -t tmpfs -o size=512k,mode=0700 airlock-full {dir} && \
                 cp -a $stash/. {dir}/ && {fill}",
                fill = if fill {
                    fill_command(&dir.to_string())
                } else {
                    "true".into()
                },
            ),
            _ => String::new(),
        }
    }
}

/// Fill the file system holding `dir` to its last page (dd stops at ENOSPC).
pub fn fill_command(dir: &str) -> String {
    format!("{{ dd if=/dev/zero of={dir}/filler bs=4096 2>/dev/null; true; }}")
}

/// Change the last record of the log at `path`: its hash (a forged chain head), or its
/// content with the hash left as it was (a record that no longer hashes to itself).
fn rewrite_last_record(path: &Path, forge_hash: bool) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let last = lines.last_mut().expect("the log has records");
    let mut rec: serde_json::Value = serde_json::from_str(last).unwrap();
    if forge_hash {
        rec["hash"] = serde_json::json!("ab".repeat(32));
    } else {
        rec["kind"] = serde_json::json!("rewritten-by-an-attacker");
    }
    *last = serde_json::to_string(&rec).unwrap();
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

/// `cmd` wrapped to run after `setup` inside a private mount namespace of its own: the
/// mounts vanish with it and never touch the host's view.
pub fn in_private_mounts(setup: &str, cmd: &Command) -> Command {
    let mut c = Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(format!("{setup} || exit 99; exec \"$@\""))
        .arg("sh")
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    if let Some(dir) = cmd.get_current_dir() {
        c.current_dir(dir);
    }
    c.stdin(Stdio::null());
    c
}

/// Mount namespaces need root, which CI has; elsewhere these cases are left out, and say so.
pub fn may_mount(b: Breakage) -> bool {
    if !b.needs_mounts() || nix::unistd::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{b:?} needs root for a private mount namespace, and CI runs as root"
    );
    eprintln!("skipped {b:?}: needs root for a private mount namespace");
    false
}

/// The operator was told: the message names the audit log and says what to do.
pub fn assert_told(b: Breakage, h: &Home, o: &Output) {
    let t = text(o);
    assert!(
        t.contains(&h.audit_dir().display().to_string()),
        "{b:?}: the message does not name the audit log: {t}"
    );
    assert!(
        b.told().iter().any(|w| t.contains(w)),
        "{b:?}: expected one of {:?}: {t}",
        b.told()
    );
    assert!(t.contains("help:"), "{b:?}: no help line: {t}");
    assert!(!t.contains("panicked"), "{b:?}: {t}");
}

pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\n{}\n--- stderr ---\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
