//! `airlock-sandbox-init`: builds the sandbox and starts the payload.
//!
//! Single-threaded by construction (nothing here spawns a thread): the kernel refuses
//! `unshare(CLONE_NEWUSER)` to multi-threaded processes. Three processes:
//!
//! 1. **stage 0** (started by the host, in the host's namespaces): first resets what the
//!    host's `posix_spawn` could not (module `clean_start`) and, when started as root,
//!    switches to the sandbox's uid and gid or refuses to start (module `identity`); then
//!    creates the user namespace with a one-id identity map, unshares mount, pid, net,
//!    ipc, uts and cgroup namespaces, forks PID 1, then relays: the host's kill command to
//!    PID 1, and PID 1's exit status to the host.
//! 2. **PID 1** (the reaper): cannot be ptraced (not dumpable), dies with stage 0
//!    (parent-death signal), brings up loopback, executes the mount plan and pivots, drops
//!    every capability (bounding and ambient too) and sets no_new_privs, forks the payload
//!    and reaps until the payload exits; its exit ends every process in the namespace.
//!    When the profile has a relay to the egress proxy, PID 1 first forks it (see
//!    [`relay`]); the relay sets itself up while the payload confines itself.
//! 3. **the payload**: `setsid`, parent-death signal, working directory, rlimits, Landlock,
//!    seccomp (last), then reads back its confinement from the kernel, adds the relay's
//!    report to it, sends the attestation to the host and waits for the host's verdict,
//!    which carries the command to `execve` (with SIGPIPE back at its default).
//!
//! Each layer is named (`layers::Layer`) so that a test-only build of these sources can
//! leave one out and show the host refusing the run; in this build every hook is a
//! constant and nothing is ever left out.

mod attach;
mod clean_start;
mod confine;
mod identity;
mod layers;
mod mounts;
mod relay;
pub(crate) mod sys;

use std::ffi::CString;
use std::io::{BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::net::UnixStream;

use nix::sched::{unshare, CloneFlags};
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};

use layers::Layer;

use crate::protocol::{
    self, ExecOrder, HostCommand, InitRequest, PayloadMessage, StageMessage, Verdict, CONTROL_FD,
    FILE_FD, HANDSHAKE_FD, OVERLAY_FD, RELAY_FD, WORKSPACE_FD,
};
pub use identity::{IDENTITY_GID_FLAG, IDENTITY_UID_FLAG};

/// A failed setup step.
#[derive(Debug)]
pub struct InitError {
    stage: String,
    message: String,
}

impl InitError {
    fn new(stage: impl Into<String>, message: impl Into<String>) -> Self {
        InitError {
            stage: stage.into(),
            message: message.into(),
        }
    }
}

/// Exit codes of the helper when it could not run the payload.
const EXIT_SETUP_FAILED: i32 = 125;
const EXIT_ABORTED: i32 = 126;
const EXIT_EXEC_FAILED: i32 = 127;
/// The program exists but may not be executed (the shell's status for the same case).
const EXIT_NOT_EXECUTABLE: i32 = 126;

/// Entry point of the `airlock-sandbox-init` binary.
pub fn main() -> ! {
    // Nothing the host leaked may reach the sandbox (fd 5 is the proxy socket of a relay,
    // fd 6 the contents of the plan's file; each is closed later when not needed).
    if let Err(e) = clean_start::clean_start() {
        eprintln!("airlock-sandbox-init: {e}");
        std::process::exit(EXIT_SETUP_FAILED);
    }
    // A no-op but in the test-only build, which reads the layer to leave out (see
    // [`layers`]) while it still runs as whoever started it.
    if let Err(e) = layers::load() {
        eprintln!("airlock-sandbox-init: {}", e.message);
        std::process::exit(EXIT_SETUP_FAILED);
    }
    // Then: never go on as root (see [`identity`]).
    if let Err(refusal) = identity::settle(std::env::args_os().skip(1)) {
        refuse(refusal);
    }
    // SAFETY: fcntl(F_GETFD) on integer fds only queries flags.
    let have_fds = unsafe {
        libc::fcntl(CONTROL_FD, libc::F_GETFD) >= 0 && libc::fcntl(HANDSHAKE_FD, libc::F_GETFD) >= 0
    };
    if !have_fds {
        eprintln!(
            "airlock-sandbox-init: this helper is started by the airlock sandbox library, which passes it file descriptors 3 and 4\nhelp: run commands with `airlock exec -- <command>`"
        );
        std::process::exit(2);
    }
    std::process::exit(stage0())
}

/// Say why the helper does not start, on stderr and (when the host passed it) on the
/// control channel, and exit without having read the request.
fn refuse(refusal: identity::Refusal) -> ! {
    let (message, help, code) = match refusal {
        identity::Refusal::Usage(message) => (
            message,
            "this helper is started by the airlock sandbox library; run commands with `airlock exec -- <command>`".to_string(),
            2,
        ),
        identity::Refusal::Identity { message, help } => (message, help, EXIT_SETUP_FAILED),
    };
    eprintln!("airlock-sandbox-init: refusing to start: {message}\nhelp: {help}");
    // SAFETY: fcntl(F_GETFD) on an integer fd only queries flags.
    if unsafe { libc::fcntl(CONTROL_FD, libc::F_GETFD) } >= 0 {
        // SAFETY: fd 3 is the control socket the host passed; nothing else in this process
        // owns it, and the process exits right after.
        let mut control = unsafe { UnixStream::from_raw_fd(CONTROL_FD) };
        report_stage_failure(&mut control, InitError::new("identity", message));
    }
    std::process::exit(code)
}

fn stage0() -> i32 {
    // SAFETY: fd 3 is the control socket the host passed (checked in `main`); this is its
    // only owner in this process.
    let mut control = unsafe { UnixStream::from_raw_fd(CONTROL_FD) };
    let mut request: InitRequest = match control
        .try_clone()
        .and_then(|c| protocol::recv(&mut BufReader::new(c)))
    {
        Ok(Some(r)) => r,
        Ok(None) => return EXIT_SETUP_FAILED,
        Err(e) => {
            report_stage_failure(&mut control, InitError::new("request", e.to_string()));
            return EXIT_SETUP_FAILED;
        }
    };
    layers::adjust_request(&mut request);
    let wants_file = request
        .plan
        .steps
        .iter()
        .any(|s| matches!(s, crate::mount_plan::MountStep::File { .. }));
    // A pooled sandbox gets the run's descriptors only with the run (see [`attach`]).
    let run_fds = !request.pooled;
    let passed = expect_passed_fd(
        RELAY_FD,
        run_fds && request.profile.relay().is_some(),
        InitError::new("egress relay", "the host passed no proxy socket"),
    )
    .and_then(|()| {
        expect_passed_fd(
            FILE_FD,
            wants_file,
            InitError::new("mount file", "the host passed no file contents"),
        )
    })
    .and_then(|()| {
        expect_passed_fd(
            WORKSPACE_FD,
            run_fds && request.workspace_tree,
            InitError::new("workspace", "the host passed no workspace mount"),
        )
    })
    .and_then(|()| {
        expect_passed_fd(
            OVERLAY_FD,
            run_fds && request.layers_tree,
            InitError::new("workspace overlay", "the host passed no overlay layers"),
        )
    });
    if let Err(e) = passed {
        report_stage_failure(&mut control, e);
        return EXIT_SETUP_FAILED;
    }
    let child = match create_namespaces().and_then(|()| fork_pid1(&request)) {
        Ok(child) => child,
        Err(e) => {
            report_stage_failure(&mut control, e);
            return EXIT_SETUP_FAILED;
        }
    };
    // The handshake channel, the proxy socket and the file belong to the sandbox now.
    // SAFETY: closing fds 4 to 8, which no Rust object in this process owns.
    unsafe {
        libc::close(HANDSHAKE_FD);
        libc::close(RELAY_FD);
        libc::close(FILE_FD);
        libc::close(WORKSPACE_FD);
        libc::close(OVERLAY_FD);
    }
    // So are the output pipes, which PID 1 has now: the host reads their end once the
    // sandbox's process tree is gone, not once this process has exited too (its exit
    // tears down the namespaces it holds, a millisecond or more). Anything this process
    // says from here goes on the control channel.
    release_output();
    let status = supervise(&mut control, child);
    let _ = protocol::send(&mut control, &StageMessage::Exited { status });
    status
}

/// Put an empty memory file on standard output and error, in place of the output pipes.
/// (Not `/dev/null`: PID 1 may be moving this mount namespace's root meanwhile, and a
/// memory file has no path to resolve.)
fn release_output() {
    // SAFETY: memfd_create with a valid C string; the result is checked.
    let fd = unsafe { libc::memfd_create(c"released-output".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return;
    }
    // SAFETY: dup2 onto fds 1 and 2, which no Rust object in this process owns, then
    // closing the memory file's own descriptor, which nothing else holds.
    unsafe {
        libc::dup2(fd, 1);
        libc::dup2(fd, 2);
        libc::close(fd);
    }
}

/// Check that descriptor `fd` was passed when the request needs it (`missing` otherwise),
/// and close it when it does not.
fn expect_passed_fd(fd: i32, wanted: bool, missing: InitError) -> Result<(), InitError> {
    // SAFETY: F_GETFD only queries flags of an integer fd.
    let present = unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0;
    match (wanted, present) {
        (true, false) => Err(missing),
        (false, true) => {
            // SAFETY: closing a passed descriptor that no Rust object in this process owns.
            unsafe { libc::close(fd) };
            Ok(())
        }
        _ => Ok(()),
    }
}

fn report_stage_failure(control: &mut UnixStream, e: InitError) {
    let _ = protocol::send(
        control,
        &StageMessage::Failed {
            stage: e.stage,
            message: e.message,
        },
    );
}

fn create_namespaces() -> Result<(), InitError> {
    let uid = nix::unistd::geteuid();
    let gid = nix::unistd::getegid();
    if !layers::skips(Layer::UserNamespace) {
        unshare(CloneFlags::CLONE_NEWUSER).map_err(|e| {
            InitError::new(
                "user namespace",
                format!("unshare(CLONE_NEWUSER): {e}; enable user namespaces: sysctl -w user.max_user_namespaces=15000 (and kernel.unprivileged_userns_clone=1 or kernel.apparmor_restrict_unprivileged_userns=0 where present)"),
            )
        })?;
        let write = |path: &str, text: String| {
            std::fs::write(path, text.as_bytes())
                .map_err(|e| InitError::new("user namespace", format!("{path}: {e}")))
        };
        write("/proc/self/setgroups", "deny".into())?;
        write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
        write("/proc/self/gid_map", format!("{gid} {gid} 1"))?;
    }
    // Dumpable until here only so that the maps above could be written. Stage 0 holds the
    // control channel (and, until PID 1 exists, the handshake): no other process of the
    // sandbox's uid on the host may ptrace it or take its descriptors. PID 1 inherits this.
    nix::sys::prctl::set_dumpable(false).map_err(|e| InitError::new("dumpable", e.to_string()))?;
    let flags = [
        (Layer::MountNamespace, CloneFlags::CLONE_NEWNS),
        (Layer::PidNamespace, CloneFlags::CLONE_NEWPID),
        (Layer::NetNamespace, CloneFlags::CLONE_NEWNET),
        (Layer::IpcNamespace, CloneFlags::CLONE_NEWIPC),
        (Layer::UtsNamespace, CloneFlags::CLONE_NEWUTS),
        (Layer::CgroupNamespace, CloneFlags::CLONE_NEWCGROUP),
    ]
    .into_iter()
    .filter(|(layer, _)| !layers::skips(*layer))
    .fold(CloneFlags::empty(), |all, (_, flag)| all | flag);
    unshare(flags).map_err(|e| {
        InitError::new(
            "namespaces",
            format!("unshare(mount, pid, net, ipc, uts, cgroup): {e}"),
        )
    })
}

fn fork_pid1(request: &InitRequest) -> Result<Pid, InitError> {
    // SAFETY: this process is single-threaded, so the child may run any code.
    match unsafe { fork() } {
        Ok(ForkResult::Child) => pid1(request),
        Ok(ForkResult::Parent { child }) => Ok(child),
        Err(e) => Err(InitError::new("fork", format!("PID 1: {e}"))),
    }
}

/// Wait for PID 1, killing it when the host says so or goes away.
fn supervise(control: &mut UnixStream, child: Pid) -> i32 {
    let pidfd = sys::pidfd_open(child.as_raw());
    let mut reader = control.try_clone().ok().map(BufReader::new);
    let mut listen = reader.is_some();
    if let Ok(pidfd) = &pidfd {
        loop {
            let mut fds = [
                libc::pollfd {
                    fd: pidfd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: if listen { control.as_raw_fd() } else { -1 },
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: `fds` is a valid array of two pollfd for the duration of the call.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if n < 0 {
                if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                break;
            }
            if fds[0].revents != 0 {
                break;
            }
            if fds[1].revents != 0 {
                let cmd = reader.as_mut().map(protocol::recv::<HostCommand>);
                if !matches!(cmd, Some(Ok(Some(_)))) {
                    listen = false; // host gone: fall through to the kill
                }
                let _ = nix::sys::signal::kill(child, Signal::SIGKILL);
            }
        }
    }
    loop {
        match waitpid(child, None) {
            Ok(WaitStatus::Exited(_, code)) => return code,
            Ok(WaitStatus::Signaled(_, sig, _)) => return 128 + sig as i32,
            Ok(_) => continue,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return EXIT_SETUP_FAILED,
        }
    }
}

/// PID 1 of the sandbox. Never returns.
fn pid1(request: &InitRequest) -> ! {
    // SAFETY: fd 4 is the handshake socket inherited from stage 0; this process owns it.
    let mut handshake = unsafe { UnixStream::from_raw_fd(HANDSHAKE_FD) };
    // A pooled sandbox compiles the filters while it waits for its run.
    let seccomp = match request.pooled {
        true => confine::SeccompFilters::ahead(),
        false => confine::SeccompFilters::later(),
    };
    // A pooled sandbox is built up to its base, then waits for the run's own request,
    // which from then on is the request (see [`attach`]).
    let setup = if request.pooled {
        attach::pooled_setup(request, &mut handshake)
    } else {
        pid1_setup(request).map(|overlay| (overlay, None))
    };
    let (overlay, attached) = match setup {
        Ok(done) => done,
        Err(e) => {
            report_payload_failure(&mut handshake, e);
            std::process::exit(EXIT_SETUP_FAILED);
        }
    };
    let request = attached.as_ref().unwrap_or(request);
    // The relay sets itself up while the payload confines itself; the payload reads its
    // report before attesting.
    let mut relay = match request.profile.relay() {
        Some(r) => match relay::start(request, r.port, &seccomp) {
            Ok(pending) => Some(pending),
            Err(e) => {
                report_payload_failure(&mut handshake, e);
                std::process::exit(EXIT_SETUP_FAILED);
            }
        },
        None => None,
    };
    // Only the relay keeps the proxy socket.
    // SAFETY: closing fd 5, which no Rust object in this process owns (EBADF without relay).
    unsafe { libc::close(RELAY_FD) };
    // SAFETY: single-threaded process.
    let payload = match unsafe { fork() } {
        Ok(ForkResult::Child) => run_payload(request, &seccomp, handshake, relay.take(), overlay),
        Ok(ForkResult::Parent { child }) => child,
        Err(e) => {
            report_payload_failure(
                &mut handshake,
                InitError::new("fork", format!("payload: {e}")),
            );
            std::process::exit(EXIT_SETUP_FAILED);
        }
    };
    drop((handshake, relay));
    // Reap everything; leave when the payload is done (the kernel then kills the rest).
    loop {
        match waitpid(None::<Pid>, None) {
            Ok(WaitStatus::Exited(pid, code)) if pid == payload => std::process::exit(code),
            Ok(WaitStatus::Signaled(pid, sig, _)) if pid == payload => {
                std::process::exit(128 + sig as i32)
            }
            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => std::process::exit(EXIT_SETUP_FAILED),
        }
    }
}

/// Everything PID 1 does before the payload exists. Returns what the workspace overlay was
/// built on, when there is one.
fn pid1_setup(
    request: &InitRequest,
) -> Result<Option<crate::attestation::OverlayReport>, InitError> {
    pid1_prelude()?;
    let mut root = mounts::StagedRoot::stage()?;
    pid1_root(request, &mut root, &request.plan.steps)?;
    let overlay = root.finish()?;
    pid1_lock_down()?;
    Ok(overlay)
}

/// What PID 1 does first, for any sandbox: die with stage 0, let go of the control
/// channel, become undumpable, name the host and bring up loopback.
fn pid1_prelude() -> Result<(), InitError> {
    let os = |stage: &'static str| move |e: nix::errno::Errno| InitError::new(stage, e.to_string());
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(os("parent-death signal"))?;
    // SAFETY: closing the control socket fd, which no Rust object in this process owns.
    unsafe { libc::close(CONTROL_FD) };
    nix::sys::prctl::set_dumpable(false).map_err(os("dumpable"))?;
    // The hostname and loopback belong to the UTS and network namespaces.
    if !layers::skips(Layer::UtsNamespace) {
        nix::unistd::sethostname("airlock").map_err(os("hostname"))?;
    }
    if !layers::skips(Layer::NetNamespace) {
        sys::loopback_up().map_err(|e| InitError::new("loopback", e.to_string()))?;
    }
    Ok(())
}

/// Execute `steps` of `request`'s plan into `root`, with the workspace and overlay
/// descriptors the request says the host passed.
fn pid1_root(
    request: &InitRequest,
    root: &mut mounts::StagedRoot,
    steps: &[crate::mount_plan::MountStep],
) -> Result<(), InitError> {
    let workspace_tree = request.workspace_tree.then(|| {
        // SAFETY: fd 7 was passed by the host (checked by stage 0) and nothing else in this
        // process owns it.
        unsafe { std::os::fd::OwnedFd::from_raw_fd(WORKSPACE_FD) }
    });
    let layers_tree = request.layers_tree.then(|| {
        // SAFETY: fd 8 was passed by the host (checked by stage 0) and nothing else in this
        // process owns it.
        unsafe { std::os::fd::OwnedFd::from_raw_fd(OVERLAY_FD) }
    });
    root.run_steps(
        steps,
        workspace_tree.map(|t| (request.workspace.as_path(), t)),
        layers_tree,
    )
}

/// Once the root is built: no file descriptor of the plan, no capability, no new
/// privileges.
fn pid1_lock_down() -> Result<(), InitError> {
    // The file's contents are in the new root; nothing after this needs the descriptor.
    // SAFETY: closing fd 6, which no Rust object in this process owns (EBADF if absent).
    unsafe { libc::close(FILE_FD) };
    if !layers::skips(Layer::Capabilities) {
        drop_capabilities()?;
    }
    if !layers::skips(Layer::NoNewPrivs) {
        nix::sys::prctl::set_no_new_privs()
            .map_err(|e| InitError::new("no_new_privs", e.to_string()))?;
    }
    Ok(())
}

fn drop_capabilities() -> Result<(), InitError> {
    for cap in 0..64 {
        // SAFETY: PR_CAPBSET_DROP with an integer capability number.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINVAL) {
                break; // past the last capability this kernel knows
            }
            return Err(InitError::new(
                "capabilities",
                format!("drop bounding capability {cap}: {err}"),
            ));
        }
    }
    // SAFETY: PR_CAP_AMBIENT_CLEAR_ALL takes no pointers.
    if unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    } != 0
    {
        return Err(InitError::new(
            "capabilities",
            format!("clear ambient: {}", std::io::Error::last_os_error()),
        ));
    }
    sys::clear_capabilities().map_err(|e| InitError::new("capabilities", format!("capset: {e}")))
}

fn report_payload_failure(handshake: &mut UnixStream, e: InitError) {
    let _ = protocol::send(
        handshake,
        &PayloadMessage::Failed {
            stage: e.stage,
            message: e.message,
        },
    );
}

/// The payload process. Never returns.
fn run_payload(
    request: &InitRequest,
    seccomp: &confine::SeccompFilters,
    mut handshake: UnixStream,
    relay: Option<relay::PendingRelay>,
    overlay: Option<crate::attestation::OverlayReport>,
) -> ! {
    let attestation = confine_payload(request, seccomp).and_then(|mut a| {
        a.relay = relay.map(relay::PendingRelay::wait).transpose()?;
        a.overlay = overlay;
        Ok(a)
    });
    let attestation = match attestation {
        Ok(a) => {
            layers::before_attesting();
            a
        }
        Err(e) => {
            report_payload_failure(&mut handshake, e);
            std::process::exit(EXIT_SETUP_FAILED);
        }
    };
    if protocol::send(
        &mut handshake,
        &PayloadMessage::Attestation(Box::new(attestation)),
    )
    .is_err()
    {
        std::process::exit(EXIT_ABORTED);
    }
    // The host sends the command only once the Gate has authorized it; until then this
    // process waits here, confined, having run nothing of the payload's.
    let verdict = handshake
        .try_clone()
        .and_then(|c| protocol::recv::<Verdict>(&mut BufReader::new(c)));
    let order = match verdict {
        Ok(Some(Verdict::Go(order))) => order,
        _ => std::process::exit(EXIT_ABORTED),
    };
    // SAFETY: F_SETFD on the handshake fd this process owns; it then closes on execve.
    unsafe { libc::fcntl(handshake.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) };
    let err = exec(request, &order);
    let _ = writeln!(
        std::io::stderr(),
        "airlock-sandbox: cannot execute {}: {err}",
        order.argv.first().map(String::as_str).unwrap_or("?")
    );
    // As the shell reports them: found but not executable, or not found.
    let code = match err {
        ExecError::Os(nix::errno::Errno::EACCES) => EXIT_NOT_EXECUTABLE,
        _ => EXIT_EXEC_FAILED,
    };
    std::process::exit(code);
}

fn confine_payload(
    request: &InitRequest,
    seccomp: &confine::SeccompFilters,
) -> Result<crate::attestation::Attestation, InitError> {
    let os = |stage: &'static str| move |e: nix::errno::Errno| InitError::new(stage, e.to_string());
    nix::unistd::setsid().map_err(os("setsid"))?;
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(os("parent-death signal"))?;
    nix::unistd::chdir(&request.cwd)
        .map_err(|e| InitError::new("cwd", format!("{}: {e}", request.cwd.display())))?;
    let attached = attached_report(request)?;
    confine::apply_rlimits(&request.profile)?;
    let mut landlock = match layers::skipped_landlock() {
        Some(none) => none,
        None => confine::apply_landlock(&request.profile, &request.workspace)?,
    };
    landlock.signal_probe_errno = confine::signal_probe();
    if !layers::skips(Layer::Seccomp) {
        confine::apply_seccomp(&seccomp.payload())?;
    }
    let mut attestation =
        confine::collect_attestation(&request.profile, landlock, request.cgroup.clone())?;
    attestation.attached = Some(attached);
    Ok(attestation)
}

/// The run's working directory, workspace and environment as the payload has them.
fn attached_report(request: &InitRequest) -> Result<crate::attestation::AttachedReport, InitError> {
    let cwd = std::env::current_dir().map_err(|e| InitError::new("cwd", format!("getcwd: {e}")))?;
    let workspace = crate::attestation::FileId::of(&request.workspace).map_err(|e| {
        InitError::new("workspace", format!("{}: {e}", request.workspace.display()))
    })?;
    Ok(crate::attestation::AttachedReport {
        cwd,
        workspace,
        env_sha256: crate::payload_env::digest(&request.profile.env),
    })
}

/// Why `execve` did not happen.
enum ExecError {
    Request(String),
    Os(nix::errno::Errno),
}

impl std::fmt::Display for ExecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExecError::Request(m) => f.write_str(m),
            ExecError::Os(e) => write!(f, "{e}"),
        }
    }
}

fn exec(request: &InitRequest, order: &ExecOrder) -> ExecError {
    let to_c = |s: &str| CString::new(s).map_err(|_| "argument contains a NUL byte".to_string());
    let argv: Result<Vec<CString>, String> = order.argv.iter().map(|a| to_c(a)).collect();
    let mut env = crate::payload_env::for_payload(&request.profile.env);
    if order.program.is_some() {
        env.insert("PWD".into(), request.cwd.display().to_string());
    }
    let env: Result<Vec<CString>, String> =
        env.iter().map(|(k, v)| to_c(&format!("{k}={v}"))).collect();
    let program = order.program.as_deref().map(to_c).transpose();
    let (argv, env, program) = match (argv, env, program) {
        (Ok(a), Ok(e), Ok(p)) if !a.is_empty() => (a, e, p),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return ExecError::Request(e),
        _ => return ExecError::Request("empty argv".into()),
    };
    let program = program.as_ref().unwrap_or(&argv[0]);
    // The Rust runtime ignores SIGPIPE in this helper, and an ignored signal stays ignored
    // across execve: give the command the default, so that a writer into a closed pipe
    // ends as it would anywhere else.
    // SAFETY: setting a signal's disposition to SIG_DFL installs no handler; this process
    // is single-threaded and calls execve next.
    if let Err(e) = unsafe {
        nix::sys::signal::signal(
            nix::sys::signal::Signal::SIGPIPE,
            nix::sys::signal::SigHandler::SigDfl,
        )
    } {
        return ExecError::Os(e);
    }
    match nix::unistd::execve(program, &argv, &env) {
        Ok(never) => match never {},
        Err(e) => ExecError::Os(e),
    }
}
