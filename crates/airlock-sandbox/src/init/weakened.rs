//! The test-only weakened helper: leaves exactly one confinement layer out, so that a test
//! can show the host refusing the run with the shortfall that names the layer, and what the
//! next layer still blocks.
//!
//! Compiled only under `cfg(airlock_weakened)`, which only the build script of
//! `crates/airlock-sandbox-weakened` sets, for its own compilation of these sources (see
//! [`super`]). The shipped `airlock-sandbox-init` holds none of this.
//!
//! Which layer: the helper reads `<its own path>.weakened.json` (the launcher gives a helper
//! no arguments and no environment to say it), for example
//! `{"skip": "seccomp", "probe": ["/path/airlock-probes", "--json", "--only", "..."],
//! "report": "/workspace/probes.jsonl"}`. Without that file it refuses to start. With a
//! `probe`, the confined payload forks it, with its output in `report`, right before it
//! attests: the probe runs with every layer but the skipped one, as the command would if
//! the host did not compare the attestation; then the host refuses the run as usual.

use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::OnceLock;

use serde::Deserialize;

use super::Layer;
use crate::attestation::LandlockReport;
use crate::init::InitError;
use crate::mount_plan::MountStep;
use crate::protocol::InitRequest;

/// Next to the helper's own path: the file naming the layer to leave out.
pub const CONFIG_SUFFIX: &str = ".weakened.json";

/// Every layer by the name the configuration file uses.
const LAYERS: &[(&str, Layer)] = &[
    ("user_namespace", Layer::UserNamespace),
    ("mount_namespace", Layer::MountNamespace),
    ("pid_namespace", Layer::PidNamespace),
    ("net_namespace", Layer::NetNamespace),
    ("ipc_namespace", Layer::IpcNamespace),
    ("uts_namespace", Layer::UtsNamespace),
    ("cgroup_namespace", Layer::CgroupNamespace),
    ("landlock", Layer::Landlock),
    ("seccomp", Layer::Seccomp),
    ("capabilities", Layer::Capabilities),
    ("no_new_privs", Layer::NoNewPrivs),
    ("read_only_mounts", Layer::ReadOnlyMounts),
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    skip: String,
    #[serde(default)]
    probe: Vec<String>,
    #[serde(default)]
    report: Option<PathBuf>,
}

struct Chosen {
    layer: Layer,
    probe: Vec<String>,
    report: Option<PathBuf>,
}

static CHOSEN: OnceLock<Chosen> = OnceLock::new();

fn fail(message: String) -> InitError {
    InitError::new(
        "weakened helper",
        format!("{message}\nhelp: this is the test-only weakened helper; it runs only with a {CONFIG_SUFFIX} file next to it naming one layer to leave out"),
    )
}

/// Read the layer to leave out from `<own path>.weakened.json`.
pub(in crate::init) fn load() -> Result<(), InitError> {
    let exe =
        std::fs::read_link("/proc/self/exe").map_err(|e| fail(format!("/proc/self/exe: {e}")))?;
    let mut path = exe.into_os_string();
    path.push(CONFIG_SUFFIX);
    let path = PathBuf::from(path);
    let text =
        std::fs::read_to_string(&path).map_err(|e| fail(format!("{}: {e}", path.display())))?;
    let config: Config =
        serde_json::from_str(&text).map_err(|e| fail(format!("{}: {e}", path.display())))?;
    let layer = LAYERS
        .iter()
        .find(|(name, _)| *name == config.skip)
        .map(|(_, layer)| *layer)
        .ok_or_else(|| {
            fail(format!(
                "{}: no layer named {:?}",
                path.display(),
                config.skip
            ))
        })?;
    if config.probe.is_empty() != config.report.is_none() {
        return Err(fail(format!(
            "{}: `probe` and `report` go together",
            path.display()
        )));
    }
    let chosen = Chosen {
        layer,
        probe: config.probe,
        report: config.report,
    };
    CHOSEN.set(chosen).map_err(|_| fail("loaded twice".into()))
}

/// Whether this helper leaves `layer` out.
pub(in crate::init) fn skips(layer: Layer) -> bool {
    CHOSEN.get().is_some_and(|c| c.layer == layer)
}

/// Without read-only mounts, every step of the plan is built writable. The host keeps its
/// own plan, so its comparison sees what was built against what it asked for.
pub(in crate::init) fn adjust_request(request: &mut InitRequest) {
    if !skips(Layer::ReadOnlyMounts) {
        return;
    }
    for step in &mut request.plan.steps {
        match step {
            MountStep::Tmpfs { read_only, .. }
            | MountStep::Bind { read_only, .. }
            | MountStep::Rebind { read_only, .. } => *read_only = false,
            _ => {}
        }
    }
}

/// Without Landlock, the payload reports what it has: no ruleset.
pub(in crate::init) fn skipped_landlock() -> Option<LandlockReport> {
    skips(Layer::Landlock).then(|| LandlockReport {
        kernel_abi: crate::host_support::kernel_landlock_abi(),
        applied_abi: 0,
        status: "not_enforced".into(),
        scoped: false,
        signal_probe_errno: None,
    })
}

/// Run the configured probe in a child of the confined payload, its stdout in the report
/// file, and wait for it.
pub(in crate::init) fn before_attesting() {
    let Some(chosen) = CHOSEN.get() else { return };
    let (Some(report), false) = (&chosen.report, chosen.probe.is_empty()) else {
        return;
    };
    let to_c = |s: &str| std::ffi::CString::new(s).ok();
    let Some(argv) = chosen
        .probe
        .iter()
        .map(|a| to_c(a))
        .collect::<Option<Vec<_>>>()
    else {
        return;
    };
    let env = [c"PATH=/usr/bin:/bin"];
    // SAFETY: the helper is single-threaded, so the child may run any code.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => {
            let file = std::fs::File::create(report);
            if let Ok(file) = &file {
                // SAFETY: dup2 onto stdout, then closing every descriptor above stderr:
                // this child owns nothing else and executes the probe next.
                unsafe {
                    libc::dup2(file.as_raw_fd(), 1);
                    for fd in 3..1024 {
                        libc::close(fd);
                    }
                }
                let _ = nix::unistd::execve(&argv[0], &argv, &env);
            }
            std::process::exit(127);
        }
        Ok(nix::unistd::ForkResult::Parent { child }) => {
            while let Err(nix::errno::Errno::EINTR) = nix::sys::wait::waitpid(child, None) {}
        }
        Err(_) => {}
    }
}
