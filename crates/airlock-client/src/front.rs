//! `airlock`, the command people type: a small front to `airlock-full`.
//!
//! An `airlock exec` while a host serves the state dir is sent to the host from here, in
//! about a millisecond of start-up instead of the full program's three or more. Every other
//! command line, and any `exec` this front does not read exactly as the full program's
//! parser would, is handed over unchanged: this process becomes `airlock-full` (the file
//! beside it), with the same arguments, environment and descriptors. So the front never
//! decides what a command line means when it is in doubt; the full program does, with its
//! own errors and help.
//!
//! The front only ever talks to the host's socket, which the host guards (the socket's dir
//! is private to its owner, and the host checks the peer's uid), and only once it has
//! checked the other way that the listener is of its own uid ([`crate::peer`]). It
//! decides nothing: the command is decided at the host's Gate as any other.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::dirs::Dirs;
use crate::wire::{ExecRequest, HostRequest};

/// The full program's file name; it sits beside the front.
pub const FULL_BINARY: &str = "airlock-full";

/// The front's `main`: the exit status.
pub fn main() -> i32 {
    let args: Vec<OsString> = std::env::args_os().collect();
    if let Some(line) = ExecLine::parse(&args) {
        if let Some(code) = exec_through_host(&line) {
            return code;
        }
    }
    hand_over(&args)
}

/// `airlock exec`'s options and command, as the command line gives them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecLine {
    /// `--workspace`, as given (made absolute in [`ExecLine::request`]).
    pub workspace: Option<PathBuf>,
    pub timeout: Option<u64>,
    pub profile: Option<String>,
    /// `--secret NAME`, repeatable.
    pub secrets: Vec<String>,
    /// The words after `--`.
    pub command: Vec<String>,
}

impl ExecLine {
    /// `args` (with the program's name first) when they are `exec` in a shape read here
    /// exactly as the full program's parser reads it: the options `--workspace`,
    /// `--timeout` and `--profile` at most once each and `--secret` any number of times
    /// (each as `--opt VALUE` or `--opt=VALUE`, the value neither empty nor starting with
    /// `-`, the timeout in digits), then `--` and at least one word, all of it UTF-8.
    /// Anything else (`--help`, a typo, a repeated option) is `None`: not ours to read.
    pub fn parse(args: &[OsString]) -> Option<ExecLine> {
        let mut words = args.iter().skip(1).map(|a| a.to_str());
        if words.next()? != Some("exec") {
            return None;
        }
        let mut line = ExecLine::default();
        loop {
            let word = words.next()??;
            if word == "--" {
                break;
            }
            let (name, inline) = match word.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (word, None),
            };
            let value = match inline {
                Some(v) => v,
                None => words.next()??,
            };
            if value.is_empty() || value.starts_with('-') {
                return None;
            }
            match name {
                "--workspace" if line.workspace.is_none() => {
                    line.workspace = Some(PathBuf::from(value))
                }
                "--profile" if line.profile.is_none() => line.profile = Some(value.to_string()),
                "--timeout" if line.timeout.is_none() => {
                    if !value.bytes().all(|b| b.is_ascii_digit()) {
                        return None;
                    }
                    line.timeout = Some(value.parse().ok()?);
                }
                "--secret" => line.secrets.push(value.to_string()),
                _ => return None,
            }
        }
        for word in words {
            line.command.push(word?.to_string());
        }
        (!line.command.is_empty()).then_some(line)
    }

    /// The request for the Gate: several words are an argument vector (as under `sudo` or
    /// `bwrap`) quoted into one line, one word is a shell line; the workspace is made
    /// absolute against this process's working directory, which is sent along.
    pub fn request(&self) -> anyhow::Result<ExecRequest> {
        anyhow::ensure!(
            !self.command.is_empty(),
            "nothing to run\nhelp: airlock exec [--workspace DIR] -- <command…>"
        );
        Ok(ExecRequest {
            command: airlock_core::shell::command_line_from_words(&self.command),
            workspace: self
                .workspace
                .as_deref()
                .map(std::path::absolute)
                .transpose()?,
            cwd: std::env::current_dir()?,
            timeout: self.timeout,
            profile: self.profile.clone(),
            secrets: self.secrets.clone(),
        })
    }
}

/// The exit status of `line` run by the host serving the state dir; `None` when there is
/// no host to take it now (none holds the state dir, its socket is not there, or it
/// refused the request because it is stopping), and nothing ran. Then the full program runs the command,
/// waiting for such a host or running it embedded, as it always has.
fn exec_through_host(line: &ExecLine) -> Option<i32> {
    let dirs = Dirs::from_env().ok()?;
    let pid = crate::host::running_host(&dirs.state)?;
    let request = line.request().ok()?;
    let stream = crate::send::connect(&crate::host::exec_socket(&dirs.state), pid).ok()?;
    match crate::send::exchange(stream, pid, &HostRequest::Exec(request)) {
        Ok(code) => Some(code),
        // Nothing was read or run: the full program waits for the host to be gone.
        Err(e) if e.downcast_ref::<crate::send::HostStopping>().is_some() => None,
        Err(e) => {
            report(&e);
            Some(1)
        }
    }
}

/// An error as the full program prints it: every line shown, none of its controls obeyed.
fn report(e: &anyhow::Error) {
    eprintln!(
        "error: {}",
        airlock_core::terminal_text::escape_block(&format!("{e:#}"))
    );
}

/// Become `airlock-full` with the same arguments (and the name this process was called
/// by). Returns only when that cannot be done.
fn hand_over(args: &[OsString]) -> i32 {
    use std::os::unix::process::CommandExt;
    let full = match std::env::current_exe() {
        Ok(exe) => exe.with_file_name(FULL_BINARY),
        Err(e) => {
            report(&anyhow::anyhow!("cannot find this program's own file: {e}"));
            return 1;
        }
    };
    let mut command = std::process::Command::new(&full);
    command.args(args.iter().skip(1));
    if let Some(name) = args.first() {
        command.arg0(name);
    }
    let e = command.exec();
    report(&anyhow::anyhow!(
        "cannot start {}: {e}\nhelp: `airlock` hands every command but a host's `exec` to {FULL_BINARY}, which must be installed beside it (`cargo build --workspace --bins` builds both)",
        full.display()
    ));
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(words: &[&str]) -> Option<ExecLine> {
        let args: Vec<OsString> = std::iter::once("airlock")
            .chain(words.iter().copied())
            .map(OsString::from)
            .collect();
        ExecLine::parse(&args)
    }

    #[test]
    fn the_shapes_of_exec_the_front_reads() {
        assert_eq!(
            parse(&["exec", "--", "/bin/true"]),
            Some(ExecLine {
                command: vec!["/bin/true".into()],
                ..Default::default()
            })
        );
        assert_eq!(
            parse(&[
                "exec",
                "--workspace",
                "ws",
                "--timeout=30",
                "--profile",
                "strict",
                "--secret",
                "gh",
                "--secret=pypi",
                "--",
                "git",
                "--version",
                "--",
            ]),
            Some(ExecLine {
                workspace: Some("ws".into()),
                timeout: Some(30),
                profile: Some("strict".into()),
                secrets: vec!["gh".into(), "pypi".into()],
                command: vec!["git".into(), "--version".into(), "--".into()],
            })
        );
    }

    /// Whatever the full program's parser might read otherwise, or refuse with its own
    /// message, goes to it.
    #[test]
    fn every_other_command_line_goes_to_the_full_program() {
        for words in [
            &[][..],
            &["status"],
            &["--version"],
            &["exec"],
            &["exec", "--"],
            &["exec", "/bin/true"],
            &["exec", "--help", "--", "x"],
            &["exec", "-h", "--", "x"],
            &["exec", "--workspac", "ws", "--", "x"],
            &["exec", "--workspace", "--", "x"],
            &["exec", "--workspace=", "--", "x"],
            &["exec", "--workspace", "a", "--workspace", "b", "--", "x"],
            &["exec", "--profile", "-x", "--", "x"],
            &["exec", "--timeout", "+5", "--", "x"],
            &["exec", "--timeout", "5s", "--", "x"],
            &["exec", "--timeout", "99999999999999999999999", "--", "x"],
            &["exec", "--timeout", "1", "--timeout", "2", "--", "x"],
            &["exec", "--secret"],
            &["exec", "--workspace", "ws"],
            &["Exec", "--", "x"],
        ] {
            assert_eq!(parse(words), None, "{words:?}");
        }
    }

    #[test]
    fn a_word_that_is_not_utf8_goes_to_the_full_program() {
        use std::os::unix::ffi::OsStringExt;
        let args = vec![
            OsString::from("airlock"),
            OsString::from("exec"),
            OsString::from("--"),
            OsString::from_vec(vec![b'a', 0xff]),
        ];
        assert_eq!(ExecLine::parse(&args), None);
    }

    #[test]
    fn the_request_quotes_several_words_and_makes_the_workspace_absolute() {
        let line = ExecLine {
            workspace: Some("ws".into()),
            command: vec!["echo".into(), "a b".into()],
            ..Default::default()
        };
        let req = line.request().unwrap();
        assert_eq!(req.command, "echo 'a b'");
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(req.workspace, Some(cwd.join("ws")));
        assert_eq!(req.cwd, cwd);
        assert!(ExecLine::default().request().is_err());
    }
}
