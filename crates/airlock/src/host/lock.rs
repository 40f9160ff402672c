//! One host per state dir: `airlock serve` holds an exclusive `flock` on
//! `<state>/host.lock` for as long as it runs, with its pid written inside. The kernel
//! drops the lock when the process dies however it dies (`kill -9` included), so a stale
//! file never blocks the next host, and a client asks the lock, not the pid, whether a host
//! is running.

use std::io::{Seek, Write};
use std::path::PathBuf;

use airlock_client::host::read_pid;
use nix::fcntl::{Flock, FlockArg};

use crate::home::Home;

/// The held lock; dropping it (or dying) releases it.
pub struct HostLock {
    _file: Flock<std::fs::File>,
}

pub fn lock_path(home: &Home) -> PathBuf {
    airlock_client::host::lock_path(&home.state)
}

fn open(home: &Home, create: bool) -> std::io::Result<std::fs::File> {
    airlock_client::host::open_lock(&home.state, create)
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
    airlock_client::host::running_host(&home.state)
}
