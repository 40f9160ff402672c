//! The probe model: each escape attempt is a row of data (name, category, expected outcome,
//! function), so the whole suite can be listed, counted and filtered without running it.

use serde::{Deserialize, Serialize};

use crate::context::Ctx;
use crate::names::{errno_name, signal_name};

/// What a probe attacks. Printed in each result line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    Identity,
    Syscalls,
    KernelAdmin,
    Mounts,
    Terminal,
    Files,
    SetId,
    PidNamespace,
    Network,
    ForeignSyscalls,
    Resources,
    Leaks,
}

impl Category {
    /// Stable name used in the JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Identity => "identity",
            Category::Syscalls => "syscalls",
            Category::KernelAdmin => "kernel-admin",
            Category::Mounts => "mounts-namespaces",
            Category::Terminal => "terminal",
            Category::Files => "files",
            Category::SetId => "set-id",
            Category::PidNamespace => "pid-namespace",
            Category::Network => "network",
            Category::ForeignSyscalls => "foreign-syscalls",
            Category::Resources => "resources",
            Category::Leaks => "leaks",
        }
    }
}

/// The outcome a confined process must see for the probe to pass.
#[derive(Debug, Clone, Copy)]
pub enum Expect {
    /// The attempt fails with one of these errno values (anything else, success included, fails
    /// the probe). More than one is listed only where two layers of the sandbox legitimately
    /// answer first with different codes (a read-only mount and Landlock, for example).
    Errno(&'static [i32]),
    /// The attempt, made in a forked child, kills that child with this signal.
    Signal(i32),
    /// A property of the sandbox that the probe observes (described in words).
    Holds(&'static str),
}

impl Expect {
    /// Human and JSON form: `EPERM`, `EROFS|EACCES`, `SIGSYS`, or the property.
    pub fn describe(&self) -> String {
        match self {
            Expect::Errno(set) => set
                .iter()
                .map(|&e| errno_name(e))
                .collect::<Vec<_>>()
                .join("|"),
            Expect::Signal(sig) => signal_name(*sig),
            Expect::Holds(what) => (*what).to_string(),
        }
    }
}

/// What actually happened when a probe ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Got {
    /// The call succeeded: the attack worked (detail says what it returned).
    Succeeded(String),
    /// The call failed with this errno.
    Failed(i32),
    /// A forked child was killed by this signal.
    Killed(i32),
    /// A forked child exited without reporting a result.
    Exited(i32),
    /// The observed property holds (detail is what was seen).
    Holds(String),
    /// The observed property does not hold (detail names the offender).
    Violated(String),
    /// The attempt could not be made (missing argument or precondition). Never a pass.
    NotRun(String),
}

impl Got {
    /// The outcome of a raw system call: `-1` means failure with `errno`.
    pub fn from_ret(ret: i64) -> Got {
        if ret == -1 {
            Got::Failed(crate::sys::last_errno())
        } else {
            Got::Succeeded(format!("returned {ret}"))
        }
    }

    /// Short form for the `got` field.
    pub fn describe(&self) -> String {
        match self {
            Got::Succeeded(detail) => format!("success ({detail})"),
            Got::Failed(errno) => errno_name(*errno),
            Got::Killed(sig) => signal_name(*sig),
            Got::Exited(code) => format!("child exited with status {code} without a result"),
            Got::Holds(detail) | Got::Violated(detail) => detail.clone(),
            Got::NotRun(why) => format!("not run: {why}"),
        }
    }
}

/// Whether `got` is exactly what `expect` demands.
pub fn passes(expect: &Expect, got: &Got) -> bool {
    match (expect, got) {
        (Expect::Errno(set), Got::Failed(errno)) => set.contains(errno),
        (Expect::Signal(want), Got::Killed(sig)) => want == sig,
        (Expect::Holds(_), Got::Holds(_)) => true,
        _ => false,
    }
}

/// A probe function: attempts one escape and reports what happened.
pub type ProbeFn = fn(&Ctx) -> Got;

/// One escape attempt, as data.
#[derive(Clone, Copy)]
pub struct Probe {
    /// Unique, stable name (`ptrace_attach_pid1`).
    pub name: &'static str,
    pub category: Category,
    /// What the attempt does, in one line.
    pub what: &'static str,
    pub expect: Expect,
    pub run: ProbeFn,
    /// True when a *successful* attempt leaves the machine as it was (process-local effects,
    /// effects undone at once, or arguments the kernel rejects after its permission check).
    /// Probes that are not host-safe are skipped when the process holds capabilities, since
    /// then it is clearly not confined and the attempt could change the host.
    pub host_safe: bool,
}

/// The result line of one probe.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeResult {
    pub probe: &'static str,
    pub category: &'static str,
    pub expected: String,
    pub got: String,
    pub pass: bool,
}

impl Probe {
    /// Run the probe (or skip it when that would be unsafe) and judge the outcome.
    pub fn execute(&self, ctx: &Ctx) -> ProbeResult {
        let got = if ctx.privileged && !self.host_safe {
            Got::NotRun(
                "the process holds capabilities, so it is not confined and this attempt could \
                 change the host"
                    .into(),
            )
        } else {
            (self.run)(ctx)
        };
        ProbeResult {
            probe: self.name,
            category: self.category.as_str(),
            expected: self.expect.describe(),
            got: got.describe(),
            pass: passes(&self.expect, &got),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_must_match_exactly() {
        let expect = Expect::Errno(&[libc::EPERM]);
        assert!(passes(&expect, &Got::Failed(libc::EPERM)));
        assert!(!passes(&expect, &Got::Failed(libc::ENOENT)));
        assert!(!passes(&expect, &Got::Succeeded("returned 0".into())));
        assert!(!passes(&expect, &Got::NotRun("missing".into())));
    }

    #[test]
    fn signal_must_match_exactly() {
        let expect = Expect::Signal(libc::SIGSYS);
        assert!(passes(&expect, &Got::Killed(libc::SIGSYS)));
        assert!(!passes(&expect, &Got::Killed(libc::SIGSEGV)));
        assert!(!passes(&expect, &Got::Failed(libc::ENOSYS)));
        assert!(!passes(&expect, &Got::Exited(0)));
    }

    #[test]
    fn property_passes_only_when_it_holds() {
        let expect = Expect::Holds("no routes");
        assert!(passes(&expect, &Got::Holds("0 routes".into())));
        assert!(!passes(&expect, &Got::Violated("default via eth0".into())));
        assert!(!passes(&expect, &Got::NotRun("no /proc".into())));
    }

    #[test]
    fn describes_sets_and_signals() {
        assert_eq!(
            Expect::Errno(&[libc::EROFS, libc::EACCES]).describe(),
            "EROFS|EACCES"
        );
        assert_eq!(Expect::Signal(libc::SIGSYS).describe(), "SIGSYS");
        assert_eq!(Got::Failed(libc::ENOSYS).describe(), "ENOSYS");
    }
}
