//! Who the helper runs as, settled before it does anything else.
//!
//! The host starts the helper with `posix_spawn`, which cannot switch users. When the host
//! runs as root it passes the sandbox's ids instead (`--uid U --gid G`), and the helper
//! switches to them first: no supplementary groups, then the gid, then the uid, each real,
//! effective and saved, and then checks that nothing of root is left (ids, groups,
//! capabilities). It never goes on as root:
//!
//! - root without ids, or with uid or gid 0, is refused;
//! - a set-user-ID root install (real uid not root, effective uid root) is refused: it would
//!   let any user pick any uid;
//! - a non-root helper given ids accepts them only when they are exactly its own ids
//!   (real, effective and saved), so that the flags always say who the helper runs as.
//!
//! A refusal happens before the helper reads its request.

use std::ffi::OsString;

use nix::unistd::{Gid, Uid};

/// The flag naming the uid a helper started as root switches to.
pub const IDENTITY_UID_FLAG: &str = "--uid";
/// The flag naming the gid a helper started as root switches to.
pub const IDENTITY_GID_FLAG: &str = "--gid";

/// The ids the host asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ids {
    uid: u32,
    gid: u32,
}

/// Why the helper does not start.
#[derive(Debug)]
pub(super) enum Refusal {
    /// The arguments are not what the launcher passes.
    Usage(String),
    /// The identity is not one the sandbox may run as, or switching to it failed.
    Identity { message: String, help: String },
}

/// Parse the helper's arguments (after `argv[0]`) and switch to the ids they name when
/// running as root. On success the process runs as neither uid 0 nor gid 0 (when it
/// started as root), or exactly as before (when it did not).
pub(super) fn settle(args: impl Iterator<Item = OsString>) -> Result<(), Refusal> {
    let ids = parse(args)?;
    let uids = nix::unistd::getresuid().map_err(|e| refusal(format!("getresuid: {e}")))?;
    let gids = nix::unistd::getresgid().map_err(|e| refusal(format!("getresgid: {e}")))?;
    let (real, effective, saved) = (uids.real, uids.effective, uids.saved);
    if real.is_root() || effective.is_root() || saved.is_root() {
        if !(real.is_root() && effective.is_root() && saved.is_root()) {
            return Err(Refusal::Identity {
                message: format!(
                    "running with uids {real}/{effective}/{saved} (real/effective/saved): the helper must not be set-user-ID root"
                ),
                help: "remove the set-user-ID bit (chmod u-s airlock-sandbox-init); run airlock as root or as an ordinary user".into(),
            });
        }
        let Some(ids) = ids else {
            return Err(Refusal::Identity {
                message: format!(
                    "started as root without {IDENTITY_UID_FLAG} and {IDENTITY_GID_FLAG}: the sandbox never runs as root"
                ),
                help: "start the helper through the airlock sandbox library, which passes the sandbox's ids".into(),
            });
        };
        switch_to(ids)?;
        verify(ids)?;
        // Changing the uid made the process non-dumpable, which leaves its
        // /proc/self/{setgroups,uid_map,gid_map} owned by root and unwritable for the user
        // namespace set up next. PID 1 makes itself non-dumpable again later.
        nix::sys::prctl::set_dumpable(true)
            .map_err(|e| refusal(format!("prctl(PR_SET_DUMPABLE, 1): {e}")))?;
        return Ok(());
    }
    if let Some(ids) = ids {
        let own = [real, effective, saved]
            .iter()
            .all(|u| u.as_raw() == ids.uid)
            && [gids.real, gids.effective, gids.saved]
                .iter()
                .all(|g| g.as_raw() == ids.gid);
        if !own {
            return Err(Refusal::Identity {
                message: format!(
                    "asked to run as uid {} gid {}, but running as uids {real}/{effective}/{saved} gids {}/{}/{} (real/effective/saved) without the privilege to switch",
                    ids.uid, ids.gid, gids.real, gids.effective, gids.saved
                ),
                help: "only a helper started as root switches users; start it without --uid/--gid".into(),
            });
        }
    }
    Ok(())
}

fn refusal(message: String) -> Refusal {
    Refusal::Identity {
        message,
        help: "the helper refuses to go on as root; check that the host may switch to the sandbox's uid and gid (sandbox_uid, sandbox_gid)".into(),
    }
}

/// Accept no arguments, or exactly `--uid U --gid G` (in either order).
fn parse(args: impl Iterator<Item = OsString>) -> Result<Option<Ids>, Refusal> {
    let usage = |what: String| {
        Refusal::Usage(format!(
            "{what}; the only arguments are {IDENTITY_UID_FLAG} <uid> {IDENTITY_GID_FLAG} <gid>"
        ))
    };
    let args: Vec<OsString> = args.collect();
    if args.is_empty() {
        return Ok(None);
    }
    let (mut uid, mut gid) = (None, None);
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let slot = match flag.to_str() {
            Some(IDENTITY_UID_FLAG) => &mut uid,
            Some(IDENTITY_GID_FLAG) => &mut gid,
            _ => return Err(usage(format!("unexpected argument {flag:?}"))),
        };
        if slot.is_some() {
            return Err(usage(format!("{flag:?} given twice")));
        }
        let value = it
            .next()
            .ok_or_else(|| usage(format!("{flag:?} needs a value")))?;
        let id = value
            .to_str()
            .and_then(|v| v.parse::<u32>().ok())
            .ok_or_else(|| usage(format!("{flag:?} takes a number, not {value:?}")))?;
        *slot = Some(id);
    }
    let (Some(uid), Some(gid)) = (uid, gid) else {
        return Err(usage(format!(
            "{IDENTITY_UID_FLAG} and {IDENTITY_GID_FLAG} go together"
        )));
    };
    if uid == 0 || gid == 0 {
        return Err(Refusal::Identity {
            message: format!("asked to run as uid {uid} gid {gid}: the sandbox never runs as root"),
            help: "set sandbox_uid and sandbox_gid to an unprivileged id (65534 by default)".into(),
        });
    }
    Ok(Some(Ids { uid, gid }))
}

/// Drop the supplementary groups, then the gid, then the uid (after which nothing else
/// could be changed).
fn switch_to(ids: Ids) -> Result<(), Refusal> {
    let (uid, gid) = (Uid::from_raw(ids.uid), Gid::from_raw(ids.gid));
    nix::unistd::setgroups(&[]).map_err(|e| refusal(format!("setgroups(none): {e}")))?;
    nix::unistd::setresgid(gid, gid, gid).map_err(|e| refusal(format!("setresgid({gid}): {e}")))?;
    nix::unistd::setresuid(uid, uid, uid).map_err(|e| refusal(format!("setresuid({uid}): {e}")))
}

/// Read back the ids, the groups and the capabilities: exactly the asked ids, no group,
/// no capability.
fn verify(ids: Ids) -> Result<(), Refusal> {
    let uids = nix::unistd::getresuid().map_err(|e| refusal(format!("getresuid: {e}")))?;
    let gids = nix::unistd::getresgid().map_err(|e| refusal(format!("getresgid: {e}")))?;
    let groups = nix::unistd::getgroups().map_err(|e| refusal(format!("getgroups: {e}")))?;
    let uid_ok = [uids.real, uids.effective, uids.saved]
        .iter()
        .all(|u| u.as_raw() == ids.uid);
    let gid_ok = [gids.real, gids.effective, gids.saved]
        .iter()
        .all(|g| g.as_raw() == ids.gid);
    if !uid_ok || !gid_ok || !groups.is_empty() {
        return Err(refusal(format!(
            "after switching to uid {} gid {}: uids {}/{}/{}, gids {}/{}/{}, groups {groups:?}",
            ids.uid,
            ids.gid,
            uids.real,
            uids.effective,
            uids.saved,
            gids.real,
            gids.effective,
            gids.saved
        )));
    }
    let (effective, permitted) = capabilities().map_err(|e| refusal(format!("capget: {e}")))?;
    if effective != 0 || permitted != 0 {
        return Err(refusal(format!(
            "capabilities survived the switch to uid {} (effective {effective:#x}, permitted {permitted:#x}); the host sets securebits that keep them",
            ids.uid
        )));
    }
    Ok(())
}

/// The effective and permitted capability sets of this thread, as 64-bit masks.
fn capabilities() -> std::io::Result<(u64, u64)> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Default, Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    let mut header = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: a header and a two-element data array, as capget with version 3 expects;
    // both live for the duration of the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_capget,
            &mut header as *mut Header,
            data.as_mut_ptr(),
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let join = |lo: u32, hi: u32| u64::from(lo) | (u64::from(hi) << 32);
    Ok((
        join(data[0].effective, data[1].effective),
        join(data[0].permitted, data[1].permitted),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> impl Iterator<Item = OsString> {
        list.iter()
            .map(OsString::from)
            .collect::<Vec<_>>()
            .into_iter()
    }

    #[test]
    fn parses_the_launchers_arguments_in_either_order() {
        assert_eq!(parse(args(&[])).unwrap(), None);
        let ids = Some(Ids {
            uid: 65534,
            gid: 65533,
        });
        assert_eq!(
            parse(args(&["--uid", "65534", "--gid", "65533"])).unwrap(),
            ids
        );
        assert_eq!(
            parse(args(&["--gid", "65533", "--uid", "65534"])).unwrap(),
            ids
        );
    }

    #[test]
    fn rejects_anything_else() {
        for bad in [
            &["--uid", "65534"][..],
            &["--uid", "65534", "--gid"],
            &["--uid", "65534", "--uid", "65534"],
            &["--uid", "-1", "--gid", "1"],
            &["--uid", "x", "--gid", "1"],
            &["--user", "1", "--gid", "1"],
        ] {
            assert!(
                matches!(parse(args(bad)), Err(Refusal::Usage(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn never_accepts_root_ids() {
        for bad in [
            &["--uid", "0", "--gid", "65534"][..],
            &["--uid", "65534", "--gid", "0"],
        ] {
            match parse(args(bad)) {
                Err(Refusal::Identity { message, .. }) => {
                    assert!(message.contains("never runs as root"), "{message}")
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn reads_this_threads_capabilities() {
        let (effective, permitted) = capabilities().unwrap();
        // Effective is always a subset of permitted.
        assert_eq!(effective & !permitted, 0);
        if nix::unistd::geteuid().is_root() {
            // CAP_SETUID (7) is what a root test process has and a switched helper lacks.
            assert_ne!(effective & (1 << 7), 0, "{effective:#x}");
        }
    }
}
