//! Reading `strace -f -e trace=execve,execveat,clone,clone3,fork,vfork -o FILE` output: the
//! programs the payload executed successfully, each with the program that executed it.

use std::collections::HashMap;

/// One successful `execve`/`execveat`: what it ran, and the programs that led to the call:
/// the program the calling process was running then (inherited from its parent at
/// `fork`), then the one before it, back to the first the trace shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Executed {
    pub path: String,
    /// Most recent first; empty when the trace does not show where the process came from.
    pub by: Vec<String>,
}

/// One `execve`/`execveat` call: who made it, what it ran, and whether it succeeded.
struct Exec<'a> {
    pid: &'a str,
    path: String,
    /// The call's argument text, for telling the harness's shell from the command's.
    args: String,
}

/// A trace event that matters for who ran what, in the order the trace shows them.
enum Event<'a> {
    Exec(Exec<'a>),
    /// `parent` created `child` (a `fork`, `vfork`, `clone` or `clone3` that returned).
    Spawn {
        parent: &'a str,
        child: &'a str,
    },
}

const SPAWNS: [&str; 4] = ["clone(", "clone3(", "fork(", "vfork("];

/// The programs executed after the sandbox started the payload, in order: the helper
/// (`/proc/self/fd/N`) and the harness binary are left out, and so is the payload's
/// own `/bin/bash --noprofile --norc -c` (the shell the Gate's parse describes). A
/// directly executed command (no shell) is the first program.
pub fn payload_execs(text: &str) -> Vec<Executed> {
    let mut pending: HashMap<&str, Exec> = HashMap::new();
    let mut events: Vec<Event> = Vec::new();
    for line in text.lines() {
        let Some((pid, rest)) = line.split_once(' ') else {
            continue;
        };
        let rest = rest.trim_start();
        if let Some(call) = rest
            .strip_prefix("execve(")
            .or_else(|| rest.strip_prefix("execveat("))
        {
            let Some(path) = first_string(call) else {
                continue;
            };
            let exec = Exec {
                pid,
                path,
                args: call.to_string(),
            };
            if rest.ends_with("<unfinished ...>") {
                pending.insert(pid, exec);
            } else if succeeded(rest) {
                events.push(Event::Exec(exec));
            }
        } else if rest.starts_with("<... execve resumed>")
            || rest.starts_with("<... execveat resumed>")
        {
            if let Some(exec) = pending.remove(pid) {
                if succeeded(rest) {
                    events.push(Event::Exec(exec));
                }
            }
        } else if SPAWNS.iter().any(|c| rest.starts_with(c))
            || ["clone", "clone3", "fork", "vfork"]
                .iter()
                .any(|c| rest.starts_with(&format!("<... {c} resumed>")))
        {
            if let Some(child) = returned_pid(rest) {
                events.push(Event::Spawn { parent: pid, child });
            }
        }
    }
    // A child's first exec can appear in the trace before its parent's `clone` returns:
    // learn every parent first, then follow the programs in order.
    let parents: HashMap<&str, &str> = events
        .iter()
        .filter_map(|e| match e {
            Event::Spawn { parent, child } => Some((*child, *parent)),
            Event::Exec(_) => None,
        })
        .collect();
    // Each process's programs, most recent first, back to the first the trace shows.
    let mut program: HashMap<&str, Vec<String>> = HashMap::new();
    let running = |program: &HashMap<&str, Vec<String>>, pid: &str| -> Vec<String> {
        let mut at = pid;
        for _ in 0..64 {
            if let Some(p) = program.get(at) {
                return p.clone();
            }
            match parents.get(at) {
                Some(parent) => at = parent,
                None => break,
            }
        }
        Vec::new()
    };
    let mut out = Vec::new();
    let mut payload_started = false;
    for event in events {
        let Event::Exec(exec) = event else { continue };
        let by = running(&program, exec.pid);
        let mut chain = vec![exec.path.clone()];
        chain.extend(by.iter().cloned());
        program.insert(exec.pid, chain);
        if exec.path.starts_with("/proc/self/fd/") || exec.path.ends_with("/sandbox-run") {
            continue;
        }
        if !payload_started {
            payload_started = true;
            // The shell the sandbox runs the command with (`/bin/bash`; an older sandbox
            // used `/bin/sh`), not one the command started.
            let harness_shell = (exec.path == "/bin/bash" || exec.path == "/bin/sh")
                && exec
                    .args
                    .starts_with(&format!("\"{}\", [\"{}\", ", exec.path, exec.path));
            if harness_shell {
                continue;
            }
        }
        out.push(Executed {
            path: exec.path,
            by,
        });
    }
    out
}

/// The pid a successful `clone`/`fork` returned, as strace names processes. Inside the
/// sandbox's PID namespace the call returns the namespace's pid, so the trace is taken
/// with `--decode-pids=pidns`, which adds strace's own (`… = 2 /* 12655 in strace's PID
/// NS */`); without that comment the returned pid is strace's already.
fn returned_pid(line: &str) -> Option<&str> {
    let (_, ret) = line.trim_end().rsplit_once("= ")?;
    let ret = match ret.split_once("/* ") {
        Some((_, translated)) => translated.split_whitespace().next()?,
        None => ret.split_whitespace().next()?,
    };
    (ret.bytes().all(|b| b.is_ascii_digit()) && ret != "0").then_some(ret)
}

fn succeeded(line: &str) -> bool {
    line.trim_end().ends_with("= 0")
}

/// The first C string literal in `call` (strace escapes `"` and `\` inside it).
fn first_string(call: &str) -> Option<String> {
    let start = call.find('"')? + 1;
    let mut out = String::new();
    let mut chars = call[start..].chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(chars.next()?),
            '"' => return Some(out),
            _ => out.push(c),
        }
    }
    None
}

#[test]
fn strace_output_gives_the_payloads_programs() {
    let text = r#"1 execve("/t/examples/sandbox-run", ["sandbox-run"], 0x1 /* 9 vars */) = 0
1 clone3({flags=CLONE_VM|CLONE_VFORK, exit_signal=SIGCHLD, stack=0x1, stack_size=0x9000}, 88) = 2
2 execve("/proc/self/fd/11", ["airlock-sandbox-init"], 0x2 /* 0 vars */) = 0
2 clone(child_stack=NULL, flags=CLONE_NEWPID|SIGCHLD) = 3
3 execve("/bin/bash", ["/bin/bash", "--noprofile", "--norc", "-c", "ls | cpan"], 0x3 /* 4 vars */) = 0
3 clone(child_stack=NULL, flags=CLONE_CHILD_SETTID|SIGCHLD <unfinished ...>
4 execve("/usr/local/bin/cpan", ["cpan"], 0x4 /* 7 vars */) = -1 ENOENT (No such file or directory)
4 execve("/usr/bin/cpan", ["cpan"], 0x4 /* 7 vars */ <unfinished ...>
3 <... clone resumed>, child_tidptr=0x7f) = 4
3 clone(child_stack=NULL, flags=CLONE_CHILD_SETTID|SIGCHLD) = 2 /* 5 in strace's PID NS */
5 execve("/usr/bin/ls", ["ls"], 0x5 /* 7 vars */) = 0
4 <... execve resumed>) = 0
4 vfork() = 6
6 execve("/bin/pwd", ["/bin/pwd"], 0x6 /* 7 vars */) = 0"#;
    let by = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let shell = ["/bin/bash", "/proc/self/fd/11", "/t/examples/sandbox-run"];
    let perl = [
        "/usr/bin/cpan",
        "/bin/bash",
        "/proc/self/fd/11",
        "/t/examples/sandbox-run",
    ];
    let execs = |path: &str, chain: &[&str]| Executed {
        path: path.into(),
        by: by(chain),
    };
    assert_eq!(
        payload_execs(text),
        [
            execs("/usr/bin/ls", &shell),
            execs("/usr/bin/cpan", &shell),
            execs("/bin/pwd", &perl),
        ]
    );
    let direct = "2 execve(\"/proc/self/fd/11\", [\"init\"], 0x2) = 0\n3 execve(\"/usr/bin/ls\", [\"ls\"], 0x3) = 0\n";
    assert_eq!(
        payload_execs(direct),
        // No `clone` line: where pid 3 came from is unknown, and nothing is assumed.
        [execs("/usr/bin/ls", &[])]
    );
}
