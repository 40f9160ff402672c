//! `git`: configuration given on the command line can name commands (`core.pager`,
//! `core.sshCommand`, `alias.x=!cmd`, …), some subcommands run repository hooks or
//! configured tools, a few take a command of their own, and an unknown subcommand may be
//! an alias or an external `git-NAME` program.
//!
//! Not covered here: configuration already in the repository (`.git/config`) can make
//! almost any subcommand run a command; containing that is the sandbox's job.

use super::inspection::{join_script, Inner, Inspection};
use super::options::{scan, OptionSyntax};
use super::words::Word;

/// Subcommands built into git that do not run hooks or configured tools by themselves.
const PLAIN: &[&str] = &[
    "status",
    "log",
    "diff",
    "show",
    "branch",
    "tag",
    "rev-parse",
    "rev-list",
    "ls-files",
    "ls-tree",
    "ls-remote",
    "blame",
    "grep",
    "describe",
    "shortlog",
    "reflog",
    "stash",
    "add",
    "rm",
    "mv",
    "restore",
    "reset",
    "fetch",
    "remote",
    "init",
    "cat-file",
    "show-ref",
    "for-each-ref",
    "name-rev",
    "merge-base",
    "format-patch",
    "apply",
    "archive",
    "bundle",
    "cherry",
    "count-objects",
    "diff-tree",
    "diff-files",
    "diff-index",
    "fsck",
    "help",
    "version",
    "worktree",
    "sparse-checkout",
    "notes",
    "range-diff",
    "whatchanged",
    "var",
    "check-ignore",
    "check-attr",
    "hash-object",
    "update-index",
    "write-tree",
    "read-tree",
    "symbolic-ref",
    "update-ref",
    "verify-commit",
    "verify-tag",
    "clean",
    "revert",
    "cherry-pick",
    "config",
];

/// Subcommands that run repository hooks (`.git/hooks`, `core.hooksPath`).
const RUNS_HOOKS: &[&str] = &[
    "commit",
    "merge",
    "am",
    "rebase",
    "push",
    "checkout",
    "switch",
    "pull",
    "clone",
    "gc",
    "receive-pack",
    "send-email",
];

/// Subcommands that run configured or given tools.
const RUNS_TOOLS: &[&str] = &[
    "difftool",
    "mergetool",
    "filter-branch",
    "filter-repo",
    "credential",
    "web--browse",
    "instaweb",
];

/// Config keys (lower case) whose value is a command or a path to one.
fn is_command_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    key.starts_with("alias.")
        || key.starts_with("filter.")
        || key.starts_with("diff.")
            && (key.ends_with(".textconv") || key.ends_with(".command") || key == "diff.external")
        || key.starts_with("merge.") && key.ends_with(".driver")
        || key.ends_with("pager")
        || key.ends_with("editor")
        || key.ends_with("command")
        || key.ends_with("program")
        || key.ends_with("cmd")
        || key.ends_with("helper")
        || key.ends_with("askpass")
        || matches!(
            key.as_str(),
            "core.fsmonitor"
                | "core.hookspath"
                | "core.gitproxy"
                | "core.sshcommand"
                | "include.path"
        )
        || key.starts_with("includeif.")
}

/// Inspect `git args…`.
pub(crate) fn inspect(args: &[Word]) -> Inspection {
    let found = scan(
        args,
        &OptionSyntax {
            short_with_arg: "cC",
            long_with_arg: &[
                "git-dir",
                "work-tree",
                "namespace",
                "config-env",
                "super-prefix",
                "attr-source",
            ],
            single_dash_long_with_arg: &[],
            permute: false,
        },
    );
    let mut ins = Inspection::default();
    if found.has(&["-c", "--config-env"]) {
        ins.set_arbitrary("git -c sets configuration, which can name commands (core.pager, core.sshCommand, alias.*)");
    }
    if found.has(&["--exec-path"])
        && found
            .options
            .iter()
            .any(|o| o.name == "--exec-path" && o.value.is_some())
    {
        ins.set_arbitrary("git --exec-path chooses where git finds its programs");
    }
    let Some(&sub_at) = found.operands.first() else {
        return ins;
    };
    let sub = &args[sub_at];
    let rest = &args[sub_at + 1..];
    if sub.dynamic {
        ins.set_arbitrary("git subcommand is dynamic");
        return ins;
    }
    let sub = sub.text.as_str();
    match sub {
        "submodule" if rest.first().is_some_and(|w| w.text == "foreach") => {
            let cmd: Vec<Word> = rest[1..]
                .iter()
                .skip_while(|w| w.text.starts_with('-'))
                .cloned()
                .collect();
            if !cmd.is_empty() {
                ins.inner.push(Inner::Script(join_script(&cmd)));
            }
        }
        "bisect" if rest.first().is_some_and(|w| w.text == "run") && rest.len() > 1 => {
            ins.inner.push(Inner::Argv(rest[1..].to_vec()));
        }
        "config" => {
            let mut operands = rest
                .iter()
                .filter(|w| w.dynamic || !w.text.starts_with('-'));
            if let (Some(key), Some(_value)) = (operands.next(), operands.next()) {
                if key.dynamic || is_command_key(&key.text) {
                    ins.set_arbitrary(format!(
                        "git config sets {}, which names a command",
                        key.text
                    ));
                }
            }
        }
        _ if RUNS_HOOKS.contains(&sub) => {
            ins.set_arbitrary(format!("git {sub} runs repository hooks"));
            if sub == "rebase" {
                let r = scan(
                    rest,
                    &OptionSyntax {
                        short_with_arg: "xsXSo",
                        long_with_arg: &["exec", "strategy", "onto"],
                        ..OptionSyntax::default()
                    },
                );
                for o in r
                    .options
                    .iter()
                    .filter(|o| o.name == "-x" || o.name == "--exec")
                {
                    if let Some(v) = &o.value {
                        ins.inner.push(Inner::Script(v.clone()));
                    }
                }
            }
            if (sub == "clone" || sub == "pull" || sub == "fetch")
                && rest
                    .iter()
                    .any(|w| w.text.starts_with("-u") || w.text.starts_with("--upload-pack"))
            {
                ins.arbitrary = Some(format!("git {sub} --upload-pack runs a given command"));
            }
        }
        _ if RUNS_TOOLS.contains(&sub) => {
            ins.set_arbitrary(format!("git {sub} runs configured or given commands"))
        }
        _ if PLAIN.contains(&sub) => {}
        _ => ins.set_arbitrary(format!(
            "git {sub} may be an alias or an external git-{sub} program"
        )),
    }
    ins
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(args: &[&str]) -> Option<String> {
        let words: Vec<Word> = args.iter().map(|s| Word::literal(*s)).collect();
        inspect(&words).arbitrary
    }

    #[test]
    fn plain_subcommands() {
        assert_eq!(reason(&["status", "--short"]), None);
        assert_eq!(reason(&["-C", "repo", "log", "-n", "3"]), None);
        assert_eq!(reason(&["config", "user.name", "Ann"]), None);
    }

    #[test]
    fn code_running_forms() {
        assert!(reason(&["-c", "core.pager=sh", "log"]).is_some());
        assert!(reason(&["commit", "-m", "x"]).is_some());
        assert!(reason(&["config", "alias.x", "!sh"]).is_some());
        assert!(reason(&["config", "core.sshCommand", "x"]).is_some());
        assert!(reason(&["frobnicate"]).is_some());
        assert!(reason(&["difftool"]).is_some());
    }
}
