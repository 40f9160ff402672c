//! Command-running commands: programs whose operands are themselves a command
//! (`env`, `sudo`, `timeout`, `xargs`, `find -exec`, `su -c`, `watch`, …).
//!
//! Most wrappers share one shape — options, a fixed number of leading operands, then
//! the command — and are described by a [`Spec`] row. Those with their own grammar
//! (`env`, `sudo`, `find`, `xargs`, `watch`, `flock`, `parallel`, `busybox`, `sg`) have
//! a function each.

use super::inspection::{env_assignment_name, join_script, Inner, Inspection};
use super::options::{scan, OptionSyntax, Scan};
use super::words::Word;
use super::RedirectKind;

/// A wrapper of the common shape.
struct Spec {
    names: &'static [&'static str],
    syntax: OptionSyntax,
    /// Operands before the command (`timeout DURATION`, `chroot NEWROOT`, `taskset MASK`).
    leading_operands: usize,
    /// Options with which the wrapper runs no command (`command -v`, `taskset -p`).
    no_run_options: &'static [&'static str],
    /// Options whose value is a shell command string (`su -c`, `script -c`).
    script_options: &'static [&'static str],
    /// What runs when no command is given: `Some(reason)` if a shell starts.
    without_command: Option<&'static str>,
}

const fn syntax(short: &'static str, long: &'static [&'static str]) -> OptionSyntax {
    OptionSyntax {
        short_with_arg: short,
        long_with_arg: long,
        single_dash_long_with_arg: &[],
        permute: false,
    }
}

const STARTS_SHELL: Option<&str> = Some("starts an interactive shell");

const SPECS: &[Spec] = &[
    Spec {
        names: &["nice"],
        syntax: syntax("n", &["adjustment"]),
        leading_operands: 0,
        no_run_options: &[],
        script_options: &[],
        without_command: None,
    },
    Spec {
        names: &["ionice"],
        syntax: syntax("cnpPu", &["class", "classdata", "pid", "pgid", "uid"]),
        leading_operands: 0,
        no_run_options: &["-p", "-P", "-u", "--pid", "--pgid", "--uid"],
        script_options: &[],
        without_command: None,
    },
    Spec {
        names: &["timeout"],
        syntax: syntax("sk", &["signal", "kill-after"]),
        leading_operands: 1,
        no_run_options: &[],
        script_options: &[],
        without_command: None,
    },
    Spec {
        names: &[
            "nohup",
            "builtin",
            "setsid",
            "catchsegv",
            "unbuffer",
            "chronic",
            "dbus-run-session",
            "caffeinate",
            "torsocks",
            "proxychains",
            "proxychains4",
            "tsocks",
            "valgrind",
            "xvfb-run",
            "firejail",
            "aa-exec",
            "linux32",
            "linux64",
            "setarch-run",
        ],
        syntax: syntax("", &[]),
        leading_operands: 0,
        no_run_options: &[],
        script_options: &[],
        without_command: None,
    },
    Spec {
        names: &["stdbuf"],
        syntax: syntax("ioe", &["input", "output", "error"]),
        leading_operands: 0,
        no_run_options: &[],
        script_options: &[],
        without_command: None,
    },
    Spec {
        names: &["time"],
        syntax: syntax("fo", &["format", "output"]),
        leading_operands: 0,
        no_run_options: &[],
        script_options: &[],
        without_command: None,
    },
    Spec {
        names: &["command"],
        syntax: syntax("", &[]),
        leading_operands: 0,
        no_run_options: &["-v", "-V"],
        script_options: &[],
        without_command: None,
    },
    Spec {
        names: &["exec"],
        syntax: syntax("a", &[]),
        leading_operands: 0,
        no_run_options: &[],
        script_options: &[],
        without_command: None,
    },
    Spec {
        names: &["doas"],
        syntax: syntax("uC", &[]),
        leading_operands: 0,
        no_run_options: &["-C"],
        script_options: &[],
        without_command: None,
    },
    Spec {
        names: &["su", "runuser"],
        syntax: OptionSyntax {
            short_with_arg: "cgGsuw",
            long_with_arg: &[
                "command",
                "session-command",
                "shell",
                "group",
                "supp-group",
                "user",
                "whitelist-environment",
            ],
            single_dash_long_with_arg: &[],
            permute: true,
        },
        leading_operands: usize::MAX,
        no_run_options: &[],
        script_options: &["-c", "--command", "--session-command"],
        without_command: STARTS_SHELL,
    },
    Spec {
        names: &["chroot"],
        syntax: syntax("", &["userspec", "groups"]),
        leading_operands: 1,
        no_run_options: &[],
        script_options: &[],
        without_command: STARTS_SHELL,
    },
    Spec {
        names: &["taskset"],
        syntax: syntax("", &[]),
        leading_operands: 1,
        no_run_options: &["-p", "--pid"],
        script_options: &[],
        without_command: None,
    },
    Spec {
        names: &["chrt"],
        syntax: syntax("T", &["sched-runtime", "sched-period", "sched-deadline"]),
        leading_operands: 1,
        no_run_options: &["-p", "--pid", "-m", "--max"],
        script_options: &[],
        without_command: None,
    },
    Spec {
        names: &["unshare"],
        syntax: syntax(
            "SGRwC",
            &[
                "setuid",
                "setgid",
                "root",
                "wd",
                "map-user",
                "map-group",
                "map-users",
                "map-groups",
                "propagation",
                "setgroups",
            ],
        ),
        leading_operands: 0,
        no_run_options: &[],
        script_options: &[],
        without_command: STARTS_SHELL,
    },
    Spec {
        names: &["nsenter"],
        syntax: syntax("tSG", &["target", "setuid", "setgid", "env"]),
        leading_operands: 0,
        no_run_options: &[],
        script_options: &[],
        without_command: STARTS_SHELL,
    },
    Spec {
        names: &["script"],
        syntax: OptionSyntax {
            short_with_arg: "cOIBTEom",
            long_with_arg: &[
                "command",
                "log-out",
                "log-in",
                "log-io",
                "log-timing",
                "echo",
                "output-limit",
                "logging-format",
            ],
            single_dash_long_with_arg: &[],
            permute: true,
        },
        leading_operands: usize::MAX,
        no_run_options: &[],
        script_options: &["-c", "--command"],
        without_command: STARTS_SHELL,
    },
    Spec {
        names: &["strace"],
        syntax: syntax("abeEIoOpPsSuUX", &[]),
        leading_operands: 0,
        no_run_options: &[],
        script_options: &[],
        without_command: None,
    },
    Spec {
        names: &["ltrace"],
        syntax: syntax("aAeEFlnopsSuwx", &[]),
        leading_operands: 0,
        no_run_options: &[],
        script_options: &[],
        without_command: None,
    },
    Spec {
        names: &["systemd-run"],
        syntax: syntax(
            "pEMH",
            &[
                "unit",
                "property",
                "description",
                "slice",
                "uid",
                "gid",
                "nice",
                "working-directory",
                "setenv",
                "machine",
                "host",
            ],
        ),
        leading_operands: 0,
        no_run_options: &[],
        script_options: &[],
        without_command: None,
    },
    Spec {
        names: &["pkexec"],
        syntax: syntax("", &["user"]),
        leading_operands: 0,
        no_run_options: &[],
        script_options: &[],
        without_command: STARTS_SHELL,
    },
    Spec {
        names: &["fakeroot"],
        syntax: syntax("sil", &["lib", "faked"]),
        leading_operands: 0,
        no_run_options: &[],
        script_options: &[],
        without_command: STARTS_SHELL,
    },
];

/// Inspect `basename args…` if it is a wrapper.
pub(crate) fn inspect(basename: &str, args: &[Word]) -> Option<Inspection> {
    match basename {
        "env" => Some(env(args)),
        "sudo" => Some(sudo(args)),
        "find" => Some(find(args)),
        "xargs" => Some(xargs(args)),
        "watch" => Some(watch(args)),
        "flock" => Some(flock(args)),
        "parallel" => Some(parallel(args)),
        "busybox" => Some(busybox(args)),
        "sg" => Some(sg(args)),
        _ => SPECS
            .iter()
            .find(|s| s.names.contains(&basename))
            .map(|spec| by_spec(spec, args)),
    }
}

fn by_spec(spec: &Spec, args: &[Word]) -> Inspection {
    let scan = scan(args, &spec.syntax);
    let mut ins = Inspection::default();
    if let Some(opt) = scan.find(spec.script_options) {
        ins.own_args = Some(args.to_vec());
        match &opt.value {
            Some(script) => ins.inner.push(Inner::Script(script.clone())),
            None => ins.set_arbitrary(format!("{} without its command string", opt.name)),
        }
        return ins;
    }
    if scan.has(spec.no_run_options) {
        ins.own_args = Some(args.to_vec());
        return ins;
    }
    let start = if spec.leading_operands == usize::MAX {
        // The operands are not a command (`su USER`); only the script option runs one.
        args.len()
    } else {
        scan.operands
            .get(spec.leading_operands)
            .copied()
            .unwrap_or(args.len())
    };
    command_from(&mut ins, args, start, spec.without_command);
    ins
}

/// Record `args[start..]` as the wrapped command, or the no-command behaviour.
fn command_from(ins: &mut Inspection, args: &[Word], start: usize, without: Option<&str>) {
    let start = start.min(args.len());
    ins.own_args = Some(args[..start].to_vec());
    if start < args.len() {
        ins.inner.push(Inner::Argv(args[start..].to_vec()));
    } else if let Some(reason) = without {
        ins.set_arbitrary(reason);
    }
}

fn env(args: &[Word]) -> Inspection {
    let scan = scan(
        args,
        &syntax(
            "uCS",
            &[
                "unset",
                "chdir",
                "split-string",
                "default-signal",
                "ignore-signal",
            ],
        ),
    );
    let mut ins = Inspection::default();
    let mut start = scan.first_operand;
    while let Some(name) = args.get(start).and_then(env_assignment_name) {
        ins.assignments.push(name.to_string());
        start += 1;
    }
    if let Some(opt) = scan.find(&["-S", "--split-string"]) {
        // `env -S` splits with its own quoting and `${VAR}` rules; the shell parse is
        // the nearest view, and the difference is why it stays arbitrary.
        ins.set_arbitrary("env -S splits a command string by its own rules");
        if let Some(script) = &opt.value {
            let mut words = vec![script.clone()];
            words.extend_from_slice(&args[start.min(args.len())..]);
            ins.own_args = Some(args[..start.min(args.len())].to_vec());
            ins.inner.push(Inner::Script(join_script(&words)));
            return ins;
        }
    }
    command_from(&mut ins, args, start, None);
    ins
}

fn sudo(args: &[Word]) -> Inspection {
    let scan = scan(
        args,
        &syntax(
            "ugCDprtTUh",
            &[
                "user",
                "group",
                "close-from",
                "chdir",
                "host",
                "prompt",
                "role",
                "type",
                "command-timeout",
                "other-user",
                "chroot",
            ],
        ),
    );
    let mut ins = Inspection::default();
    if scan.has(&[
        "-l",
        "-v",
        "-k",
        "-K",
        "-e",
        "-V",
        "--list",
        "--validate",
        "--reset-timestamp",
        "--remove-timestamp",
        "--edit",
        "--version",
        "--help",
    ]) && scan.first_operand >= args.len()
    {
        ins.own_args = Some(args.to_vec());
        return ins;
    }
    let mut start = scan.first_operand;
    while let Some(name) = args.get(start).and_then(env_assignment_name) {
        ins.assignments.push(name.to_string());
        start += 1;
    }
    let shell = scan.has(&["-s", "-i", "--shell", "--login"]);
    command_from(
        &mut ins,
        args,
        start,
        if shell { STARTS_SHELL } else { None },
    );
    ins
}

/// `find … -exec CMD … ;` and its siblings; also `-fprint FILE` style writes.
fn find(args: &[Word]) -> Inspection {
    let mut ins = Inspection::default();
    let mut own = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        let text = if arg.dynamic { "" } else { arg.text.as_str() };
        match text {
            "-exec" | "-execdir" | "-ok" | "-okdir" => {
                own.push(arg.clone());
                let mut cmd = Vec::new();
                i += 1;
                while i < args.len() {
                    let w = &args[i];
                    let end = !w.dynamic
                        && (w.text == ";"
                            || (w.text == "+"
                                && cmd.last().is_some_and(|p: &Word| p.text == "{}")));
                    if end {
                        break;
                    }
                    cmd.push(w.clone());
                    i += 1;
                }
                if let Some(terminator) = args.get(i) {
                    own.push(terminator.clone());
                }
                if cmd.is_empty() {
                    ins.set_arbitrary(format!("find {text} without a command"));
                } else {
                    ins.inner.push(Inner::Argv(cmd));
                }
            }
            "-fprint" | "-fprint0" | "-fprintf" | "-fls" => {
                own.push(arg.clone());
                if let Some(target) = args.get(i + 1) {
                    ins.file(RedirectKind::Write, target);
                    own.push(target.clone());
                    i += 1;
                }
            }
            _ => own.push(arg.clone()),
        }
        i += 1;
    }
    ins.own_args = Some(own);
    ins
}

fn xargs(args: &[Word]) -> Inspection {
    let scan = scan(
        args,
        &syntax(
            "aEdILnPs",
            &[
                "arg-file",
                "delimiter",
                "max-args",
                "max-procs",
                "max-chars",
                "process-slot-var",
            ],
        ),
    );
    let mut ins = Inspection::default();
    if scan.first_operand >= args.len() {
        // No command: xargs runs `echo`.
        ins.own_args = Some(args.to_vec());
        ins.inner.push(Inner::Argv(vec![Word::literal("echo")]));
        return ins;
    }
    command_from(&mut ins, args, scan.first_operand, None);
    ins
}

fn watch(args: &[Word]) -> Inspection {
    let scan = scan(args, &syntax("nq", &["interval", "equexit"]));
    let mut ins = Inspection::default();
    let start = scan.first_operand.min(args.len());
    ins.own_args = Some(args[..start].to_vec());
    if start >= args.len() {
        return ins;
    }
    if scan.has(&["-x", "--exec"]) {
        ins.inner.push(Inner::Argv(args[start..].to_vec()));
    } else {
        // Without -x, watch joins its arguments and runs them with `sh -c`.
        ins.inner.push(Inner::Script(join_script(&args[start..])));
    }
    ins
}

fn flock(args: &[Word]) -> Inspection {
    let scan: Scan = scan(
        args,
        &syntax("wE", &["timeout", "wait", "conflict-exit-code"]),
    );
    let mut ins = Inspection::default();
    let file = scan.first_operand;
    let after = file + 1;
    match args.get(after) {
        Some(w) if !w.dynamic && (w.text == "-c" || w.text == "--command") => {
            ins.own_args = Some(args[..after + 1].to_vec());
            match args.get(after + 1) {
                Some(script) => ins.inner.push(Inner::Script(script.clone())),
                None => ins.set_arbitrary("flock -c without its command string"),
            }
        }
        _ => command_from(&mut ins, args, after, None),
    }
    ins
}

fn parallel(args: &[Word]) -> Inspection {
    let scan = scan(
        args,
        &syntax(
            "jSadCEInNLs",
            &[
                "jobs",
                "sshlogin",
                "arg-file",
                "delimiter",
                "colsep",
                "replace",
                "max-args",
                "max-lines",
                "max-chars",
                "results",
                "joblog",
                "timeout",
            ],
        ),
    );
    let mut ins = Inspection::default();
    let start = scan.first_operand.min(args.len());
    ins.own_args = Some(args[..start].to_vec());
    let end = args[start..]
        .iter()
        .position(|w| !w.dynamic && w.text.starts_with(":::"))
        .map_or(args.len(), |p| start + p);
    if start >= end {
        ins.set_arbitrary("parallel runs commands read from its input");
    } else {
        // GNU parallel composes a shell command line from its template.
        ins.inner
            .push(Inner::Script(join_script(&args[start..end])));
    }
    ins
}

fn busybox(args: &[Word]) -> Inspection {
    let mut ins = Inspection::default();
    let start = args
        .iter()
        .position(|w| w.dynamic || !w.text.starts_with('-'))
        .unwrap_or(args.len());
    command_from(&mut ins, args, start, None);
    ins
}

/// `sg GROUP [-c] COMMAND`: the command is a string run by `/bin/sh -c`.
fn sg(args: &[Word]) -> Inspection {
    let mut ins = Inspection::default();
    let mut rest: Vec<Word> = args.iter().skip(1).cloned().collect();
    if rest.first().is_some_and(|w| !w.dynamic && w.text == "-c") {
        rest.remove(0);
    }
    ins.own_args = Some(args.iter().take(1).cloned().collect());
    if rest.is_empty() {
        ins.set_arbitrary(STARTS_SHELL.unwrap_or_default());
    } else {
        ins.inner.push(Inner::Script(join_script(&rest)));
    }
    ins
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(list: &[&str]) -> Vec<Word> {
        list.iter().map(|s| Word::literal(*s)).collect()
    }

    fn argv(ins: &Inspection) -> Vec<String> {
        match ins.inner.first() {
            Some(Inner::Argv(words)) => words.iter().map(|w| w.text.clone()).collect(),
            other => panic!("expected argv, got {other:?}"),
        }
    }

    #[test]
    fn common_shape_wrappers() {
        let ins = inspect("timeout", &w(&["-s", "KILL", "5", "ls", "-l"])).expect("wrapper");
        assert_eq!(argv(&ins), ["ls", "-l"]);
        let ins = inspect("nice", &w(&["-n", "10", "make", "-j4"])).expect("wrapper");
        assert_eq!(argv(&ins), ["make", "-j4"]);
        let ins = inspect("command", &w(&["-v", "ls"])).expect("wrapper");
        assert!(ins.inner.is_empty());
        let ins = inspect("chroot", &w(&["/srv"])).expect("wrapper");
        assert!(ins.arbitrary.is_some());
    }

    #[test]
    fn env_skips_options_and_assignments() {
        let ins = inspect("env", &w(&["-i", "-u", "X", "A=1", "B=2", "ls"])).expect("wrapper");
        assert_eq!(argv(&ins), ["ls"]);
        assert_eq!(ins.assignments, ["A", "B"]);
    }

    #[test]
    fn su_command_string() {
        let ins = inspect("su", &w(&["root", "-c", "id; ls"])).expect("wrapper");
        assert_eq!(ins.inner, [Inner::Script(Word::literal("id; ls"))]);
        assert!(inspect("su", &w(&["-"]))
            .expect("wrapper")
            .arbitrary
            .is_some());
    }

    #[test]
    fn find_exec_segments() {
        let ins = inspect(
            "find",
            &w(&[
                ".", "-name", "*.o", "-exec", "rm", "-f", "{}", ";", "-execdir", "x", "{}", "+",
            ]),
        )
        .expect("wrapper");
        assert_eq!(ins.inner.len(), 2);
        assert_eq!(argv(&ins), ["rm", "-f", "{}"]);
        let own: Vec<String> = ins
            .own_args
            .unwrap_or_default()
            .iter()
            .map(|w| w.text.clone())
            .collect();
        assert_eq!(own, [".", "-name", "*.o", "-exec", ";", "-execdir", "+"]);
    }

    #[test]
    fn xargs_and_watch() {
        let ins = inspect("xargs", &w(&["-0", "-n", "1", "-I{}", "grep", "x"])).expect("wrapper");
        assert_eq!(argv(&ins), ["grep", "x"]);
        let ins = inspect("xargs", &w(&["-0"])).expect("wrapper");
        assert_eq!(argv(&ins), ["echo"]);
        let ins = inspect("watch", &w(&["-n", "1", "ls", "|", "wc"])).expect("wrapper");
        assert_eq!(ins.inner, [Inner::Script(Word::literal("ls | wc"))]);
    }
}
