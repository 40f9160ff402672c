//! Whether a host (`airlock serve`) holds a state dir, and where its sockets are.
//!
//! The host holds an exclusive `flock` on `<state>/host.lock` for as long as it runs, with
//! its pid written inside. The kernel drops the lock when the process dies however it dies,
//! so a client asks the lock, not the pid, whether a host is running.

use std::io::{Read, Seek};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

pub fn lock_path(state: &Path) -> PathBuf {
    state.join("host.lock")
}

/// The dir of the host's sockets (created by the host, private to its owner).
pub fn socket_dir(state: &Path) -> PathBuf {
    state.join("host")
}

/// The HTTP/JSON API's socket.
pub fn api_socket(state: &Path) -> PathBuf {
    socket_dir(state).join("api.sock")
}

/// The socket of the runs that take the caller's descriptors (`exec`, `run`, `chat`).
pub fn exec_socket(state: &Path) -> PathBuf {
    socket_dir(state).join("exec.sock")
}

/// Open the lock file; `create` only for the host taking it.
pub fn open_lock(state: &Path, create: bool) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(lock_path(state))
}

/// The pid written in the lock file, if it reads as one.
pub fn read_pid(file: &mut std::fs::File) -> Option<u32> {
    let mut text = String::new();
    file.seek(std::io::SeekFrom::Start(0)).ok()?;
    file.take(64).read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

/// The pid of the host holding the state dir, if one does (0 when its pid cannot be read).
pub fn running_host(state: &Path) -> Option<u32> {
    let file = open_lock(state, false).ok()?;
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        // We got it, so nobody holds it; dropping ours releases it at once.
        Ok(_) => None,
        Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => Some(read_pid(&mut file).unwrap_or(0)),
        Err(_) => None,
    }
}
