//! Where the host listens, and who may talk to it.
//!
//! The API's socket is `<state>/host/api.sock`. Two walls keep others out:
//! - the file system: the directory is 0700 and the operator's (checked at every start,
//!   never loosened), the socket 0600;
//! - the kernel's word on the caller: every connection's `SO_PEERCRED` uid must be the
//!   operator's (the uid the host runs as). A caller that got past the first wall (a
//!   loosened directory, a descriptor passed on) is refused by the second, before any
//!   request of its is read.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;

use axum::extract::connect_info::Connected;
use axum::serve::IncomingStream;
use tokio::net::UnixListener;

use crate::home::Home;

pub fn socket_dir(home: &Home) -> PathBuf {
    airlock_client::host::socket_dir(&home.state)
}

pub fn socket_path(home: &Home) -> PathBuf {
    airlock_client::host::api_socket(&home.state)
}

/// Bind the API socket. Call only with the host lock held: a socket left by a host that
/// died is removed, and only the lock's holder may do that.
pub fn bind(home: &Home) -> anyhow::Result<UnixListener> {
    check_dir(home)?;
    let std_listener = bind_at(&socket_path(home))?;
    std_listener.set_nonblocking(true)?;
    Ok(UnixListener::from_std(std_listener)?)
}

/// Make the socket directory if need be, and refuse it unless it is the operator's alone.
pub fn check_dir(home: &Home) -> anyhow::Result<()> {
    let dir = socket_dir(home);
    crate::home::create_private_dir(&dir)?;
    let meta = std::fs::symlink_metadata(&dir)?;
    let me = nix::unistd::geteuid().as_raw();
    if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o077 != 0 {
        anyhow::bail!(
            "{} must be a directory of uid {me} that only it can open (mode 0700); it is {}, uid {}, mode {:o}\nhelp: remove it and start the host again, which makes it anew",
            dir.display(),
            if meta.is_dir() { "a directory" } else { "not a directory" },
            meta.uid(),
            meta.mode() & 0o7777
        );
    }
    Ok(())
}

/// Bind a socket at `path` in the (checked) socket directory, mode 0600, replacing one a
/// dead host left.
pub fn bind_at(path: &std::path::Path) -> anyhow::Result<std::os::unix::net::UnixListener> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => anyhow::bail!("cannot remove the old socket {}: {e}", path.display()),
    }
    let listener = std::os::unix::net::UnixListener::bind(path)
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// The connecting process, as the kernel reports it.
#[derive(Debug, Clone, Copy)]
pub struct Peer {
    pub uid: Option<u32>,
    pub pid: Option<i32>,
}

impl Connected<IncomingStream<'_, UnixListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, UnixListener>) -> Self {
        match stream.io().peer_cred() {
            Ok(cred) => Peer {
                uid: Some(cred.uid()),
                pid: cred.pid(),
            },
            // No credentials: refused like a stranger.
            Err(_) => Peer {
                uid: None,
                pid: None,
            },
        }
    }
}
