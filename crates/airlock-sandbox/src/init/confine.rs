//! Confinement of the payload process, in order: rlimits, Landlock, no_new_privs, seccomp;
//! then the attestation read back from the kernel.

use std::path::Path;

use landlock::{
    Access, AccessFs, AccessNet, NetPort, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use nix::sys::resource::{setrlimit, Resource};

use super::InitError;
use crate::attestation::{self, Attestation, CgroupReport, LandlockReport};
use crate::host_support::{kernel_landlock_abi, usable_landlock_abi};
use crate::profile::{SandboxProfile, WeakenedMode};
use crate::seccomp_policy;

/// Apply the profile's rlimits (soft = hard) and forbid core dumps.
pub fn apply_rlimits(profile: &SandboxProfile) -> Result<(), InitError> {
    let r = &profile.rlimits;
    for (res, value) in [
        (Resource::RLIMIT_CPU, r.cpu_seconds),
        (Resource::RLIMIT_AS, r.address_space_bytes),
        (Resource::RLIMIT_NPROC, r.processes),
        (Resource::RLIMIT_NOFILE, r.open_files),
        (Resource::RLIMIT_FSIZE, r.file_size_bytes),
        (Resource::RLIMIT_CORE, 0),
    ] {
        setrlimit(res, value, value)
            .map_err(|e| InitError::new("rlimits", format!("{res:?}={value}: {e}")))?;
    }
    Ok(())
}

/// Restrict the payload with Landlock, handling every right of the kernel's ABI.
pub fn apply_landlock(
    profile: &SandboxProfile,
    workspace: &Path,
) -> Result<LandlockReport, InitError> {
    let kernel_abi = kernel_landlock_abi();
    let applied = usable_landlock_abi();
    if profile.weakened == Some(WeakenedMode::WithoutLandlock) && applied == 0 {
        return Ok(LandlockReport {
            kernel_abi,
            applied_abi: 0,
            status: "not_enforced".into(),
            scoped: false,
            signal_probe_errno: None,
        });
    }
    let abi = ABI::from(applied as i32);
    let read = AccessFs::from_read(abi);
    let all = AccessFs::from_all(abi);
    let devices = AccessFs::from_file(abi) & !AccessFs::Execute | AccessFs::ReadDir;
    let proc_access = read | AccessFs::WriteFile;
    let rules: Vec<(&Path, landlock::BitFlags<AccessFs>)> = vec![
        (Path::new("/"), read),
        (Path::new("/proc"), proc_access),
        (Path::new("/dev"), devices),
        (Path::new("/dev/shm"), all),
        (Path::new("/tmp"), all),
        (workspace, all),
    ];
    let ports: Vec<(u16, landlock::BitFlags<AccessNet>)> = profile
        .allowed_tcp_ports()
        .into_iter()
        .map(|p| (p, AccessNet::from_all(abi)))
        .collect();
    restrict(abi, kernel_abi, applied, rules, ports)
}

/// Restrict the relay to the egress proxy: it reads only `/proc` (its own status), may bind
/// only its port and connect to no TCP port at all. Its UNIX socket connection goes through
/// an inherited descriptor, which no filesystem right governs.
pub fn apply_relay_landlock(
    profile: &SandboxProfile,
    port: u16,
) -> Result<LandlockReport, InitError> {
    let kernel_abi = kernel_landlock_abi();
    let applied = usable_landlock_abi();
    if profile.weakened == Some(WeakenedMode::WithoutLandlock) && applied == 0 {
        return Ok(LandlockReport {
            kernel_abi,
            applied_abi: 0,
            status: "not_enforced".into(),
            scoped: false,
            signal_probe_errno: None,
        });
    }
    let abi = ABI::from(applied as i32);
    let rules = vec![(Path::new("/proc"), AccessFs::from_read(abi))];
    let ports = vec![(port, AccessNet::BindTcp.into())];
    restrict(abi, kernel_abi, applied, rules, ports)
}

/// Build a ruleset handling every right of `abi`, allow exactly `rules` and `ports`, and
/// restrict the calling process.
fn restrict(
    abi: ABI,
    kernel_abi: u32,
    applied: u32,
    mut rules: Vec<(&Path, landlock::BitFlags<AccessFs>)>,
    ports: Vec<(u16, landlock::BitFlags<AccessNet>)>,
) -> Result<LandlockReport, InitError> {
    let fail = |e: &dyn std::fmt::Display| InitError::new("landlock", e.to_string());
    let all = AccessFs::from_all(abi);
    rules.retain(|(p, _)| p.exists());
    let scopes = Scope::from_all(abi);
    let mut ruleset = Ruleset::default()
        .handle_access(all)
        .map_err(|e| fail(&e))?
        .handle_access(AccessNet::from_all(abi))
        .map_err(|e| fail(&e))?
        .scope(scopes)
        .map_err(|e| fail(&e))?
        .create()
        .map_err(|e| fail(&e))?;
    for (path, access) in rules {
        let fd = PathFd::new(path).map_err(|e| fail(&e))?;
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| fail(&e))?;
    }
    if !AccessNet::from_all(abi).is_empty() {
        for (port, access) in ports {
            ruleset = ruleset
                .add_rule(NetPort::new(port, access))
                .map_err(|e| fail(&e))?;
        }
    }
    // The landlock crate sets no_new_privs itself (the kernel requires it, or
    // CAP_SYS_ADMIN, for a ruleset); only the test-only build leaves it unset.
    let ruleset = ruleset.no_new_privs(!super::layers::skips(super::layers::Layer::NoNewPrivs));
    let status = ruleset.restrict_self().map_err(|e| fail(&e))?;
    let status_name = match status.ruleset {
        RulesetStatus::FullyEnforced => "fully_enforced",
        RulesetStatus::PartiallyEnforced => "partially_enforced",
        RulesetStatus::NotEnforced => "not_enforced",
    };
    Ok(LandlockReport {
        kernel_abi,
        applied_abi: if status.ruleset == RulesetStatus::NotEnforced {
            0
        } else {
            applied
        },
        status: status_name.into(),
        scoped: !scopes.is_empty() && status.ruleset == RulesetStatus::FullyEnforced,
        signal_probe_errno: None,
    })
}

/// `kill(1, 0)`: with Landlock signal scoping, the sandbox's PID 1 (outside the payload's
/// domain) cannot be signalled, so the kernel answers `EPERM`.
pub fn signal_probe() -> Option<i32> {
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(1), None) {
        Ok(()) => None,
        Err(e) => Some(e as i32),
    }
}

/// Set no_new_privs and install the seccomp filters compiled from `rules`
/// ([`seccomp_policy::deny_list`] for the payload). Must be the last restriction.
pub fn apply_seccomp(filters: &CompiledFilters) -> Result<(), InitError> {
    if !super::layers::skips(super::layers::Layer::NoNewPrivs) {
        nix::sys::prctl::set_no_new_privs()
            .map_err(|e| InitError::new("no_new_privs", e.to_string()))?;
    }
    let filters = filters
        .as_ref()
        .map_err(|e| InitError::new("seccomp", e.clone()))?;
    for filter in filters {
        seccompiler::apply_filter(filter).map_err(|e| InitError::new("seccomp", e.to_string()))?;
    }
    Ok(())
}

/// A deny list compiled to BPF, or why it could not be.
pub type CompiledFilters = Result<Vec<seccompiler::BpfProgram>, String>;

/// The payload's and the relay's seccomp filters, compiled ahead or not. A pooled
/// sandbox's PID 1 compiles them while it waits for its run, so that confining a process
/// is only applying them (compiling took a third of a millisecond of the payload's
/// start). A sandbox built for its run compiles each in the process it confines, the
/// relay's and the payload's side by side, as before: compiling both ahead in PID 1 would
/// only put them one after the other on the run's path.
pub struct SeccompFilters {
    payload: Option<CompiledFilters>,
    relay: Option<CompiledFilters>,
}

fn compile(rules: &[seccomp_policy::DenyRule]) -> CompiledFilters {
    seccomp_policy::compile(rules).map_err(|e| e.to_string())
}

impl SeccompFilters {
    /// Compiled now, both (whether the run will have a relay is known only with it).
    pub fn ahead() -> SeccompFilters {
        SeccompFilters {
            payload: Some(compile(&seccomp_policy::deny_list())),
            relay: Some(compile(&seccomp_policy::relay_deny_list())),
        }
    }

    /// Left for each confined process to compile.
    pub fn later() -> SeccompFilters {
        SeccompFilters {
            payload: None,
            relay: None,
        }
    }

    pub fn payload(&self) -> CompiledFilters {
        self.payload
            .clone()
            .unwrap_or_else(|| compile(&seccomp_policy::deny_list()))
    }

    pub fn relay(&self) -> CompiledFilters {
        self.relay
            .clone()
            .unwrap_or_else(|| compile(&seccomp_policy::relay_deny_list()))
    }
}

/// Read back from the kernel what is applied to this process.
pub fn collect_attestation(
    profile: &SandboxProfile,
    landlock: LandlockReport,
    cgroup: CgroupReport,
) -> Result<Attestation, InitError> {
    let read = |p: &str| {
        std::fs::read_to_string(p).map_err(|e| InitError::new("attestation", format!("{p}: {e}")))
    };
    let status = attestation::parse_status(&read("/proc/self/status")?);
    let (Some(uid), Some(gid)) = (status.uid, status.gid) else {
        return Err(InitError::new(
            "attestation",
            "no Uid/Gid in /proc/self/status",
        ));
    };
    Ok(Attestation {
        namespaces: attestation::namespace_ids(Path::new("/proc/self/ns")),
        host_namespaces: Default::default(),
        uid,
        gid,
        uid_map: attestation::parse_id_map(&read("/proc/self/uid_map")?),
        gid_map: attestation::parse_id_map(&read("/proc/self/gid_map")?),
        cap_effective: status.cap_eff,
        cap_permitted: status.cap_prm,
        cap_inheritable: status.cap_inh,
        cap_bounding: status.cap_bnd,
        cap_ambient: status.cap_amb,
        no_new_privs: status.no_new_privs,
        seccomp_mode: status.seccomp,
        seccomp_filters: status.seccomp_filters,
        landlock,
        mounts: attestation::parse_mountinfo(&read("/proc/self/mountinfo")?),
        cgroup,
        weakened: profile.weakened,
        relay: None,
        overlay: None,
        attached: None,
    })
}
