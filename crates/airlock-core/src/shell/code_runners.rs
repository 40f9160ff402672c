//! Programs that run code the normalizer cannot see: shells and interpreters given a
//! program, `sed` and `awk` scripts with commands, build tools and package managers that
//! run project-defined code, tools whose options name a command, and the shell builtins
//! that run strings (`eval`, `source`, `trap`, `alias`).
//!
//! Rules are about classes of programs and syntax; every reason names the class so the
//! operator sees why.

use super::awk_program;
use super::inspection::{join_script, only_info_flags, Inner, Inspection};
use super::options::{scan, OptionSyntax};
use super::sed_script;
use super::words::Word;
use super::RedirectKind;

/// Inspect `basename args…` if it runs code.
pub(crate) fn inspect(basename: &str, args: &[Word]) -> Option<Inspection> {
    let family = family(basename);
    if SHELLS.contains(&family) {
        return Some(shell(basename, args));
    }
    if let Some(ins) = builtin(basename, args) {
        return Some(ins);
    }
    match family {
        "awk" | "gawk" | "mawk" | "nawk" => return Some(awk(args)),
        "sed" | "gsed" => return Some(sed(args)),
        "git" => return Some(super::git::inspect(args)),
        "ssh" => return Some(ssh(args)),
        "gdb" | "lldb" => return Some(debugger(basename, args)),
        _ => {}
    }
    if let Some((_, inline)) = INTERPRETERS
        .iter()
        .find(|(names, _)| names.contains(&family))
    {
        return Some(interpreter(basename, inline, args));
    }
    if let Some(ins) = project_runner(basename, args) {
        return Some(ins);
    }
    command_options(basename, args)
}

/// The name without a version suffix: `python3.11` → `python`, `perl5.36` → `perl`.
pub(crate) fn family(basename: &str) -> &str {
    let trimmed = basename.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.' || c == '-');
    if trimmed.is_empty() {
        basename
    } else {
        trimmed
    }
}

const SHELLS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "lksh", "oksh", "pdksh", "ash", "yash", "posh",
    "rbash", "fish", "csh", "tcsh",
];

/// Interpreters, with the flags that give them a program inline.
const INTERPRETERS: &[(&[&str], &[&str])] = &[
    (&["python", "pypy", "ipython"], &["-c"]),
    (&["perl"], &["-e", "-E"]),
    (&["ruby", "jruby"], &["-e"]),
    (&["irb", "pry"], &[]),
    (&["node", "nodejs"], &["-e", "-p", "--eval", "--print"]),
    (&["deno", "bun"], &["eval", "-e", "--eval"]),
    (&["php"], &["-r", "-R", "-B", "-E", "-a"]),
    (&["lua", "luajit"], &["-e"]),
    (&["tclsh", "wish", "expect"], &["-c"]),
    (&["Rscript", "R"], &["-e"]),
    (&["julia"], &["-e", "-E"]),
    (
        &["pwsh", "powershell"],
        &["-c", "-Command", "-command", "-EncodedCommand", "-ec"],
    ),
    (&["osascript"], &["-e"]),
    (&["groovy", "scala", "jrunscript", "rhino", "qjs"], &["-e"]),
    (&["java", "jshell", "jjs", "kotlin"], &[]),
    (
        &[
            "ghci",
            "runghc",
            "runhaskell",
            "ocaml",
            "swift",
            "escript",
            "iex",
        ],
        &[],
    ),
    (&["elixir", "racket"], &["-e"]),
    (&["erl"], &["-eval"]),
    (&["guile", "gjs"], &["-c"]),
    (&["sbcl"], &["--eval"]),
    (&["clisp"], &["-x"]),
    (
        &[
            "ld.so",
            "ld-linux",
            "ld-linux-x86-64.so",
            "ld-linux-aarch64.so",
        ],
        &[],
    ),
];

fn shell(basename: &str, args: &[Word]) -> Inspection {
    let mut command_mode = false;
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a.dynamic {
            break;
        }
        let t = a.text.as_str();
        if t == "--" || t == "-" {
            i += 1;
            break;
        }
        if let Some(long) = t.strip_prefix("--") {
            if matches!(long, "rcfile" | "init-file") {
                i += 1;
            }
            if long == "command" {
                command_mode = true;
            }
            i += 1;
            continue;
        }
        let Some(cluster) = t.strip_prefix('-').or_else(|| t.strip_prefix('+')) else {
            break;
        };
        if cluster.is_empty() {
            break;
        }
        for c in cluster.chars() {
            match c {
                'c' => command_mode = true,
                'o' | 'O' => i += 1,
                _ => {}
            }
        }
        i += 1;
    }
    let mut ins = Inspection {
        own_args: Some(args[..i.min(args.len())].to_vec()),
        ..Inspection::default()
    };
    match (command_mode, args.get(i)) {
        (true, Some(script)) => {
            ins.inner.push(Inner::Script(script.clone()));
            // The string is read as bash (or, for `sh`-like shells, as the syntax bash
            // and POSIX sh share); zsh, ksh, fish and csh have grammars of their own that
            // can run code bash would not (zsh's `*(e:…:)` glob qualifiers).
            if !matches!(basename, "sh" | "bash" | "rbash" | "dash" | "ash" | "posh") {
                ins.set_arbitrary(format!(
                    "{basename} reads its command string with its own grammar"
                ));
            }
        }
        (true, None) => ins.set_arbitrary(format!("{basename} -c without a command string")),
        (false, Some(file)) => {
            ins.set_arbitrary(format!("{basename} runs the script file {}", file.text))
        }
        (false, None) if only_info_flags(args) => {}
        (false, None) => {
            ins.set_arbitrary(format!("{basename} reads commands from standard input"))
        }
    }
    ins
}

fn interpreter(basename: &str, inline: &[&str], args: &[Word]) -> Inspection {
    if only_info_flags(args) {
        return Inspection::default();
    }
    let inline_flag = args.iter().find_map(|a| {
        if a.dynamic {
            return None;
        }
        let t = a.text.split('=').next().unwrap_or("");
        inline
            .iter()
            .find(|flag| **flag == t || is_cluster_with(t, flag))
    });
    if let Some(flag) = inline_flag {
        return Inspection::arbitrary(format!("{basename} runs inline code ({flag})"));
    }
    if family(basename) == "python"
        && args
            .iter()
            .any(|a| !a.dynamic && (a.text == "-m" || is_cluster_with(&a.text, "-m")))
    {
        return Inspection::arbitrary(format!(
            "{basename} -m runs a module from the import path, which includes the working directory"
        ));
    }
    match args.iter().find(|a| a.dynamic || !a.text.starts_with('-')) {
        Some(file) => {
            Inspection::arbitrary(format!("{basename} runs the program file {}", file.text))
        }
        None => Inspection::arbitrary(format!(
            "{basename} reads a program from standard input or starts an interactive session"
        )),
    }
}

/// `-ne` holds `-e`: a single-dash cluster of letters containing the flag's letter.
fn is_cluster_with(token: &str, flag: &str) -> bool {
    let (Some(cluster), Some(letter)) = (token.strip_prefix('-'), flag.strip_prefix('-')) else {
        return false;
    };
    letter.len() == 1
        && cluster.len() > 1
        && !cluster.starts_with('-')
        && cluster.chars().all(|c| c.is_ascii_alphabetic())
        && cluster.contains(letter)
}

fn awk(args: &[Word]) -> Inspection {
    let found = scan(
        args,
        &OptionSyntax {
            short_with_arg: "fvFE",
            long_with_arg: &[
                "file",
                "assign",
                "field-separator",
                "exec",
                "include",
                "load",
            ],
            single_dash_long_with_arg: &[],
            permute: false,
        },
    );
    if found.has(&["-f", "--file", "-E", "--exec", "-i", "--include"]) {
        return Inspection::arbitrary("awk runs a program file");
    }
    if found.has(&["-l", "--load"]) {
        return Inspection::arbitrary("awk loads an extension library");
    }
    let Some(program) = found.operands.first().and_then(|&i| args.get(i)) else {
        return Inspection::arbitrary("awk without a program");
    };
    if program.dynamic {
        return Inspection::arbitrary("awk program is dynamic");
    }
    let fx = awk_program::scan(&program.text);
    let mut ins = Inspection::default();
    if let Some(reason) = fx.runs {
        ins.set_arbitrary(reason);
    }
    for (target, append, dynamic) in fx.writes {
        let kind = if append {
            RedirectKind::Append
        } else {
            RedirectKind::Write
        };
        ins.file(
            kind,
            &Word {
                text: target,
                dynamic,
            },
        );
    }
    ins
}

fn sed(args: &[Word]) -> Inspection {
    let found = scan(
        args,
        &OptionSyntax {
            short_with_arg: "efl",
            long_with_arg: &["expression", "file", "line-length"],
            single_dash_long_with_arg: &[],
            permute: true,
        },
    );
    let mut ins = Inspection::default();
    if found.has(&["-f", "--file"]) {
        ins.set_arbitrary("sed runs a script file");
    }
    let mut scripts: Vec<Word> = found
        .options
        .iter()
        .filter(|o| o.name == "-e" || o.name == "--expression")
        .filter_map(|o| o.value.clone())
        .collect();
    let mut files: Vec<usize> = found.operands.clone();
    if scripts.is_empty() && !found.has(&["-f", "--file"]) {
        if files.is_empty() {
            return ins;
        }
        scripts.push(args[files.remove(0)].clone());
    }
    for script in &scripts {
        if script.dynamic {
            ins.set_arbitrary("sed script is dynamic");
            continue;
        }
        let fx = sed_script::scan(&script.text);
        if fx.executes {
            ins.set_arbitrary("sed script runs commands (e)");
        }
        for w in fx.writes {
            ins.file(RedirectKind::Write, &Word::literal(w));
        }
        for r in fx.reads {
            ins.file(RedirectKind::Read, &Word::literal(r));
        }
    }
    if found.has(&["-i", "--in-place"])
        || found
            .options
            .iter()
            .any(|o| o.name.starts_with("--in-place"))
    {
        for &i in &files {
            let target = args[i].clone();
            ins.file(RedirectKind::Write, &target);
        }
    }
    ins
}

fn ssh(args: &[Word]) -> Inspection {
    if only_info_flags(args) {
        return Inspection::default();
    }
    let found = scan(
        args,
        &OptionSyntax {
            short_with_arg: "BbcDEeFIiJLlmOopQRSWw",
            ..OptionSyntax::default()
        },
    );
    let mut ins = Inspection::arbitrary("ssh runs commands on a remote host");
    ins.own_args = Some(args[..found.first_operand.min(args.len())].to_vec());
    let remote = found.first_operand + 1;
    if remote < args.len() {
        ins.inner.push(Inner::Script(join_script(&args[remote..])));
    }
    ins
}

fn debugger(basename: &str, args: &[Word]) -> Inspection {
    if only_info_flags(args) {
        return Inspection::default();
    }
    let mut ins = Inspection::arbitrary(format!(
        "{basename} runs debugger commands, which can run shell and Python code"
    ));
    if let Some(at) = args
        .iter()
        .position(|a| !a.dynamic && (a.text == "--args" || a.text == "--"))
    {
        ins.own_args = Some(args[..=at].to_vec());
        if at + 1 < args.len() {
            ins.inner.push(Inner::Argv(args[at + 1..].to_vec()));
        }
    }
    ins
}

/// Shell builtins that run strings or files.
fn builtin(basename: &str, args: &[Word]) -> Option<Inspection> {
    let mut ins = Inspection::default();
    match basename {
        "eval" => {
            if !args.is_empty() {
                ins.inner.push(Inner::Script(join_script(args)));
            }
        }
        "source" | "." => ins.set_arbitrary(format!(
            "{basename} runs a script file in the current shell"
        )),
        "trap" => {
            let action = args.iter().find(|a| a.dynamic || !a.text.starts_with('-'));
            let listing = args
                .iter()
                .any(|a| !a.dynamic && (a.text == "-p" || a.text == "-l"));
            if let (Some(action), false) = (action, listing) {
                if action.dynamic || !(action.text.is_empty() || action.text == "-") {
                    ins.inner.push(Inner::Script(action.clone()));
                }
            }
        }
        "alias" => {
            for a in args {
                if let Some((_, value)) = a.text.split_once('=') {
                    ins.set_arbitrary("alias defines a command that runs later");
                    ins.inner.push(Inner::Script(Word {
                        text: value.to_string(),
                        dynamic: a.dynamic,
                    }));
                }
            }
        }
        "fc" if !args.iter().any(|a| a.text == "-l") => {
            ins.set_arbitrary("fc re-runs commands from history");
        }
        "bind" if args.iter().any(|a| a.text.starts_with("-x")) => {
            ins.set_arbitrary("bind -x binds a key to a command");
        }
        "complete" | "compgen" if args.iter().any(|a| a.text.starts_with("-C")) => {
            ins.set_arbitrary("complete -C runs a completion command");
        }
        "enable" if args.iter().any(|a| a.text.starts_with("-f")) => {
            ins.set_arbitrary("enable -f loads a shared library as a builtin");
        }
        "crontab" if !args.iter().any(|a| a.text == "-l") => {
            ins.set_arbitrary("crontab installs commands that run on a schedule");
        }
        "at" | "batch" => ins.set_arbitrary(format!("{basename} reads commands to run later")),
        _ => return None,
    }
    Some(ins)
}

/// Build tools, test runners and package managers run code defined by project files
/// (recipes, build scripts, test code, package install scripts).
enum Runs {
    /// Every invocation but `--version`/`--help`.
    Always,
    /// Every subcommand except these.
    Except(&'static [&'static str]),
    /// Only these subcommands.
    Only(&'static [&'static str]),
}

const PROJECT_RUNNERS: &[(&[&str], Runs)] = &[
    (
        &[
            "make",
            "gmake",
            "bmake",
            "ninja",
            "just",
            "rake",
            "ant",
            "mvn",
            "mvnw",
            "gradle",
            "gradlew",
            "sbt",
            "bazel",
            "bazelisk",
            "scons",
            "tox",
            "nox",
            "pytest",
            "py.test",
            "invoke",
            "snakemake",
            "ctest",
            "cmake",
            "meson",
            "mix",
            "npx",
            "bunx",
            "pnpx",
            "phpunit",
            "jest",
            "vitest",
            "mocha",
            "tsx",
            "ts-node",
        ],
        Runs::Always,
    ),
    (
        &["cargo"],
        Runs::Except(&[
            "fmt",
            "metadata",
            "tree",
            "version",
            "search",
            "help",
            "new",
            "init",
            "locate-project",
            "pkgid",
            "clean",
            "update",
            "fetch",
            "generate-lockfile",
            "verify-project",
            "vendor",
            "login",
            "logout",
            "owner",
            "yank",
            "info",
            "add",
            "remove",
            "config",
            "report",
        ]),
    ),
    (
        &["npm", "pnpm", "yarn"],
        Runs::Except(&[
            "ls", "list", "view", "info", "outdated", "help", "search", "whoami", "ping", "config",
            "get", "audit", "explain", "why", "show", "docs", "root", "prefix", "bin", "cache",
            "login", "logout",
        ]),
    ),
    (
        &["pip", "pipx", "easy_install"],
        Runs::Only(&["install", "download", "wheel", "run", "runpip", "inject"]),
    ),
    (
        &["uv", "poetry", "pipenv", "pdm", "hatch", "conda", "mamba"],
        Runs::Only(&[
            "run", "install", "sync", "add", "shell", "exec", "pip", "tool", "build", "create",
            "update", "lock",
        ]),
    ),
    (&["go"], Runs::Only(&["run", "test", "generate", "tool"])),
    (
        &["gem", "bundle", "bundler"],
        Runs::Only(&["install", "exec", "build", "update"]),
    ),
    (
        &["composer"],
        Runs::Only(&["install", "update", "run", "run-script", "exec", "require"]),
    ),
    (
        &["dotnet", "swift"],
        Runs::Only(&["run", "test", "build", "msbuild", "tool", "publish", "pack"]),
    ),
    (
        &[
            "apt", "apt-get", "aptitude", "dpkg", "yum", "dnf", "apk", "pacman", "brew", "zypper",
            "snap", "rpm",
        ],
        Runs::Only(&[
            "install",
            "reinstall",
            "upgrade",
            "dist-upgrade",
            "full-upgrade",
            "add",
            "-i",
            "--install",
            "-S",
            "-U",
            "-Syu",
            "-Sy",
            "localinstall",
        ]),
    ),
];

fn project_runner(basename: &str, args: &[Word]) -> Option<Inspection> {
    let (_, runs) = PROJECT_RUNNERS
        .iter()
        .find(|(names, _)| names.contains(&basename))?;
    if only_info_flags(args) {
        return Some(Inspection::default());
    }
    // Package managers take their action as an option (`dpkg -i`, `pacman -S`) or word.
    let sub = args.iter().find(|a| a.dynamic || !a.text.starts_with('-'));
    let sub_text = sub.map(|s| s.text.as_str());
    let action = args
        .iter()
        .map(|a| a.text.as_str())
        .find(|t| matches!(runs, Runs::Only(list) if list.contains(t)));
    let runs_code = match runs {
        Runs::Always => true,
        Runs::Except(safe) => !sub_text.is_some_and(|s| safe.contains(&s)),
        Runs::Only(_) => action.is_some() || sub.is_some_and(|s| s.dynamic),
    };
    if !runs_code {
        return Some(Inspection::default());
    }
    let what = action
        .or(sub_text)
        .map(|s| format!(" {s}"))
        .unwrap_or_default();
    Some(Inspection::arbitrary(format!(
        "{basename}{what} runs code defined by project files or packages"
    )))
}

/// Tools whose options name a command or library to run.
const COMMAND_OPTIONS: &[(&[&str], &[&str])] = &[
    (
        &["tar", "gtar", "bsdtar"],
        &[
            "--to-command",
            "--checkpoint-action",
            "-I",
            "--use-compress-program",
            "--rsh-command",
            "--info-script",
            "--new-volume-script",
            "-F",
        ],
    ),
    (&["rsync"], &["-e", "--rsh", "--rsync-path"]),
    (&["zip"], &["-TT", "--unzip-command"]),
    (&["scp", "sftp"], &["-S", "-D"]),
    (&["man"], &["-P", "--pager", "-H", "--html"]),
    (&["tcpdump"], &["-z"]),
    (&["nmap"], &["--script"]),
    (
        &["vi", "vim", "nvim", "view", "ex", "vimdiff"],
        &["-c", "--cmd", "-S"],
    ),
    (&["curl", "openssl", "wget"], &["--engine", "-engine"]),
];

fn command_options(basename: &str, args: &[Word]) -> Option<Inspection> {
    let (_, options) = COMMAND_OPTIONS
        .iter()
        .find(|(names, _)| names.contains(&basename))?;
    let mut ins = Inspection::default();
    for a in args.iter().filter(|a| !a.dynamic) {
        let t = a.text.as_str();
        if t == "--" {
            break;
        }
        let hit = options.iter().find(|opt| {
            t == **opt
                || t.strip_prefix(**opt)
                    .is_some_and(|rest| rest.starts_with('='))
                || (opt.len() == 2
                    && !opt.starts_with("--")
                    && t.starts_with(**opt)
                    && !t.starts_with("--"))
        });
        if let Some(opt) = hit {
            ins.set_arbitrary(format!(
                "{basename} {opt} names a command or library to run"
            ));
        }
        if (basename == "scp" || basename == "sftp") && t.contains("ProxyCommand") {
            ins.set_arbitrary(format!("{basename} ProxyCommand runs a local command"));
        }
    }
    Some(ins)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(list: &[&str]) -> Vec<Word> {
        list.iter().map(|s| Word::literal(*s)).collect()
    }

    fn reason(basename: &str, args: &[&str]) -> Option<String> {
        inspect(basename, &w(args)).and_then(|i| i.arbitrary)
    }

    #[test]
    fn shell_modes() {
        let ins = shell("bash", &w(&["-lc", "ls | wc", "name"]));
        assert_eq!(ins.inner, [Inner::Script(Word::literal("ls | wc"))]);
        assert!(shell("sh", &w(&["x.sh"])).arbitrary.is_some());
        assert!(shell("sh", &w(&["-s"])).arbitrary.is_some());
        assert!(shell("bash", &w(&["--version"])).arbitrary.is_none());
        let ins = shell("bash", &w(&["-o", "pipefail", "-c", "true"]));
        assert_eq!(ins.inner, [Inner::Script(Word::literal("true"))]);
    }

    #[test]
    fn interpreters() {
        assert!(reason("python3.12", &["-c", "print(1)"]).is_some_and(|r| r.contains("inline")));
        assert!(reason("perl", &["-lne", "print"]).is_some_and(|r| r.contains("-e")));
        assert!(reason("python3", &["-m", "pytest"]).is_some_and(|r| r.contains("-m")));
        assert!(reason("node", &["app.js"]).is_some_and(|r| r.contains("program file")));
        assert!(reason("ruby", &[]).is_some());
        assert_eq!(reason("python3", &["--version"]), None);
    }

    #[test]
    fn awk_and_sed() {
        assert_eq!(reason("awk", &["-F:", "{print $1}"]), None);
        assert!(reason("gawk", &["BEGIN{system(\"id\")}"]).is_some());
        assert_eq!(reason("sed", &["-n", "s/a/b/p", "f"]), None);
        assert!(reason("sed", &["-e", "1e id", "f"]).is_some());
        let ins = inspect("sed", &w(&["-i", "s/a/b/w log", "f.txt"])).expect("sed");
        let targets: Vec<_> = ins.file_effects.iter().map(|r| r.target.as_str()).collect();
        assert_eq!(targets, ["log", "f.txt"]);
    }

    #[test]
    fn project_runners_and_command_options() {
        assert!(reason("cargo", &["test", "-p", "x"]).is_some());
        assert_eq!(reason("cargo", &["fmt"]), None);
        assert!(reason("npm", &["install"]).is_some());
        assert_eq!(reason("npm", &["ls"]), None);
        assert_eq!(reason("go", &["build", "./..."]), None);
        assert!(reason("dpkg", &["-i", "x.deb"]).is_some());
        assert!(reason("make", &[]).is_some());
        assert!(reason("tar", &["-xf", "a.tar", "--to-command=sh"]).is_some());
        assert!(reason("tar", &["-Igzip", "-cf", "a.tgz", "."]).is_some());
        assert_eq!(reason("tar", &["-czf", "a.tgz", "src"]), None);
        assert!(reason("rsync", &["-e", "ssh -p 2", "a", "b:"]).is_some());
    }

    #[test]
    fn builtins() {
        let ins = inspect("eval", &w(&["ls", "-l;", "id"])).expect("eval");
        assert_eq!(ins.inner, [Inner::Script(Word::literal("ls -l; id"))]);
        assert!(reason("source", &["env.sh"]).is_some());
        let ins = inspect("trap", &w(&["rm -f x", "EXIT"])).expect("trap");
        assert_eq!(ins.inner, [Inner::Script(Word::literal("rm -f x"))]);
    }
}
