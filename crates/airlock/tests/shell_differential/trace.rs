//! Reading `strace -f -e trace=execve,execveat -o FILE` output: the programs the payload
//! executed successfully.

use std::collections::HashMap;

/// One `execve`/`execveat` call: who made it, what it ran, and whether it succeeded.
struct Exec {
    path: String,
    /// The call's argument text, for telling the harness's shell from the command's.
    args: String,
}

/// The programs executed after the sandbox started the payload, in order: the helper
/// (`/proc/self/fd/N`) and the harness binary are left out, and so is the payload's
/// own `/bin/bash --noprofile --norc -c` (the shell the Gate's parse describes). A
/// directly executed command (no shell) is the first program.
pub fn payload_execs(text: &str) -> Vec<String> {
    let mut pending: HashMap<&str, Exec> = HashMap::new();
    let mut done: Vec<Exec> = Vec::new();
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
                path,
                args: call.to_string(),
            };
            if rest.ends_with("<unfinished ...>") {
                pending.insert(pid, exec);
            } else if succeeded(rest) {
                done.push(exec);
            }
        } else if rest.starts_with("<... execve resumed>")
            || rest.starts_with("<... execveat resumed>")
        {
            if let Some(exec) = pending.remove(pid) {
                if succeeded(rest) {
                    done.push(exec);
                }
            }
        }
    }
    let mut out = Vec::new();
    let mut payload_started = false;
    for exec in done {
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
        out.push(exec.path);
    }
    out
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
2 execve("/proc/self/fd/11", ["airlock-sandbox-init"], 0x2 /* 0 vars */) = 0
3 execve("/bin/bash", ["/bin/bash", "--noprofile", "--norc", "-c", "ls | wc"], 0x3 /* 4 vars */) = 0
4 execve("/usr/local/bin/wc", ["wc"], 0x4 /* 7 vars */) = -1 ENOENT (No such file or directory)
4 execve("/usr/bin/wc", ["wc"], 0x4 /* 7 vars */ <unfinished ...>
5 execve("/usr/bin/ls", ["ls"], 0x5 /* 7 vars */) = 0
4 <... execve resumed>) = 0"#;
    assert_eq!(payload_execs(text), ["/usr/bin/ls", "/usr/bin/wc"]);
    let direct = "2 execve(\"/proc/self/fd/11\", [\"init\"], 0x2) = 0\n3 execve(\"/usr/bin/ls\", [\"ls\"], 0x3) = 0\n";
    assert_eq!(payload_execs(direct), ["/usr/bin/ls"]);
}
