//! I2, one layer at a time: the test-only helper `airlock-sandbox-init-weakened`
//! (crate `airlock-sandbox-weakened`) leaves exactly one confinement layer out, and the
//! real launcher must refuse the run, naming that layer. Where the run gets as far as the
//! attestation, the weakened helper also runs escape probes in the confined payload right
//! before it attests (as the command would run if the host did not compare), and each
//! escape must still be blocked by the next layer, with that layer's errno.
//!
//! The weakened helper is another package's binary, so cargo does not build it for this
//! test; build it first with the same target directory and profile:
//!
//! ```text
//! cargo build -p airlock-sandbox-weakened -p airlock-probes
//! ```

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, TcpListener, UdpSocket};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::path::{Path, PathBuf};

use airlock_core::action::ExecAction;
use airlock_core::testing::authorize_for_tests;
use airlock_sandbox::{OutputMode, Sandbox, SandboxError, SandboxProfile};

use crate::common;

/// The file next to the weakened helper that names the layer it leaves out.
const CONFIG_SUFFIX: &str = ".weakened.json";
/// A string only the weakened helper's code holds (its refusal without a configuration).
const WEAKENED_MARKER: &str = "this is the test-only weakened helper";

/// `target/<profile>/<name>`, next to this test's `deps/` directory.
fn sibling_binary(name: &str, package: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("path of the test binary");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test binary lives in target/<profile>/deps");
    let path = dir.join(name);
    assert!(
        path.is_file(),
        "error: {name} is missing at {}\nhelp: build it first with `cargo build -p {package}` \
         (same CARGO_TARGET_DIR and profile as this test)",
        path.display()
    );
    path
}

fn weakened_binary() -> PathBuf {
    sibling_binary("airlock-sandbox-init-weakened", "airlock-sandbox-weakened")
}

/// A private copy of `binary` (a hard link when possible) with its `.weakened.json`.
struct HelperCopy {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl HelperCopy {
    fn new(binary: &Path, config: Option<&serde_json::Value>) -> HelperCopy {
        // In the target directory, so that a hard link works and nothing else can write it.
        let dir = tempfile::Builder::new()
            .prefix("weakened-helper-")
            .tempdir_in(binary.parent().unwrap())
            .unwrap();
        let path = dir.path().join("airlock-sandbox-init");
        if std::fs::hard_link(binary, &path).is_err() {
            std::fs::copy(binary, &path).unwrap();
        }
        if let Some(config) = config {
            let mut name = path.clone().into_os_string();
            name.push(CONFIG_SUFFIX);
            std::fs::write(name, config.to_string()).unwrap();
        }
        HelperCopy { _dir: dir, path }
    }

    fn sandbox(&self) -> Sandbox {
        Sandbox::with_init(self.path.clone()).unwrap()
    }
}

/// Host endpoints the probes try to reach.
struct Endpoints {
    tcp: TcpListener,
    udp: UdpSocket,
    _abstract: UnixListener,
    abstract_name: String,
}

impl Endpoints {
    fn open(tag: &str) -> Endpoints {
        let abstract_name = format!("airlock-forced-{tag}-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap();
        Endpoints {
            tcp: TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap(),
            udp: UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap(),
            _abstract: UnixListener::bind_addr(&addr).unwrap(),
            abstract_name,
        }
    }
}

/// How the launcher must refuse the run.
enum Refusal {
    /// An attestation shortfall: exactly these features.
    Shortfall(&'static [&'static str]),
    /// The helper could not build the sandbox at `stage`; the kernel's answer names
    /// `errno`.
    Setup {
        stage: &'static str,
        errno: &'static str,
    },
}

/// One forced shortfall: the layer left out, the refusal, and the probes (name, what the
/// probe must get) that the next layer still blocks.
struct Case {
    layer: &'static str,
    refusal: Refusal,
    probes: &'static [(&'static str, &'static str)],
}

/// Run `touch payload-ran` with the helper that leaves `case.layer` out; check the
/// refusal and that nothing ran, then what each probe got.
fn check(case: &Case) {
    let (_ws_dir, ws) = common::workspace();
    let hooks = ws.join(".git/hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();
    for p in [ws.join(".git"), hooks.clone(), ws.join(".git/config")] {
        if common::is_root() {
            std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
        }
    }
    let endpoints = Endpoints::open(case.layer);
    // A host socket in the workspace that anyone may connect to by path.
    let host_socket = ws.join("host.sock");
    let _listener = UnixListener::bind(&host_socket).unwrap();
    std::fs::set_permissions(&host_socket, std::fs::Permissions::from_mode(0o777)).unwrap();
    let probe =
        (!case.probes.is_empty()).then(|| sibling_binary("airlock-probes", "airlock-probes"));
    let report = ws.join("probes.jsonl");
    let mut config = serde_json::json!({ "skip": case.layer });
    if let Some(probe) = &probe {
        let names: Vec<&str> = case.probes.iter().map(|(n, _)| *n).collect();
        let argv: Vec<String> = [
            probe.display().to_string(),
            "--json".into(),
            "--only".into(),
            names.join(","),
            "--workspace".into(),
            ws.display().to_string(),
            "--protected".into(),
            ".git/hooks".into(),
            "--protected".into(),
            ".git/config".into(),
            "--host-tcp".into(),
            endpoints.tcp.local_addr().unwrap().port().to_string(),
            "--host-udp".into(),
            endpoints.udp.local_addr().unwrap().port().to_string(),
            "--host-abstract".into(),
            endpoints.abstract_name.clone(),
            "--host-pid".into(),
            std::process::id().to_string(),
            "--host-unix-path".into(),
            host_socket.display().to_string(),
        ]
        .into();
        config["probe"] = serde_json::json!(argv);
        config["report"] = serde_json::json!(report);
    }
    let helper = HelperCopy::new(&weakened_binary(), Some(&config));
    let mut profile = SandboxProfile::new(&ws);
    profile.read_only_paths = probe.iter().cloned().collect();
    let auth = authorize_for_tests(ExecAction {
        command: "touch payload-ran".into(),
        cwd: String::new(),
        env: vec![],
    });
    let result = helper.sandbox().run(&auth, &profile, OutputMode::Capture);
    let layer = case.layer;
    match (&case.refusal, &result) {
        (Refusal::Shortfall(expected), Err(SandboxError::Shortfall(items))) => {
            let mut got: Vec<&str> = items.iter().map(|s| s.feature.as_str()).collect();
            got.dedup();
            assert_eq!(
                got, *expected,
                "without {layer}: the shortfalls are {items:#?}"
            );
            assert!(items.iter().all(|s| !s.help.is_empty()), "{items:#?}");
        }
        (
            Refusal::Setup { stage, errno },
            Err(SandboxError::Setup {
                stage: s, message, ..
            }),
        ) => {
            assert_eq!(s, stage, "without {layer}: {message}");
            assert!(
                message.contains(errno),
                "without {layer}: {s}: {message} does not name {errno}"
            );
        }
        (_, Err(e)) => panic!("without {layer}: the run was refused for another reason: {e}"),
        (_, Ok(out)) => panic!(
            "without {layer}: the run was NOT refused (status {}, stderr {})",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
    }
    assert!(
        !ws.join("payload-ran").exists(),
        "without {layer}: the payload ran"
    );
    if case.probes.is_empty() {
        return;
    }
    let text = std::fs::read_to_string(&report)
        .unwrap_or_else(|e| panic!("without {layer}: no probe report {}: {e}", report.display()));
    let got: BTreeMap<String, String> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| {
            Some((
                v["probe"].as_str()?.to_string(),
                v["got"].as_str()?.to_string(),
            ))
        })
        .collect();
    let wrong: Vec<String> = case
        .probes
        .iter()
        .filter(|(name, want)| got.get(*name).is_none_or(|g| !g.starts_with(want)))
        .map(|(name, want)| format!("  {name}: expected {want}, got {:?}", got.get(*name)))
        .collect();
    assert!(
        wrong.is_empty(),
        "without {layer}, the next layer did not answer as expected:\n{}\nfull report:\n{text}",
        wrong.join("\n")
    );
}

// Namespaces. Without the user namespace nothing else can be unshared; without the mount
// or pid namespace the root (or its /proc) cannot be mounted: the kernel refuses, because
// the sandbox's user namespace owns none of the host's namespaces. The others reach the
// attestation.

#[test]
fn i2_without_the_user_namespace_no_other_namespace_can_be_made() {
    check(&Case {
        layer: "user_namespace",
        refusal: Refusal::Setup {
            stage: "namespaces",
            errno: "EPERM",
        },
        probes: &[],
    });
}

#[test]
fn i2_without_the_mount_namespace_the_host_mounts_cannot_be_touched() {
    check(&Case {
        layer: "mount_namespace",
        refusal: Refusal::Setup {
            stage: "mount make-rprivate",
            errno: "EPERM",
        },
        probes: &[],
    });
}

#[test]
fn i2_without_the_pid_namespace_no_proc_can_be_mounted() {
    check(&Case {
        layer: "pid_namespace",
        refusal: Refusal::Setup {
            stage: "mount proc",
            errno: "EPERM",
        },
        probes: &[],
    });
}

#[test]
fn i2_without_the_net_namespace_the_run_is_refused_and_landlock_blocks_tcp() {
    check(&Case {
        layer: "net_namespace",
        refusal: Refusal::Shortfall(&["net namespace"]),
        probes: &[
            // Landlock's TCP rules (ABI 4 and later): no port is allowed.
            ("tcp_host_loopback", "EACCES"),
            // seccomp refuses AF_UNIX sockets.
            ("abstract_unix_host", "EAFNOSUPPORT"),
        ],
    });
}

#[test]
fn i2_without_the_ipc_namespace_the_run_is_refused() {
    check(&Case {
        layer: "ipc_namespace",
        refusal: Refusal::Shortfall(&["ipc namespace"]),
        probes: &[],
    });
}

#[test]
fn i2_without_the_uts_namespace_the_run_is_refused_and_the_host_name_cannot_be_set() {
    check(&Case {
        layer: "uts_namespace",
        refusal: Refusal::Shortfall(&["uts namespace"]),
        // seccomp does not filter these: the missing CAP_SYS_ADMIN over the host's UTS
        // namespace answers.
        probes: &[("sethostname", "EPERM"), ("setdomainname", "EPERM")],
    });
}

#[test]
fn i2_without_the_cgroup_namespace_the_run_is_refused() {
    check(&Case {
        layer: "cgroup_namespace",
        refusal: Refusal::Shortfall(&["cgroup namespace"]),
        probes: &[],
    });
}

#[test]
fn i2_without_landlock_the_run_is_refused_and_the_read_only_root_blocks_writes() {
    check(&Case {
        layer: "landlock",
        // The ABI check and the kernel's own answer to kill(1, 0) from the payload.
        refusal: Refusal::Shortfall(&["landlock", "landlock scoping"]),
        probes: &[
            ("usr_create", "EROFS"),
            ("root_create", "EROFS"),
            ("protected_create", "EROFS"),
            // The /etc copies have no write bit: the file's mode answers first.
            ("etc_write_existing", "EACCES"),
            ("abstract_unix_host", "EAFNOSUPPORT"),
            // No signal scoping, but host processes are outside the pid namespace.
            ("kill_host_pid", "ESRCH"),
        ],
    });
}

#[test]
fn i2_without_seccomp_the_run_is_refused_and_the_other_layers_still_block() {
    check(&Case {
        layer: "seccomp",
        refusal: Refusal::Shortfall(&["seccomp"]),
        probes: &[
            // Abstract socket names belong to a network namespace: the host's name does
            // not exist in the sandbox's.
            ("abstract_unix_host", "ECONNREFUSED"),
            ("usr_create", "EROFS"),
            // No capability (and none over the host's namespaces): the kernel's permission
            // checks answer with the same errno seccomp would.
            ("mknod_char_device", "EPERM"),
            ("raw_socket", "EPERM"),
            ("mount_tmpfs", "EPERM"),
            ("remount_usr_rw", "EPERM"),
            ("pivot_root", "EPERM"),
            ("unshare_net", "EPERM"),
            ("setns_mount", "EPERM"),
            ("ptrace_attach_pid1", "EPERM"),
            ("open_by_handle_at", "EPERM"),
            // CLOCK_MONOTONIC cannot be set at all.
            ("clock_settime", "EINVAL"),
        ],
    });
}

#[test]
fn i2_without_the_capability_drop_the_run_is_refused_and_execve_clears_them() {
    check(&Case {
        layer: "capabilities",
        refusal: Refusal::Shortfall(&["capabilities"]),
        probes: &[
            // The uid inside is not 0, so execve leaves the command no effective or
            // permitted capability; the bounding set stays full.
            ("caps_effective_zero", "CapEff=0 CapPrm=0 CapAmb=0 CapInh=0"),
            // uid 0 is not mapped in the sandbox's user namespace.
            ("setuid_root", "EINVAL"),
            ("usr_create", "EROFS"),
        ],
    });
}

#[test]
fn i2_without_no_new_privs_neither_landlock_nor_seccomp_can_be_installed() {
    check(&Case {
        layer: "no_new_privs",
        // Without no_new_privs (and without CAP_SYS_ADMIN, dropped before) the kernel
        // refuses the Landlock ruleset, before the seccomp filter is reached.
        refusal: Refusal::Setup {
            stage: "landlock",
            errno: "Operation not permitted",
        },
        probes: &[],
    });
}

#[test]
fn i2_without_read_only_mounts_the_run_is_refused_and_landlock_blocks_writes() {
    check(&Case {
        layer: "read_only_mounts",
        refusal: Refusal::Shortfall(&["mounts"]),
        probes: &[
            ("usr_create", "EACCES"),
            ("etc_write_existing", "EACCES"),
            ("root_create", "EACCES"),
        ],
    });
}

#[test]
fn the_weakened_helper_refuses_to_start_without_naming_a_layer() {
    let (_d, ws) = common::workspace();
    let helper = HelperCopy::new(&weakened_binary(), None);
    let auth = authorize_for_tests(ExecAction {
        command: "touch payload-ran".into(),
        cwd: String::new(),
        env: vec![],
    });
    let err = helper
        .sandbox()
        .run(&auth, &SandboxProfile::new(&ws), OutputMode::Capture)
        .unwrap_err();
    assert!(!ws.join("payload-ran").exists());
    // It stops before it reads the request: no sandbox was built, nothing attested.
    assert!(
        !matches!(err, SandboxError::Shortfall(_)),
        "the weakened helper built a sandbox without a layer named: {err}"
    );
}

/// The shipped helper holds none of the weakened helper's code, and ignores its switch:
/// given the same `.weakened.json`, it applies every layer.
#[test]
fn the_shipped_helper_cannot_leave_a_layer_out() {
    let shipped = PathBuf::from(env!("CARGO_BIN_EXE_airlock-sandbox-init"));
    let weakened = weakened_binary();
    let holds = |path: &Path, needle: &str| {
        let bytes = std::fs::read(path).unwrap();
        bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
    };
    for marker in [CONFIG_SUFFIX, WEAKENED_MARKER, "read_only_mounts"] {
        // The check can see the marker: the weakened build holds it.
        assert!(
            holds(&weakened, marker),
            "{marker:?} is not in {}",
            weakened.display()
        );
        assert!(
            !holds(&shipped, marker),
            "the shipped helper {} holds {marker:?}, a string of the code that leaves a confinement layer out",
            shipped.display()
        );
    }
    let helper = HelperCopy::new(&shipped, Some(&serde_json::json!({ "skip": "seccomp" })));
    let (_d, ws) = common::workspace();
    let auth = authorize_for_tests(ExecAction {
        command: "echo ran".into(),
        cwd: String::new(),
        env: vec![],
    });
    let out = helper
        .sandbox()
        .run(&auth, &SandboxProfile::new(&ws), OutputMode::Capture)
        .unwrap_or_else(|e| panic!("the shipped helper refused: {e}"));
    assert_eq!(out.stdout, b"ran\n");
    let a = &out.attestation;
    assert_eq!(a.seccomp_mode, 2);
    assert!(a.seccomp_filters >= airlock_sandbox::seccomp_policy::FILTER_COUNT);
    assert!(a.no_new_privs);
    assert_eq!(a.cap_bounding, 0);
    assert_eq!(a.landlock.status, "fully_enforced");
}
