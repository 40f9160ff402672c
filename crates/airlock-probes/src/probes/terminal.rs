//! Terminal injection: `TIOCSTI` pushes bytes into a terminal's input queue, so a payload
//! sharing the operator's terminal could type commands into the operator's shell.

use libc::{ENXIO, EPERM};

use crate::context::Ctx;
use crate::probe::{Category, Expect, Got, Probe};
use crate::sys::{c_str, close, in_child, last_errno};

const C: Category = Category::Terminal;

pub const PROBES: &[Probe] = &[
    Probe {
        name: "tiocsti_new_pty",
        category: C,
        what: "ioctl(TIOCSTI) on a fresh pty made our controlling terminal",
        expect: Expect::Errno(&[EPERM]),
        run: tiocsti_new_pty,
        host_safe: true,
    },
    Probe {
        name: "tiocsti_inherited_tty",
        category: C,
        what: "ioctl(TIOCSTI) on stdio ttys and /dev/tty (ENXIO: no controlling terminal)",
        expect: Expect::Errno(&[EPERM, ENXIO]),
        run: tiocsti_inherited_tty,
        host_safe: false,
    },
];

fn inject(fd: i32) -> Got {
    let byte: libc::c_char = b'#' as libc::c_char;
    // SAFETY: TIOCSTI reads one byte through the pointer, which points at a live local.
    Got::from_ret(unsafe { libc::ioctl(fd, libc::TIOCSTI, &byte) } as i64)
}

fn tiocsti_new_pty(_: &Ctx) -> Got {
    // In a child: it becomes a session leader and acquires the new pty as its controlling
    // terminal, which is the case an unfiltered kernel permits.
    in_child(|| {
        // SAFETY: no arguments; the child leaves its parent's session. Closing the master
        // below hangs the terminal up, which must not kill the reporting child.
        unsafe {
            libc::setsid();
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
        }
        // SAFETY: posix_openpt takes flags only.
        let master = unsafe { libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY) };
        if master < 0 {
            return Got::NotRun(format!("cannot open a pty master: errno {}", last_errno()));
        }
        // SAFETY: `master` is a pty master we own.
        if unsafe { libc::grantpt(master) } != 0 || unsafe { libc::unlockpt(master) } != 0 {
            return Got::NotRun(format!("cannot unlock the pty: errno {}", last_errno()));
        }
        let mut name = [0 as libc::c_char; 128];
        // SAFETY: `name` is a writable buffer of the length passed.
        if unsafe { libc::ptsname_r(master, name.as_mut_ptr(), name.len()) } != 0 {
            return Got::NotRun("ptsname_r failed".into());
        }
        // SAFETY: `name` is NUL-terminated by ptsname_r. No O_NOCTTY: the session leader
        // acquires this terminal as its controlling terminal.
        let slave = unsafe { libc::open(name.as_ptr(), libc::O_RDWR) };
        if slave < 0 {
            return Got::NotRun(format!("cannot open the pty slave: errno {}", last_errno()));
        }
        let got = inject(slave);
        close(slave);
        close(master);
        got
    })
}

fn tiocsti_inherited_tty(_: &Ctx) -> Got {
    // Every terminal the payload can reach: its standard streams and its controlling terminal.
    for fd in 0..=2 {
        // SAFETY: isatty only inspects the descriptor.
        if unsafe { libc::isatty(fd) } == 1 {
            let got = inject(fd);
            if got != Got::Failed(EPERM) {
                return got;
            }
        }
    }
    let path = c_str("/dev/tty");
    // SAFETY: `path` outlives the call.
    let tty = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    };
    if tty < 0 {
        return Got::Failed(last_errno());
    }
    let got = inject(tty);
    close(tty);
    got
}
