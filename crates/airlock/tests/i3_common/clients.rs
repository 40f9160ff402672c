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

/// A missing client (`msg` says which, with a `help:` line) fails the test in CI and skips
/// it elsewhere, saying why. Returns `false`, for `if !found && !missing_client(..)`.
pub fn missing_client(msg: &str) -> bool {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{msg}");
    }
    eprintln!("skipping: {msg}");
    false
}
