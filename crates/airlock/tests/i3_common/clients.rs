//! Real network clients (git, pip, npm, cargo, Python) inside the sandbox: finding them
//! where the sandbox can see them, and the loopback servers they talk to.

use std::path::Path;

/// Whether `tool` is installed where the sandbox sees it (`/usr/bin`, `/usr/local/bin`;
/// the sandbox binds `/usr` but not, say, `/root/.cargo`). Missing in CI (`CI=true`) fails
/// the test, naming the Debian package; elsewhere the test says why it skips.
pub fn require_tool(tool: &str, package: &str) -> bool {
    let found = ["/usr/local/bin", "/usr/bin", "/bin"]
        .iter()
        .any(|d| Path::new(d).join(tool).is_file());
    found
        || missing_client(&format!(
            "{tool} is not installed under /usr, where the sandbox can run it\nhelp: apt-get install -y {package} (scripts/test-env installs it)"
        ))
}

/// Whether the executable `path` exists (a client that must be that very one, such as
/// `/usr/bin/cargo`, new enough for sparse registries), with [`require_tool`]'s rules.
pub fn require_executable(path: &str, package: &str) -> bool {
    Path::new(path).is_file()
        || missing_client(&format!(
            "{path} is missing\nhelp: apt-get install -y {package} (scripts/test-env installs it)"
        ))
}

/// How many client checks this test binary has skipped so far.
static SKIPPED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Whether this is a CI run, where nothing may skip. CI services set `CI` to `true`, `1`
/// or `yes`; only unset, empty, `false` and `0` mean a developer's machine.
pub fn in_ci() -> bool {
    is_ci_value(std::env::var("CI").ok().as_deref())
}

/// [`in_ci`] for a given value of `CI`.
pub fn is_ci_value(ci: Option<&str>) -> bool {
    ci.is_some_and(|v| !matches!(v.trim(), "" | "0" | "false" | "False" | "FALSE"))
}

/// A missing client (`msg` says which, with a `help:` line) fails the test in CI and skips
/// it elsewhere, saying why. Returns `false`, for `if !found && !missing_client(..)`.
pub fn missing_client(msg: &str) -> bool {
    if in_ci() {
        panic!("{msg}\n(CI is set: a security test must not pass by skipping)");
    }
    let n = SKIPPED.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
    // Straight to the process's stderr: the test harness captures `eprintln!` of passing
    // tests, and a skip must show even though the test passes.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED ({n} so far in this test binary): {msg}"
    );
    false
}
