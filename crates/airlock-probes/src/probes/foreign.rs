//! Foreign system-call ABIs: the filter only understands native x86-64 calls, so x32 calls
//! and 32-bit `int 0x80` calls must kill the process (SIGSYS) instead of slipping past it.

use crate::probe::Probe;

#[cfg(target_arch = "x86_64")]
use crate::{
    context::Ctx,
    probe::{Category, Expect, Got},
    sys::in_child,
};

#[cfg(target_arch = "x86_64")]
const C: Category = Category::ForeignSyscalls;

#[cfg(target_arch = "x86_64")]
pub const PROBES: &[Probe] = &[
    Probe {
        name: "x32_syscall",
        category: C,
        what: "getpid through the x32 ABI (__X32_SYSCALL_BIT)",
        expect: Expect::Signal(libc::SIGSYS),
        run: x32_syscall,
        host_safe: true,
    },
    Probe {
        name: "int80_syscall",
        category: C,
        what: "getpid through the 32-bit int 0x80 entry",
        expect: Expect::Signal(libc::SIGSYS),
        run: int80_syscall,
        host_safe: true,
    },
];

#[cfg(not(target_arch = "x86_64"))]
pub const PROBES: &[Probe] = &[];

#[cfg(target_arch = "x86_64")]
fn x32_syscall(_: &Ctx) -> Got {
    const X32_SYSCALL_BIT: libc::c_long = 0x4000_0000;
    // In a child: the expected outcome kills the caller.
    // SAFETY: getpid takes no arguments, whatever the ABI.
    in_child(|| Got::from_ret(unsafe { libc::syscall(X32_SYSCALL_BIT | libc::SYS_getpid) } as i64))
}

#[cfg(target_arch = "x86_64")]
fn int80_syscall(_: &Ctx) -> Got {
    const I386_NR_GETPID: i64 = 20;
    in_child(|| {
        let mut rax = I386_NR_GETPID;
        // SAFETY: the 32-bit getpid takes no arguments and touches no memory; the compat entry
        // clobbers at most r8-r11, declared here.
        unsafe {
            std::arch::asm!(
                "int 0x80",
                inout("rax") rax,
                out("r8") _, out("r9") _, out("r10") _, out("r11") _,
                options(nostack)
            );
        }
        if (-4095..0).contains(&rax) {
            Got::Failed(-rax as i32)
        } else {
            Got::Succeeded(format!("returned {rax}"))
        }
    })
}
