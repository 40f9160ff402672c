//! A megabyte of hostile shell costs the Gate little memory and comes out unparsed.
//!
//! Each input is parsed in a child process (this test binary again, run under `prlimit`
//! so that a regression cannot take the machine down), which reports its peak resident
//! memory (`VmHWM`); the parent fails if that exceeds the cap.

use std::process::Command;

use airlock_core::shell::normalize;

/// The child's environment variable naming the input to parse.
const CHILD: &str = "AIRLOCK_BOUNDED_PARSE_CHILD";

/// Most memory a parse may use, as peak resident set of the whole child process.
const CAP_KIB: u64 = 256 * 1024;

/// Address-space limit for the child: far above the cap, far below what the machine has.
const CHILD_ADDRESS_SPACE: &str = "--as=2147483648";

/// One megabyte: under the normalizer's length limit, so the other bounds are what act.
const SIZE: usize = 1_000_000;

/// `open`, repeated, then `middle`, then `close` repeated: about `SIZE` bytes.
fn nested(open: &str, middle: &str, close: &str) -> String {
    let n = SIZE / (open.len() + close.len());
    format!("{}{middle}{}", open.repeat(n), close.repeat(n))
}

fn repeated(unit: &str, tail: &str) -> String {
    format!("{}{tail}", unit.repeat(SIZE / unit.len()))
}

/// The hostile inputs, by name.
fn hostile(name: &str) -> String {
    match name {
        "nested-command-substitution" => nested("$(echo ", "id", ")"),
        "unclosed-command-substitution" => repeated("$(", ""),
        "nested-subshells" => nested("( ", "ls", " )"),
        "nested-quoted-substitution" => nested("\"$(echo ", "id", ")\""),
        "nested-parameter-defaults" => nested("${a:-", "x", "}"),
        "nested-arithmetic" => nested("$((", "1", "))"),
        "nested-groups" => nested("{ ", "ls", "; }"),
        "nested-ifs" => nested("if true; then ", "ls", "; fi"),
        "long-pipeline" => repeated("true | ", "true"),
        "long-and-list" => repeated("true && ", "true"),
        "backquotes" => repeated("`", ""),
        "escaped-backquotes" => repeated("`echo \\`", "`"),
        "many-words" => format!("echo {}", repeated("a ", "")),
        "quote-soup" => repeated("'\"$( ( { `\\", ""),
        "nested-sh-c" => nested("sh -c \"", "id", "\""),
        other => panic!("no hostile input {other}"),
    }
}

const NAMES: &[&str] = &[
    "nested-command-substitution",
    "unclosed-command-substitution",
    "nested-subshells",
    "nested-quoted-substitution",
    "nested-parameter-defaults",
    "nested-arithmetic",
    "nested-groups",
    "nested-ifs",
    "long-pipeline",
    "long-and-list",
    "backquotes",
    "escaped-backquotes",
    "many-words",
    "quote-soup",
    "nested-sh-c",
];

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/self/status")
}

#[test]
fn i2_a_megabyte_of_hostile_shell_is_unparsed_in_bounded_memory() {
    if let Ok(name) = std::env::var(CHILD) {
        let input = hostile(&name);
        assert!(
            input.len() >= SIZE - 64 && input.len() <= airlock_core::shell::MAX_COMMAND_BYTES,
            "{name}: {} bytes",
            input.len()
        );
        let started = std::time::Instant::now();
        let facts = normalize(&input);
        let reason = facts
            .unparsed
            .unwrap_or_else(|| panic!("{name} was parsed; it must be unparsed"));
        println!(
            "PEAK_KIB={} {name}: unparsed in {:?}: {reason}",
            peak_rss_kib(),
            started.elapsed()
        );
        return;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut failures = Vec::new();
    for name in NAMES {
        let out = Command::new("prlimit")
            .arg(CHILD_ADDRESS_SPACE)
            .arg("--")
            .arg(&exe)
            .args([
                "--exact",
                "bounded_parse::i2_a_megabyte_of_hostile_shell_is_unparsed_in_bounded_memory",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, name)
            .output()
            .expect("prlimit runs the test binary");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let peak = stdout
            .lines()
            .find_map(|l| l.split_once("PEAK_KIB=").map(|(_, rest)| rest))
            .and_then(|l| l.split(' ').next())
            .and_then(|v| v.parse::<u64>().ok());
        match peak {
            Some(kib) if out.status.success() && kib <= CAP_KIB => {
                eprintln!("{name}: peak {kib} KiB");
            }
            _ => failures.push(format!(
                "{name}: status {}, peak {peak:?} KiB (cap {CAP_KIB})\n{stdout}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            )),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
