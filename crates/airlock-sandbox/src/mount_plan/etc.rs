//! Which entries of the host's `/etc` the sandbox gets, and how: small regular files are
//! copied into the sandbox's read-only root tmpfs, everything else is a read-only bind.
//!
//! A bind costs a mount point, an `open_tree` + `mount_setattr` + `move_mount`, a line of
//! mountinfo for the attestation to check and an unmount at teardown; about two dozen of the
//! entries are small files (passwd, hosts, ld.so.cache, …) where a copy is cheaper and gives
//! the payload the same read-only bytes.
//!
//! The copy is made by `airlock-sandbox-init`, inside its user namespace as the sandbox uid,
//! through the same host-root resolution as the binds (see
//! [`MountStep::Copy`](super::MountStep::Copy)); the host only decides here, from what it
//! sees at plan time, which entries are worth copying. It never reads their contents: when
//! root runs Airlock, the host can read files that the sandbox uid cannot.

use std::path::{Path, PathBuf};

use super::{ro_bind, MountStep, NodeKind};

/// Entries of the host's `/etc` that ordinary programs need: user and group names, name
/// resolution, the dynamic linker cache, TLS trust roots, locale and time zone, shell
/// start-up files. Everything else in `/etc` (shadow, sudoers, ssh keys, service
/// credentials) stays out.
pub const ETC_ENTRIES: &[&str] = &[
    "passwd",
    "group",
    "hosts",
    "host.conf",
    "resolv.conf",
    "nsswitch.conf",
    "gai.conf",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "pki",
    "crypto-policies",
    "alternatives",
    "localtime",
    "timezone",
    "locale.alias",
    "locale.conf",
    "default/locale",
    "protocols",
    "services",
    "mime.types",
    "magic",
    "magic.mime",
    "inputrc",
    "bash.bashrc",
    "profile",
    "profile.d",
    "shells",
    "terminfo",
    "os-release",
    "lsb-release",
    "debian_version",
    "gitconfig",
    "python3",
    "perl",
];

/// The largest `/etc` file that is copied rather than bound, and the most the helper reads
/// of one copy. A file that has grown past it by the time the helper copies it refuses the
/// run (the plan promised a copy, and a truncated `passwd` or `ld.so.cache` would be worse
/// than no sandbox).
pub const COPY_MAX_LEN: u64 = 256 << 10;

/// The most the copies may add to the root tmpfs, together. Each copy reserves
/// [`COPY_MAX_LEN`] of it (the file may grow between plan and copy); entries past the budget
/// stay binds. A tmpfs size is a limit, not an allocation: only the bytes written use memory,
/// and the root is read-only once built, so nothing else can fill it.
pub const COPY_BUDGET: u64 = 8 << 20;

/// What the root tmpfs holds besides the copies: mount points, the directories above them,
/// symlinks and the proxy's CA certificate ([`MountStep::File`], at most
/// [`crate::profile::MAX_CA_CERT_BYTES`]).
pub const ROOT_TMPFS_BASE: u64 = 1 << 20;

/// The hard upper bound of the root tmpfs size.
pub const ROOT_TMPFS_MAX: u64 = ROOT_TMPFS_BASE + COPY_BUDGET;

/// Mode of every copied file: readable by everyone (there is one uid inside), writable by
/// no one, no set-id or exec bits whatever the host's mode is.
pub const COPY_MODE: u32 = 0o444;

/// The `/etc` steps for a host whose root is `host_root`, and the root tmpfs size they need.
pub(super) struct EtcSteps {
    pub steps: Vec<MountStep>,
    /// [`ROOT_TMPFS_BASE`] plus the space reserved for the copies; at most [`ROOT_TMPFS_MAX`].
    pub root_tmpfs_bytes: u64,
}

/// How one present `/etc` entry reaches the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Treatment {
    Copy,
    Bind(NodeKind),
}

/// Decide for every present entry of [`ETC_ENTRIES`] under `host_root`: a regular file of at
/// most [`COPY_MAX_LEN`] bytes is copied while the budget lasts; directories, larger files
/// and anything else (a FIFO or device someone put in `/etc`) are bound read-only as before.
///
/// The host only `stat`s here (following symlinks), it opens nothing.
pub(super) fn etc_steps(host_root: &Path) -> EtcSteps {
    let mut steps = Vec::new();
    let mut reserved = 0u64;
    for entry in ETC_ENTRIES {
        let Ok(meta) = std::fs::metadata(host_root.join("etc").join(entry)) else {
            continue;
        };
        let path = format!("/etc/{entry}");
        let fits = reserved + COPY_MAX_LEN <= COPY_BUDGET;
        let treatment = if meta.is_dir() {
            Treatment::Bind(NodeKind::Dir)
        } else if meta.is_file() && meta.len() <= COPY_MAX_LEN && fits {
            Treatment::Copy
        } else {
            Treatment::Bind(NodeKind::File)
        };
        match treatment {
            Treatment::Copy => {
                reserved += COPY_MAX_LEN;
                steps.push(MountStep::Copy {
                    source: PathBuf::from(&path),
                    target: PathBuf::from(&path),
                    max_len: COPY_MAX_LEN,
                    mode: COPY_MODE,
                });
            }
            Treatment::Bind(node) => steps.push(ro_bind(&path, node)),
        }
    }
    EtcSteps {
        steps,
        root_tmpfs_bytes: ROOT_TMPFS_BASE + reserved,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mount_plan::MountPlan;
    use crate::profile::SandboxProfile;

    /// A fake host root with an empty workspace at `/ws`.
    fn fake_root() -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("etc")).unwrap();
        std::fs::create_dir_all(root.path().join("ws")).unwrap();
        root
    }

    fn plan_for(root: &Path) -> MountPlan {
        let ws = Path::new("/ws");
        MountPlan::for_host_root(&SandboxProfile::new(ws), ws, root).unwrap()
    }

    fn etc_step(plan: &MountPlan, entry: &str) -> Option<MountStep> {
        let target = Path::new("/etc").join(entry);
        plan.steps.iter().find(|s| s.target() == target).cloned()
    }

    fn root_size(plan: &MountPlan) -> u64 {
        match &plan.steps[0] {
            MountStep::Tmpfs {
                target, size_bytes, ..
            } if target == Path::new("/") => *size_bytes,
            other => panic!("the plan starts with {other:?}"),
        }
    }

    #[test]
    fn small_regular_files_are_copies_and_the_rest_stay_binds() {
        let root = fake_root();
        let etc = root.path().join("etc");
        std::fs::write(etc.join("passwd"), "root:x:0:0::/root:/bin/sh\n").unwrap();
        std::fs::write(etc.join("hosts"), vec![b'#'; COPY_MAX_LEN as usize]).unwrap();
        std::fs::write(etc.join("services"), vec![b'#'; COPY_MAX_LEN as usize + 1]).unwrap();
        std::fs::create_dir_all(etc.join("ssl/certs")).unwrap();
        std::fs::create_dir_all(root.path().join("usr/share/zoneinfo")).unwrap();
        std::fs::write(root.path().join("usr/share/zoneinfo/UTC"), "TZif").unwrap();
        std::os::unix::fs::symlink("../usr/share/zoneinfo/UTC", etc.join("localtime")).unwrap();
        nix::unistd::mkfifo(
            &etc.join("gai.conf"),
            nix::sys::stat::Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        let plan = plan_for(root.path());

        for copied in ["passwd", "hosts", "localtime"] {
            let target = Path::new("/etc").join(copied);
            assert_eq!(
                etc_step(&plan, copied),
                Some(MountStep::Copy {
                    source: target.clone(),
                    target,
                    max_len: COPY_MAX_LEN,
                    mode: 0o444,
                }),
                "{copied}"
            );
        }
        let bound = |entry: &str| match etc_step(&plan, entry) {
            Some(MountStep::Bind {
                node,
                read_only: true,
                ..
            }) => node,
            other => panic!("/etc/{entry} should be a read-only bind, is {other:?}"),
        };
        assert_eq!(bound("ssl"), NodeKind::Dir);
        assert_eq!(bound("services"), NodeKind::File, "past the cap");
        assert_eq!(bound("gai.conf"), NodeKind::File, "not a regular file");
        assert_eq!(etc_step(&plan, "group"), None, "absent on the host");
        // Copies are not mounts: the attestation must find none there.
        assert!(plan
            .mounts()
            .all(|s| !s.target().starts_with("/etc/passwd")));
        assert_eq!(root_size(&plan), ROOT_TMPFS_BASE + 3 * COPY_MAX_LEN);
    }

    #[test]
    fn copies_past_the_budget_stay_binds_and_the_root_keeps_its_bound() {
        let root = fake_root();
        for entry in ETC_ENTRIES {
            let path = root.path().join("etc").join(entry);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "x\n").unwrap();
        }
        let plan = plan_for(root.path());
        let copies: Vec<_> = plan
            .steps
            .iter()
            .filter(|s| matches!(s, MountStep::Copy { .. }))
            .collect();
        let budgeted = (COPY_BUDGET / COPY_MAX_LEN) as usize;
        assert!(
            budgeted < ETC_ENTRIES.len(),
            "the test must overflow the budget"
        );
        assert_eq!(copies.len(), budgeted);
        // The first entries are the copies, in list order; the later ones are binds.
        assert_eq!(copies[0].target(), Path::new("/etc/passwd"));
        let last = ETC_ENTRIES[ETC_ENTRIES.len() - 1];
        assert!(matches!(
            etc_step(&plan, last),
            Some(MountStep::Bind {
                read_only: true,
                node: NodeKind::File,
                ..
            })
        ));
        assert_eq!(root_size(&plan), ROOT_TMPFS_MAX);
    }

    #[test]
    fn an_empty_etc_leaves_the_root_at_its_base_size() {
        let root = fake_root();
        let plan = plan_for(root.path());
        assert_eq!(root_size(&plan), ROOT_TMPFS_BASE);
        assert!(!plan.steps.iter().any(|s| s.target().starts_with("/etc")));
    }

    #[test]
    fn doctor_shows_copies_as_non_mounts_with_their_cap() {
        let root = fake_root();
        std::fs::write(root.path().join("etc/hosts"), "127.0.0.1 localhost\n").unwrap();
        let text = plan_for(root.path()).to_string();
        let row = text
            .lines()
            .find(|l| l.starts_with("/etc/hosts "))
            .unwrap_or_else(|| panic!("no /etc/hosts row in\n{text}"));
        let cols: Vec<_> = row.split_whitespace().collect();
        assert_eq!(&cols[..3], ["/etc/hosts", "copy", "-"], "{row}");
        assert!(
            row.contains("of host /etc/hosts (at most 256 KiB), mode 444"),
            "{row}"
        );
        assert!(text.contains("size=1280 KiB"), "{text}");
    }
}
