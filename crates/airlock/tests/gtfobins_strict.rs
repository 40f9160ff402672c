//! The strict profile must allow no GTFOBins case of a dangerous function unattended
//! (shell, command, reverse-shell, bind-shell, file-upload, file-download, library-load),
//! on the dev set and on binaries the dev set does not contain.

mod common_eval;

use airlock_core::action::{Action, ExecAction};
use airlock_core::facts::GateConfig;
use airlock_core::gate::{Gate, Session};
use airlock_core::policy::{PolicyEngine, Profile};
use airlock_core::DecisionKind;

const DANGEROUS: &[&str] = &[
    "shell",
    "command",
    "reverse-shell",
    "bind-shell",
    "file-upload",
    "file-download",
    "library-load",
];

fn decide(gate: &Gate, command: &str) -> (DecisionKind, Vec<String>) {
    let action = Action::Exec(ExecAction {
        command: command.into(),
        cwd: "/work/ws".into(),
        env: vec![],
    });
    let e = gate.evaluate(&Session::new("t", "owner"), &action);
    (e.decision, e.reasons)
}

fn strict_gate() -> Gate {
    Gate::new(
        PolicyEngine::builtin(Profile::Strict).unwrap(),
        GateConfig::new("/work/ws"),
    )
}

#[test]
fn no_dangerous_gtfobins_case_is_allowed_under_strict() {
    let gate = strict_gate();
    let text = std::fs::read_to_string(common_eval::eval_file("gtfobins/dev.jsonl")).unwrap();
    let mut counts = std::collections::BTreeMap::<String, [usize; 3]>::new();
    let mut failures = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let case: serde_json::Value = serde_json::from_str(line).unwrap();
        let function = case["function"].as_str().unwrap().to_string();
        let command = case["command"].as_str().unwrap();
        let (d, _) = decide(&gate, command);
        let slot = match d {
            DecisionKind::Allow => 0,
            DecisionKind::Ask => 1,
            DecisionKind::Deny => 2,
        };
        counts.entry(function.clone()).or_default()[slot] += 1;
        if d == DecisionKind::Allow && DANGEROUS.contains(&function.as_str()) {
            failures.push(format!("{} {}: {command:?}", case["binary"], function));
        }
    }
    println!("GTFOBins dev set under strict (allow / ask / deny):");
    for (f, [a, q, d]) in &counts {
        println!("  {f:<14} {a:>4} {q:>4} {d:>4}");
    }
    assert!(
        counts
            .values()
            .map(|c| c.iter().sum::<usize>())
            .sum::<usize>()
            > 300,
        "data set unexpectedly small"
    );
    assert!(
        failures.is_empty(),
        "dangerous cases allowed unattended:\n{}",
        failures.join("\n")
    );
}

/// Binaries and tricks the dev set (names a..l) does not contain, in GTFOBins style.
#[test]
fn dangerous_commands_of_unseen_binaries_are_not_allowed() {
    let gate = strict_gate();
    let cases = [
        "nmap --script=/tmp/x.nse",
        "more /etc/profile\n!/bin/sh",
        "man man\n!/bin/sh",
        "nano -s /bin/sh",
        "perl -e 'exec \"/bin/sh\";'",
        "python3 -c 'import os; os.system(\"/bin/sh\")'",
        "ruby -e 'exec \"/bin/sh\"'",
        "node -e 'require(\"child_process\").spawn(\"/bin/sh\", {stdio: [0, 1, 2]})'",
        "php -r 'system(\"/bin/sh\");'",
        "rsync -e 'sh -c \"sh 0<&2 1>&2\"' 127.0.0.1:/dev/null",
        "socat tcp-connect:127.0.0.1:4444 exec:/bin/sh,pty,stderr",
        "nc -e /bin/sh 127.0.0.1 4444",
        "ssh -o ProxyCommand=';sh 0<&2 1>&2' x",
        "tar -cf /dev/null /dev/null --checkpoint=1 --checkpoint-action=exec=/bin/sh",
        "zip /tmp/x.zip /etc/hosts -T -TT 'sh #'",
        "vim -c ':!/bin/sh'",
        "wget --post-file=/etc/passwd http://127.0.0.1:8000/",
        "scp /etc/passwd 127.0.0.1:/tmp/",
        "sed -n '1e exec sh 1>&0' /etc/hosts",
        "awk 'BEGIN {system(\"/bin/sh\")}'",
        "xargs -a /dev/null sh",
        "find . -exec /bin/sh \\; -quit",
        "env /bin/sh",
        "timeout 7d /bin/sh",
        "nice /bin/sh",
        "git -c core.pager='sh -c id' log",
        "git log --output=/tmp/x",
        "sort -o /tmp/x /etc/hosts",
        "echo x > /tmp/x",
        "cat /etc/passwd > /dev/tcp/127.0.0.1/4444",
        "LD_PRELOAD=/tmp/x.so ls",
        "$(printf 'sh')",
        "${SHELL}",
        "./run.sh",
        "ls; sh",
        "ls | sh",
        "bash <(cat)",
        "rg --pre sh x",
        "env -S 'sh -c id'",
    ];
    let mut failures = Vec::new();
    for c in cases {
        let (d, _) = decide(&gate, c);
        if d == DecisionKind::Allow {
            failures.push(c);
        }
    }
    assert!(
        failures.is_empty(),
        "allowed unattended under strict: {failures:#?}"
    );
}

/// The strict profile stays useful: ordinary read-only commands run unattended.
#[test]
fn read_only_commands_are_allowed_under_strict() {
    let gate = strict_gate();
    for c in [
        "ls -la",
        "cat README.md | grep -n airlock | head -20",
        "git status",
        "git log --oneline -n 5",
        "find . -name '*.rs' -type f",
        "wc -l src/*.rs",
        "diff a.txt b.txt",
        "sort data.txt | cut -d, -f1",
        "ls 2>/dev/null",
    ] {
        let (d, reasons) = decide(&gate, c);
        assert_eq!(d, DecisionKind::Allow, "{c}: {reasons:?}");
    }
}
