//! Running a simple command without the intermediate shell.
//!
//! Authorized commands are shell text, so the sandbox normally runs them with
//! [`shell_argv`]: `/bin/bash --noprofile --norc -c <command>`. The shell is bash because
//! bash's is the grammar the Gate parses; `/bin/sh` (dash on Debian) reads some text
//! differently (`$'…'`, control characters) and could run commands the Gate never saw.
//! For a command that is only words (a program and plain arguments) the shell adds
//! nothing but one more process and one more `execve`, about a fifth of the launch time
//! of a short command. [`plan`] recognises exactly those commands, conservatively: any
//! character the shell could give a meaning to (quotes, `$`, globs, `~`, redirections,
//! separators, comments, tabs, newlines), a leading assignment, or a first word that
//! names a bash builtin or reserved word sends the command back to the shell. What runs
//! is then exactly what `bash -c` would have run: the same argv, `argv[0]` as typed, the
//! program found on the sandbox's `PATH` the way the shell finds it.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A command that can be executed directly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectExec {
    /// Absolute path of the program (found on `PATH`).
    pub program: PathBuf,
    /// The words of the command; `argv[0]` as typed.
    pub argv: Vec<String>,
}

/// The argv that runs `command` in the sandbox: bash, without startup files. The
/// environment holds none of the variables that would make it read one (see
/// [`crate::payload_env`]).
pub fn shell_argv(command: &str) -> Vec<String> {
    ["/bin/bash", "--noprofile", "--norc", "-c", command]
        .into_iter()
        .map(String::from)
        .collect()
}

/// Words bash treats as something other than a program on `PATH`: all of bash 5's
/// builtins (`enable -a` lists them) and reserved words (`compgen -k`), plus dash's
/// `chdir`.
const SHELL_WORDS: &[&str] = &[
    "!",
    ".",
    ":",
    "[",
    "[[",
    "]]",
    "alias",
    "bg",
    "bind",
    "break",
    "builtin",
    "caller",
    "case",
    "cd",
    "chdir",
    "command",
    "compgen",
    "complete",
    "compopt",
    "continue",
    "coproc",
    "declare",
    "dirs",
    "disown",
    "do",
    "done",
    "echo",
    "elif",
    "else",
    "enable",
    "esac",
    "eval",
    "exec",
    "exit",
    "export",
    "false",
    "fc",
    "fg",
    "fi",
    "for",
    "function",
    "getopts",
    "hash",
    "help",
    "history",
    "if",
    "in",
    "jobs",
    "kill",
    "let",
    "local",
    "logout",
    "mapfile",
    "popd",
    "printf",
    "pushd",
    "pwd",
    "read",
    "readarray",
    "readonly",
    "return",
    "select",
    "set",
    "shift",
    "shopt",
    "source",
    "suspend",
    "test",
    "then",
    "time",
    "times",
    "trap",
    "true",
    "type",
    "typeset",
    "ulimit",
    "umask",
    "unalias",
    "unset",
    "until",
    "wait",
    "while",
    "{",
    "}",
];

/// Characters with no meaning to the shell's parser or its expansions.
fn is_plain(c: char) -> bool {
    c.is_ascii_alphanumeric()
        || matches!(c, '_' | '-' | '.' | '/' | ',' | ':' | '+' | '@' | '%' | '=')
}

/// The direct form of `command`, if it has one. `path` is the sandbox's `PATH`; programs
/// are looked up on the host, which is sound because the sandbox binds the host's `/usr`
/// (where every `PATH` entry of the sandbox lives) read-only at the same place.
pub fn plan(command: &str, path: &str) -> Option<DirectExec> {
    if !command.chars().all(|c| c == ' ' || is_plain(c)) {
        return None;
    }
    // `%1` as a command word is bash's job control (`fg %1`).
    if command.trim_start().starts_with('%') {
        return None;
    }
    let argv: Vec<String> = command
        .split(' ')
        .filter(|w| !w.is_empty())
        .map(String::from)
        .collect();
    let first = argv.first()?;
    // `NAME=value cmd` is an assignment: the shell's job.
    if first.contains('=') || SHELL_WORDS.contains(&first.as_str()) {
        return None;
    }
    let program = if first.contains('/') {
        system_path(first)?
    } else {
        lookup(first, path)?
    };
    Some(DirectExec { program, argv })
}

/// An absolute path into the system trees, which the sandbox binds from the host at the
/// same place, so the host sees the file the sandbox would run. Any other path (relative,
/// or into the workspace, `/tmp`, `/etc`…) is left to the shell in the sandbox.
fn system_path(word: &str) -> Option<PathBuf> {
    let path = Path::new(word);
    (is_system_tree(path) && is_kernel_executable(path)).then(|| path.to_path_buf())
}

/// `/usr/…`, `/bin/…` or `/sbin/…` with no `.` or `..` components.
fn is_system_tree(path: &Path) -> bool {
    use std::path::Component;
    let mut components = path.components();
    let (Some(Component::RootDir), Some(Component::Normal(top))) =
        (components.next(), components.next())
    else {
        return false;
    };
    ["usr", "bin", "sbin"].iter().any(|t| top == *t)
        && components.all(|c| matches!(c, Component::Normal(_)))
}

/// The first regular, executable file named `name` on `path`, as `sh` finds it — but only
/// one the kernel executes itself (an ELF binary or a `#!` script). Anything else (`sh`
/// would run a file without either as a shell script) goes back to the shell.
fn lookup(name: &str, path: &str) -> Option<PathBuf> {
    for dir in path.split(':') {
        // The host sees what the sandbox sees only in the system trees: a `PATH` entry
        // elsewhere (empty = the working directory, `/tmp`, the workspace…) may hold a
        // different file in the sandbox, so the shell must do the lookup.
        if !is_system_tree(Path::new(dir)) {
            return None;
        }
        let candidate = Path::new(dir).join(name);
        // `sh` takes the first executable file named so; a later one never runs.
        if candidate.is_file() {
            return is_kernel_executable(&candidate).then_some(candidate);
        }
    }
    None
}

/// A regular executable file that starts with the ELF magic or `#!`. Opened first
/// (non-blocking) and checked through the descriptor, so a FIFO swapped in after the
/// lookup can never block the host.
fn is_kernel_executable(file: &Path) -> bool {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(mut f) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(file)
    else {
        return false;
    };
    match f.metadata() {
        Ok(meta) if meta.is_file() && meta.permissions().mode() & 0o111 != 0 => {}
        _ => return false,
    }
    let mut head = [0u8; 4];
    match f.read_exact(&mut head) {
        Ok(()) => head == *b"\x7fELF" || head.starts_with(b"#!"),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every builtin and reserved word of the bash the sandbox runs goes to the shell.
    #[test]
    fn shell_words_cover_every_bash_builtin_and_reserved_word() {
        let out = std::process::Command::new("/bin/bash")
            .args(["--noprofile", "--norc", "-c", "enable -a; compgen -k"])
            .env_clear()
            .output()
            .expect("/bin/bash runs");
        let listing = String::from_utf8(out.stdout).expect("UTF-8");
        let words: Vec<&str> = listing
            .lines()
            .map(|l| l.strip_prefix("enable ").unwrap_or(l).trim())
            .filter(|w| !w.is_empty())
            .collect();
        assert!(words.len() > 60, "{listing}");
        for w in words {
            assert!(SHELL_WORDS.contains(&w), "bash's `{w}` would run directly");
        }
    }

    #[test]
    fn the_shell_is_bash_without_startup_files() {
        assert_eq!(
            shell_argv("ls"),
            ["/bin/bash", "--noprofile", "--norc", "-c", "ls"]
        );
    }

    const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

    #[test]
    fn plain_words_run_directly_with_argv0_as_typed() {
        let d = plan("ls -la /tmp", PATH).expect("plain command");
        assert_eq!(d.argv, ["ls", "-la", "/tmp"]);
        assert!(
            d.program.is_absolute() && d.program.ends_with("ls"),
            "{d:?}"
        );
        // Repeated spaces separate words, as in the shell.
        assert_eq!(plan("ls   -l", PATH).unwrap().argv, ["ls", "-l"]);
        // A path into the system trees runs as given.
        let d = plan("/bin/true x", PATH).expect("system path");
        assert_eq!(d.program, PathBuf::from("/bin/true"));
        assert_eq!(d.argv, ["/bin/true", "x"]);
        // `=` after the program is a plain argument.
        assert_eq!(
            plan("env A=1", PATH).unwrap().argv,
            ["env", "A=1"],
            "an argument with = is not an assignment"
        );
    }

    #[test]
    fn anything_the_shell_would_interpret_goes_to_the_shell() {
        for command in [
            "echo hi", // builtin
            "true",    // builtin, though /usr/bin/true exists
            "cd /tmp", // builtin
            "if true; then :; fi",
            "ls *.rs",  // glob
            "ls ~",     // tilde
            "ls $HOME", // expansion
            "ls 'a b'", // quotes
            "ls a\\ b", // escape
            "ls > out", // redirection
            "ls | wc",  // pipe
            "ls; rm x", // separator
            "ls && rm x",
            "ls # comment",
            "ls\tx",         // tab
            "ls\nrm x",      // newline
            "A=1 ls",        // assignment
            "./run",         // relative path: the shell runs it from its cwd
            "/tmp/x",        // a path the sandbox does not share with the host
            "/usr/../tmp/x", // not a plain path
            "no-such-program-xyz",
            "",
            "   ",
        ] {
            assert_eq!(
                plan(command, PATH),
                None,
                "{command:?} must go to the shell"
            );
        }
    }

    #[test]
    fn a_path_entry_outside_the_system_trees_stops_the_lookup() {
        // The sandbox may hold a different `ls` in the working directory or /tmp.
        for path in [
            ":/usr/bin",
            "/tmp:/usr/bin",
            "/usr/../tmp:/usr/bin",
            "bin:/usr/bin",
        ] {
            assert_eq!(plan("ls", path), None, "PATH={path}");
        }
        assert!(plan("ls", "/usr/bin:/tmp").is_some(), "found before /tmp");
    }

    #[test]
    fn a_file_the_kernel_cannot_execute_goes_to_the_shell() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("plain-script");
        std::fs::write(&script, "echo no shebang\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let with_shebang = dir.path().join("shebang-script");
        std::fs::write(&with_shebang, "#!/bin/sh\necho hi\n").unwrap();
        std::fs::set_permissions(&with_shebang, std::fs::Permissions::from_mode(0o755)).unwrap();
        let not_executable = dir.path().join("not-executable");
        std::fs::write(&not_executable, "#!/bin/sh\n").unwrap();
        assert!(
            !is_kernel_executable(&script),
            "sh would run it as a script"
        );
        assert!(!is_kernel_executable(&not_executable));
        assert!(is_kernel_executable(&with_shebang));
        assert!(is_kernel_executable(Path::new("/bin/true")));
    }

    /// A FIFO where a program was looked up is not executable, and checking it does not
    /// block (it is opened non-blocking before anything else).
    #[test]
    fn a_fifo_is_not_a_program_and_does_not_block() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("prog");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o755)).unwrap();
        std::fs::set_permissions(&fifo, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(!is_kernel_executable(&fifo));
    }
}
