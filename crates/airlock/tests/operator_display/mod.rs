//! What the operator is asked to approve is what runs: a command carrying terminal
//! controls (ESC sequences that erase a line, CR, C1 controls, bidi overrides and
//! isolates, a newline) is shown at the `airlock exec` approval prompt with every one of
//! them visible, on a real terminal (a pseudo-terminal from `script`).

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Characters a terminal obeys instead of showing (newline aside).
pub fn is_raw_control(c: char) -> bool {
    (c.is_control() && c != '\n')
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
        || ('\u{200b}'..='\u{200f}').contains(&c)
        || c == '\u{feff}'
}

#[test]
fn i6_the_exec_approval_prompt_shows_every_hidden_part_of_the_command() {
    let home = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let hostile = "rm -rf ./x \u{1b}[2K\rls -la \u{202e}fdp.exe\u{2066} \u{9b}2K\u{7f}\nls";
    let mut child = Command::new("script")
        // `script` gives the command a pseudo-terminal, as an operator's shell would.
        .args([
            "-qec",
            "\"$AIRLOCK\" exec --profile strict -- \"$HOSTILE\"",
            "/dev/null",
        ])
        .env("AIRLOCK", env!("CARGO_BIN_EXE_airlock"))
        .env("AIRLOCK_HOME", home.path())
        .env("HOSTILE", hostile)
        .current_dir(ws.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("`script` (util-linux) runs the prompt on a pseudo-terminal");
    child.stdin.take().unwrap().write_all(b"n\n").unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(start.elapsed() < Duration::from_secs(60), "the prompt hung");
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = child.wait_with_output().unwrap();
    // The terminal itself turns each `\n` into `\r\n`; any other CR came from the command.
    let out = String::from_utf8_lossy(&o.stdout).replace("\r\n", "\n");
    assert!(out.contains("approval needed"), "no prompt:\n{out:?}");
    assert!(out.contains("did not run"), "{out:?}");
    if let Some(c) = out.chars().find(|&c| is_raw_control(c)) {
        panic!("raw {c:?} reached the terminal:\n{out:?}");
    }
    let shown = out
        .lines()
        .find(|l| l.trim_start().starts_with("command:"))
        .unwrap_or_else(|| panic!("no command line:\n{out}"));
    assert_eq!(
        shown.trim_start(),
        "command: rm -rf ./x \\u{1b}[2K\\rls -la \\u{202e}fdp.exe\\u{2066} \\u{9b}2K\\u{7f}\\nls",
        "{out}"
    );
    assert!(!ws.path().join("x").exists());
}
