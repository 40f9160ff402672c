//! What this machine supports, for `airlock doctor` and for the host's comparison.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One feature's availability.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Feature {
    pub available: bool,
    /// What was found (a version, a path, a reason).
    pub detail: String,
    /// How to enable it when it is missing.
    pub help: Option<String>,
}

/// The machine's support for each sandbox feature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostSupport {
    pub user_namespaces: Feature,
    pub landlock: Feature,
    /// Landlock ABI of the kernel (0 when absent).
    pub landlock_abi: u32,
    pub seccomp: Feature,
    pub cgroup_delegation: Feature,
    pub overlayfs_in_userns: Feature,
}

/// The kernel's Landlock ABI, or 0 when Landlock is absent or disabled.
pub fn kernel_landlock_abi() -> u32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: landlock_create_ruleset with a NULL attribute, size 0 and the VERSION flag only
    // returns the ABI number (or -1 with errno); it reads no memory.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if r < 0 {
        0
    } else {
        r as u32
    }
}

/// The highest Landlock ABI both the kernel and the `landlock` crate know.
pub fn usable_landlock_abi() -> u32 {
    kernel_landlock_abi().min(landlock::ABI::V10 as u32)
}

fn read_trim(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

fn user_namespaces() -> Feature {
    let max = read_trim("/proc/sys/user/max_user_namespaces").and_then(|s| s.parse::<u64>().ok());
    let debian = read_trim("/proc/sys/kernel/unprivileged_userns_clone");
    let apparmor = read_trim("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
    let mut problems = Vec::new();
    match max {
        None => problems.push("the kernel has no user namespaces (CONFIG_USER_NS)".to_string()),
        Some(0) => problems.push("user.max_user_namespaces is 0".to_string()),
        _ => {}
    }
    if debian.as_deref() == Some("0") {
        problems.push("kernel.unprivileged_userns_clone is 0".into());
    }
    if apparmor.as_deref() == Some("1") {
        problems.push("kernel.apparmor_restrict_unprivileged_userns is 1".into());
    }
    Feature {
        available: problems.is_empty(),
        detail: if problems.is_empty() {
            format!("max_user_namespaces={}", max.unwrap_or(0))
        } else {
            problems.join("; ")
        },
        help: (!problems.is_empty()).then(|| {
            "sysctl -w user.max_user_namespaces=15000 kernel.unprivileged_userns_clone=1 kernel.apparmor_restrict_unprivileged_userns=0 (the last two where they exist)".into()
        }),
    }
}

fn seccomp() -> Feature {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let ok = status.lines().any(|l| l.starts_with("Seccomp:"))
        && std::path::Path::new("/proc/sys/kernel/seccomp/actions_avail").exists();
    Feature {
        available: ok,
        detail: read_trim("/proc/sys/kernel/seccomp/actions_avail")
            .unwrap_or_else(|| "no seccomp filter support".into()),
        help: (!ok)
            .then(|| "build the kernel with CONFIG_SECCOMP=y and CONFIG_SECCOMP_FILTER=y".into()),
    }
}

/// The caller's cgroup directory, when cgroup v2 is mounted at `/sys/fs/cgroup`.
pub(crate) fn own_cgroup_v2_dir() -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    let root = Path::new("/sys/fs/cgroup");
    root.join("cgroup.controllers")
        .exists()
        .then(|| root.join(rel.trim_start_matches('/')))
}

/// Whether a delegated cgroup v2 subtree lets this process create a child with the
/// memory, pids and cpu controllers.
pub(crate) fn cgroup_delegation() -> Feature {
    let Some(dir) = own_cgroup_v2_dir() else {
        return Feature {
            available: false,
            detail: "no cgroup v2 hierarchy at /sys/fs/cgroup (cgroup v1 or hybrid)".into(),
            help: Some("boot with systemd.unified_cgroup_hierarchy=1 and run airlock in a unit with Delegate=yes".into()),
        };
    };
    let controllers =
        std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
    let missing: Vec<&str> = ["memory", "pids", "cpu"]
        .into_iter()
        .filter(|c| !controllers.split_whitespace().any(|x| x == *c))
        .collect();
    let writable = nix::unistd::access(&dir, nix::unistd::AccessFlags::W_OK).is_ok();
    let ok = missing.is_empty() && writable;
    Feature {
        available: ok,
        detail: if ok {
            format!("{} delegates memory, pids, cpu", dir.display())
        } else if !writable {
            format!("{} is not writable by this user", dir.display())
        } else {
            format!("{} does not enable {} for its children", dir.display(), missing.join(", "))
        },
        help: (!ok).then(|| "run airlock in a systemd unit or scope with Delegate=yes (systemd-run --user --scope -p Delegate=yes airlock ...)".into()),
    }
}

/// The first Linux release that mounts overlayfs inside a user namespace (with the
/// `userxattr` option the workspace overlay needs).
pub const OVERLAY_IN_USERNS_SINCE: (u32, u32) = (5, 11);

fn overlayfs_in_userns() -> Feature {
    let fs = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    let has_overlay = fs
        .lines()
        .any(|l| l.split_whitespace().last() == Some("overlay"));
    let (major, minor) = kernel_version();
    let new_enough = (major, minor) >= OVERLAY_IN_USERNS_SINCE;
    let ok = has_overlay && new_enough;
    Feature {
        available: ok,
        detail: format!(
            "overlay {} in /proc/filesystems, kernel {major}.{minor}",
            if has_overlay {
                "listed"
            } else {
                "not listed (module not loaded?)"
            }
        ),
        help: (!ok).then(|| "modprobe overlay; Linux 5.11 or newer".into()),
    }
}

/// The running kernel's major and minor version (0.0 when unknown).
pub(crate) fn kernel_version() -> (u32, u32) {
    let release = nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut it = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|x| x.parse().ok());
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

/// Probe this machine.
pub fn host_support() -> HostSupport {
    let abi = kernel_landlock_abi();
    HostSupport {
        user_namespaces: user_namespaces(),
        landlock: Feature {
            available: abi > 0,
            detail: if abi > 0 {
                format!("ABI {abi}")
            } else {
                "not available (not built in, or not in the lsm= list)".into()
            },
            help: (abi == 0)
                .then(|| "boot with lsm=landlock,... (Linux 5.13+, ABI 6 needs 6.12+)".into()),
        },
        landlock_abi: abi,
        seccomp: seccomp(),
        cgroup_delegation: cgroup_delegation(),
        overlayfs_in_userns: overlayfs_in_userns(),
    }
}

impl fmt::Display for HostSupport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{:<24} {:<4} detail", "feature", "ok")?;
        for (name, feat) in [
            ("user namespaces", &self.user_namespaces),
            ("landlock", &self.landlock),
            ("seccomp", &self.seccomp),
            ("cgroup v2 delegation", &self.cgroup_delegation),
            ("overlayfs in userns", &self.overlayfs_in_userns),
        ] {
            writeln!(
                f,
                "{name:<24} {:<4} {}",
                if feat.available { "yes" } else { "no" },
                feat.detail
            )?;
            if let Some(help) = &feat.help {
                writeln!(f, "{:<29} help: {help}", "")?;
            }
        }
        Ok(())
    }
}
