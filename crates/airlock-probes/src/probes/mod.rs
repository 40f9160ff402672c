//! The probe catalogue, one module per category.

/// A probe that must fail with `EPERM`, the answer of the sandbox's seccomp filter. It
/// takes the category `C` and the names `Probe`, `Expect`, `EPERM` of the module that uses it.
macro_rules! denied {
    ($name:literal, $what:literal, $run:path, $safe:literal) => {
        Probe {
            name: $name,
            category: C,
            what: $what,
            expect: Expect::Errno(&[EPERM]),
            run: $run,
            host_safe: $safe,
        }
    };
}

pub mod files;
pub mod foreign;
pub mod identity;
pub mod kernel_admin;
pub mod leaks;
pub mod mounts;
pub mod network;
pub mod pidns;
pub mod resources;
pub mod setid;
pub mod syscalls;
pub mod terminal;

use crate::probe::Probe;

/// Every probe, in the order they run. Cheap checks first; the fork bomb runs last so that
/// the processes it creates cannot disturb any other probe.
pub fn all() -> Vec<Probe> {
    [
        identity::PROBES,
        syscalls::PROBES,
        kernel_admin::PROBES,
        mounts::PROBES,
        terminal::PROBES,
        files::PROBES,
        setid::PROBES,
        pidns::PROBES,
        network::PROBES,
        foreign::PROBES,
        leaks::PROBES,
        resources::PROBES,
    ]
    .concat()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn at_least_forty_probes_with_unique_names() {
        let probes = all();
        assert!(probes.len() >= 40, "only {} probes", probes.len());
        let names: HashSet<_> = probes.iter().map(|p| p.name).collect();
        assert_eq!(names.len(), probes.len(), "duplicate probe names");
    }

    #[test]
    fn the_issue_required_probes_are_present() {
        let names: HashSet<_> = all().iter().map(|p| p.name).collect();
        for required in [
            "caps_effective_zero",
            "setuid_root",
            "ptrace_attach_pid1",
            "process_vm_readv_pid1",
            "keyctl_process_keyring",
            "bpf_map_create",
            "perf_event_open_self",
            "userfaultfd_user_mode",
            "io_uring_setup",
            "init_module",
            "kexec_load",
            "open_by_handle_at",
            "clone3_enosys",
            "mount_tmpfs",
            "umount_usr",
            "chroot_tmp",
            "pivot_root",
            "unshare_user_mount",
            "setns_mount",
            "tiocsti_new_pty",
            "proc_sys_write",
            "usr_create",
            "etc_write_existing",
            "protected_create",
            "etc_shadow_read",
            "proc1_environ_read",
            "symlink_outside_read",
            "hardlink_outside",
            "kill_pid1",
            "kill_host_pid",
            "tcp_host_loopback",
            "udp_host_loopback",
            "only_loopback_interface",
            "no_routes",
            "raw_socket",
            "abstract_unix_host",
            "unix_socket_in_workspace",
            "unix_dgram_pair",
            "chmod_setuid",
            "fchmod_setgid",
            "open_creat_setuid",
            "mkdir_setgid",
            "openat2_enosys",
            "fork_bomb_bounded",
            "no_inherited_fds",
            "env_no_secrets",
            "mountinfo_allowed_only",
        ] {
            assert!(names.contains(required), "missing probe {required}");
        }
        #[cfg(target_arch = "x86_64")]
        for required in ["x32_syscall", "int80_syscall"] {
            assert!(names.contains(required), "missing probe {required}");
        }
    }
}
