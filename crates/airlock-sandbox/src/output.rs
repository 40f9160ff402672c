//! Forwarding or capturing the payload's output under a shared byte cap.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// Where the payload's output goes.
#[derive(Debug, Clone)]
pub enum OutputMode {
    /// Forwarded live to this process's stdout and stderr (through pipes, so the payload
    /// never holds the caller's terminal), up to the cap; then a marker says it was cut.
    Inherit,
    /// Forwarded live, as [`OutputMode::Inherit`], to another caller's streams: a host
    /// that runs a client's command forwards to the descriptors the client sent it.
    Forward(ForwardTo),
    /// Kept in [`crate::RunOutcome::stdout`] / [`crate::RunOutcome::stderr`], up to the cap.
    Capture,
    /// Told later: a sandbox prepared before anyone asked for its run (a host's run staged
    /// ahead) learns where its output goes once a caller takes it. Until then nothing is
    /// read from its pipes; a sandbox abandoned without a caller keeps what it wrote, as a
    /// capture does, and drops it.
    Deferred(DeferredOutput),
}

/// Where a [`OutputMode::Deferred`] run's output goes, set once by whoever takes the run.
#[derive(Debug, Clone, Default)]
pub struct DeferredOutput(Arc<(Mutex<Option<OutputMode>>, Condvar)>);

impl DeferredOutput {
    pub fn new() -> DeferredOutput {
        DeferredOutput::default()
    }

    /// Send the output to `mode` from now on. Only the first setting counts: the run
    /// may already have been abandoned (its output captured and dropped). A deferred mode
    /// given here is taken as a capture: it could never be resolved.
    pub fn set(&self, mode: OutputMode) {
        let mode = match mode {
            OutputMode::Deferred(_) => OutputMode::Capture,
            other => other,
        };
        let (slot, changed) = &*self.0;
        let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(mode);
            changed.notify_all();
        }
    }

    /// Wait until the output has somewhere to go.
    fn wait(&self) -> OutputMode {
        let (slot, changed) = &*self.0;
        let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(mode) = slot.as_ref() {
                return mode.clone();
            }
            slot = changed.wait(slot).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// The two streams [`OutputMode::Forward`] writes to.
#[derive(Debug, Clone)]
pub struct ForwardTo {
    pub stdout: Arc<std::fs::File>,
    pub stderr: Arc<std::fs::File>,
}

impl OutputMode {
    /// Write `chunk` of `stream` where this mode forwards it (nothing for a capture).
    fn forward(&self, stream: Stream, chunk: &[u8]) {
        let _ = match (self, stream) {
            (OutputMode::Capture | OutputMode::Deferred(_), _) => Ok(()),
            (OutputMode::Inherit, Stream::Stdout) => std::io::stdout()
                .lock()
                .write_all(chunk)
                .and_then(|()| std::io::stdout().flush()),
            (OutputMode::Inherit, Stream::Stderr) => std::io::stderr().lock().write_all(chunk),
            (OutputMode::Forward(to), Stream::Stdout) => (&*to.stdout).write_all(chunk),
            (OutputMode::Forward(to), Stream::Stderr) => (&*to.stderr).write_all(chunk),
        };
    }
}

/// The byte budget shared by stdout and stderr of one run.
pub(crate) struct OutputCap {
    remaining: AtomicU64,
    truncated: AtomicBool,
    cap: u64,
}

impl OutputCap {
    pub(crate) fn new(cap: u64) -> Arc<Self> {
        Arc::new(OutputCap {
            remaining: AtomicU64::new(cap),
            truncated: AtomicBool::new(false),
            cap,
        })
    }

    /// How many of `want` bytes may still pass.
    fn take(&self, want: u64) -> u64 {
        let mut cur = self.remaining.load(Ordering::Relaxed);
        loop {
            let grant = cur.min(want);
            match self.remaining.compare_exchange(
                cur,
                cur - grant,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return grant,
                Err(now) => cur = now,
            }
        }
    }

    pub(crate) fn truncated(&self) -> bool {
        self.truncated.load(Ordering::Relaxed)
    }
}

/// Which of the caller's streams a pump forwards to in [`OutputMode::Inherit`].
#[derive(Clone, Copy)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

/// Read `source` to its end on a thread; forward or keep what fits under `cap`; drain the
/// rest so the payload never blocks on a full pipe.
pub(crate) fn pump(
    mut source: impl Read + Send + 'static,
    mode: OutputMode,
    stream: Stream,
    cap: Arc<OutputCap>,
) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        // A deferred run's pump reads nothing until a caller took the run (or it was
        // abandoned, which sets a capture): the pipe holds what comes before.
        let mode = match mode {
            OutputMode::Deferred(later) => later.wait(),
            other => other,
        };
        let mut kept = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        loop {
            let n = match source.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            let grant = cap.take(n as u64) as usize;
            let chunk = &buf[..grant];
            match mode {
                OutputMode::Capture => kept.extend_from_slice(chunk),
                _ => mode.forward(stream, chunk),
            }
            if grant < n
                && !cap.truncated.swap(true, Ordering::Relaxed)
                && !matches!(mode, OutputMode::Capture)
            {
                let marker = format!("\n[airlock: output cut after {} bytes]\n", cap.cap);
                mode.forward(Stream::Stderr, marker.as_bytes());
            }
        }
        kept
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_deferred_pump_reads_nothing_until_told_where_and_then_all_of_it() {
        let later = DeferredOutput::new();
        let pump = pump(
            std::io::Cursor::new(b"written before the caller came".to_vec()),
            OutputMode::Deferred(later.clone()),
            Stream::Stdout,
            OutputCap::new(1024),
        );
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            !pump.is_finished(),
            "the pump read before it was told where to"
        );
        later.set(OutputMode::Capture);
        // Only the first setting counts.
        later.set(OutputMode::Inherit);
        assert_eq!(pump.join().unwrap(), b"written before the caller came");
    }

    #[test]
    fn a_deferred_mode_set_to_another_deferred_one_is_a_capture() {
        let later = DeferredOutput::new();
        later.set(OutputMode::Deferred(DeferredOutput::new()));
        assert!(matches!(later.wait(), OutputMode::Capture));
    }
}
