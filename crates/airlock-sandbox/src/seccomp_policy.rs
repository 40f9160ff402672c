//! The seccomp deny-list as data, and its compilation to BPF.
//!
//! The list is a table ([`deny_list`]) that can be printed (`airlock doctor`), diffed and
//! tested. [`compile`] turns it into the filters `airlock-sandbox-init` installs last,
//! right before `execve`:
//!
//! 1. an architecture filter (hand-written BPF, see [`arch_filter`]) that kills foreign
//!    architectures (`int 0x80`, 32-bit compat) and the x32 ABI;
//! 2. the `EPERM` rules (seccompiler);
//! 3. the `ENOSYS` rules (seccompiler): `clone3`, so that libc falls back to `clone`, whose
//!    flags a filter can inspect, and `openat2`, whose mode sits in a struct no filter can
//!    read, so that libc falls back to `openat`;
//! 4. the `EAFNOSUPPORT` rules (seccompiler): UNIX sockets that could reach a host socket
//!    by name, refused as a kernel without that address family would refuse them.
//!
//! The payload gets the whole list ([`deny_list`]); the relay to the egress proxy, which
//! must open one UNIX socket connection per client through the descriptor the host gave
//! it, gets the list without the host-socket rules ([`relay_deny_list`]).

use std::collections::BTreeMap;
use std::fmt;

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};
use serde::Serialize;

mod host_effects;

use host_effects::{host_socket_rules, set_id_rules};
pub use host_effects::{HOST_SOCKETS, SET_ID_BITS};

/// What a matching call gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum DenyErrno {
    Eperm,
    Enosys,
    Eafnosupport,
}

impl DenyErrno {
    /// Every result, in the order [`compile`] installs their filters.
    pub const ALL: [DenyErrno; 3] = [DenyErrno::Eperm, DenyErrno::Enosys, DenyErrno::Eafnosupport];

    fn value(self) -> u32 {
        match self {
            DenyErrno::Eperm => libc::EPERM as u32,
            DenyErrno::Enosys => libc::ENOSYS as u32,
            DenyErrno::Eafnosupport => libc::EAFNOSUPPORT as u32,
        }
    }

    /// The errno's name as the table prints it.
    pub fn name(self) -> &'static str {
        match self {
            DenyErrno::Eperm => "EPERM",
            DenyErrno::Enosys => "ENOSYS",
            DenyErrno::Eafnosupport => "EAFNOSUPPORT",
        }
    }
}

/// When a rule applies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum When {
    /// Every call.
    Always,
    /// Argument `arg` (64-bit) has any of these flags set.
    ArgHasAnyFlag {
        arg: u8,
        flags: Vec<(&'static str, u64)>,
    },
    /// Argument `arg` (low 32 bits, as the kernel reads an `unsigned int`) equals `value`.
    Arg32Equals {
        arg: u8,
        name: &'static str,
        value: u64,
    },
    /// Every one of these conditions holds.
    AllOf(Vec<Cond>),
}

/// One condition of [`When::AllOf`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cond {
    /// Argument `arg` has any of these flags set.
    AnyFlag {
        arg: u8,
        flags: Vec<(&'static str, u64)>,
    },
    /// Argument `arg` (low 32 bits) equals `value`.
    Equals32 {
        arg: u8,
        name: &'static str,
        value: u64,
    },
    /// Argument `arg` (low 32 bits) masked with `mask` equals `value`.
    MaskedEquals32 {
        arg: u8,
        name: &'static str,
        mask: u64,
        value: u64,
    },
}

impl Cond {
    /// The alternatives this condition stands for, each one seccomp comparison (a flag
    /// set is "any of", so one comparison per flag).
    fn alternatives(&self) -> Vec<(u8, SeccompCmpArgLen, SeccompCmpOp, u64)> {
        match self {
            Cond::AnyFlag { arg, flags } => flags
                .iter()
                .map(|(_, f)| {
                    (
                        *arg,
                        SeccompCmpArgLen::Qword,
                        SeccompCmpOp::MaskedEq(*f),
                        *f,
                    )
                })
                .collect(),
            Cond::Equals32 { arg, value, .. } => {
                vec![(*arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, *value)]
            }
            Cond::MaskedEquals32 {
                arg, mask, value, ..
            } => vec![(
                *arg,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::MaskedEq(*mask),
                *value,
            )],
        }
    }
}

impl fmt::Display for Cond {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cond::AnyFlag { arg, flags } => write!(
                f,
                "arg{arg} has any of {}",
                flags.iter().map(|(n, _)| *n).collect::<Vec<_>>().join("|")
            ),
            Cond::Equals32 { arg, name, .. } => write!(f, "arg{arg} == {name}"),
            Cond::MaskedEquals32 { arg, name, .. } => write!(f, "arg{arg} is {name}"),
        }
    }
}

/// One row of the deny-list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DenyRule {
    /// Syscall name.
    pub syscall: &'static str,
    /// Syscall number on the build architecture.
    pub nr: i64,
    pub when: When,
    pub errno: DenyErrno,
    /// The family it belongs to, for people reading the table.
    pub group: &'static str,
}

/// Namespace flags of `clone`: a payload must not create namespaces.
const CLONE_NS_FLAGS: &[(&str, u64)] = &[
    ("CLONE_NEWNS", libc::CLONE_NEWNS as u64),
    ("CLONE_NEWCGROUP", libc::CLONE_NEWCGROUP as u64),
    ("CLONE_NEWUTS", libc::CLONE_NEWUTS as u64),
    ("CLONE_NEWIPC", libc::CLONE_NEWIPC as u64),
    ("CLONE_NEWUSER", libc::CLONE_NEWUSER as u64),
    ("CLONE_NEWPID", libc::CLONE_NEWPID as u64),
    ("CLONE_NEWNET", libc::CLONE_NEWNET as u64),
];

macro_rules! always {
    ($group:expr, $errno:expr, $($name:ident),+ $(,)?) => {
        vec![$(DenyRule {
            syscall: stringify!($name),
            nr: paste_nr!($name),
            when: When::Always,
            errno: $errno,
            group: $group,
        }),+]
    };
}

macro_rules! paste_nr {
    (mount) => {
        libc::SYS_mount
    };
    (umount2) => {
        libc::SYS_umount2
    };
    (pivot_root) => {
        libc::SYS_pivot_root
    };
    (chroot) => {
        libc::SYS_chroot
    };
    (open_tree) => {
        libc::SYS_open_tree
    };
    (move_mount) => {
        libc::SYS_move_mount
    };
    (fsopen) => {
        libc::SYS_fsopen
    };
    (fsconfig) => {
        libc::SYS_fsconfig
    };
    (fsmount) => {
        libc::SYS_fsmount
    };
    (fspick) => {
        libc::SYS_fspick
    };
    (mount_setattr) => {
        libc::SYS_mount_setattr
    };
    (unshare) => {
        libc::SYS_unshare
    };
    (setns) => {
        libc::SYS_setns
    };
    (ptrace) => {
        libc::SYS_ptrace
    };
    (process_vm_readv) => {
        libc::SYS_process_vm_readv
    };
    (process_vm_writev) => {
        libc::SYS_process_vm_writev
    };
    (pidfd_getfd) => {
        libc::SYS_pidfd_getfd
    };
    (keyctl) => {
        libc::SYS_keyctl
    };
    (add_key) => {
        libc::SYS_add_key
    };
    (request_key) => {
        libc::SYS_request_key
    };
    (bpf) => {
        libc::SYS_bpf
    };
    (perf_event_open) => {
        libc::SYS_perf_event_open
    };
    (userfaultfd) => {
        libc::SYS_userfaultfd
    };
    (io_uring_setup) => {
        libc::SYS_io_uring_setup
    };
    (io_uring_enter) => {
        libc::SYS_io_uring_enter
    };
    (io_uring_register) => {
        libc::SYS_io_uring_register
    };
    (open_by_handle_at) => {
        libc::SYS_open_by_handle_at
    };
    (name_to_handle_at) => {
        libc::SYS_name_to_handle_at
    };
    (init_module) => {
        libc::SYS_init_module
    };
    (finit_module) => {
        libc::SYS_finit_module
    };
    (delete_module) => {
        libc::SYS_delete_module
    };
    (kexec_load) => {
        libc::SYS_kexec_load
    };
    (kexec_file_load) => {
        libc::SYS_kexec_file_load
    };
    (reboot) => {
        libc::SYS_reboot
    };
    (swapon) => {
        libc::SYS_swapon
    };
    (swapoff) => {
        libc::SYS_swapoff
    };
    (acct) => {
        libc::SYS_acct
    };
    (quotactl) => {
        libc::SYS_quotactl
    };
    (quotactl_fd) => {
        libc::SYS_quotactl_fd
    };
    (settimeofday) => {
        libc::SYS_settimeofday
    };
    (clock_settime) => {
        libc::SYS_clock_settime
    };
    (clock_adjtime) => {
        libc::SYS_clock_adjtime
    };
    (adjtimex) => {
        libc::SYS_adjtimex
    };
    (syslog) => {
        libc::SYS_syslog
    };
    (clone3) => {
        libc::SYS_clone3
    };
    (openat2) => {
        libc::SYS_openat2
    };
}

/// The payload's deny-list without the rules of [`HOST_SOCKETS`]: the relay to the egress
/// proxy, which opens a UNIX socket connection per client through the descriptor of the
/// proxy's socket.
pub fn relay_deny_list() -> Vec<DenyRule> {
    deny_list()
        .into_iter()
        .filter(|r| r.group != HOST_SOCKETS)
        .collect()
}

/// The deny-list: every rule the payload's seccomp filters enforce (besides the
/// architecture filter).
pub fn deny_list() -> Vec<DenyRule> {
    use DenyErrno::*;
    let mut rules = Vec::new();
    rules.extend(always!(
        "mount",
        Eperm,
        mount,
        umount2,
        pivot_root,
        chroot,
        open_tree,
        move_mount,
        fsopen,
        fsconfig,
        fsmount,
        fspick,
        mount_setattr
    ));
    rules.extend(always!("namespaces", Eperm, unshare, setns));
    rules.push(DenyRule {
        syscall: "clone",
        nr: libc::SYS_clone,
        when: When::ArgHasAnyFlag {
            arg: 0,
            flags: CLONE_NS_FLAGS.to_vec(),
        },
        errno: Eperm,
        group: "namespaces",
    });
    rules.extend(always!("namespaces", Enosys, clone3));
    rules.extend(set_id_rules());
    rules.extend(always!(SET_ID_BITS, Enosys, openat2));
    rules.extend(host_socket_rules());
    rules.extend(always!(
        "process access",
        Eperm,
        ptrace,
        process_vm_readv,
        process_vm_writev,
        pidfd_getfd
    ));
    rules.extend(always!(
        "kernel keyring",
        Eperm,
        keyctl,
        add_key,
        request_key
    ));
    rules.extend(always!(
        "kernel attack surface",
        Eperm,
        bpf,
        perf_event_open,
        userfaultfd,
        io_uring_setup,
        io_uring_enter,
        io_uring_register
    ));
    rules.extend(always!(
        "file handles",
        Eperm,
        open_by_handle_at,
        name_to_handle_at
    ));
    rules.extend(always!(
        "system administration",
        Eperm,
        init_module,
        finit_module,
        delete_module,
        kexec_load,
        kexec_file_load,
        reboot,
        swapon,
        swapoff,
        acct,
        quotactl,
        quotactl_fd,
        settimeofday,
        clock_settime,
        clock_adjtime,
        adjtimex,
        syslog
    ));
    // The ioctl request constants' type differs between libc targets.
    #[allow(clippy::unnecessary_cast)]
    let ioctls = [
        ("TIOCSTI", libc::TIOCSTI as u64),
        ("TIOCLINUX", libc::TIOCLINUX as u64),
    ];
    for (name, value) in ioctls {
        rules.push(DenyRule {
            syscall: "ioctl",
            nr: libc::SYS_ioctl,
            when: When::Arg32Equals {
                arg: 1,
                name,
                value,
            },
            errno: Eperm,
            group: "terminal injection",
        });
    }
    rules
}

/// Number of filters [`compile`] produces (the attestation must show at least this many).
pub const FILTER_COUNT: u32 = 4;

#[cfg(target_arch = "x86_64")]
const TARGET: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const TARGET: TargetArch = TargetArch::aarch64;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH_NATIVE: u32 = 62 | 0x8000_0000 | 0x4000_0000;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH_NATIVE: u32 = 183 | 0x8000_0000 | 0x4000_0000;

/// The x32 ABI marks its syscall numbers with this bit while reporting the x86-64 audit
/// architecture.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// Errors compiling the policy (a bug in the table, never input-dependent).
#[derive(Debug, thiserror::Error)]
#[error("seccomp policy does not compile: {0}")]
pub struct CompileError(String);

/// Compile the deny-list into the filters, in installation order.
pub fn compile(rules: &[DenyRule]) -> Result<Vec<BpfProgram>, CompileError> {
    let mut out = vec![arch_filter()];
    for errno in DenyErrno::ALL {
        let mut map: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
        for rule in rules.iter().filter(|r| r.errno == errno) {
            let entry = map.entry(rule.nr).or_default();
            let err = |e: seccompiler::BackendError| CompileError(format!("{}: {e}", rule.syscall));
            match &rule.when {
                // An empty rule list matches every call of the syscall.
                When::Always => entry.clear(),
                When::ArgHasAnyFlag { arg, flags } => {
                    for (_, flag) in flags {
                        let cond = SeccompCondition::new(
                            *arg,
                            SeccompCmpArgLen::Qword,
                            SeccompCmpOp::MaskedEq(*flag),
                            *flag,
                        )
                        .map_err(err)?;
                        entry.push(SeccompRule::new(vec![cond]).map_err(err)?);
                    }
                }
                When::Arg32Equals { arg, value, .. } => {
                    let cond = SeccompCondition::new(
                        *arg,
                        SeccompCmpArgLen::Dword,
                        SeccompCmpOp::Eq,
                        *value,
                    )
                    .map_err(err)?;
                    entry.push(SeccompRule::new(vec![cond]).map_err(err)?);
                }
                When::AllOf(conds) => {
                    // A seccomp rule is a conjunction; a flag set is a disjunction. Expand
                    // to the disjunction of every combination (a handful at most).
                    let mut combos: Vec<Vec<SeccompCondition>> = vec![Vec::new()];
                    for cond in conds {
                        let mut next = Vec::new();
                        for combo in &combos {
                            for (arg, len, op, value) in cond.alternatives() {
                                let c = SeccompCondition::new(arg, len, op, value).map_err(err)?;
                                let mut extended = combo.clone();
                                extended.push(c);
                                next.push(extended);
                            }
                        }
                        combos = next;
                    }
                    for combo in combos {
                        entry.push(SeccompRule::new(combo).map_err(err)?);
                    }
                }
            }
        }
        let filter = SeccompFilter::new(
            map,
            SeccompAction::Allow,
            SeccompAction::Errno(errno.value()),
            TARGET,
        )
        .map_err(|e| CompileError(e.to_string()))?;
        out.push(BpfProgram::try_from(filter).map_err(|e| CompileError(e.to_string()))?);
    }
    Ok(out)
}

/// Kill any syscall made through a foreign architecture or the x32 ABI.
///
/// Written by hand because seccompiler matches exact syscall numbers of one architecture:
/// it cannot express "number has bit 0x40000000 set" (x32 numbers are the x86-64 ones with
/// that bit) and its own architecture check is one per filter. Four instructions:
/// load arch; if not native, kill; load nr; if nr >= X32 bit, kill; allow.
pub fn arch_filter() -> BpfProgram {
    const BPF_LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const BPF_JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const BPF_JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
    const BPF_RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    const ARCH_OFFSET: u32 = 4; // offsetof(struct seccomp_data, arch)
    const NR_OFFSET: u32 = 0; // offsetof(struct seccomp_data, nr)
    let ins = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    let _ = X32_SYSCALL_BIT;
    vec![
        ins(BPF_LD_W_ABS, 0, 0, ARCH_OFFSET),
        // native: skip the kill
        ins(BPF_JEQ_K, 1, 0, AUDIT_ARCH_NATIVE),
        ins(BPF_RET_K, 0, 0, libc::SECCOMP_RET_KILL_PROCESS),
        ins(BPF_LD_W_ABS, 0, 0, NR_OFFSET),
        // x32 (bit set): fall through to the kill; otherwise jump to allow
        ins(BPF_JGE_K, 0, 1, X32_SYSCALL_BIT),
        ins(BPF_RET_K, 0, 0, libc::SECCOMP_RET_KILL_PROCESS),
        ins(BPF_RET_K, 0, 0, libc::SECCOMP_RET_ALLOW),
    ]
}

/// The deny-list as a readable table, one rule per line.
pub struct DenyListTable<'a>(pub &'a [DenyRule]);

impl fmt::Display for DenyListTable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<22} {:<5} {:<12} {:<22} condition",
            "syscall", "nr", "result", "group"
        )?;
        writeln!(
            f,
            "{:<22} {:<5} {:<12} {:<22} foreign architecture or x32 ABI",
            "*", "-", "KILL", "architecture"
        )?;
        for r in self.0 {
            let cond = match &r.when {
                When::Always => "always".to_string(),
                When::ArgHasAnyFlag { arg, flags } => format!(
                    "arg{arg} has any of {}",
                    flags.iter().map(|(n, _)| *n).collect::<Vec<_>>().join("|")
                ),
                When::Arg32Equals { arg, name, .. } => format!("arg{arg} == {name}"),
                When::AllOf(conds) => conds
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(" and "),
            };
            let result = r.errno.name();
            writeln!(
                f,
                "{:<22} {:<5} {:<12} {:<22} {cond}",
                r.syscall, r.nr, result, r.group
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn required_families_are_denied() {
        let rules = deny_list();
        let find = |name: &str| {
            rules
                .iter()
                .find(|r| r.syscall == name)
                .unwrap_or_else(|| panic!("{name} missing"))
        };
        for name in [
            "mount",
            "umount2",
            "pivot_root",
            "unshare",
            "setns",
            "ptrace",
            "process_vm_readv",
            "process_vm_writev",
            "pidfd_getfd",
            "keyctl",
            "add_key",
            "request_key",
            "bpf",
            "perf_event_open",
            "userfaultfd",
            "io_uring_setup",
            "io_uring_enter",
            "io_uring_register",
            "open_by_handle_at",
            "init_module",
            "finit_module",
            "kexec_load",
            "reboot",
            "swapon",
            "acct",
            "quotactl",
            "settimeofday",
            "clock_settime",
        ] {
            assert_eq!(find(name).errno, DenyErrno::Eperm, "{name}");
        }
        assert_eq!(find("clone3").errno, DenyErrno::Enosys);
        assert!(
            matches!(&find("clone").when, When::ArgHasAnyFlag { flags, .. } if flags.len() == 7)
        );
        assert!(rules.iter().any(|r| matches!(
            r.when,
            When::Arg32Equals {
                name: "TIOCSTI",
                ..
            }
        )));
    }

    #[test]
    fn i2_set_id_bits_are_refused_by_every_mode_setting_call() {
        let rules = deny_list();
        let mut calls = vec![
            "fchmod",
            "fchmodat",
            "fchmodat2",
            "mkdirat",
            "mknodat",
            "openat",
        ];
        #[cfg(target_arch = "x86_64")]
        calls.extend(["chmod", "mkdir", "mknod", "creat", "open"]);
        for name in calls {
            let rule = rules
                .iter()
                .find(|r| r.syscall == name && r.group == SET_ID_BITS)
                .unwrap_or_else(|| panic!("{name} has no set-id rule"));
            assert_eq!(rule.errno, DenyErrno::Eperm, "{name}");
            let When::AllOf(conds) = &rule.when else {
                panic!("{name}: {:?}", rule.when)
            };
            assert!(
                conds.iter().any(|c| matches!(c, Cond::AnyFlag { flags, .. }
                    if flags.iter().map(|f| f.0).collect::<Vec<_>>() == ["S_ISUID", "S_ISGID"])),
                "{name}: {conds:?}"
            );
        }
        let openat2 = rules.iter().find(|r| r.syscall == "openat2").unwrap();
        assert_eq!(
            (openat2.errno, &openat2.when),
            (DenyErrno::Enosys, &When::Always)
        );
    }

    #[test]
    fn i3_host_socket_rules_bind_the_payload_but_not_the_relay() {
        let payload = deny_list();
        let relay = relay_deny_list();
        let socket = payload.iter().find(|r| r.syscall == "socket").unwrap();
        assert_eq!(socket.errno, DenyErrno::Eafnosupport);
        assert!(payload.iter().any(|r| r.syscall == "socketpair"));
        assert!(!relay.iter().any(|r| r.group == HOST_SOCKETS));
        assert_eq!(relay.len() + 2, payload.len());
        assert_eq!(compile(&relay).unwrap().len() as u32, FILTER_COUNT);
    }

    #[test]
    fn no_syscall_has_conflicting_rules() {
        let rules = deny_list();
        for r in &rules {
            for o in &rules {
                if r.nr == o.nr {
                    assert_eq!(r.errno, o.errno, "{} has two results", r.syscall);
                }
            }
        }
    }

    #[test]
    fn policy_compiles_to_the_advertised_number_of_filters() {
        let filters = compile(&deny_list()).unwrap();
        assert_eq!(filters.len() as u32, FILTER_COUNT);
        assert!(filters.iter().all(|f| !f.is_empty() && f.len() < 4096));
    }

    #[test]
    fn table_lists_every_rule() {
        let rules = deny_list();
        let text = DenyListTable(&rules).to_string();
        assert_eq!(text.lines().count(), rules.len() + 2);
        assert!(text.contains("arg1 == TIOCSTI"));
        assert!(text.contains("arg3 has any of S_ISUID|S_ISGID and arg2 has any of O_CREAT"));
        assert!(text.contains("arg0 == AF_UNIX and arg1 is SOCK_DGRAM"));
    }
}
