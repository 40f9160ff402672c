//! Telling the processes that wait on an approval that its answer may have come.
//!
//! An approval is decided in one process (`airlock approvals approve`, the host, later a
//! web page or a chat channel) and awaited in another (an agent's tool call, a held
//! commit, the egress proxy). Every write that changes an approval's status closes
//! `<state>/approvals.changed` after opening it for writing (the file stays empty), and a
//! waiter holds an inotify watch on that file, so it wakes as soon as the write commits
//! instead of at its next poll. The poll stays as the safety net: a watch that cannot be
//! made, or a file someone removed, only brings back the old delay.
//!
//! Written with rustix's inotify rather than a file-watching crate: one file, one event
//! kind, and no thread of its own.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::inotify;

/// The file approval writers touch, in the state dir.
pub const APPROVALS_CHANGED_FILE: &str = "approvals.changed";

fn path_in(state_dir: &Path) -> PathBuf {
    state_dir.join(APPROVALS_CHANGED_FILE)
}

/// Wake every waiter of `state_dir`. Failing to is never an error of the decision itself:
/// waiters still see it at their next poll.
pub fn signal_approvals_changed(state_dir: &Path) {
    let _ = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path_in(state_dir));
}

/// An inotify watch on the approvals' change file.
#[derive(Debug)]
pub struct ApprovalWatch {
    fd: OwnedFd,
}

impl ApprovalWatch {
    /// Watch `state_dir`'s change file (made if missing). Make the watch *before* reading
    /// the status it guards, so that an answer written in between still wakes the wait.
    pub fn new(state_dir: &Path) -> std::io::Result<ApprovalWatch> {
        let path = path_in(state_dir);
        if std::fs::symlink_metadata(&path).is_err() {
            signal_approvals_changed(state_dir);
        }
        let fd = inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK)?;
        inotify::add_watch(
            &fd,
            &path,
            inotify::WatchFlags::CLOSE_WRITE
                | inotify::WatchFlags::ATTRIB
                | inotify::WatchFlags::DELETE_SELF,
        )?;
        Ok(ApprovalWatch { fd })
    }

    /// Wait until an approval changes or `timeout` passes; true when woken by a change.
    /// Events that had already arrived count, and are consumed.
    pub fn wait(&self, timeout: Duration) -> bool {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let timeout = Timespec {
            tv_sec: timeout.as_secs() as i64,
            tv_nsec: timeout.subsec_nanos() as _,
        };
        let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
        let woke = loop {
            match poll(&mut fds, Some(&timeout)) {
                Ok(n) => break n > 0,
                Err(rustix::io::Errno::INTR) => continue,
                // A broken watch only brings back the poll's delay.
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(50));
                    break false;
                }
            }
        };
        if woke {
            self.drain();
        }
        woke
    }

    /// Consume the events that have arrived.
    fn drain(&self) {
        let mut buf = [0u8; 4096];
        while matches!(rustix::io::read(&self.fd, &mut buf), Ok(n) if n > 0) {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_wakes_a_waiter_in_another_thread_and_a_quiet_wait_times_out() {
        let dir = tempfile::tempdir().unwrap();
        let watch = ApprovalWatch::new(dir.path()).unwrap();
        assert!(
            !watch.wait(Duration::from_millis(30)),
            "nothing changed yet"
        );
        let state = dir.path().to_path_buf();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            signal_approvals_changed(&state);
        });
        // Far longer than the writer needs: woken by the signal, not by the timeout.
        assert!(watch.wait(Duration::from_secs(60)));
        writer.join().unwrap();
        // Consumed: the next wait is quiet again.
        assert!(!watch.wait(Duration::from_millis(30)));
        // A signal that came before the wait still counts.
        signal_approvals_changed(dir.path());
        assert!(watch.wait(Duration::from_secs(60)));
    }
}
