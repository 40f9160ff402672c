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

/// Where the lines Airlock says to the caller go (refusals, held commits, timeouts, and a
/// conversation's own text).
#[derive(Clone)]
pub enum Notices {
    /// This process's stderr.
    Stderr,
    /// This process's stdout (a conversation's text, embedded).
    Stdout,
    /// A client's stderr, sent to the host with its request.
    Client(Arc<File>),
    /// A session that lives in the host: whichever client is attached to it, if any.
    Attachable(Arc<Attachable>),
    /// Nobody (a run the web page started: its reply is watched through the host's
    /// replies, and its report is in the store).
    Nobody,
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
            Notices::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(text.as_bytes()).and_then(|()| out.flush())
            }
            Notices::Client(f) => (&**f).write_all(text.as_bytes()),
            Notices::Attachable(a) => {
                a.write(text.as_bytes());
                Ok(())
            }
            Notices::Nobody => Ok(()),
        };
    }
}

/// The most a detached session keeps of what it said, for the next client to attach.
const BACKLOG_BYTES: usize = 64 * 1024;

/// The most of what a session said lately that a new watcher (the web page) is shown first.
const RECENT_BYTES: usize = 16 * 1024;

/// One stream of a session that lives in the host and outlasts its clients: what it says
/// goes to the attached client's descriptor, or, while no client is attached, into a
/// bounded backlog that the next client to attach is shown first (the end of a turn that
/// ran on after its client left is not lost). Besides, anyone may *watch* it (the web
/// page): a watcher is shown what was said lately, then each piece as it is said, whether
/// a client is attached or not.
pub struct Attachable {
    state: Mutex<AttachState>,
}

#[derive(Default)]
struct AttachState {
    to: Option<Arc<File>>,
    backlog: Vec<u8>,
    /// The backlog lost its beginning to the bound.
    cut: bool,
    /// The end of what was said, for a new watcher.
    recent: String,
    /// The watchers, once there was one.
    watchers: Option<tokio::sync::broadcast::Sender<String>>,
}

impl Attachable {
    pub fn new() -> Arc<Attachable> {
        Arc::new(Attachable {
            state: Mutex::new(AttachState::default()),
        })
    }

    /// Send from now on to `to`; returns what was said while nobody was attached.
    pub fn attach(&self, to: Arc<File>) -> String {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.to = Some(to);
        let backlog = std::mem::take(&mut s.backlog);
        let cut = std::mem::take(&mut s.cut);
        let text = String::from_utf8_lossy(&backlog).into_owned();
        if cut {
            format!("(earlier output was dropped)\n{text}")
        } else {
            text
        }
    }

    /// What was said while nobody was attached, taken (a channel sends it as a message).
    pub fn take(&self) -> String {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.cut = false;
        String::from_utf8_lossy(&std::mem::take(&mut s.backlog)).into_owned()
    }

    /// Watch what is said: the end of what was said lately, then each piece as it is said
    /// (a watcher too slow to keep up is told it lagged by its receiver).
    pub fn watch(&self) -> (String, tokio::sync::broadcast::Receiver<String>) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let rx = match &s.watchers {
            Some(tx) => tx.subscribe(),
            None => {
                let (tx, rx) = tokio::sync::broadcast::channel(1024);
                s.watchers = Some(tx);
                rx
            }
        };
        (s.recent.clone(), rx)
    }

    /// Keep from now on what is said, for the next client.
    pub fn detach(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).to = None;
    }

    fn write(&self, bytes: &[u8]) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let text = String::from_utf8_lossy(bytes);
        s.recent.push_str(&text);
        if s.recent.len() > RECENT_BYTES {
            let mut from = s.recent.len() - RECENT_BYTES;
            while !s.recent.is_char_boundary(from) {
                from += 1;
            }
            s.recent.drain(..from);
        }
        if let Some(tx) = &s.watchers {
            // Nobody watching is not an error.
            let _ = tx.send(text.into_owned());
        }
        if let Some(to) = &s.to {
            // A client that went away loses it; its hang-up detaches it.
            let _ = (&**to).write_all(bytes);
            return;
        }
        s.backlog.extend_from_slice(bytes);
        if s.backlog.len() > BACKLOG_BYTES {
            let extra = s.backlog.len() - BACKLOG_BYTES;
            s.backlog.drain(..extra);
            s.cut = true;
        }
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
        let mut partial = Vec::new();
        Ok(
            match read_line_from(f, self.hang_up.as_deref(), None, &mut partial)? {
                Line::Text(l) => Some(l),
                Line::End | Line::TimedOut | Line::Gone => None,
            },
        )
    }
}

/// What a wait for a line of input got.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    Text(String),
    /// Input ended.
    End,
    TimedOut,
    /// The client went away (or detached): nobody is there to answer.
    Gone,
}

/// One line of `f` before `deadline`, without its newline. Byte by byte with a poll before
/// each read: a client that went away wakes the wait, and nothing after the line is taken
/// from the caller's input (it may be a terminal whose next line is for its shell). What
/// was read of a line before a timeout stays in `partial` for the next call.
fn read_line_from(
    f: &File,
    hang_up: Option<&HangUp>,
    deadline: Option<std::time::Instant>,
    partial: &mut Vec<u8>,
) -> std::io::Result<Line> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    loop {
        let timeout = match deadline {
            None => PollTimeout::NONE,
            Some(d) => {
                let left = d.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    return Ok(Line::TimedOut);
                }
                // At most a minute per wait (a u16 of milliseconds); the loop waits again.
                PollTimeout::from(left.as_millis().clamp(1, 60_000) as u16)
            }
        };
        let mut fds = vec![PollFd::new(f.as_fd(), PollFlags::POLLIN)];
        if let Some(h) = hang_up {
            fds.push(PollFd::new(h.wake.0.as_fd(), PollFlags::POLLIN));
        }
        match poll(&mut fds, timeout) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
            Ok(0) => continue,
            Ok(_) => {}
        }
        if hang_up.is_some_and(|h| h.fired()) {
            return Ok(Line::Gone);
        }
        let mut byte = [0u8; 1];
        match nix::unistd::read(f, &mut byte) {
            Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => continue,
            Err(e) => return Err(e.into()),
            Ok(0) if partial.is_empty() => return Ok(Line::End),
            Ok(0) => break,
            Ok(_) if byte[0] == b'\n' => break,
            // A person's answer is a word; a longer line is not one.
            Ok(_) if partial.len() >= MAX_ANSWER_BYTES => break,
            Ok(_) => partial.push(byte[0]),
        }
    }
    let line = String::from_utf8_lossy(partial).into_owned();
    partial.clear();
    Ok(Line::Text(line))
}

/// The lines a client attached to a session types: its prompts, and its answers to the
/// session's approval prompts (see [`crate::inline_approvals::Lines`]).
pub struct ClientLines {
    stdin: File,
    hang_up: Arc<HangUp>,
    partial: Mutex<Vec<u8>>,
    /// Piped input is echoed, as embedded, so the transcript reads like a session.
    echo: Option<Notices>,
}

impl ClientLines {
    pub fn new(stdin: File, hang_up: Arc<HangUp>, out: Notices) -> ClientLines {
        use std::io::IsTerminal;
        let echo = (!stdin.is_terminal()).then_some(out);
        ClientLines {
            stdin,
            hang_up,
            partial: Mutex::new(Vec::new()),
            echo,
        }
    }

    /// The next line before `deadline` (`None`: no limit).
    pub fn next_line_before(&self, deadline: Option<std::time::Instant>) -> Line {
        let mut partial = self.partial.lock().unwrap_or_else(|p| p.into_inner());
        match read_line_from(&self.stdin, Some(&self.hang_up), deadline, &mut partial) {
            Ok(Line::Text(l)) => {
                if let Some(out) = &self.echo {
                    out.line(&airlock_core::terminal_text::escape_line(&l));
                }
                Line::Text(l)
            }
            Ok(other) => other,
            // An input that cannot be read is one nobody answers on.
            Err(_) => Line::Gone,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watcher_sees_the_recent_text_then_each_piece_attached_or_not() {
        let a = Attachable::new();
        Notices::Attachable(a.clone()).write("before anyone watched\n");
        let (recent, mut rx) = a.watch();
        assert_eq!(recent, "before anyone watched\n");
        Notices::Attachable(a.clone()).write("model> Hel");
        Notices::Attachable(a.clone()).write("lo");
        assert_eq!(rx.try_recv().unwrap(), "model> Hel");
        assert_eq!(rx.try_recv().unwrap(), "lo");
        // The detached backlog is kept for the next client as before.
        assert!(a.take().ends_with("model> Hello"));
        // The recent text is bounded, cut on a character boundary.
        let long = "é".repeat(RECENT_BYTES);
        Notices::Attachable(a.clone()).write(&long);
        let (recent, _) = a.watch();
        assert!(recent.len() <= RECENT_BYTES);
        assert!(recent.ends_with("éé"));
    }
}
