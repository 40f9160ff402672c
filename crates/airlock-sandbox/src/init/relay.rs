//! The relay to the egress proxy: `127.0.0.1:<port>` inside the sandbox's network namespace,
//! forwarded byte for byte to the proxy's UNIX socket on the host.
//!
//! PID 1 forks it before the payload. It is confined like the payload (no capabilities,
//! no_new_privs, rlimits, seccomp) with a narrower Landlock ruleset of its own and the
//! payload's seccomp list minus the rules against UNIX sockets, which it needs to connect
//! to the proxy ([`crate::seccomp_policy::relay_deny_list`]); it is not
//! dumpable (so the payload cannot reach its descriptors through `/proc`), and it dies
//! with the sandbox's pid namespace. It reaches the proxy through the `O_PATH` descriptor
//! the host passed ([`RELAY_FD`]), never through a path of the host's filesystem.
//!
//! The forwarding loop is written by hand with `poll(2)`: the helper must stay
//! single-threaded and small, which rules out an async runtime, and the job (copy bytes
//! both ways, pass half-closes on) is a few dozen lines.

use std::io::{BufReader, ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::Signal;
use nix::unistd::{fork, ForkResult};

use super::{confine, InitError};
use crate::attestation::{self, RelayReport};
use crate::protocol::{self, InitRequest, HANDSHAKE_FD, RELAY_FD};

/// The relay's process name (`comm`), as `ps` shows it inside the sandbox.
pub const RELAY_NAME: &std::ffi::CStr = c"airlock-relay";
/// Connections forwarded at the same time; further clients wait in the listen backlog.
const MAX_CONNECTIONS: usize = 256;
/// Bytes buffered per direction of one connection.
const BUFFER: usize = 64 << 10;
/// How long the payload waits for the relay to report.
const REPORT_TIMEOUT: Duration = Duration::from_secs(30);

/// A relay that was forked and is setting itself up. Its report is read by the payload
/// process, after the payload's own confinement, so that the two set up side by side
/// rather than one after the other.
pub struct PendingRelay {
    report: UnixStream,
}

impl PendingRelay {
    /// Wait for the relay's report: what it applied to itself, or why it could not start.
    pub fn wait(self) -> Result<RelayReport, InitError> {
        let mut report = self.report;
        report
            .set_read_timeout(Some(REPORT_TIMEOUT))
            .map_err(|e| InitError::new("egress relay", e.to_string()))?;
        let mut reader = BufReader::new(&mut report);
        match protocol::recv::<Result<RelayReport, String>>(&mut reader) {
            Ok(Some(Ok(report))) => Ok(report),
            Ok(Some(Err(message))) => Err(InitError::new("egress relay", message)),
            Ok(None) => Err(InitError::new(
                "egress relay",
                "the relay ended before reporting",
            )),
            Err(e) => Err(InitError::new("egress relay", format!("report: {e}"))),
        }
    }
}

/// Fork the relay. Called by PID 1 after the root is built and capabilities are dropped,
/// before the payload is forked; the caller closes [`RELAY_FD`] afterwards. The report
/// channel is close-on-exec, so it never reaches the payload's program.
pub fn start(
    request: &InitRequest,
    port: u16,
    seccomp: &confine::SeccompFilters,
) -> Result<PendingRelay, InitError> {
    let (report_rx, report_tx) = UnixStream::pair()
        .map_err(|e| InitError::new("egress relay", format!("socketpair: {e}")))?;
    // SAFETY: the helper is single-threaded, so the child may run any code.
    match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            drop(report_rx);
            run(request, port, seccomp, report_tx)
        }
        Ok(ForkResult::Parent { .. }) => {
            drop(report_tx);
            Ok(PendingRelay { report: report_rx })
        }
        Err(e) => Err(InitError::new("egress relay", format!("fork: {e}"))),
    }
}

/// The relay process. Never returns.
fn run(
    request: &InitRequest,
    port: u16,
    seccomp: &confine::SeccompFilters,
    mut report: UnixStream,
) -> ! {
    // SAFETY: fd RELAY_FD is the O_PATH descriptor of the proxy socket the host passed
    // (checked by `setup`'s fstat before use); this process owns it from here on.
    let socket = unsafe { OwnedFd::from_raw_fd(RELAY_FD) };
    match setup(request, port, seccomp, &socket) {
        Ok((listener, r)) => {
            if protocol::send(&mut report, &Ok::<_, String>(r)).is_err() {
                std::process::exit(1);
            }
            drop(report);
            forward(listener, &format!("/proc/self/fd/{}", socket.as_raw_fd()))
        }
        Err(e) => {
            let message = format!("{}: {}", e.stage, e.message);
            let _ = protocol::send(&mut report, &Err::<RelayReport, _>(message));
            std::process::exit(1);
        }
    }
}

fn setup(
    request: &InitRequest,
    port: u16,
    seccomp: &confine::SeccompFilters,
    socket: &OwnedFd,
) -> Result<(TcpListener, RelayReport), InitError> {
    let os = |stage: &'static str| move |e: nix::errno::Errno| InitError::new(stage, e.to_string());
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(os("parent-death signal"))?;
    nix::sys::prctl::set_dumpable(false).map_err(os("dumpable"))?;
    nix::sys::prctl::set_name(RELAY_NAME).map_err(os("name"))?;
    nix::unistd::setsid().map_err(os("setsid"))?;
    nix::unistd::chdir("/").map_err(os("cwd"))?;
    // The relay needs neither the host's handshake channel nor the run's output pipes.
    // SAFETY: closing fd 4, which no Rust object in this process owns (PID 1's handle on
    // it is never dropped here: this process only exits).
    unsafe { libc::close(HANDSHAKE_FD) };
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(|e| InitError::new("stdio", format!("/dev/null: {e}")))?;
    for fd in 0..=2 {
        // SAFETY: dup2 onto the standard descriptors of this single-threaded process.
        if unsafe { libc::dup2(null.as_raw_fd(), fd) } < 0 {
            return Err(InitError::new(
                "stdio",
                std::io::Error::last_os_error().to_string(),
            ));
        }
    }
    let stat = nix::sys::stat::fstat(socket).map_err(os("proxy socket"))?;
    if stat.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(InitError::new(
            "proxy socket",
            "the descriptor the host passed is not a socket",
        ));
    }
    let listen = format!("127.0.0.1:{port}");
    let listener = TcpListener::bind(&listen)
        .map_err(|e| InitError::new("listen", format!("{listen}: {e}")))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| InitError::new("listen", e.to_string()))?;
    confine::apply_rlimits(&request.profile)?;
    let landlock = confine::apply_relay_landlock(&request.profile, port)?;
    confine::apply_seccomp(&seccomp.relay())?;
    // One test connection proves the sandbox uid may use the socket; the proxy sees it
    // close without a request.
    let upstream_error = UnixStream::connect(format!("/proc/self/fd/{}", socket.as_raw_fd()))
        .err()
        .map(|e| e.to_string());
    let text = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| InitError::new("attestation", format!("/proc/self/status: {e}")))?;
    let status = attestation::parse_status(&text);
    Ok((
        listener,
        RelayReport {
            listen,
            socket_dev: stat.st_dev,
            socket_ino: stat.st_ino,
            upstream_error,
            uid: status.uid.map(|u| u.effective).unwrap_or(0),
            cap_effective: status.cap_eff,
            cap_bounding: status.cap_bnd,
            no_new_privs: status.no_new_privs,
            seccomp_filters: status.seccomp_filters,
            landlock_status: landlock.status,
        },
    ))
}

/// Bytes read from one side and not yet written to the other.
struct Pending {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// The source side sent end-of-stream.
    eof: bool,
    /// End-of-stream was passed on (`shutdown(Write)` on the destination).
    closed: bool,
}

impl Pending {
    fn new() -> Self {
        Pending {
            buf: vec![0; BUFFER].into_boxed_slice(),
            start: 0,
            end: 0,
            eof: false,
            closed: false,
        }
    }
    fn wants_read(&self) -> bool {
        !self.eof && self.end < self.buf.len()
    }
    fn has_data(&self) -> bool {
        self.start < self.end
    }
    /// Read what is available; `Err` means the connection is broken.
    fn fill(&mut self, src: &mut impl Read) -> std::io::Result<()> {
        match src.read(&mut self.buf[self.end..]) {
            Ok(0) => self.eof = true,
            Ok(n) => self.end += n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
            Err(e) => return Err(e),
        }
        Ok(())
    }
    /// Write what is buffered; pass end-of-stream on once everything is written.
    fn drain(
        &mut self,
        dst: &mut impl Write,
        shut: impl FnOnce() -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        if self.has_data() {
            match dst.write(&self.buf[self.start..self.end]) {
                Ok(n) => self.start += n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
                Err(e) => return Err(e),
            }
            if self.start == self.end {
                self.start = 0;
                self.end = 0;
            }
        }
        if self.eof && !self.has_data() && !self.closed {
            self.closed = true;
            shut()?;
        }
        Ok(())
    }
}

/// One forwarded connection.
struct Connection {
    client: TcpStream,
    proxy: UnixStream,
    /// client -> proxy
    up: Pending,
    /// proxy -> client
    down: Pending,
}

impl Connection {
    fn interest(&self) -> (PollFlags, PollFlags) {
        let mut client = PollFlags::empty();
        let mut proxy = PollFlags::empty();
        if self.up.wants_read() {
            client |= PollFlags::POLLIN;
        }
        if self.down.has_data() {
            client |= PollFlags::POLLOUT;
        }
        if self.down.wants_read() {
            proxy |= PollFlags::POLLIN;
        }
        if self.up.has_data() {
            proxy |= PollFlags::POLLOUT;
        }
        (client, proxy)
    }

    /// Move bytes both ways; `false` when the connection is finished or broken.
    fn pump(&mut self) -> bool {
        let step = (|| -> std::io::Result<()> {
            if self.up.wants_read() {
                self.up.fill(&mut self.client)?;
            }
            if self.down.wants_read() {
                self.down.fill(&mut self.proxy)?;
            }
            let proxy = &self.proxy;
            self.up
                .drain(&mut &self.proxy, || proxy.shutdown(Shutdown::Write))?;
            let client = &self.client;
            self.down
                .drain(&mut &self.client, || client.shutdown(Shutdown::Write))?;
            Ok(())
        })();
        step.is_ok() && !(self.up.closed && self.down.closed)
    }
}

/// Accept clients and forward each to a fresh connection to the proxy, until killed.
fn forward(listener: TcpListener, proxy_path: &str) -> ! {
    let mut conns: Vec<Connection> = Vec::new();
    loop {
        // Poll only descriptors with something to wait for, so a peer that hung up while
        // its buffer is full cannot make the loop spin.
        let mut fds: Vec<PollFd> = Vec::with_capacity(conns.len() * 2 + 1);
        let mut owners: Vec<usize> = Vec::with_capacity(conns.len() * 2);
        if conns.len() < MAX_CONNECTIONS {
            fds.push(PollFd::new(listener.as_fd(), PollFlags::POLLIN));
        }
        let listening = !fds.is_empty();
        for (i, c) in conns.iter().enumerate() {
            let (client, proxy) = c.interest();
            if !client.is_empty() {
                fds.push(PollFd::new(c.client.as_fd(), client));
                owners.push(i);
            }
            if !proxy.is_empty() {
                fds.push(PollFd::new(c.proxy.as_fd(), proxy));
                owners.push(i);
            }
        }
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => std::process::exit(1),
        }
        let ready = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
        let accept = listening && ready(&fds[0]);
        let skip = usize::from(listening);
        let mut active: Vec<usize> = fds[skip..]
            .iter()
            .zip(&owners)
            .filter(|(f, _)| ready(f))
            .map(|(_, i)| *i)
            .collect();
        drop(fds);
        active.dedup();
        let mut finished = Vec::new();
        for i in active {
            if !conns[i].pump() {
                finished.push(i);
            }
        }
        for i in finished.into_iter().rev() {
            conns.swap_remove(i);
        }
        if accept {
            accept_clients(&listener, proxy_path, &mut conns);
        }
    }
}

fn accept_clients(listener: &TcpListener, proxy_path: &str, conns: &mut Vec<Connection>) {
    while conns.len() < MAX_CONNECTIONS {
        let client = match listener.accept() {
            Ok((c, _)) => c,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return, // WouldBlock, or a client gone before accept
        };
        // A client the relay cannot forward is closed at once: it sees the connection end.
        let Ok(proxy) = UnixStream::connect(proxy_path) else {
            continue;
        };
        if client.set_nonblocking(true).is_err() || proxy.set_nonblocking(true).is_err() {
            continue;
        }
        let _ = client.set_nodelay(true);
        conns.push(Connection {
            client,
            proxy,
            up: Pending::new(),
            down: Pending::new(),
        });
    }
}
