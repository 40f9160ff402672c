//! One host per state dir: `airlock serve` holds an exclusive `flock` on
//! `<state>/host.lock` for as long as it runs, with its pid written inside. The kernel
//! drops the lock when the process dies however it dies (`kill -9` included), so a stale
//! file never blocks the next host, and a client asks the lock, not the pid, whether a host
//! is running.

use std::io::{Read, Seek, Write};
use std::path::PathBuf;

use nix::fcntl::{Flock, FlockArg};

use crate::home::Home;

/// The held lock; dropping it (or dying) releases it.
pub struct HostLock {
    _file: Flock<std::fs::File>,
}

pub fn lock_path(home: &Home) -> PathBuf {
    home.state.join("host.lock")
}

fn open(home: &Home, create: bool) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(create)
        .truncate(false)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(lock_path(home))
}

fn read_pid(file: &mut std::fs::File) -> Option<u32> {
    let mut text = String::new();
    file.seek(std::io::SeekFrom::Start(0)).ok()?;
    file.take(64).read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

impl HostLock {
    /// Take the state dir for this process, or say which host has it.
    pub fn acquire(home: &Home) -> anyhow::Result<HostLock> {
        crate::home::create_private_dir(&home.state)?;
        let mut file = open(home, true)
            .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", lock_path(home).display()))?;
        // A client asking whether a host runs holds a shared lock for a moment: try a few
        // times before calling the dir taken.
        for _ in 0..20 {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Err((f, nix::errno::Errno::EWOULDBLOCK)) => {
                    file = f;
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                other => return Self::taken(home, other),
            }
        }
        Self::taken(home, Flock::lock(file, FlockArg::LockExclusiveNonblock))
    }

    fn taken(
        home: &Home,
        attempt: Result<Flock<std::fs::File>, (std::fs::File, nix::errno::Errno)>,
    ) -> anyhow::Result<HostLock> {
        match attempt {
            Ok(mut held) => {
                held.set_len(0)?;
                held.seek(std::io::SeekFrom::Start(0))?;
                writeln!(held, "{}", std::process::id())?;
                held.sync_all()?;
                Ok(HostLock { _file: held })
            }
            Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
                let pid = read_pid(&mut file)
                    .map(|p| format!(" (pid {p})"))
                    .unwrap_or_default();
                anyhow::bail!(
                    "another airlock host{pid} is already serving {}\nhelp: one host per state dir; stop it first (`kill -TERM` it), or use it: the CLI talks to it by itself",
                    home.state.display()
                )
            }
            Err((_, e)) => anyhow::bail!("cannot lock {}: {e}", lock_path(home).display()),
        }
    }
}

/// The pid of the host holding `home`'s state dir, if one does.
pub fn running_host(home: &Home) -> Option<u32> {
    let file = open(home, false).ok()?;
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        // We got it, so nobody holds it; dropping ours releases it at once.
        Ok(_) => None,
        Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => Some(read_pid(&mut file).unwrap_or(0)),
        Err(_) => None,
    }
}
