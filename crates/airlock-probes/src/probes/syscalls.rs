//! System calls the seccomp filter denies: tracing and cross-process memory access, kernel
//! keyrings, BPF, perf, userfaultfd, io_uring, handle-based opens, and `clone3`.
//!
//! Where the kernel would refuse an unprivileged caller anyway, the arguments are chosen so
//! that an unfiltered kernel answers with a *different* errno (EBADF, EINVAL, ENOKEY, …): an
//! EPERM then proves the filter, and a successful attempt on an unconfined host has no effect.

use libc::{c_long, ENOSYS, EPERM};

use crate::context::Ctx;
use crate::probe::{Category, Expect, Got, Probe};
use crate::sys::{c_str, close, got_from_fd, in_child};

const C: Category = Category::Syscalls;

/// An address that is never mapped (below `vm.mmap_min_addr`).
const UNMAPPED_ADDR: usize = 0x1000;

pub const PROBES: &[Probe] = &[
    denied!(
        "ptrace_attach_pid1",
        "ptrace(PTRACE_ATTACH, 1)",
        ptrace_attach_pid1,
        false
    ),
    denied!(
        "ptrace_attach_parent",
        "ptrace(PTRACE_ATTACH, getppid())",
        ptrace_attach_parent,
        false
    ),
    denied!(
        "process_vm_readv_pid1",
        "process_vm_readv from PID 1",
        process_vm_readv_pid1,
        true
    ),
    denied!(
        "process_vm_writev_pid1",
        "process_vm_writev into PID 1 (unmapped address)",
        process_vm_writev_pid1,
        false
    ),
    denied!(
        "pidfd_getfd_self",
        "pidfd_getfd on a pidfd of this process",
        pidfd_getfd_self,
        true
    ),
    denied!(
        "keyctl_process_keyring",
        "keyctl(KEYCTL_GET_KEYRING_ID, process keyring)",
        keyctl_process_keyring,
        true
    ),
    denied!(
        "add_key_user",
        "add_key(\"user\", …) into the process keyring",
        add_key_user,
        true
    ),
    denied!(
        "request_key_user",
        "request_key(\"user\", …)",
        request_key_user,
        true
    ),
    denied!(
        "bpf_map_create",
        "bpf(BPF_MAP_CREATE, array map)",
        bpf_map_create,
        true
    ),
    denied!(
        "perf_event_open_self",
        "perf_event_open(software clock, this process)",
        perf_event_open_self,
        true
    ),
    denied!(
        "userfaultfd_user_mode",
        "userfaultfd(UFFD_USER_MODE_ONLY)",
        userfaultfd_user_mode,
        true
    ),
    denied!(
        "io_uring_setup",
        "io_uring_setup(1 entry)",
        io_uring_setup,
        true
    ),
    denied!(
        "io_uring_enter",
        "io_uring_enter(-1, …)",
        io_uring_enter,
        true
    ),
    denied!(
        "io_uring_register",
        "io_uring_register(-1, …)",
        io_uring_register,
        true
    ),
    denied!(
        "open_by_handle_at",
        "open_by_handle_at(AT_FDCWD, forged handle)",
        open_by_handle_at,
        true
    ),
    Probe {
        name: "clone3_enosys",
        category: C,
        what: "clone3() must look unimplemented so callers fall back to inspectable clone()",
        expect: Expect::Errno(&[ENOSYS]),
        run: clone3_enosys,
        host_safe: true,
    },
];

// `c_long` is `i64` only on 64-bit targets.
#[allow(clippy::unnecessary_cast)]
fn raw(ret: c_long) -> Got {
    Got::from_ret(ret as i64)
}

fn ptrace_attach(pid: libc::pid_t) -> Got {
    // SAFETY: integer arguments only; a successful attach is undone right away.
    let ret = unsafe { libc::ptrace(libc::PTRACE_ATTACH, pid, 0usize, 0usize) };
    if ret == 0 {
        // The attach sent SIGSTOP: wait until the tracee has stopped (PTRACE_DETACH needs a
        // stopped tracee), then detach and let it continue, so it is not left stopped.
        let mut status = 0;
        // SAFETY: `status` is a valid out-pointer; `pid` is our tracee.
        unsafe {
            libc::waitpid(pid, &mut status, libc::__WALL);
            libc::ptrace(libc::PTRACE_DETACH, pid, 0usize, 0usize);
            libc::kill(pid, libc::SIGCONT);
        }
    }
    raw(ret)
}

fn ptrace_attach_pid1(_: &Ctx) -> Got {
    ptrace_attach(1)
}

fn ptrace_attach_parent(_: &Ctx) -> Got {
    // SAFETY: getppid has no arguments and cannot fail.
    let parent = unsafe { libc::getppid() };
    if parent <= 0 {
        return Got::NotRun("this process has no parent in its pid namespace".into());
    }
    ptrace_attach(parent)
}

fn process_vm(write: bool) -> Got {
    let mut byte = [0u8; 1];
    let local = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let remote = libc::iovec {
        iov_base: UNMAPPED_ADDR as *mut libc::c_void,
        iov_len: 1,
    };
    // SAFETY: `local` points at a live one-byte buffer; `remote` is only interpreted in the
    // target process, where the kernel checks it (an unmapped address gives EFAULT).
    let ret = unsafe {
        if write {
            libc::process_vm_writev(1, &local, 1, &remote, 1, 0)
        } else {
            libc::process_vm_readv(1, &local, 1, &remote, 1, 0)
        }
    };
    raw(ret as c_long)
}

fn process_vm_readv_pid1(_: &Ctx) -> Got {
    process_vm(false)
}

fn process_vm_writev_pid1(_: &Ctx) -> Got {
    process_vm(true)
}

fn pidfd_getfd_self(_: &Ctx) -> Got {
    // SAFETY: integer arguments only.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) };
    if pidfd < 0 {
        return Got::NotRun(format!(
            "pidfd_open on this process failed: {}",
            Got::from_ret(pidfd as i64).describe()
        ));
    }
    // SAFETY: integer arguments only; a returned descriptor is closed by got_from_fd.
    let ret = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd, 0, 0) };
    close(pidfd as i32);
    got_from_fd(ret as i64)
}

const KEYCTL_GET_KEYRING_ID: c_long = 0;
const KEY_SPEC_PROCESS_KEYRING: c_long = -2;

fn keyctl_process_keyring(_: &Ctx) -> Got {
    // SAFETY: integer arguments only; with create=0 nothing is created.
    raw(unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            KEYCTL_GET_KEYRING_ID,
            KEY_SPEC_PROCESS_KEYRING,
            0,
        )
    })
}

fn add_key_user(_: &Ctx) -> Got {
    // In a child: on an unconfined host the key lands in a process keyring that dies with it.
    in_child(|| {
        let (kind, desc, payload) = (c_str("user"), c_str("airlock-probe"), b"x");
        // SAFETY: the strings and payload outlive the call; the length matches the payload.
        raw(unsafe {
            libc::syscall(
                libc::SYS_add_key,
                kind.as_ptr(),
                desc.as_ptr(),
                payload.as_ptr(),
                payload.len(),
                KEY_SPEC_PROCESS_KEYRING,
            )
        })
    })
}

fn request_key_user(_: &Ctx) -> Got {
    let (kind, desc) = (c_str("user"), c_str("airlock-probe-absent"));
    // SAFETY: the strings outlive the call; a NULL callout means no upcall.
    raw(unsafe {
        libc::syscall(
            libc::SYS_request_key,
            kind.as_ptr(),
            desc.as_ptr(),
            std::ptr::null::<libc::c_char>(),
            0,
        )
    })
}

const BPF_MAP_CREATE: c_long = 0;
const BPF_MAP_TYPE_ARRAY: u32 = 2;

fn bpf_map_create(_: &Ctx) -> Got {
    // `union bpf_attr` for BPF_MAP_CREATE starts map_type, key_size, value_size, max_entries.
    let mut attr = [0u32; 32];
    attr[..4].copy_from_slice(&[BPF_MAP_TYPE_ARRAY, 4, 4, 1]);
    // SAFETY: `attr` is a live, zero-padded buffer of the size passed.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_CREATE,
            attr.as_ptr(),
            std::mem::size_of_val(&attr),
        )
    };
    got_from_fd(ret as i64)
}

fn perf_event_open_self(_: &Ctx) -> Got {
    // `struct perf_event_attr` (PERF_ATTR_SIZE_VER0 = 64 bytes): type=PERF_TYPE_SOFTWARE,
    // size, config=PERF_COUNT_SW_CPU_CLOCK, and flags disabled|exclude_kernel|exclude_hv.
    let mut attr = [0u64; 16];
    attr[0] = 1 | (64u64 << 32);
    attr[1] = 0;
    attr[5] = 1 | (1 << 5) | (1 << 6);
    const PERF_FLAG_FD_CLOEXEC: c_long = 8;
    // SAFETY: `attr` is a live buffer at least as large as the size it declares.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr.as_ptr(),
            0,
            -1,
            -1,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    got_from_fd(ret as i64)
}

fn userfaultfd_user_mode(_: &Ctx) -> Got {
    const UFFD_USER_MODE_ONLY: c_long = 1;
    // SAFETY: integer flags only; a returned descriptor is closed.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_userfaultfd,
            libc::O_CLOEXEC as c_long | UFFD_USER_MODE_ONLY,
        )
    };
    got_from_fd(ret as i64)
}

fn io_uring_setup(_: &Ctx) -> Got {
    // `struct io_uring_params` is 120 bytes; all zero asks for defaults.
    let mut params = [0u32; 30];
    // SAFETY: `params` is a live, writable buffer of the size the kernel expects.
    let ret = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1, params.as_mut_ptr()) };
    got_from_fd(ret as i64)
}

fn io_uring_enter(_: &Ctx) -> Got {
    // SAFETY: an invalid descriptor and null pointers; nothing is dereferenced.
    raw(unsafe { libc::syscall(libc::SYS_io_uring_enter, -1, 0, 0, 0, 0usize, 0) })
}

fn io_uring_register(_: &Ctx) -> Got {
    // SAFETY: an invalid descriptor and a null pointer; nothing is dereferenced.
    raw(unsafe { libc::syscall(libc::SYS_io_uring_register, -1, 0, 0usize, 0) })
}

fn open_by_handle_at(_: &Ctx) -> Got {
    // `struct file_handle { u32 handle_bytes; i32 handle_type; u8 f_handle[8]; }`, forged.
    let mut handle = [0u32; 4];
    handle[0] = 8;
    handle[1] = 1;
    // SAFETY: `handle` is a live buffer holding the header and the 8 bytes it declares.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_open_by_handle_at,
            libc::AT_FDCWD,
            handle.as_mut_ptr(),
            libc::O_RDONLY,
        )
    };
    got_from_fd(ret as i64)
}

fn clone3_enosys(_: &Ctx) -> Got {
    // A size below CLONE_ARGS_SIZE_VER0 makes an unfiltered kernel answer EINVAL without
    // creating anything; the filter cannot read the struct and must answer ENOSYS.
    let args = [0u64; 11];
    // SAFETY: `args` is a live buffer larger than the size passed; no process is created.
    raw(unsafe { libc::syscall(libc::SYS_clone3, args.as_ptr(), 8usize) })
}
