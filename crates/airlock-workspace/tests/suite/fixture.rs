//! A workspace, an upper layer, a state dir, and a real overlay to run shell in.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use airlock_workspace::{ChangeSet, ChangeSetOptions, CommitMeta, RelPath, Workspace};

pub struct Fx {
    pub _tmp: tempfile::TempDir,
    pub ws: PathBuf,
    pub upper: PathBuf,
    pub work: PathBuf,
    pub state: PathBuf,
}

pub fn fx() -> Fx {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().to_path_buf();
    for d in ["ws", "upper", "work", "state", "merged"] {
        std::fs::create_dir(base.join(d)).unwrap();
    }
    Fx {
        ws: base.join("ws"),
        upper: base.join("upper"),
        work: base.join("work"),
        state: base.join("state"),
        _tmp: tmp,
    }
}

pub fn is_root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(2))
        == Some("0")
}

impl Fx {
    /// Write a workspace file (parents created).
    pub fn put(&self, rel: &str, content: &[u8]) {
        let p = self.ws.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    pub fn read(&self, rel: &str) -> Option<Vec<u8>> {
        std::fs::read(self.ws.join(rel)).ok()
    }

    /// Run `script` with `sh` in the merged view of a real overlay (workspace lower, this
    /// upper). In CI the mount must work; elsewhere a host without user namespaces fails
    /// loudly too, since every test here needs it.
    pub fn overlay(&self, script: &str) {
        let merged = self.upper.parent().unwrap().join("merged");
        let mount = format!(
            "mount -t overlay overlay -o lowerdir={},upperdir={},workdir={},userxattr {} && cd {} && {}",
            self.ws.display(),
            self.upper.display(),
            self.work.display(),
            merged.display(),
            merged.display(),
            script
        );
        let out = Command::new("unshare")
            .args(["-Urm", "sh", "-ec", &mount])
            .output()
            .expect("run unshare");
        assert!(
            out.status.success(),
            "overlay script failed ({}): {}\nhelp: these tests need overlayfs in a user namespace (Linux 5.11+)",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn compute(&self) -> ChangeSet {
        ChangeSet::compute(&self.ws, &self.upper, &ChangeSetOptions::default()).unwrap()
    }

    pub fn compute_with(&self, opts: &ChangeSetOptions) -> ChangeSet {
        ChangeSet::compute(&self.ws, &self.upper, opts).unwrap()
    }

    pub fn open(&self) -> Workspace {
        let (ws, rec) = Workspace::open(&self.ws, &self.state).unwrap();
        assert!(rec.is_none(), "unexpected recovery: {rec:?}");
        ws
    }

    /// A fresh upper layer for the next run.
    pub fn next_run(&mut self) {
        std::fs::remove_dir_all(&self.upper).unwrap();
        std::fs::create_dir(&self.upper).unwrap();
        let _ = std::fs::remove_dir_all(&self.work);
        std::fs::create_dir(&self.work).unwrap();
    }
}

pub fn meta(note: &str) -> CommitMeta {
    CommitMeta {
        session: "s1".into(),
        principal: "agent:s1".into(),
        note: note.into(),
    }
}

pub fn rp(s: &str) -> RelPath {
    RelPath::new(s).unwrap()
}

pub fn rb(b: &[u8]) -> RelPath {
    RelPath::from_bytes(b).unwrap()
}

pub fn os(b: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(b))
}
