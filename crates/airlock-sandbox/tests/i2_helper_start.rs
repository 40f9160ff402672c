//! I2 at the start of a run. The host starts the helper with posix_spawn, which cannot
//! switch users: the helper switches itself to the ids the host passes and refuses, before
//! it reads any request, to go on as root. A helper that cannot be executed is a clear
//! error, and a finished run leaves no helper process behind.

mod common;

use std::io::{BufReader, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use airlock_core::action::ExecAction;
use airlock_core::testing::authorize_for_tests;
use airlock_sandbox::protocol::{self, StageMessage, CONTROL_FD, HANDSHAKE_FD};
use airlock_sandbox::{OutputMode, Sandbox, SandboxError, SandboxProfile};

/// What a directly started helper did: its exit code, its stderr, and what it sent on
/// the control channel.
struct Refused {
    code: Option<i32>,
    stderr: String,
    control: Option<StageMessage>,
}

/// Start the helper binary with `args`, sockets on fds 3 and 4 whose peers stay open and
/// receive nothing: a helper that went on to read its request would block forever, so an
/// exit within the deadline means it stopped before reading. `as_user` starts it as that
/// uid and gid instead of as this process.
fn start_helper(args: &[&str], as_user: Option<u32>) -> Refused {
    start_helper_at(
        Path::new(env!("CARGO_BIN_EXE_airlock-sandbox-init")),
        args,
        as_user,
    )
}

fn start_helper_at(program: &Path, args: &[&str], as_user: Option<u32>) -> Refused {
    let (control, control_child) = UnixStream::pair().unwrap();
    let (_handshake, handshake_child) = UnixStream::pair().unwrap();
    let (c, h) = (control_child.as_raw_fd(), handshake_child.as_raw_fd());
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(id) = as_user {
        cmd.uid(id).gid(id);
    }
    // SAFETY: the closure only calls fcntl and dup2, which are async-signal-safe, and
    // allocates nothing. Both ends are first copied above every target: a source that
    // already had a target's number would otherwise keep close-on-exec (dup2 onto itself
    // does nothing) or be overwritten by the other placement.
    unsafe {
        cmd.pre_exec(move || {
            let (c, h) = (
                libc::fcntl(c, libc::F_DUPFD, 100),
                libc::fcntl(h, libc::F_DUPFD, 100),
            );
            if c < 0 || h < 0 || libc::dup2(c, CONTROL_FD) < 0 || libc::dup2(h, HANDSHAKE_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    drop((control_child, handshake_child));
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the helper did not exit: it went on (to read its request)");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    control
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let message = protocol::recv::<StageMessage>(&mut BufReader::new(control)).unwrap_or(None);
    Refused {
        code: status.code(),
        stderr,
        control: message,
    }
}

fn assert_refused(r: &Refused, expected: &str) {
    assert_eq!(r.code, Some(125), "{}", r.stderr);
    assert!(
        r.stderr.contains("refusing to start") && r.stderr.contains(expected),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("help: "), "{}", r.stderr);
    match &r.control {
        Some(StageMessage::Failed { stage, message }) => {
            assert_eq!(stage, "identity");
            assert!(message.contains(expected), "{message}");
        }
        other => panic!("expected a failure on the control channel, got {other:?}"),
    }
}

#[test]
fn helper_started_as_root_without_ids_refuses_before_reading_the_request() {
    if !common::is_root() {
        eprintln!("skipped: needs root to start the helper as root");
        return;
    }
    let r = start_helper(&[], None);
    assert_refused(&r, "started as root without --uid and --gid");
}

#[test]
fn helper_asked_for_uid_or_gid_0_refuses_before_reading_the_request() {
    // Refused whoever starts it: the ids themselves are not allowed.
    for args in [
        ["--uid", "0", "--gid", "65534"],
        ["--uid", "65534", "--gid", "0"],
    ] {
        let r = start_helper(&args, None);
        assert_refused(&r, "the sandbox never runs as root");
    }
}

#[test]
fn helper_not_root_refuses_ids_other_than_its_own() {
    let (me, other) = if common::is_root() {
        (Some(4242), "4243")
    } else {
        (None, "4243")
    };
    let own = me.unwrap_or_else(|| nix::unistd::geteuid().as_raw());
    let other = if own.to_string() == other {
        "4244"
    } else {
        other
    };
    let r = start_helper(&["--uid", other, "--gid", other], me);
    assert_refused(&r, "without the privilege to switch");
}

/// A set-user-ID root copy of the helper would let any user pick any uid with `--uid`:
/// it refuses to start instead.
#[test]
fn a_set_user_id_root_helper_refuses() {
    if !common::is_root() {
        eprintln!("skipped: needs root to make a set-user-ID root copy");
        return;
    }
    let dir = tempfile::tempdir_in("/tmp").unwrap();
    let nosuid = nix::sys::statvfs::statvfs(dir.path())
        .unwrap()
        .flags()
        .contains(nix::sys::statvfs::FsFlags::ST_NOSUID);
    if nosuid {
        eprintln!("skipped: /tmp is mounted nosuid");
        return;
    }
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let copy = dir.path().join("airlock-sandbox-init");
    std::fs::copy(env!("CARGO_BIN_EXE_airlock-sandbox-init"), &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o4755)).unwrap();
    // The ids are the caller's own: without the check it would go on (and block reading).
    let r = start_helper_at(&copy, &["--uid", "4242", "--gid", "4242"], Some(4242));
    assert_refused(&r, "must not be set-user-ID root");
}

#[test]
fn helper_rejects_unknown_arguments() {
    let r = start_helper(&["--uid", "65534", "--gid", "65534", "--keep-root"], None);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("unexpected argument"), "{}", r.stderr);
}

/// The helper the host starts (stage 0, in the host's namespaces) runs as the sandbox's
/// uid and gid in every slot, with no supplementary group, while the sandbox waits for its
/// command. (Its capabilities are those of the user namespace it created by then, which
/// hold nothing on the host; the payload's are in the attestation.)
#[test]
fn a_root_callers_helper_holds_nothing_of_root() {
    let (_d, ws) = common::workspace();
    let pid = std::sync::Arc::new(std::sync::Mutex::new(None));
    let seen = pid.clone();
    let sandbox = common::sandbox().on_spawn(move |p| *seen.lock().unwrap() = Some(p));
    let prepared = sandbox
        .prepare(&SandboxProfile::new(&ws), "", OutputMode::Capture)
        .unwrap();
    let pid = pid.lock().unwrap().expect("the spawn hook ran");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .unwrap_or_else(|| panic!("no {name} in {status}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    let uid = common::sandbox_uid().to_string();
    let four = [uid.as_str(); 4].join(" ");
    assert_eq!(field("Uid"), four, "{status}");
    if common::is_root() {
        assert_eq!(field("Gid"), four, "{status}");
        assert_eq!(field("Groups"), "", "{status}");
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let argv: &[&str] = if common::is_root() {
        &["airlock-sandbox-init", "--uid", "65534", "--gid", "65534"]
    } else {
        &["airlock-sandbox-init"]
    };
    let expected: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    assert_eq!(cmdline, expected);
    // Not dumpable: its /proc entries belong to root, so no host process of the sandbox's
    // uid can ptrace it or take the control channel from it.
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::metadata(format!("/proc/{pid}/fd")).unwrap().uid();
    assert_eq!(owner, 0, "/proc/{pid}/fd belongs to uid {owner}");
    drop(prepared);
}

/// A root host starts the helper as root (it switches itself), so it runs only a helper
/// file that root owns and no one else can write.
#[test]
fn a_root_host_refuses_a_helper_someone_else_could_have_written() {
    if !common::is_root() {
        return;
    }
    use std::os::unix::fs::chown;
    let (_d, ws) = common::workspace();
    let dir = tempfile::tempdir().unwrap();
    let helper = dir.path().join("airlock-sandbox-init");
    std::fs::copy(env!("CARGO_BIN_EXE_airlock-sandbox-init"), &helper).unwrap();
    let prepare = |helper: &Path| {
        Sandbox::with_init(helper.to_path_buf()).unwrap().prepare(
            &SandboxProfile::new(&ws),
            "",
            OutputMode::Capture,
        )
    };
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).unwrap();
    drop(prepare(&helper).expect("a root-owned 0755 helper runs"));
    for (owner, mode) in [(65534, 0o755), (0, 0o775), (0, 0o757), (0, 0o4755)] {
        chown(&helper, Some(owner), Some(0)).unwrap();
        std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(mode)).unwrap();
        match prepare(&helper) {
            Err(SandboxError::Helper { message, help }) => {
                assert!(message.contains("no one else can write"), "{message}");
                assert!(help.contains("chown root:root"), "{help}");
            }
            other => panic!("owner {owner} mode {mode:o}: expected a refusal, got {other:?}"),
        }
    }
}

/// An ignored signal stays ignored across fork and exec. glibc's `posix_spawn` leaves its
/// internal signals 32 and 33 ignored in the helper, and the Rust runtime ignores SIGPIPE
/// in it: the payload must start with none of them ignored (a program writing into a
/// closed pipe dies of SIGPIPE, as `yes | head -1` expects) and nothing blocked.
#[test]
fn the_payload_starts_with_no_signal_ignored_or_blocked() {
    let (_d, ws) = common::workspace();
    let out = common::run(&ws, "grep ^Sig /proc/self/status");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status,
        0,
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mask = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    };
    assert_eq!(mask("SigBlk:"), 0, "{text}");
    assert_eq!(mask("SigIgn:"), 0, "{text}");

    // The same through a shell pipeline: `yes` dies of SIGPIPE instead of reporting EPIPE.
    let out = common::run(&ws, "yes | head -n 1");
    assert_eq!(out.status, 0);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "y\n");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("Broken pipe"), "{err}");
}

/// posix_spawn reports a failed execve as its result: a helper that is not executable is
/// the same clear error it was when the launcher forked.
#[test]
fn a_helper_that_cannot_be_executed_is_a_clear_error() {
    let (_d, ws) = common::workspace();
    let dir = tempfile::tempdir().unwrap();
    let helper = dir.path().join("airlock-sandbox-init");
    std::fs::copy(env!("CARGO_BIN_EXE_airlock-sandbox-init"), &helper).unwrap();
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = Sandbox::with_init(helper.clone())
        .unwrap()
        .prepare(&SandboxProfile::new(&ws), "", OutputMode::Capture)
        .unwrap_err();
    match err {
        SandboxError::Helper { message, help } => {
            assert!(
                message.starts_with(&helper.display().to_string())
                    && message.contains("Permission denied"),
                "{message}"
            );
            assert!(help.contains("executable"), "{help}");
        }
        other => panic!("expected a helper error, got {other:?}"),
    }
}

/// Once a run returned, its helper is reaped: not running, not a zombie.
#[test]
fn a_finished_run_leaves_no_helper_behind() {
    let (_d, ws) = common::workspace();
    let pid = std::sync::Arc::new(std::sync::Mutex::new(None));
    let seen = pid.clone();
    let sandbox = common::sandbox().on_spawn(move |p| *seen.lock().unwrap() = Some(p));
    let auth = authorize_for_tests(ExecAction {
        command: "kill -9 $$".into(),
        cwd: String::new(),
        env: vec![],
    });
    let out = sandbox
        .run(&auth, &SandboxProfile::new(&ws), OutputMode::Capture)
        .unwrap();
    assert_eq!(out.status, 128 + 9);
    let pid = pid.lock().unwrap().expect("the spawn hook ran");
    assert!(common::gone_soon(pid), "helper {pid} is still there");
}

/// A pinned sandbox hashes the descriptor it is about to execute: a helper whose bytes
/// differ from the pin by one byte is refused before it starts, whoever owns it.
#[test]
fn i2_a_pinned_sandbox_refuses_a_helper_whose_bytes_differ() {
    let (_d, ws) = common::workspace();
    let dir = tempfile::tempdir().unwrap();
    let helper = dir.path().join("airlock-sandbox-init");
    std::fs::copy(env!("CARGO_BIN_EXE_airlock-sandbox-init"), &helper).unwrap();
    std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let pin = airlock_sandbox::helper_sha256(&std::fs::File::open(&helper).unwrap()).unwrap();
    let prepare = || {
        Sandbox::with_init(helper.clone())
            .unwrap()
            .pinned(pin.clone())
            .prepare(&SandboxProfile::new(&ws), "", OutputMode::Capture)
    };
    drop(prepare().expect("the pinned helper runs"));
    let mut bytes = std::fs::read(&helper).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::write(&helper, bytes).unwrap();
    match prepare() {
        Err(SandboxError::Helper { message, help }) => {
            assert!(
                message.contains("not the pinned") && message.contains(&pin),
                "{message}"
            );
            assert!(help.contains("airlock sandbox pin-helper"), "{help}");
        }
        other => panic!("expected a helper error, got {other:?}"),
    }
}
