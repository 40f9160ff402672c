//! Rules that keep what the payload leaves behind from acting on the host: set-id files
//! in the workspace, and connections to host UNIX sockets. Part of the deny-list
//! ([`super::deny_list`]); plain data like the rest of it.

use super::{Cond, DenyErrno, DenyRule, When};

/// The group of the rules that keep host UNIX sockets out of reach ([`relay_deny_list`]
/// leaves them out).
pub const HOST_SOCKETS: &str = "host unix sockets";
/// The group of the rules that refuse set-user-ID and set-group-ID bits.
pub const SET_ID_BITS: &str = "set-id files";

/// The set-user-ID and set-group-ID mode bits.
const SET_ID_MODE: &[(&str, u64)] = &[
    ("S_ISUID", libc::S_ISUID as u64),
    ("S_ISGID", libc::S_ISGID as u64),
];

/// Open flags under which the mode argument applies to a file the call creates.
/// `__O_TMPFILE` is `O_TMPFILE` without `O_DIRECTORY` (which alone creates nothing).
const CREATING_OPEN: &[(&str, u64)] = &[
    ("O_CREAT", libc::O_CREAT as u64),
    ("__O_TMPFILE", (libc::O_TMPFILE & !libc::O_DIRECTORY) as u64),
];

/// A rule refusing set-id bits in argument `mode_arg` of `syscall`, when argument
/// `flags_arg` (if any) says the call creates a file.
fn set_id_rule(syscall: &'static str, nr: i64, mode_arg: u8, flags_arg: Option<u8>) -> DenyRule {
    let mut conds = vec![Cond::AnyFlag {
        arg: mode_arg,
        flags: SET_ID_MODE.to_vec(),
    }];
    if let Some(arg) = flags_arg {
        conds.push(Cond::AnyFlag {
            arg,
            flags: CREATING_OPEN.to_vec(),
        });
    }
    DenyRule {
        syscall,
        nr,
        when: When::AllOf(conds),
        errno: DenyErrno::Eperm,
        group: SET_ID_BITS,
    }
}

/// Rules that refuse set-user-ID and set-group-ID bits, as systemd's `RestrictSUIDSGID=`
/// does: a file the sandbox leaves in the workspace is owned by the operator (or by the
/// sandbox uid), and a set-id copy of a program would let any other local user run it as
/// that owner. Every call that sets a mode is covered: the chmod family, file creation
/// (`open`/`openat`/`creat` with `O_CREAT` or `O_TMPFILE`), `mkdir` and `mknod`.
/// `openat2` carries its mode inside a struct that no filter can read, so it answers
/// `ENOSYS` (see [`deny_list`]) and libc falls back to `openat`. Setting file
/// capabilities instead needs `CAP_SETFCAP`, which the payload never holds.
pub(super) fn set_id_rules() -> Vec<DenyRule> {
    #[cfg(target_arch = "x86_64")]
    let legacy = vec![
        set_id_rule("chmod", libc::SYS_chmod, 1, None),
        set_id_rule("mkdir", libc::SYS_mkdir, 1, None),
        set_id_rule("mknod", libc::SYS_mknod, 1, None),
        set_id_rule("creat", libc::SYS_creat, 1, None),
        set_id_rule("open", libc::SYS_open, 2, Some(1)),
    ];
    #[cfg(not(target_arch = "x86_64"))]
    let legacy = Vec::new();
    let mut rules = legacy;
    rules.extend([
        set_id_rule("fchmod", libc::SYS_fchmod, 1, None),
        set_id_rule("fchmodat", libc::SYS_fchmodat, 2, None),
        set_id_rule("fchmodat2", libc::SYS_fchmodat2, 2, None),
        set_id_rule("mkdirat", libc::SYS_mkdirat, 2, None),
        set_id_rule("mknodat", libc::SYS_mknodat, 2, None),
        set_id_rule("openat", libc::SYS_openat, 3, Some(2)),
    ]);
    rules
}

/// Rules that keep the payload from reaching a host UNIX socket by name.
///
/// A host process may listen on a socket inside the workspace (an editor's server, an
/// agent, a multiplexer), and `connect` on a socket file is governed only by write
/// permission on it: neither the mount plan nor Landlock (ABI 7) can refuse it. So the
/// payload may not create a UNIX socket at all (`EAFNOSUPPORT`, what a kernel without the
/// family answers; glibc's nscd client and syslog fall back quietly). A connected pair
/// from `socketpair` stays allowed, for pipes between processes, except a datagram pair:
/// a datagram socket can be re-connected, or given a destination by `sendto`, to any
/// socket file. Abstract sockets are already out of reach: they live in the network
/// namespace, and Landlock scopes them (ABI 6).
pub(super) fn host_socket_rules() -> Vec<DenyRule> {
    let unix = || Cond::Equals32 {
        arg: 0,
        name: "AF_UNIX",
        value: libc::AF_UNIX as u64,
    };
    vec![
        DenyRule {
            syscall: "socket",
            nr: libc::SYS_socket,
            when: When::AllOf(vec![unix()]),
            errno: DenyErrno::Eafnosupport,
            group: HOST_SOCKETS,
        },
        DenyRule {
            syscall: "socketpair",
            nr: libc::SYS_socketpair,
            when: When::AllOf(vec![
                unix(),
                Cond::MaskedEquals32 {
                    arg: 1,
                    name: "SOCK_DGRAM",
                    // The low bits are the type; SOCK_CLOEXEC and SOCK_NONBLOCK sit above.
                    mask: 0xf,
                    value: libc::SOCK_DGRAM as u64,
                },
            ]),
            errno: DenyErrno::Eafnosupport,
            group: HOST_SOCKETS,
        },
    ]
}
