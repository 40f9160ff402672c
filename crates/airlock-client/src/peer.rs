//! Whether the process at the other end of a host's socket may be talked to.
//!
//! A client hands the host what it must not hand anyone else: its terminal, its pipes
//! and files (the exec socket takes descriptors 0, 1 and 2), a command line, an approval
//! or a kill. So before it sends a byte it asks the kernel who listens (`SO_PEERCRED`:
//! the uid that process had when it began to listen) and goes on only when that is its
//! own effective uid.
//!
//! Root is not an exception either way. A host answers only the uid it runs as, so a
//! peer of any other uid, root included, is never a host that would serve this client:
//! what listens there is something else (planted where the host's socket should be, or
//! a host this user may not use), and gets nothing. A client running as root talks only
//! to a host running as root.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

/// The socket's listener is not of this client's uid: nothing was sent to it.
#[derive(Debug)]
pub struct NotOwnHost {
    pub socket: PathBuf,
    /// The listener's uid; `None` when the kernel would not say.
    pub peer: Option<u32>,
    pub own: u32,
}

impl std::fmt::Display for NotOwnHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let who = match self.peer {
            Some(uid) => format!("a process of uid {uid}"),
            None => "a process whose uid the kernel would not give".into(),
        };
        write!(
            f,
            "{} is served by {who}, not by this user (uid {}): it is not your host, and nothing was sent to it\nhelp: check who owns that socket (`ss -xlp`); a host serves only the user it runs as, so run `airlock serve` as uid {} or run the command without a host",
            self.socket.display(),
            self.own,
            self.own
        )
    }
}

impl std::error::Error for NotOwnHost {}

/// Whether a client of effective uid `own` may talk to a listener of uid `peer`.
pub fn may_talk_to(own: u32, peer: u32) -> bool {
    peer == own
}

/// Check the listener at the other end of `stream`, connected to `socket`, before
/// anything is sent on it.
pub fn check(stream: &impl AsFd, socket: &Path) -> Result<(), NotOwnHost> {
    let own = nix::unistd::geteuid().as_raw();
    let peer = nix::sys::socket::getsockopt(stream, nix::sys::socket::sockopt::PeerCredentials)
        .ok()
        .map(|c| c.uid());
    match peer {
        Some(uid) if may_talk_to(own, uid) => Ok(()),
        _ => Err(NotOwnHost {
            socket: socket.to_path_buf(),
            peer,
            own,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_listener_of_the_clients_own_uid_is_talked_to() {
        assert!(may_talk_to(1000, 1000));
        assert!(may_talk_to(0, 0));
        assert!(!may_talk_to(1000, 0), "root is not this user's host");
        assert!(!may_talk_to(0, 1000), "nor is a user's host root's");
        assert!(!may_talk_to(1000, 1001));
    }

    #[test]
    fn a_peer_of_this_process_is_its_own_uid() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        check(&a, Path::new("/x.sock")).unwrap();
    }

    #[test]
    fn the_refusal_names_the_socket_both_uids_and_what_to_do() {
        let e = NotOwnHost {
            socket: "/h/state/host/exec.sock".into(),
            peer: Some(0),
            own: 1000,
        }
        .to_string();
        assert!(e.contains("/h/state/host/exec.sock"), "{e}");
        assert!(e.contains("uid 0") && e.contains("uid 1000"), "{e}");
        assert!(
            e.contains("nothing was sent") && e.contains("\nhelp: "),
            "{e}"
        );
    }
}
