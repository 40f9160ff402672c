//! The person a service acts for, as the service sees them: where its messages, the
//! payload's output and an approval prompt go, and whether they are still there.
//!
//! Embedded, that is this process's own standard streams. Through the host, it is the
//! descriptors the client sent with its request (`host::exec_wire`): the host writes to
//! the client's terminal, pipe or file exactly what the command would have written
//! embedded, and never to its own stderr, which is its log.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use airlock_sandbox::{ForwardTo, OutputMode};

/// The longest line [`Caller::read_line`] takes from a client.
const MAX_ANSWER_BYTES: usize = 4096;

/// Where the lines Airlock says to the caller go (refusals, held commits, timeouts).
#[derive(Clone)]
pub enum Notices {
    /// This process's stderr.
    Stderr,
    /// A client's stderr, sent to the host with its request.
    Client(Arc<File>),
}

impl Notices {
    /// Say `text` (one or more lines) to the caller. A caller that went away loses it.
    pub fn line(&self, text: &str) {
        self.write(&format!("{text}\n"));
    }

    /// Say `text` as it is (a prompt ends without a newline).
    pub fn write(&self, text: &str) {
        let _ = match self {
            Notices::Stderr => {
                let mut err = std::io::stderr().lock();
                err.write_all(text.as_bytes()).and_then(|()| err.flush())
            }
            Notices::Client(f) => (&**f).write_all(text.as_bytes()),
        };
    }
}

/// Set once the caller has gone away: what was armed runs (once), and a wait on the
/// caller's input gives up.
pub struct HangUp {
    fired: AtomicBool,
    /// Readable once fired, so a `poll` on the caller's input wakes.
    wake: (OwnedFd, OwnedFd),
    armed: Mutex<Vec<Box<dyn Fn() + Send + Sync>>>,
}

impl HangUp {
    pub fn new() -> std::io::Result<Arc<HangUp>> {
        let wake = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        Ok(Arc::new(HangUp {
            fired: AtomicBool::new(false),
            wake,
            armed: Mutex::new(Vec::new()),
        }))
    }

    /// The caller went away: run what is armed.
    pub fn fire(&self) {
        if self.fired.swap(true, Ordering::AcqRel) {
            return;
        }
        let _ = nix::unistd::write(&self.wake.1, b"x");
        for f in self.armed.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            f();
        }
    }

    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::Acquire)
    }

    /// Run `f` when the caller goes away, or now if it already has.
    pub fn arm(&self, f: impl Fn() + Send + Sync + 'static) {
        let mut armed = self.armed.lock().unwrap_or_else(|p| p.into_inner());
        if self.fired() {
            drop(armed);
            f();
            return;
        }
        armed.push(Box::new(f));
    }
}

/// Who a run is for, and how to reach them.
pub struct Caller {
    /// The caller's standard input (an approval prompt reads it); `None` is this
    /// process's own.
    pub stdin: Option<File>,
    /// Where the payload's output goes.
    pub output: OutputMode,
    pub notices: Notices,
    /// Fired when a client of the host goes away; `None` embedded (the caller is this
    /// process).
    pub hang_up: Option<Arc<HangUp>>,
}

impl Caller {
    /// This process's own streams.
    pub fn this_process() -> Caller {
        Caller {
            stdin: None,
            output: OutputMode::Inherit,
            notices: Notices::Stderr,
            hang_up: None,
        }
    }

    /// A client's standard input, output and error, as the host received them.
    pub fn client(fds: [OwnedFd; 3], hang_up: Arc<HangUp>) -> Caller {
        let [stdin, stdout, stderr] = fds;
        let stderr = Arc::new(File::from(stderr));
        Caller {
            stdin: Some(File::from(stdin)),
            output: OutputMode::Forward(ForwardTo {
                stdout: Arc::new(File::from(stdout)),
                stderr: stderr.clone(),
            }),
            notices: Notices::Client(stderr),
            hang_up: Some(hang_up),
        }
    }

    /// Whether the caller's input is a terminal, so a person can answer a prompt on it.
    pub fn stdin_is_terminal(&self) -> bool {
        use std::io::IsTerminal;
        match &self.stdin {
            Some(f) => f.is_terminal(),
            None => std::io::stdin().is_terminal(),
        }
    }

    /// One line of the caller's input, without its newline; `None` at its end or when the
    /// caller went away while it waited.
    pub fn read_line(&self) -> std::io::Result<Option<String>> {
        let Some(f) = &self.stdin else {
            let mut line = String::new();
            use std::io::BufRead;
            let n = std::io::stdin().lock().read_line(&mut line)?;
            return Ok((n > 0).then(|| line.trim_end_matches('\n').to_string()));
        };
        // Byte by byte with a poll before each read: a client that went away wakes the
        // wait, and nothing after the line is taken from the caller's input.
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let mut line = Vec::new();
        loop {
            let mut fds = vec![PollFd::new(f.as_fd(), PollFlags::POLLIN)];
            if let Some(h) = &self.hang_up {
                fds.push(PollFd::new(h.wake.0.as_fd(), PollFlags::POLLIN));
            }
            match poll(&mut fds, PollTimeout::NONE) {
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
                Ok(_) => {}
            }
            if self.hang_up.as_ref().is_some_and(|h| h.fired()) {
                return Ok(None);
            }
            let mut byte = [0u8; 1];
            match nix::unistd::read(f, &mut byte) {
                Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => continue,
                Err(e) => return Err(e.into()),
                Ok(0) if line.is_empty() => return Ok(None),
                Ok(0) => break,
                Ok(_) if byte[0] == b'\n' => break,
                // A person's answer is a word; a longer line is not one.
                Ok(_) if line.len() >= MAX_ANSWER_BYTES => break,
                Ok(_) => line.push(byte[0]),
            }
        }
        Ok(Some(String::from_utf8_lossy(&line).into_owned()))
    }
}
