//! What a sandboxed command writes must never run on the host: no set-id file is left in
//! the workspace, git's config and hooks cannot be written or redirected, and no host UNIX
//! socket can be reached. Each attack runs in the real sandbox, from a root host (the
//! sandbox runs as 65534) and from an unprivileged caller (the sandbox runs as that uid,
//! through the `sandbox-run` example).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::common;

/// The uid of the unprivileged caller when the tests run as root.
const UNPRIVILEGED: u32 = 4243;

/// One run of a command: who ran it and what it printed.
struct Ran {
    who: String,
    stdout: String,
    stderr: String,
}

/// `target/<profile>/examples/sandbox-run`.
fn runner() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples/sandbox-run")
}

fn chown_tree(path: &Path, uid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid)).unwrap();
    if path.is_dir() && !path.is_symlink() {
        for entry in std::fs::read_dir(path).unwrap() {
            chown_tree(&entry.unwrap().path(), uid);
        }
    }
}

/// Run `command` in `ws` as this process's caller, and (when the tests run as root) again
/// from an unprivileged caller in a second workspace prepared by `setup`.
fn run_both_ways(setup: impl Fn(&Path), command: &str) -> Vec<(Ran, tempfile::TempDir, PathBuf)> {
    let mut runs = Vec::new();
    let (dir, ws) = common::workspace();
    setup(&ws);
    if common::is_root() {
        chown_tree(&ws, common::sandbox_uid());
    }
    let out = common::run(&ws, command);
    runs.push((
        Ran {
            who: format!("caller uid {}", nix::unistd::geteuid()),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        },
        dir,
        ws,
    ));
    if common::is_root() {
        let (dir, ws) = common::workspace();
        setup(&ws);
        chown_tree(&ws, UNPRIVILEGED);
        let out = Command::new(runner())
            .arg("--init")
            .arg(env!("CARGO_BIN_EXE_airlock-sandbox-init"))
            .arg("--capture")
            .arg(&ws)
            .arg("--")
            .arg(command)
            .current_dir("/")
            .uid(UNPRIVILEGED)
            .gid(UNPRIVILEGED)
            .output()
            .unwrap();
        runs.push((
            Ran {
                who: format!("unprivileged caller uid {UNPRIVILEGED}"),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            },
            dir,
            ws,
        ));
    }
    runs
}

/// Every file and directory below `dir` with a set-user-ID or set-group-ID bit.
fn set_id_files(dir: &Path) -> Vec<(PathBuf, u32)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.mode() & 0o6000 != 0 {
            found.push((path.clone(), meta.mode() & 0o7777));
        }
        if meta.is_dir() {
            found.extend(set_id_files(&path));
        }
    }
    found
}

#[test]
fn i2_no_set_id_file_is_left_in_the_workspace() {
    let command = "cp /usr/bin/id x && chmod 4755 x; echo chmod=$?; \
         chmod g+s x; echo chmod_g=$?; \
         install -m 4755 /usr/bin/id y; echo install=$?; \
         mkdir d && chmod g+s d; echo dir=$?; \
         python3 -c 'import os; os.open(\"z\", os.O_CREAT | os.O_WRONLY, 0o4755)'; echo py=$?; \
         python3 -c 'import os; os.mkdir(\"e\", 0o2755)'; echo pydir=$?; \
         perl -e 'sysopen(F, \"w\", 0101, 04755) or die \"$!\\n\"'; echo perl=$?";
    for (ran, _dir, ws) in run_both_ways(|_| {}, command) {
        let Ran {
            who,
            stdout,
            stderr,
            ..
        } = &ran;
        for step in ["chmod", "chmod_g", "install", "dir", "py", "pydir", "perl"] {
            assert!(
                !stdout.contains(&format!("{step}=0")),
                "{who}: {step} succeeded\n{stdout}\n{stderr}"
            );
        }
        assert!(
            stderr.contains("Operation not permitted"),
            "{who}: not refused by the filter\n{stderr}"
        );
        assert!(ws.join("x").is_file(), "{who}: the copy itself is allowed");
        assert_eq!(set_id_files(&ws), vec![], "{who}: set-id files were left");
    }
}

#[test]
fn i2_git_config_and_hooks_can_be_neither_written_nor_redirected() {
    let setup = |ws: &Path| {
        let git = |args: &[&str]| {
            let out = Command::new("git")
                .args(["-c", "safe.directory=*"])
                .args(args)
                .current_dir(ws)
                .output()
                .unwrap();
            assert!(out.status.success(), "git {args:?}: {out:?}");
        };
        git(&["init", "-q"]);
        git(&[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "first",
        ]);
        std::fs::create_dir_all(ws.join(".git/modules/sub/hooks")).unwrap();
        std::fs::write(ws.join(".git/modules/sub/config"), "[core]\n").unwrap();
    };
    // The ordinary work git does in a sandbox, then each attack, printing its status.
    let command = "echo tracked > file && git add file && git -c user.name=t -c user.email=t@t commit -qm second; echo commit=$?; \
         mkdir -p evil && printf '[core]\\n\\tfsmonitor = touch PWNED\\n' > evil/config; \
         echo ../evil > .git/commondir; echo commondir=$?; \
         printf '[core]\\n\\tfsmonitor = touch PWNED\\n' > .git/config.worktree; echo worktree=$?; \
         echo '[core] fsmonitor = x' >> .git/config; echo config=$?; \
         echo evil > .git/hooks/post-checkout; echo hook=$?; \
         echo '* filter=x' > .git/info/attributes; echo info=$?; \
         echo '[core] fsmonitor = x' >> .git/modules/sub/config; echo module=$?; \
         echo x > .git/modules/sub/hooks/pre-commit; echo module_hook=$?; \
         mkdir .git/worktrees; echo worktrees=$?";
    for (ran, _dir, ws) in run_both_ways(setup, command) {
        let Ran {
            who,
            stdout,
            stderr,
            ..
        } = &ran;
        for step in ["config", "hook", "info", "module", "module_hook"] {
            assert!(
                stdout.contains(&format!("{step}=")),
                "{who}: {stdout}\n{stderr}"
            );
            assert!(
                !stdout.contains(&format!("{step}=0")),
                "{who}: {step} was written\n{stdout}\n{stderr}"
            );
        }
        // The ordinary work still works.
        assert!(
            stdout.contains("commit=0"),
            "{who}: commit failed\n{stdout}\n{stderr}"
        );
        // What did not exist could be created, and is gone once the run is over.
        assert!(!ws.join(".git/commondir").exists(), "{who}: commondir left");
        assert!(
            !ws.join(".git/config.worktree").exists(),
            "{who}: config.worktree left"
        );
        assert!(
            stderr.contains(".git/commondir, which the command created"),
            "{who}: {stderr}"
        );
        // The host's git takes nothing from the sandbox's files.
        let status = Command::new("git")
            .args(["-c", "safe.directory=*", "status", "--porcelain"])
            .current_dir(&ws)
            .output()
            .unwrap();
        assert!(status.status.success(), "{who}: {status:?}");
        assert!(
            !ws.join("PWNED").exists(),
            "{who}: the host's git ran the sandbox's command"
        );
        let log = Command::new("git")
            .args(["-c", "safe.directory=*", "log", "--format=%s"])
            .current_dir(&ws)
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&log.stdout),
            "second\nfirst\n",
            "{who}"
        );
    }
}

#[test]
fn i2_host_unix_sockets_are_unreachable_by_path() {
    use std::os::unix::net::UnixListener;
    let (_d, ws) = common::workspace();
    // A socket anyone may connect to, listening before the run.
    let early = UnixListener::bind(ws.join("early.sock")).unwrap();
    std::fs::set_permissions(
        ws.join("early.sock"),
        std::fs::Permissions::from_mode(0o777),
    )
    .unwrap();
    early.set_nonblocking(true).unwrap();
    // A host process starts listening while the command runs.
    let late_path = ws.join("late.sock");
    let ready = ws.join("ready");
    let late = std::thread::spawn({
        let (late_path, ready) = (late_path.clone(), ready.clone());
        move || {
            for _ in 0..200 {
                if ready.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            let l = UnixListener::bind(&late_path).unwrap();
            std::fs::set_permissions(&late_path, std::fs::Permissions::from_mode(0o777)).unwrap();
            l.set_nonblocking(true).unwrap();
            l
        }
    });
    let script = r#"import os, socket, time
open('ready', 'w').close()
for _ in range(200):
    if os.path.exists('late.sock'):
        break
    time.sleep(0.05)
for name in ['early.sock', 'late.sock']:
    for kind in [socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_SEQPACKET]:
        try:
            s = socket.socket(socket.AF_UNIX, kind)
            s.connect(name)
            print(name, kind, 'connected')
        except OSError as e:
            print(name, kind, 'errno', e.errno)
try:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.connect('late.sock')
    print('pair connected')
except OSError as e:
    print('pair errno', e.errno)
a, b = socket.socketpair()
a.send(b'x')
print('stream pair', b.recv(1))
"#;
    std::fs::write(ws.join("probe.py"), script).unwrap();
    if common::is_root() {
        std::os::unix::fs::chown(ws.join("probe.py"), Some(65534), Some(65534)).unwrap();
    }
    let out = common::run(&ws, "python3 probe.py");
    let late = late.join().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stdout.contains("connected"), "{stdout}\n{stderr}");
    let refused = format!("errno {}", libc::EAFNOSUPPORT);
    assert_eq!(
        stdout.lines().filter(|l| l.ends_with(&refused)).count(),
        7,
        "every UNIX socket must be refused with EAFNOSUPPORT\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains(&format!("pair {refused}")), "{stdout}");
    assert!(
        stdout.contains("stream pair b'x'"),
        "stream pairs still work\n{stdout}\n{stderr}"
    );
    for l in [&early, &late] {
        let got = l.accept().map(|_| ());
        assert!(
            matches!(&got, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "a host socket was reached: {got:?}"
        );
    }
}
