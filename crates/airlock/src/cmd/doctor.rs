//! `airlock doctor`: what this machine supports, the exact profile that will be applied,
//! and the escape probes run inside a real sandbox.

use std::net::{TcpListener, UdpSocket};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use serde_json::Value;

use airlock_core::action::ExecAction;
use airlock_core::gate::{Session, Verdict};
use airlock_core::policy::Profile;
use airlock_sandbox::{describe_profile, host_support, CgroupReport, OutputMode, SandboxProfile};

use airlock_core::terminal_text::escape_line;

use crate::home::Home;
use crate::service::exec;
use crate::{config, runtime};

/// Where the probe binary is: `AIRLOCK_PROBES`, or next to this executable.
fn locate_probes() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("AIRLOCK_PROBES") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    let p = exe.with_file_name("airlock-probes");
    if p.exists() {
        return Ok(p);
    }
    anyhow::bail!(
        "the escape-probe binary was not found next to {}\nhelp: build it with `cargo build --workspace --bins`, or set AIRLOCK_PROBES",
        exe.display()
    )
}

pub fn run() -> anyhow::Result<i32> {
    let home = Home::from_env()?;
    let cfg = config::load(&home.config_file())?;
    crate::out!("== host support\n{}", host_support());
    match cfg.sandbox.weakened {
        Some(w) => crate::out!(
            "!! weakened sandbox mode configured: {} (written into every audit record)\n",
            w.name()
        ),
        // Isolation only: whether resources are bounded is said after the probe run,
        // from what that run really had applied.
        None => crate::out!(
            "sandbox mode: no weakened mode (namespaces, Landlock and seccomp in full)\n"
        ),
    }

    let tmp = std::env::temp_dir().join(format!("airlock-doctor-{}", std::process::id()));
    let ws = tmp.join("workspace");
    std::fs::create_dir_all(ws.join(".git/hooks"))?;
    // When Airlock runs as root the sandbox runs as an unprivileged uid that must reach it.
    for d in [&tmp, &ws, &ws.join(".git"), &ws.join(".git/hooks")] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777))?;
    }
    std::fs::write(ws.join(".git/config"), "[core]\n")?;
    std::fs::write(ws.join(".git/hooks/pre-commit"), "#!/bin/sh\nexit 0\n")?;
    let outside = tmp.join("outside-secret.txt");
    std::fs::write(&outside, "host file outside the workspace\n")?;
    let result = probe_run(&home, &cfg, &ws, &outside);
    let _ = std::fs::remove_dir_all(&tmp);
    result
}

fn probe_run(
    home: &Home,
    cfg: &config::Config,
    ws: &std::path::Path,
    outside: &std::path::Path,
) -> anyhow::Result<i32> {
    let probes = locate_probes()?;
    // The same profile `airlock exec` builds, plus the probe binary.
    let mut profile = exec::sandbox_profile(home, cfg, ws.to_path_buf(), ws.to_path_buf(), 60);
    profile.read_only_paths.push(probes.clone());
    crate::out!(
        "== sandbox profile applied to every run\n{}",
        describe_profile(&profile).map_err(|e| anyhow::anyhow!("{e}"))?
    );

    // Host endpoints that must stay unreachable from inside.
    let tcp = TcpListener::bind("127.0.0.1:0")?;
    tcp.set_nonblocking(true)?;
    let udp = UdpSocket::bind("127.0.0.1:0")?;
    udp.set_nonblocking(true)?;
    let abstract_name = format!("airlock-doctor-{}", std::process::id());
    let abstract_sock = bind_abstract(&abstract_name)?;
    // A host socket in the workspace that anyone may connect to by its path.
    let unix_path = ws.join("host.sock");
    let _unix_sock = std::os::unix::net::UnixListener::bind(&unix_path)?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&unix_path, std::fs::Permissions::from_mode(0o777))?;
    }
    let command = format!(
        "{} --json --workspace {} --host-tcp {} --host-udp {} --host-abstract {} --host-pid {} --outside-path {} --protected .git/hooks --host-unix-path {}",
        probes.display(),
        ws.display(),
        tcp.local_addr()?.port(),
        udp.local_addr()?.port(),
        abstract_name,
        std::process::id(),
        outside.display(),
        unix_path.display()
    );

    // The probe run is an action like any other: decided by the Gate and audited.
    let gate = runtime::gate_for(home, cfg, Profile::Default, ws)?;
    let log = std::sync::Mutex::new(runtime::open_audit(home, cfg)?);
    let mut session = Session::new(runtime::session_id("doctor"), "owner");
    // The host proposes its own probe run, on the operator's behalf: no model is involved.
    session.actor = airlock_core::Principal::system("doctor").ok();
    let action = ExecAction {
        command,
        cwd: ws.display().to_string(),
        env: vec![],
    };
    let token = match gate.decide(&session, action, &mut *exec::lock(&log)) {
        Verdict::Allow(t) => t,
        Verdict::Ask(t) => anyhow::bail!(
            "the policy asks before running the probes: {}",
            t.reasons.join("; ")
        ),
        Verdict::Deny(d) => anyhow::bail!(
            "the policy denies running the probes: {}",
            d.reasons.join("; ")
        ),
    };
    let sandbox = crate::sandbox_helper::locate()?;
    let outcome = sandbox
        .run(&token, &profile, OutputMode::Capture)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    exec::record_execution(
        &token,
        &session,
        &log,
        serde_json::json!({"status": outcome.status, "attestation": outcome.attestation}),
    );
    log.into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .close()
        .map_err(|e| anyhow::anyhow!("{e}"))?;

    crate::out!("== escape probes (inside a real sandbox)");
    let mut failed = 0usize;
    let mut passed = 0usize;
    for line in String::from_utf8_lossy(&outcome.stdout).lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if v.get("summary").is_some() {
            continue;
        }
        let ok = v["pass"].as_bool().unwrap_or(false);
        if ok {
            passed += 1;
        } else {
            failed += 1;
        }
        crate::out!(
            "  {} {:<34} {:<12} expected {:<18} got {}",
            if ok { "pass" } else { "FAIL" },
            escape_line(v["probe"].as_str().unwrap_or("?")),
            escape_line(v["category"].as_str().unwrap_or("")),
            escape_line(v["expected"].as_str().unwrap_or("")),
            escape_line(v["got"].as_str().unwrap_or(""))
        );
    }
    let leaked = tcp.accept().is_ok()
        || udp.recv_from(&mut [0u8; 64]).is_ok()
        || abstract_sock.accept().is_ok();
    if leaked {
        crate::out!(
            "  FAIL a host listener on loopback received a connection from inside the sandbox"
        );
        failed += 1;
    }
    if passed + failed == 0 {
        crate::out!(
            "  FAIL the probes printed no results (exit {}): {}",
            outcome.status,
            airlock_core::terminal_text::escape_block(&String::from_utf8_lossy(&outcome.stderr))
        );
        return Ok(1);
    }
    crate::out!("{passed} passed, {failed} failed");
    let limits = ResourceLimits::of(&profile, &outcome.attestation.cgroup, cfg);
    crate::out!("\n== resource limits (as applied to the probe run)");
    for line in &limits.lines {
        crate::out!("  {line}");
    }
    crate::out!("{}", limits.verdict());
    Ok(if failed == 0 { 0 } else { 1 })
}

/// A listening abstract UNIX socket (Linux): the probes try to reach it from inside.
fn bind_abstract(name: &str) -> anyhow::Result<std::os::unix::net::UnixListener> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
    let l = std::os::unix::net::UnixListener::bind_addr(&addr)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// What bounds a run's use of the host's resources, as really applied: the rlimits the
/// sandbox's init sets on every process, and the cgroup limits only when the run's
/// attestation says a cgroup was applied.
struct ResourceLimits {
    lines: Vec<String>,
    /// Resources with no bound on the run as a whole.
    unbounded: Vec<&'static str>,
}

impl ResourceLimits {
    fn of(profile: &SandboxProfile, cgroup: &CgroupReport, cfg: &config::Config) -> Self {
        let r = &profile.rlimits;
        let c = &profile.cgroup;
        let mut lines = Vec::new();
        let mut unbounded = Vec::new();
        let in_cgroup = match cgroup {
            CgroupReport::Applied { cgroup } => {
                lines.push(format!("cgroup:      applied ({})", escape_line(cgroup)));
                true
            }
            CgroupReport::Unavailable { reason } => {
                lines.push(format!("cgroup:      NOT applied: {}", escape_line(reason)));
                lines.push(
                    "             help: run airlock in a systemd unit or scope with Delegate=yes (systemd-run --user --scope -p Delegate=yes airlock ...)"
                        .into(),
                );
                false
            }
        };
        if in_cgroup {
            lines.push(format!(
                "memory:      {} for the whole run, no swap (cgroup memory.max); {} of address space per process (RLIMIT_AS)",
                bytes(c.memory_max_bytes),
                bytes(r.address_space_bytes)
            ));
            lines.push(format!(
                "processes:   {} in the run (cgroup pids.max); {} of the sandbox uid (RLIMIT_NPROC)",
                c.pids_max, r.processes
            ));
            lines.push(format!(
                "CPU:         {}% of one CPU (cgroup cpu.max); {} s of CPU time per process (RLIMIT_CPU); {} s wall clock per command",
                c.cpu_percent, r.cpu_seconds, cfg.sandbox.timeout_secs
            ));
        } else {
            unbounded.extend(["memory", "CPU share"]);
            lines.push(format!(
                "memory:      NOT BOUNDED for the run: only {} of address space per process (RLIMIT_AS), and up to {} processes",
                bytes(r.address_space_bytes),
                r.processes
            ));
            lines.push(format!(
                "processes:   {} of the sandbox uid (RLIMIT_NPROC: counted per user, not per run)",
                r.processes
            ));
            lines.push(format!(
                "CPU:         NOT BOUNDED in share: {} s of CPU time per process (RLIMIT_CPU); {} s wall clock per command",
                r.cpu_seconds, cfg.sandbox.timeout_secs
            ));
        }
        lines.push(format!(
            "open files:  {} per process (RLIMIT_NOFILE)",
            r.open_files
        ));
        // Nothing sets a quota on the workspace: it is the operator's own directory.
        unbounded.push("disk in the workspace");
        lines.push(format!(
            "disk:        NOT BOUNDED in total in the workspace: {} per file (RLIMIT_FSIZE); /tmp and /dev/shm {} each (tmpfs)",
            bytes(r.file_size_bytes),
            bytes(profile.tmp_size_bytes)
        ));
        lines.push(format!(
            "output:      {} kept per command, the rest cut",
            bytes(cfg.sandbox.output_cap_bytes)
        ));
        ResourceLimits { lines, unbounded }
    }

    /// One line that never claims more confinement than the run had.
    fn verdict(&self) -> String {
        format!(
            "resource limits: PARTIAL: not bounded: {}",
            self.unbounded.join(", ")
        )
    }
}

/// `n` bytes for people: "16 GiB", "512 MiB", or bytes.
fn bytes(n: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (size, unit) in UNITS {
        if n >= size && n.is_multiple_of(size) {
            return format!("{} {unit}", n / size);
        }
    }
    format!("{n} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(cgroup: CgroupReport) -> String {
        let profile = SandboxProfile::new("/tmp/ws");
        let limits = ResourceLimits::of(&profile, &cgroup, &config::Config::default());
        format!("{}\n{}", limits.lines.join("\n"), limits.verdict())
    }

    #[test]
    fn i2_doctor_never_claims_bounds_a_run_did_not_have() {
        let without = report(CgroupReport::Unavailable {
            reason: "no cgroup v2 hierarchy".into(),
        });
        assert!(without.contains("memory:      NOT BOUNDED for the run: only 16 GiB of address space per process (RLIMIT_AS), and up to 512 processes"), "{without}");
        assert!(
            without.contains("CPU:         NOT BOUNDED in share"),
            "{without}"
        );
        assert!(
            without.contains("not bounded: memory, CPU share, disk in the workspace"),
            "{without}"
        );
        assert!(!without.contains("full confinement"));
        let with = report(CgroupReport::Applied {
            cgroup: "/sys/fs/cgroup/airlock-1-0".into(),
        });
        assert!(
            with.contains("memory:      4 GiB for the whole run"),
            "{with}"
        );
        assert!(
            with.contains("processes:   1024 in the run (cgroup pids.max)"),
            "{with}"
        );
        assert!(
            with.contains("not bounded: disk in the workspace"),
            "{with}"
        );
        assert!(!with.contains("memory, CPU share"), "{with}");
    }
}
