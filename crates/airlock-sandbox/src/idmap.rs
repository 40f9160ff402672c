//! An id-mapped lower layer for a root host's workspace overlay.
//!
//! A root host runs the sandbox as [`SandboxProfile::sandbox_uid`](crate::SandboxProfile)
//! (65534 by default), whose user namespace maps that one id. The workspace it works on is
//! usually root's: every file belongs to uid 0, which does not exist in the sandbox. Reading
//! works (the files show as the overflow id), but overlayfs copies a file up *as its owner*
//! before the first write, and cannot create a file owned by an id the namespace lacks: the
//! write fails with `EOVERFLOW`. So a run could add files but never change or delete one.
//!
//! The fix is the kernel's id-mapped mounts: the host (root, so allowed to) makes the
//! detached lower bind show the workspace owner's ids as the sandbox's. Nothing is written
//! through this mount (it is read-only, and only overlayfs' lower layer); it changes only
//! whose files they appear to be, so copy-up makes upper files the sandbox owns, and the
//! host commits the result as before. Files of other owners keep showing as the overflow
//! id and stay unchangeable, as before.
//!
//! The mapping is a user namespace whose one line maps the owner's id (inside) to the
//! sandbox's (outside). A user namespace needs a process to be made in: a clone that shares
//! the host's memory (no page tables are copied) and only sleeps, killed as soon as the
//! namespace has its maps and an open descriptor. The namespace lives on in that
//! descriptor, which is kept for the process's lifetime, one per mapping, so a long-running
//! host makes each one once.

use std::collections::HashMap;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Mutex;

/// Which ids an id-mapped mount shows as which: files of `from` appear owned by `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct IdShift {
    pub from_uid: u32,
    pub from_gid: u32,
    pub to_uid: u32,
    pub to_gid: u32,
}

impl IdShift {
    /// Nothing to map when the owner already is the sandbox's id.
    pub fn is_identity(&self) -> bool {
        self.from_uid == self.to_uid && self.from_gid == self.to_gid
    }
}

static NAMESPACES: Mutex<Option<HashMap<IdShift, OwnedFd>>> = Mutex::new(None);

/// Make the detached mount `tree` show `shift.from_*`'s files as `shift.to_*`'s.
pub(crate) fn apply(tree: &OwnedFd, shift: IdShift) -> io::Result<()> {
    let mut cache = NAMESPACES.lock().unwrap_or_else(|p| p.into_inner());
    let map = cache.get_or_insert_with(HashMap::new);
    let userns = match map.entry(shift) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(e) => e.insert(mapping_namespace(shift)?),
    };
    crate::init::sys::set_mount_idmap(tree.as_raw_fd(), userns.as_raw_fd())
}

/// A new user namespace whose maps say `from` inside is `to` outside.
fn mapping_namespace(shift: IdShift) -> io::Result<OwnedFd> {
    // The child only sleeps until it is killed: it allocates nothing and touches no
    // shared state, which is what makes sharing the host's memory (CLONE_VM) safe.
    let mut stack = vec![0u8; 64 * 1024];
    let sleep_forever = Box::new(|| -> isize {
        loop {
            // SAFETY: pause has no preconditions.
            unsafe { libc::pause() };
        }
    });
    let flags = nix::sched::CloneFlags::CLONE_NEWUSER | nix::sched::CloneFlags::CLONE_VM;
    // SAFETY: the callback runs on its own stack, which outlives the child (it is freed
    // only after the child has been reaped below), and calls only pause(2).
    let child = unsafe { nix::sched::clone(sleep_forever, &mut stack, flags, None) }
        .map_err(io::Error::from)?;
    let result = (|| {
        let proc_dir = format!("/proc/{child}");
        for (file, from, to) in [
            ("uid_map", shift.from_uid, shift.to_uid),
            ("gid_map", shift.from_gid, shift.to_gid),
        ] {
            // One write, as the kernel wants it.
            std::fs::OpenOptions::new()
                .write(true)
                .open(format!("{proc_dir}/{file}"))?
                .write_all(format!("{from} {to} 1\n").as_bytes())?;
        }
        let ns = std::fs::File::open(format!("{proc_dir}/ns/user"))?;
        Ok(OwnedFd::from(ns))
    })();
    let _ = nix::sys::signal::kill(child, nix::sys::signal::Signal::SIGKILL);
    // No exit signal was asked for, so the child is reaped as a clone child (__WALL).
    let _ = nix::sys::wait::waitpid(child, Some(nix::sys::wait::WaitPidFlag::__WALL));
    drop(stack);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shift_onto_the_same_ids_is_identity() {
        let same = IdShift {
            from_uid: 65534,
            from_gid: 65534,
            to_uid: 65534,
            to_gid: 65534,
        };
        assert!(same.is_identity());
        assert!(!IdShift {
            from_uid: 0,
            ..same
        }
        .is_identity());
        assert!(!IdShift {
            from_gid: 0,
            ..same
        }
        .is_identity());
    }

    /// As root: a detached bind with the shift shows root's file as the sandbox's.
    #[test]
    fn an_id_mapped_bind_shows_the_owners_files_as_the_sandboxs() {
        use std::os::unix::fs::MetadataExt;
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), "x").unwrap();
        let (uid, gid) = {
            let m = std::fs::metadata(dir.path().join("f")).unwrap();
            (m.uid(), m.gid())
        };
        let tree = crate::launcher::detached_bind(dir.path(), 0, "test").unwrap();
        apply(
            &tree,
            IdShift {
                from_uid: uid,
                from_gid: gid,
                to_uid: 65534,
                to_gid: 65533,
            },
        )
        .unwrap();
        let f =
            nix::sys::stat::fstatat(&tree, "f", nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW).unwrap();
        assert_eq!((f.st_uid, f.st_gid), (65534, 65533));
        // The file itself is unchanged.
        let m = std::fs::metadata(dir.path().join("f")).unwrap();
        assert_eq!((m.uid(), m.gid()), (uid, gid));
    }
}
