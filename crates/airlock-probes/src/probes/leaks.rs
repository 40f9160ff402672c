//! Leaks into the sandbox: descriptors, environment, mounts, sockets, home directories and
//! devices that the host could hand the payload by mistake.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use crate::context::Ctx;
use crate::probe::{Category, Expect, Got, Probe};

const C: Category = Category::Leaks;

/// Variables a clean environment may hold (plus `LC_*`).
const ENV_ALLOWED: &[&str] = &[
    "PATH", "HOME", "LANG", "LANGUAGE", "TERM", "TZ", "PWD", "OLDPWD", "SHLVL", "_", "USER",
    "LOGNAME", "SHELL", "TMPDIR", "COLUMNS", "LINES",
];

/// Name fragments that mark a variable as a credential or a handle to a host service.
const SECRET_NAME_PARTS: &[&str] = &[
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSW",
    "CREDENTIAL",
    "AUTH",
    "COOKIE",
    "SESSION",
    "PRIVATE",
    "DBUS",
    "XDG_RUNTIME",
    "SSH_",
    "GPG_",
    "AWS_",
    "AZURE_",
    "GOOGLE_",
    "GITHUB_",
    "DOCKER_",
];

/// Value prefixes of well-known credential formats.
const SECRET_VALUE_PREFIXES: &[&str] = &[
    "sk-",
    "ghp_",
    "gho_",
    "ghs_",
    "github_pat_",
    "xoxb-",
    "xoxp-",
    "AKIA",
    "ASIA",
    "AIza",
    "glpat-",
    "-----BEGIN",
    "eyJ",
];

/// Entries a minimal `/dev` may hold.
const DEV_ALLOWED: &[&str] = &[
    "null", "zero", "full", "random", "urandom", "tty", "pts", "ptmx", "shm", "fd", "stdin",
    "stdout", "stderr", "console", "core", "mqueue",
];

/// Directories searched for host UNIX sockets, and how deep.
const SOCKET_DIRS: &[&str] = &[
    "/run", "/var/run", "/var/lib", "/tmp", "/dev", "/home", "/root",
];
const SOCKET_SEARCH_DEPTH: usize = 4;

pub const PROBES: &[Probe] = &[
    Probe {
        name: "no_inherited_fds",
        category: C,
        what: "no file descriptor above 2 was open at start-up",
        expect: Expect::Holds("only fds 0-2"),
        run: no_inherited_fds,
        host_safe: true,
    },
    Probe {
        name: "env_minimal",
        category: C,
        what: "the environment holds only PATH, HOME, LANG, TERM and similar",
        expect: Expect::Holds("only allowed variables"),
        run: env_minimal,
        host_safe: true,
    },
    Probe {
        name: "env_no_secrets",
        category: C,
        what: "no variable looks like a credential (by name or by value format)",
        expect: Expect::Holds("no secret-looking variable"),
        run: env_no_secrets,
        host_safe: true,
    },
    Probe {
        name: "mountinfo_allowed_only",
        category: C,
        what: "/proc/self/mountinfo shows only the allowed mount points",
        expect: Expect::Holds("only allowed mount points"),
        run: mountinfo_allowed_only,
        host_safe: true,
    },
    Probe {
        name: "no_host_sockets",
        category: C,
        what: "no UNIX socket file under /run, /var, /tmp, /dev, /home or /root",
        expect: Expect::Holds("no socket files"),
        run: no_host_sockets,
        host_safe: true,
    },
    Probe {
        name: "no_host_home",
        category: C,
        what: "/home and /root are absent or empty (apart from the way to the workspace)",
        expect: Expect::Holds("no host home"),
        run: no_host_home,
        host_safe: true,
    },
    Probe {
        name: "dev_minimal",
        category: C,
        what: "/dev holds only null, zero, full, random, urandom, tty, pts, ptmx, shm and fd links",
        expect: Expect::Holds("minimal /dev"),
        run: dev_minimal,
        host_safe: true,
    },
];

/// Highest descriptor number checked for inheritance.
const MAX_FD_CHECKED: i32 = 4096;

/// Descriptors above 2 open in this process, with what they point at. Checked with
/// `fcntl(F_GETFD)` so that the check itself opens nothing; call it before anything else.
pub fn inherited_fds() -> Vec<(i32, String)> {
    (3..MAX_FD_CHECKED)
        // SAFETY: F_GETFD only queries the descriptor's flags.
        .filter(|&fd| unsafe { libc::fcntl(fd, libc::F_GETFD) } != -1)
        .map(|fd| {
            let target = std::fs::read_link(format!("/proc/self/fd/{fd}"))
                .map(|t| t.display().to_string())
                .unwrap_or_else(|_| "?".into());
            (fd, target)
        })
        .collect()
}

fn no_inherited_fds(ctx: &Ctx) -> Got {
    if ctx.inherited_fds.is_empty() {
        Got::Holds("only fds 0-2".into())
    } else {
        let listed: Vec<String> = ctx
            .inherited_fds
            .iter()
            .map(|(fd, target)| format!("{fd} -> {target}"))
            .collect();
        Got::Violated(format!("inherited: {}", listed.join(", ")))
    }
}

fn env_minimal(_: &Ctx) -> Got {
    let names: Vec<String> = std::env::vars_os()
        .map(|(k, _)| k.to_string_lossy().into_owned())
        .collect();
    let extra: Vec<&String> = names
        .iter()
        .filter(|n| !ENV_ALLOWED.contains(&n.as_str()) && !n.starts_with("LC_"))
        .collect();
    if extra.is_empty() {
        Got::Holds(format!("{} variables: {}", names.len(), names.join(" ")))
    } else {
        Got::Violated(format!("unexpected variables: {extra:?}"))
    }
}

/// Whether a variable looks like a credential. Only names are ever reported.
pub fn looks_secret(name: &str, value: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_NAME_PARTS.iter().any(|part| upper.contains(part))
        || SECRET_VALUE_PREFIXES.iter().any(|p| value.starts_with(p))
}

fn env_no_secrets(_: &Ctx) -> Got {
    let suspicious: Vec<String> = std::env::vars_os()
        .filter(|(k, v)| looks_secret(&k.to_string_lossy(), &v.to_string_lossy()))
        .map(|(k, _)| k.to_string_lossy().into_owned())
        .collect();
    if suspicious.is_empty() {
        Got::Holds("no secret-looking variable".into())
    } else {
        Got::Violated(format!(
            "secret-looking variables (names only): {suspicious:?}"
        ))
    }
}

/// Decode the octal escapes (`\040` for a space) that mountinfo uses in paths.
fn unescape_mount_path(raw: &str) -> String {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .and_then(|digits| std::str::from_utf8(digits).ok())
            .and_then(|digits| u8::from_str_radix(digits, 8).ok());
        match octal {
            Some(value) if bytes[i] == b'\\' => {
                out.push(value);
                i += 4;
            }
            _ => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Mount points of a mountinfo text that fall outside the allowed set.
pub fn disallowed_mounts(mountinfo: &str, allowed_trees: &[PathBuf]) -> Vec<String> {
    const EXACT: &[&str] = &[
        "/", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/tmp",
    ];
    const TREES: &[&str] = &["/etc", "/dev", "/proc"];
    mountinfo
        .lines()
        .filter_map(|line| line.split_whitespace().nth(4))
        .map(unescape_mount_path)
        .filter(|point| {
            let path = Path::new(point);
            let allowed = EXACT.contains(&point.as_str())
                || TREES.iter().any(|t| path.starts_with(t))
                || allowed_trees.iter().any(|t| path.starts_with(t));
            !allowed
        })
        .collect()
}

fn mountinfo_allowed_only(ctx: &Ctx) -> Got {
    let text = match std::fs::read_to_string("/proc/self/mountinfo") {
        Ok(text) => text,
        Err(e) => return Got::NotRun(format!("cannot read /proc/self/mountinfo: {e}")),
    };
    let mut allowed = vec![ctx.workspace.clone()];
    allowed.extend(ctx.protected.iter().cloned());
    allowed.extend(ctx.allowed_mounts.iter().cloned());
    // The probe binary itself may be bound read-only into the sandbox.
    if let Ok(exe) = std::env::current_exe() {
        allowed.push(exe);
    }
    let bad = disallowed_mounts(&text, &allowed);
    if bad.is_empty() {
        Got::Holds(format!("{} mounts, all allowed", text.lines().count()))
    } else {
        Got::Violated(format!("unexpected mount points: {}", bad.join(", ")))
    }
}

fn find_sockets(dir: &Path, depth: usize, skip: &Path, found: &mut Vec<String>) {
    if depth == 0 || dir.starts_with(skip) || dir.starts_with("/proc") {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_socket() {
            found.push(entry.path().display().to_string());
        } else if kind.is_dir() {
            find_sockets(&entry.path(), depth - 1, skip, found);
        }
    }
}

fn no_host_sockets(ctx: &Ctx) -> Got {
    let mut found = Vec::new();
    for dir in SOCKET_DIRS {
        find_sockets(
            Path::new(dir),
            SOCKET_SEARCH_DEPTH,
            &ctx.workspace,
            &mut found,
        );
    }
    if found.is_empty() {
        Got::Holds("no socket files".into())
    } else {
        Got::Violated(format!("sockets: {}", found.join(", ")))
    }
}

fn no_host_home(ctx: &Ctx) -> Got {
    let mut exposed = Vec::new();
    for home in ["/home", "/root"] {
        let Ok(entries) = std::fs::read_dir(home) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            // The directories leading to a workspace below /home or /root must exist.
            if !ctx.workspace.starts_with(&path) {
                exposed.push(path.display().to_string());
            }
        }
    }
    if exposed.is_empty() {
        Got::Holds("no host home".into())
    } else {
        Got::Violated(format!("visible: {}", exposed.join(", ")))
    }
}

fn dev_minimal(_: &Ctx) -> Got {
    let entries = match std::fs::read_dir("/dev") {
        Ok(entries) => entries,
        Err(e) => return Got::NotRun(format!("cannot list /dev: {e}")),
    };
    let extra: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| !DEV_ALLOWED.contains(&name.as_str()))
        .collect();
    if extra.is_empty() {
        Got::Holds("minimal /dev".into())
    } else {
        Got::Violated(format!("unexpected devices: {}", extra.join(", ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_secret_names_and_values() {
        assert!(looks_secret("OPENAI_API_KEY", "x"));
        assert!(looks_secret("GITHUB_TOKEN", "x"));
        assert!(looks_secret("HARMLESS", "ghp_abcdef"));
        assert!(looks_secret("SSH_AUTH_SOCK", "/run/user/1000/ssh"));
        assert!(!looks_secret("PATH", "/usr/bin:/bin"));
        assert!(!looks_secret("LANG", "C.UTF-8"));
    }

    #[test]
    fn mount_points_outside_the_allowed_set_are_reported() {
        let info = "\
22 1 0:20 / / ro,nosuid - tmpfs none rw
23 22 8:1 /usr /usr ro - ext4 /dev/sda1 rw
24 22 8:1 /home/me/proj /home/me/proj rw - ext4 /dev/sda1 rw
25 22 8:1 /home/me /home/me rw - ext4 /dev/sda1 rw
26 22 0:5 / /run/user/1000 rw - tmpfs tmpfs rw
27 22 0:21 / /proc rw - proc proc rw
28 27 0:21 /sys /proc/sys ro - proc proc rw
29 22 8:1 /x /my\\040dir rw - ext4 /dev/sda1 rw
";
        let bad = disallowed_mounts(info, &[PathBuf::from("/home/me/proj")]);
        assert_eq!(bad, ["/home/me", "/run/user/1000", "/my dir"]);
    }
}
