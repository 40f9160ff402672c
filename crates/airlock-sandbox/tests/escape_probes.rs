//! The escape probes (crate `airlock-probes`) run inside the real sandbox, as the calling user
//! and as an unprivileged user. Every probe must pass — each attack failed with the errno or
//! signal it names — and nothing may reach the host: the listeners this test opens on the
//! host's loopback see no connection, and the file outside the workspace is unchanged.
//!
//! The probe binary is a separate crate, so cargo does not build it for this test. Build it
//! first, with the same target directory and profile:
//!
//! ```text
//! cargo build -p airlock-probes && cargo test -p airlock-sandbox --test escape_probes
//! ```
//!
//! When the tests run as root, the unprivileged run re-executes this test binary as the user
//! named by `AIRLOCK_TEST_UNPRIVILEGED_USER` (default `nobody`).

mod common;

use std::io::ErrorKind;
use std::net::{Ipv4Addr, TcpListener, UdpSocket};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use airlock_sandbox::SandboxProfile;
use serde_json::Value;

/// Set in the environment of the re-executed, unprivileged copy of this test binary.
const UNPRIVILEGED_MARK: &str = "AIRLOCK_ESCAPE_PROBES_UNPRIVILEGED";
/// Names the account for the unprivileged run when the tests run as root.
const UNPRIVILEGED_USER_VAR: &str = "AIRLOCK_TEST_UNPRIVILEGED_USER";
/// The test that the unprivileged copy runs.
const CALLER_TEST: &str = "escape_probes_pass_as_the_calling_user";

/// Fewer probes than this means the probe binary is not the full suite.
const MIN_PROBES: usize = 40;

/// One probe suite at a time: each ends with a fork bomb, and the machine is small.
static SUITE: Mutex<()> = Mutex::new(());

/// `target/<profile>/airlock-probes`, next to this test's `deps/` directory.
fn probe_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("path of the test binary");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test binary lives in target/<profile>/deps");
    let probe = profile_dir.join("airlock-probes");
    assert!(
        probe.is_file(),
        "error: the escape probe binary is missing at {}\n\
         help: build it first with `cargo build -p airlock-probes` \
         (same CARGO_TARGET_DIR and profile as this test)",
        probe.display()
    );
    probe
}

/// Host endpoints on 127.0.0.1 and an abstract UNIX socket, opened before the run and
/// checked after it: anything that reached them is still queued.
struct HostEndpoints {
    tcp: TcpListener,
    udp: UdpSocket,
    unix: UnixListener,
    abstract_name: String,
}

impl HostEndpoints {
    fn open() -> HostEndpoints {
        let tcp = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let udp = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let abstract_name = format!("airlock-escape-probe-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap();
        let unix = UnixListener::bind_addr(&addr).unwrap();
        tcp.set_nonblocking(true).unwrap();
        udp.set_nonblocking(true).unwrap();
        unix.set_nonblocking(true).unwrap();
        HostEndpoints {
            tcp,
            udp,
            unix,
            abstract_name,
        }
    }

    fn assert_untouched(&self) {
        let tcp = self.tcp.accept().map(|(_, peer)| peer.to_string());
        assert!(
            matches!(&tcp, Err(e) if e.kind() == ErrorKind::WouldBlock),
            "the host TCP listener was reached: {tcp:?}"
        );
        let mut buf = [0u8; 64];
        let udp = self
            .udp
            .recv_from(&mut buf)
            .map(|(n, peer)| (n, peer.to_string()));
        assert!(
            matches!(&udp, Err(e) if e.kind() == ErrorKind::WouldBlock),
            "the host UDP socket received a datagram: {udp:?}"
        );
        let unix = self.unix.accept().map(|_| ());
        assert!(
            matches!(&unix, Err(e) if e.kind() == ErrorKind::WouldBlock),
            "the host abstract socket @{} was reached: {unix:?}",
            self.abstract_name
        );
    }
}

/// Single-quote `s` for `/bin/sh`.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Give a path to the sandbox uid when the tests run as root (the sandbox then runs as it).
fn hand_to_sandbox_uid(path: &Path) {
    if common::is_root() {
        let id = common::sandbox_uid();
        std::os::unix::fs::chown(path, Some(id), Some(id)).unwrap();
    }
}

/// How the probe run's sandbox is built.
#[derive(Clone, Copy, PartialEq)]
enum Built {
    /// For the run, from nothing.
    ForTheRun,
    /// Ahead of the run ([`airlock_sandbox::Sandbox::build_pooled`], for another workspace),
    /// the run's workspace, cwd, environment attached when it is taken.
    Pooled,
}

/// Run the whole probe suite in the sandbox as the current user and check everything.
fn run_probe_suite() {
    run_probe_suite_in(Built::ForTheRun)
}

fn run_probe_suite_in(built: Built) {
    let _one_at_a_time = SUITE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let probe = probe_binary();

    // A workspace with the protected paths the default profile binds read-only.
    let (_ws_dir, ws) = common::workspace();
    let hooks = ws.join(".git/hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    std::fs::write(hooks.join("pre-commit"), "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();
    for path in [
        ws.join(".git"),
        hooks.clone(),
        hooks.join("pre-commit"),
        ws.join(".git/config"),
    ] {
        hand_to_sandbox_uid(&path);
    }

    // A host file outside the workspace that anyone may read and write, so that only the
    // sandbox stands between the probes and it.
    let outside_dir = tempfile::Builder::new()
        .prefix("airlock-outside-")
        .tempdir_in("/tmp")
        .unwrap();
    let outside = outside_dir.path().canonicalize().unwrap().join("secret");
    std::fs::write(&outside, "outside-the-sandbox\n").unwrap();
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o666)).unwrap();
    std::fs::set_permissions(outside_dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();

    let host = HostEndpoints::open();
    // A host socket in the workspace that anyone may connect to by path.
    let unix_path = ws.join("host.sock");
    let unix_by_path = UnixListener::bind(&unix_path).unwrap();
    std::fs::set_permissions(&unix_path, std::fs::Permissions::from_mode(0o777)).unwrap();
    unix_by_path.set_nonblocking(true).unwrap();
    let mut profile = SandboxProfile::new(&ws);
    profile.read_only_paths = vec![probe.clone()];
    let command = format!(
        "exec {} --json --host-tcp {} --host-udp {} --host-abstract {} --host-pid {} \
         --outside-path {} --workspace {} --protected .git/hooks --protected .git/config \
         --host-unix-path {}",
        sh_quote(&probe.display().to_string()),
        host.tcp.local_addr().unwrap().port(),
        host.udp.local_addr().unwrap().port(),
        sh_quote(&host.abstract_name),
        std::process::id(),
        sh_quote(&outside.display().to_string()),
        sh_quote(&ws.display().to_string()),
        sh_quote(&unix_path.display().to_string()),
    );
    let out = match built {
        Built::ForTheRun => common::run_in(&ws, &profile, &command),
        Built::Pooled => {
            let (_other_dir, other) = common::workspace();
            let mut base = profile.clone();
            base.workspace = other;
            let pooled = common::sandbox()
                .build_pooled(&base)
                .unwrap_or_else(|e| panic!("building the pooled sandbox: {e}"));
            pooled
                .attach(&profile, "", airlock_sandbox::OutputMode::Capture, |_| {})
                .and_then(|prepared| {
                    prepared.run(&airlock_core::testing::authorize_for_tests(
                        airlock_core::action::ExecAction {
                            command: command.clone(),
                            cwd: String::new(),
                            env: vec![],
                        },
                    ))
                })
        }
    }
    .unwrap_or_else(|e| panic!("the sandbox refused the probe run: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);

    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad probe output {l:?}: {e}")))
        .collect();
    let results: Vec<&Value> = lines.iter().filter(|v| v.get("probe").is_some()).collect();
    let failed: Vec<String> = results
        .iter()
        .filter(|r| r["pass"] != Value::Bool(true))
        .map(|r| {
            format!(
                "  {}: expected {}, got {}",
                r["probe"], r["expected"], r["got"]
            )
        })
        .collect();
    assert!(
        failed.is_empty(),
        "escape probes failed inside the sandbox (uid {}):\n{}\nstderr:\n{stderr}",
        nix::unistd::geteuid(),
        failed.join("\n")
    );
    assert!(
        results.len() >= MIN_PROBES,
        "only {} probe results (status {}); stderr:\n{stderr}",
        results.len(),
        out.status
    );
    let summary = &lines.last().expect("a summary line")["summary"];
    eprintln!("escape probes as uid {}: {summary}", nix::unistd::geteuid());
    assert_eq!(summary["total"], results.len(), "summary: {summary}");
    assert_eq!(summary["failed"], 0, "summary: {summary}");
    assert_eq!(out.status, 0, "probe exit status; stderr:\n{stderr}");
    assert!(!out.timed_out && !out.truncated);

    // Nothing reached the host.
    host.assert_untouched();
    let by_path = unix_by_path.accept().map(|_| ());
    assert!(
        matches!(&by_path, Err(e) if e.kind() == ErrorKind::WouldBlock),
        "the host socket {} was reached: {by_path:?}",
        unix_path.display()
    );
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        "outside-the-sandbox\n"
    );
    let outside_entries: Vec<_> = std::fs::read_dir(outside_dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        outside_entries,
        ["secret"],
        "files appeared next to the outside file"
    );
    assert_eq!(
        std::fs::read_to_string(hooks.join("pre-commit")).unwrap(),
        "#!/bin/sh\nexit 0\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join(".git/config")).unwrap(),
        "[core]\n"
    );
    let hook_entries: Vec<_> = std::fs::read_dir(&hooks)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(hook_entries, ["pre-commit"], "a hook was planted");
}

#[test]
fn escape_probes_pass_as_the_calling_user() {
    run_probe_suite();
}

/// I2 through a pool: a sandbox built before the run's workspace was known, given it
/// when taken, stops every probe the same way.
#[test]
fn i2_escape_probes_pass_through_a_pooled_sandbox() {
    run_probe_suite_in(Built::Pooled);
}

#[test]
fn escape_probes_pass_as_an_unprivileged_user() {
    if !common::is_root() {
        // Already unprivileged (a CI user, or the re-executed copy below).
        run_probe_suite();
        return;
    }
    assert!(
        std::env::var_os(UNPRIVILEGED_MARK).is_none(),
        "the unprivileged copy of this test is still root"
    );
    let name = std::env::var(UNPRIVILEGED_USER_VAR).unwrap_or_else(|_| "nobody".into());
    let user = nix::unistd::User::from_name(&name)
        .ok()
        .flatten()
        .unwrap_or_else(|| {
            panic!(
                "error: no account named `{name}` for the unprivileged run\n\
                 help: create one or set {UNPRIVILEGED_USER_VAR} to an existing unprivileged user"
            )
        });
    assert_ne!(user.uid.as_raw(), 0, "{name} is root");
    let output = Command::new(std::env::current_exe().unwrap())
        .args([CALLER_TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(UNPRIVILEGED_MARK, "1")
        .env("HOME", "/tmp")
        .current_dir("/")
        .uid(user.uid.as_raw())
        .gid(user.gid.as_raw())
        .output()
        .unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "the probe suite failed as {name} (uid {}):\n{report}",
        user.uid
    );
    // The copy really ran the suite as that user (a filter matching nothing would also
    // succeed).
    let ran_as = format!("escape probes as uid {}:", user.uid);
    let line = report.lines().find(|l| l.starts_with(&ran_as));
    assert!(
        line.is_some(),
        "the unprivileged run did not run {CALLER_TEST}:\n{report}"
    );
    eprintln!("{}", line.unwrap_or_default());
}
