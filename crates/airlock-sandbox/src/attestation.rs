//! The attestation: what the kernel says is applied to the payload, read by the payload
//! itself after every restriction is in place and right before `execve`, and the host's
//! comparison of it with the profile.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::mount_plan::MountPlan;
use crate::profile::{SandboxProfile, WeakenedMode, MIN_SAFE_LANDLOCK_ABI};
use crate::seccomp_policy::FILTER_COUNT;

/// Namespace kinds the sandbox must not share with the host.
pub const NAMESPACES: &[&str] = &["user", "mnt", "pid", "net", "ipc", "uts", "cgroup"];

/// Real, effective, saved and filesystem ids, as `/proc/self/status` shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ids {
    pub real: u32,
    pub effective: u32,
    pub saved: u32,
    pub fs: u32,
}

/// One line of `/proc/self/uid_map` or `gid_map`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdMapLine {
    pub inside: u32,
    pub outside: u32,
    pub count: u32,
}

/// What Landlock enforces on the payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandlockReport {
    /// The kernel's ABI (`landlock_create_ruleset(.., LANDLOCK_CREATE_RULESET_VERSION)`).
    pub kernel_abi: u32,
    /// The ABI whose every right the ruleset handles (0 when no ruleset was applied).
    pub applied_abi: u32,
    /// `fully_enforced`, `partially_enforced` or `not_enforced`, as the kernel answered
    /// `landlock_restrict_self`.
    pub status: String,
    /// Whether abstract UNIX sockets and signals are scoped.
    pub scoped: bool,
    /// errno of `kill(1, 0)` from the payload (signal scoping proves itself with `EPERM`);
    /// `None` when the call succeeded.
    pub signal_probe_errno: Option<i32>,
}

/// One mount as the payload sees it in `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountEntry {
    pub mount_point: PathBuf,
    /// Path inside the mounted filesystem that is the root of this mount.
    pub root: PathBuf,
    pub fs_type: String,
    pub read_only: bool,
    /// Per-mount options (`ro,nosuid,nodev,…`).
    pub options: String,
    /// The file system's device as `major:minor`.
    #[serde(default)]
    pub device: String,
    /// Per-superblock options (for an overlay: its layers and `userxattr`, …).
    #[serde(default)]
    pub super_options: String,
}

/// A file's device and inode number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
}

impl FileId {
    /// The identity of `path` itself (a symlink is not followed).
    pub fn of(path: &Path) -> std::io::Result<FileId> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::symlink_metadata(path)?;
        Ok(FileId {
            dev: m.dev(),
            ino: m.ino(),
        })
    }

    /// The device as mountinfo prints it (`major:minor`).
    pub fn device_text(&self) -> String {
        format!("{}:{}", libc::major(self.dev), libc::minor(self.dev))
    }
}

/// The layers of the workspace overlay: what the helper read back (`fstat`) of the
/// directories it gave overlayfs, or what the host expects them to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverlayReport {
    /// The workspace (the lower layer).
    pub lower: FileId,
    pub upper: FileId,
    pub work: FileId,
}

/// Whether cgroup v2 limits apply to this run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum CgroupReport {
    /// Limits written to this cgroup (path relative to the cgroup2 mount).
    Applied { cgroup: String },
    /// No delegated cgroup: only rlimits bound the run.
    Unavailable { reason: String },
}

/// The relay to the egress proxy, as it reports itself after its own confinement is in
/// place (read back from the kernel, like the payload's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelayReport {
    /// The address the relay listens on inside the sandbox.
    pub listen: String,
    /// Device and inode of the socket the relay forwards to (`fstat` of its descriptor);
    /// the host compares them with the proxy socket it opened.
    pub socket_dev: u64,
    pub socket_ino: u64,
    /// Why a test connection to the proxy failed; `None` when it succeeded.
    pub upstream_error: Option<String>,
    pub uid: u32,
    pub cap_effective: u64,
    pub cap_bounding: u64,
    pub no_new_privs: bool,
    pub seccomp_filters: u32,
    /// Landlock status of the relay's own ruleset (`fully_enforced`, ...).
    pub landlock_status: String,
}

/// The confinement of one run, as read back from the kernel by the payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attestation {
    /// Namespace inode numbers of the payload (`/proc/self/ns/*`).
    pub namespaces: BTreeMap<String, u64>,
    /// The host's namespace inode numbers, filled in by the host.
    #[serde(default)]
    pub host_namespaces: BTreeMap<String, u64>,
    pub uid: Ids,
    pub gid: Ids,
    pub uid_map: Vec<IdMapLine>,
    pub gid_map: Vec<IdMapLine>,
    pub cap_effective: u64,
    pub cap_permitted: u64,
    pub cap_inheritable: u64,
    pub cap_bounding: u64,
    pub cap_ambient: u64,
    pub no_new_privs: bool,
    /// `Seccomp:` of `/proc/self/status` (2 = filter mode).
    pub seccomp_mode: u32,
    /// `Seccomp_filters:` of `/proc/self/status`.
    pub seccomp_filters: u32,
    pub landlock: LandlockReport,
    pub mounts: Vec<MountEntry>,
    pub cgroup: CgroupReport,
    /// The weaker mode the operator chose, if any.
    pub weakened: Option<WeakenedMode>,
    /// The relay to the egress proxy, when the profile has one.
    #[serde(default)]
    pub relay: Option<RelayReport>,
    /// The workspace overlay's layers, when the profile has one.
    #[serde(default)]
    pub overlay: Option<OverlayReport>,
    /// What the run attached to its sandbox, as the payload sees it: the same for a
    /// sandbox built for the run and for one taken from a pool, whose workspace, working
    /// directory and environment arrive only with the run.
    #[serde(default)]
    pub attached: Option<AttachedReport>,
}

/// The run's own part of the sandbox, read back by the payload right before it attests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachedReport {
    /// The payload's working directory (`getcwd`).
    pub cwd: PathBuf,
    /// The workspace at its path inside the sandbox (`lstat`).
    pub workspace: FileId,
    /// SHA-256 of the environment the command will get ([`crate::payload_env::digest`]).
    pub env_sha256: String,
}

/// One way the attested confinement falls short of the profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shortfall {
    /// The missing feature, e.g. `landlock`.
    pub feature: String,
    /// What the kernel reported.
    pub detail: String,
    /// How to enable it.
    pub help: String,
}

/// Facts the host contributes to the comparison.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostView {
    /// The host's own namespace inode numbers.
    pub namespaces: BTreeMap<String, u64>,
    /// The uid and gid the payload must run as (inside and outside: the map is identity).
    pub uid: u32,
    pub gid: u32,
    /// The best Landlock ABI of this kernel, capped at what the `landlock` crate knows.
    pub landlock_abi: u32,
    /// Device and inode of the proxy socket the host passed to the relay.
    pub relay_socket: Option<(u64, u64)>,
    /// The workspace and overlay layers the host made, when the profile has an overlay.
    pub overlay: Option<OverlayReport>,
    /// The run's working directory, workspace and environment as the host asked for them.
    pub attached: Option<AttachedReport>,
}

fn shortfall(feature: &str, detail: String, help: &str) -> Shortfall {
    Shortfall {
        feature: feature.into(),
        detail,
        help: help.into(),
    }
}

impl Attestation {
    /// Compare with the profile and the mount plan. An empty list means the run may go.
    pub fn verify(
        &self,
        profile: &SandboxProfile,
        plan: &MountPlan,
        host: &HostView,
    ) -> Vec<Shortfall> {
        let mut out = Vec::new();
        self.verify_namespaces(host, &mut out);
        self.verify_identity(host, &mut out);
        self.verify_privileges(&mut out);
        self.verify_landlock(profile, host, &mut out);
        self.verify_mounts(plan, &mut out);
        self.verify_relay(profile, host, &mut out);
        self.verify_overlay(profile, plan, host, &mut out);
        self.verify_attached(profile, host, &mut out);
        if self.weakened != profile.weakened {
            out.push(shortfall(
                "weakened mode",
                format!(
                    "the sandbox reports {:?}, the profile asks for {:?}",
                    self.weakened, profile.weakened
                ),
                "this is a bug: the helper must apply the profile's mode",
            ));
        }
        out
    }

    fn verify_namespaces(&self, host: &HostView, out: &mut Vec<Shortfall>) {
        for ns in NAMESPACES {
            match (self.namespaces.get(*ns), host.namespaces.get(*ns)) {
                (Some(inside), Some(outside)) if inside != outside => {}
                (Some(_), Some(_)) => out.push(shortfall(
                    &format!("{ns} namespace"),
                    format!("the sandbox shares the host's {ns} namespace"),
                    "enable user namespaces: sysctl -w user.max_user_namespaces=15000 (and kernel.unprivileged_userns_clone=1 or kernel.apparmor_restrict_unprivileged_userns=0 where they exist)",
                )),
                _ => out.push(shortfall(
                    &format!("{ns} namespace"),
                    format!("the {ns} namespace id could not be read"),
                    "the kernel must be built with CONFIG_NAMESPACES and all namespace kinds",
                )),
            }
        }
    }

    fn verify_identity(&self, host: &HostView, out: &mut Vec<Shortfall>) {
        let uid_ok = [
            self.uid.real,
            self.uid.effective,
            self.uid.saved,
            self.uid.fs,
        ]
        .iter()
        .all(|u| *u == host.uid && *u != 0);
        let gid_ok = [
            self.gid.real,
            self.gid.effective,
            self.gid.saved,
            self.gid.fs,
        ]
        .iter()
        .all(|g| *g == host.gid);
        if !uid_ok || !gid_ok {
            out.push(shortfall(
                "sandbox uid",
                format!(
                    "uid {:?} gid {:?}, expected {} and {} (never 0)",
                    self.uid, self.gid, host.uid, host.gid
                ),
                "set sandbox_uid/sandbox_gid to an unprivileged id",
            ));
        }
        let single = |m: &[IdMapLine], id: u32| {
            m.len() == 1 && m[0].count == 1 && m[0].inside == id && m[0].outside == id && id != 0
        };
        if !single(&self.uid_map, host.uid) || !single(&self.gid_map, host.gid) {
            out.push(shortfall(
                "user namespace id map",
                format!("uid_map {:?} gid_map {:?}", self.uid_map, self.gid_map),
                "the sandbox maps exactly one unprivileged id; this is a bug in the helper",
            ));
        }
    }

    fn verify_privileges(&self, out: &mut Vec<Shortfall>) {
        let caps = [
            ("effective", self.cap_effective),
            ("permitted", self.cap_permitted),
            ("inheritable", self.cap_inheritable),
            ("bounding", self.cap_bounding),
            ("ambient", self.cap_ambient),
        ];
        for (set, value) in caps {
            if value != 0 {
                out.push(shortfall(
                    "capabilities",
                    format!("{set} capability set is {value:#x}, not empty"),
                    "the helper must drop every capability; this is a bug",
                ));
            }
        }
        if !self.no_new_privs {
            out.push(shortfall(
                "no_new_privs",
                "NoNewPrivs is 0".into(),
                "the helper must set PR_SET_NO_NEW_PRIVS; this is a bug",
            ));
        }
        if self.seccomp_mode != 2 || self.seccomp_filters < FILTER_COUNT {
            out.push(shortfall(
                "seccomp",
                format!(
                    "Seccomp mode {} with {} filters, expected mode 2 with at least {FILTER_COUNT}",
                    self.seccomp_mode, self.seccomp_filters
                ),
                "build the kernel with CONFIG_SECCOMP_FILTER=y",
            ));
        }
    }

    fn verify_landlock(&self, profile: &SandboxProfile, host: &HostView, out: &mut Vec<Shortfall>) {
        if profile.weakened == Some(WeakenedMode::WithoutLandlock) {
            return;
        }
        let required = profile.required_landlock_abi(host.landlock_abi);
        let ll = &self.landlock;
        if ll.applied_abi < required {
            out.push(shortfall(
                "landlock",
                format!(
                    "the ruleset handles Landlock ABI {} (kernel ABI {}), the profile requires ABI {required}",
                    ll.applied_abi, ll.kernel_abi
                ),
                "run a kernel with a newer Landlock (ABI 6 needs Linux 6.12) and boot with lsm=...,landlock; or set `weakened = \"without_landlock_scopes\"` / `\"without_landlock\"` in airlock.toml",
            ));
        }
        if ll.status != "fully_enforced" {
            out.push(shortfall(
                "landlock",
                format!("the ruleset is {}", ll.status),
                "enable Landlock: boot with lsm=landlock,... (check /sys/kernel/security/lsm)",
            ));
        }
        if required >= MIN_SAFE_LANDLOCK_ABI
            && (!ll.scoped || ll.signal_probe_errno != Some(libc::EPERM))
        {
            out.push(shortfall(
                "landlock scoping",
                format!(
                    "scoped={}, kill(1, 0) from the payload gave {:?} instead of EPERM",
                    ll.scoped, ll.signal_probe_errno
                ),
                "Landlock ABI 6 (Linux 6.12) scopes signals and abstract UNIX sockets",
            ));
        }
    }

    fn verify_relay(&self, profile: &SandboxProfile, host: &HostView, out: &mut Vec<Shortfall>) {
        let bug = "this is a bug in airlock-sandbox-init";
        let (relay, report) = match (profile.relay(), &self.relay) {
            (None, None) => return,
            (None, Some(_)) => {
                out.push(shortfall(
                    "egress relay",
                    "a relay runs although the profile has none".into(),
                    bug,
                ));
                return;
            }
            (Some(_), None) => {
                out.push(shortfall(
                    "egress relay",
                    "the profile asks for a relay to the egress proxy and none reported".into(),
                    bug,
                ));
                return;
            }
            (Some(r), Some(rep)) => (r, rep),
        };
        let mut bad =
            |detail: String, help: &str| out.push(shortfall("egress relay", detail, help));
        let expected = format!("127.0.0.1:{}", relay.port);
        if report.listen != expected {
            bad(
                format!("listens on {}, expected {expected}", report.listen),
                bug,
            );
        }
        if host.relay_socket != Some((report.socket_dev, report.socket_ino)) {
            bad(
                format!(
                    "forwards to socket {}:{}, the host passed {:?}",
                    report.socket_dev, report.socket_ino, host.relay_socket
                ),
                bug,
            );
        }
        if let Some(e) = &report.upstream_error {
            bad(
                format!("cannot reach the egress proxy at {}: {e}", relay.socket.display()),
                "the sandbox uid must be allowed to write to the proxy socket (chown it to the sandbox uid when airlock runs as root)",
            );
        }
        if report.uid == 0 || report.uid != host.uid {
            bad(
                format!("runs as uid {}, expected {}", report.uid, host.uid),
                bug,
            );
        }
        if report.cap_effective != 0 || report.cap_bounding != 0 || !report.no_new_privs {
            bad(
                format!(
                    "holds privileges: CapEff {:#x}, CapBnd {:#x}, no_new_privs {}",
                    report.cap_effective, report.cap_bounding, report.no_new_privs
                ),
                bug,
            );
        }
        if report.seccomp_filters < FILTER_COUNT {
            bad(
                format!(
                    "has {} seccomp filters, expected at least {FILTER_COUNT}",
                    report.seccomp_filters
                ),
                "build the kernel with CONFIG_SECCOMP_FILTER=y",
            );
        }
        if profile.weakened != Some(WeakenedMode::WithoutLandlock)
            && report.landlock_status != "fully_enforced"
        {
            bad(
                format!("its Landlock ruleset is {}", report.landlock_status),
                "enable Landlock: boot with lsm=landlock,... (check /sys/kernel/security/lsm)",
            );
        }
    }

    /// The run's working directory, environment and workspace are the ones it asked for
    /// and nothing else: what proves that a pooled sandbox holds this run's parts.
    fn verify_attached(&self, profile: &SandboxProfile, host: &HostView, out: &mut Vec<Shortfall>) {
        let Some(expected) = &host.attached else {
            return;
        };
        let help = "the sandbox must hold exactly the run's own workspace, working directory and environment; this is a bug in airlock-sandbox-init or a sandbox taken for another run";
        let Some(got) = &self.attached else {
            out.push(shortfall(
                "attached run",
                "the sandbox did not report the run's workspace, working directory and environment"
                    .into(),
                help,
            ));
            return;
        };
        if got.cwd != expected.cwd {
            out.push(shortfall(
                "working directory",
                format!(
                    "the payload works in {}, the run asked for {}",
                    got.cwd.display(),
                    expected.cwd.display()
                ),
                help,
            ));
        }
        if got.env_sha256 != expected.env_sha256 {
            out.push(shortfall(
                "environment",
                format!(
                    "the payload's environment hashes to {}, the run's to {}",
                    got.env_sha256, expected.env_sha256
                ),
                help,
            ));
        }
        // Under the overlay the workspace's path shows the overlay's own directory; its
        // lower layer is checked with the overlay's report instead.
        if profile.workspace_overlay.is_none() && got.workspace != expected.workspace {
            out.push(shortfall(
                "workspace",
                format!(
                    "the sandbox's workspace is {:?}, the run's is {:?}",
                    got.workspace, expected.workspace
                ),
                help,
            ));
        }
    }

    fn verify_mounts(&self, plan: &MountPlan, out: &mut Vec<Shortfall>) {
        let mut bad = |detail: String| {
            out.push(shortfall("mounts", detail, "the sandbox's filesystem must match the mount plan; this is a bug or a hostile host mount"))
        };
        // The last entry for a mount point is the one on top.
        let top = |p: &Path| self.mounts.iter().rev().find(|m| m.mount_point == p);
        for step in plan.mounts() {
            let target = step.target();
            match top(&target) {
                None => bad(format!("{} is not mounted", target.display())),
                Some(m) if step.read_only() && !m.read_only => bad(format!(
                    "{} is writable, the plan says read-only",
                    target.display()
                )),
                Some(m) if !step.read_only() && m.read_only => bad(format!(
                    "{} is read-only, the plan says writable",
                    target.display()
                )),
                Some(_) => {}
            }
        }
        for m in &self.mounts {
            // A copy, file or symlink of the plan is part of the root tmpfs: a mount there
            // (say a bind of the host's /etc/passwd instead of the copy) is never expected.
            let not_mounted = plan.steps.iter().find(|s| {
                !s.is_mount()
                    && s.target() == m.mount_point
                    && !plan.mounts().any(|p| p.target() == m.mount_point)
            });
            if let Some(step) = not_mounted {
                bad(format!(
                    "{} is a mount ({}), but the plan puts a {} there in the read-only root and mounts nothing",
                    m.mount_point.display(),
                    m.fs_type,
                    step.kind_name()
                ));
                continue;
            }
            let covering = plan
                .mounts()
                .filter(|s| m.mount_point.starts_with(s.target()))
                .max_by_key(|s| s.target().components().count());
            match covering {
                Some(s) if s.target() == m.mount_point => {}
                Some(s) if s.allows_submounts() && (m.read_only || !s.read_only()) => {}
                _ => bad(format!(
                    "unexpected mount {} ({}) not in the plan",
                    m.mount_point.display(),
                    m.fs_type
                )),
            }
        }
    }
}

/// Parse `/proc/self/mountinfo`.
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let f: Vec<&str> = left.split(' ').collect();
            let fs_type = right.split(' ').next()?.to_string();
            let options = f.get(5)?.to_string();
            Some(MountEntry {
                root: PathBuf::from(unescape_octal(f.get(3)?)),
                mount_point: PathBuf::from(unescape_octal(f.get(4)?)),
                read_only: options.split(',').any(|o| o == "ro"),
                options,
                fs_type,
                device: f.get(2)?.to_string(),
                super_options: unescape_octal(right.split(' ').nth(2).unwrap_or("")),
            })
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_octal(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parse a `/proc/self/{uid,gid}_map`.
pub fn parse_id_map(text: &str) -> Vec<IdMapLine> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace().map(|x| x.parse::<u32>());
            Some(IdMapLine {
                inside: it.next()?.ok()?,
                outside: it.next()?.ok()?,
                count: it.next()?.ok()?,
            })
        })
        .collect()
}

/// The inode number of a `/proc/<pid>/ns/<kind>` link (`net:[4026531840]`).
pub fn namespace_id(proc_ns_dir: &Path, kind: &str) -> Option<u64> {
    let link = std::fs::read_link(proc_ns_dir.join(kind)).ok()?;
    let s = link.to_str()?;
    s.split_once('[')?.1.trim_end_matches(']').parse().ok()
}

/// Namespace ids of the process whose `/proc/<pid>/ns` is `proc_ns_dir`.
pub fn namespace_ids(proc_ns_dir: &Path) -> BTreeMap<String, u64> {
    NAMESPACES
        .iter()
        .filter_map(|k| Some((k.to_string(), namespace_id(proc_ns_dir, k)?)))
        .collect()
}

/// Fields of `/proc/self/status` that the attestation needs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StatusFields {
    pub uid: Option<Ids>,
    pub gid: Option<Ids>,
    pub cap_eff: u64,
    pub cap_prm: u64,
    pub cap_inh: u64,
    pub cap_bnd: u64,
    pub cap_amb: u64,
    pub no_new_privs: bool,
    pub seccomp: u32,
    pub seccomp_filters: u32,
}

/// Parse `/proc/self/status`. Unknown or missing capability fields read as "all set" so
/// that a kernel that hides them cannot pass the check.
pub fn parse_status(text: &str) -> StatusFields {
    let mut s = StatusFields {
        cap_eff: u64::MAX,
        cap_prm: u64::MAX,
        cap_inh: u64::MAX,
        cap_bnd: u64::MAX,
        cap_amb: u64::MAX,
        ..Default::default()
    };
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        let ids = || {
            let v: Vec<u32> = value
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            (v.len() == 4).then(|| Ids {
                real: v[0],
                effective: v[1],
                saved: v[2],
                fs: v[3],
            })
        };
        let hex = || u64::from_str_radix(value, 16).unwrap_or(u64::MAX);
        match key {
            "Uid" => s.uid = ids(),
            "Gid" => s.gid = ids(),
            "CapEff" => s.cap_eff = hex(),
            "CapPrm" => s.cap_prm = hex(),
            "CapInh" => s.cap_inh = hex(),
            "CapBnd" => s.cap_bnd = hex(),
            "CapAmb" => s.cap_amb = hex(),
            "NoNewPrivs" => s.no_new_privs = value == "1",
            "Seccomp" => s.seccomp = value.parse().unwrap_or(0),
            "Seccomp_filters" => s.seccomp_filters = value.parse().unwrap_or(0),
            _ => {}
        }
    }
    s
}

mod overlay;
#[cfg(test)]
mod tests;
