//! Shell normalization: a command line becomes typed facts the policy can judge.
//!
//! See [`normalize`]. Every simple command is exposed — including those nested in
//! pipelines, lists, subshells, command and process substitutions and wrappers such as
//! `env`, `xargs`, `sh -c`, `find -exec` — with its basename and arguments. A command that
//! runs code the normalizer cannot see is marked `runs_arbitrary_code`. Anything the parser
//! cannot handle makes the whole command `unparsed`, and no allow rule can pass it.

use serde::{Deserialize, Serialize};

mod analyze;
mod awk_program;
mod bounds;
mod code_runners;
mod git;
mod inspection;
mod options;
mod parse;
mod paths;
mod quote;
mod sed_script;
mod words;
mod wrappers;

pub use paths::{normalize_absolute, resolve_programs};
pub use quote::{command_line_from_words, quote_word};

/// Largest command line analysed, in bytes; a longer one is `unparsed`.
pub const MAX_COMMAND_BYTES: usize = 1 << 20;

/// One simple command found anywhere in the command line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimpleCommand {
    /// The program word as written (after quote removal), e.g. `/bin/ls` or `ls`.
    pub program: String,
    /// Basename of the program, e.g. `ls`. Empty when the program is dynamic.
    pub basename: String,
    /// Absolute path when the program word is a path (lexically normalized), or the
    /// result of a PATH lookup done by the caller's resolver. `None` if unknown.
    pub resolved_path: Option<String>,
    /// Arguments after quote removal. Words with expansions keep their source text.
    pub args: Vec<String>,
    /// Options seen, as `basename:option` (`find:-exec`, `sort:-o`, `git:-c`), with long
    /// options cut at `=` and short option clusters kept whole and split (`-la` gives
    /// `-la`, `-l` and `-a`). Options stop at `--`; a wrapper's options stop where its
    /// command begins. The full rule is in the `options` module.
    pub options: Vec<String>,
    /// The program word contains an expansion (`$X`, `$(…)`, glob), so what runs is
    /// not known statically.
    pub dynamic_program: bool,
    /// Chain of wrappers this command was unwrapped from, outermost first
    /// (e.g. `["sudo", "env"]`).
    pub via: Vec<String>,
    /// Why this command runs code that cannot be seen statically, if it does
    /// (e.g. `python -c`, `awk system()`, `sed e`, script in the workspace).
    pub runs_arbitrary_code: Option<String>,
}

/// Direction of a redirection's file effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RedirectKind {
    Read,
    Write,
    Append,
    /// Duplicates a file descriptor (`2>&1`): no file effect.
    Dup,
}

/// A redirection and the file it touches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Redirection {
    pub kind: RedirectKind,
    /// Target word as written (after quote removal).
    pub target: String,
    /// The target contains an expansion.
    pub dynamic: bool,
}

/// Everything the Gate knows about a shell command line.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShellFacts {
    /// Set when parsing failed or syntax is unsupported. No allow rule passes such a command.
    pub unparsed: Option<String>,
    /// All simple commands, nested ones included, in source order.
    pub commands: Vec<SimpleCommand>,
    /// All redirections, as file read/write facts.
    pub redirections: Vec<Redirection>,
    /// Variable assignments (`NAME=value` prefixes and standalone), as `NAME`.
    pub assignments: Vec<String>,
    pub has_pipeline: bool,
    /// `;`, `&&`, `||`, newline-separated or `&` lists.
    pub has_list: bool,
    pub has_background: bool,
    pub has_subshell: bool,
    pub has_command_substitution: bool,
    pub has_process_substitution: bool,
    pub has_heredoc: bool,
    /// Function definitions, loops, conditionals, `case`, arithmetic.
    pub has_compound: bool,
    /// True if any command (or the structure itself) runs code that cannot be seen.
    pub runs_arbitrary_code: bool,
    /// Why `runs_arbitrary_code` is set: `basename: reason` for each command, and
    /// reasons of the structure (e.g. a standalone `LD_PRELOAD=…`).
    #[serde(default)]
    pub arbitrary_code_reasons: Vec<String>,
}

/// Parse `command` and return its facts. Never panics; bad syntax gives `unparsed`.
///
/// ```
/// let facts = airlock_core::shell::normalize("sudo env A=1 find . -name '*.o' -exec rm {} \\;");
/// assert_eq!(facts.unparsed, None);
/// let names: Vec<&str> = facts.commands.iter().map(|c| c.basename.as_str()).collect();
/// assert_eq!(names, ["sudo", "env", "find", "rm"]);
/// assert_eq!(facts.commands[3].via, ["sudo", "env", "find"]);
/// ```
pub fn normalize(command: &str) -> ShellFacts {
    let mut collector = analyze::Collector::default();
    parse::parse_into(&mut collector, command, &analyze::Scope::default());
    collector.finish()
}
