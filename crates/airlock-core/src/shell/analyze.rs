//! One simple command → its [`SimpleCommand`] fact, then the commands it runs
//! (wrapped argument vectors and shell strings), recursively and depth-bounded.

use super::code_runners;
use super::inspection::{Inner, Inspection};
use super::options::option_facts;
use super::parse::parse_into;
use super::paths::normalize_absolute;
use super::words::Word;
use super::wrappers;
use super::{ShellFacts, SimpleCommand};

/// Deepest chain of wrappers and shell strings followed (`sudo env sh -c 'xargs …'`).
pub(crate) const MAX_DEPTH: usize = 16;

pub(crate) fn too_deep() -> String {
    format!("commands are nested deeper than {MAX_DEPTH} wrappers or shell strings")
}

/// Where a parse or command sits: its wrapper chain, depth and, for re-parsed
/// strings, the source position of the command that runs them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Scope {
    pub via: Vec<String>,
    pub depth: usize,
    pub anchor: Option<usize>,
    /// The grammar of the shell that runs this text.
    pub dialect: Dialect,
}

/// Which shell reads a piece of text. The command line itself is run by bash (the
/// grammar parsed here); a string given to `sh -c`, `su -c`, `watch`, git aliases and
/// the like is run by `/bin/sh` (dash) or another shell, which reads some bash syntax
/// differently (`$'…'`, `[[`, `((`, `<<<`, …), so such syntax is unparsed there.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Dialect {
    #[default]
    Bash,
    /// POSIX sh: only syntax that bash and dash read alike is accepted.
    Posix,
}

/// The dialect of a shell string run by `basename`, inside text of dialect `outer`.
fn script_dialect(basename: &str, outer: Dialect) -> Dialect {
    match basename {
        "bash" | "rbash" => Dialect::Bash,
        // Builtins that run their string in the current shell.
        "eval" | "trap" | "alias" => outer,
        _ => Dialect::Posix,
    }
}

/// Facts gathered so far.
#[derive(Debug, Default)]
pub(crate) struct Collector {
    pub facts: ShellFacts,
    /// Commands with their source position, sorted at the end.
    pub commands: Vec<(usize, SimpleCommand)>,
    /// Syntax tree nodes parsed so far, nested shell strings included.
    pub nodes: usize,
    /// Parser operations spent so far, nested shell strings included.
    pub parse_ops: usize,
}

impl Collector {
    /// Mark the command line unparsed; the first reason wins.
    pub(crate) fn unparsed(&mut self, reason: String) {
        if self.facts.unparsed.is_none() {
            self.facts.unparsed = Some(reason);
        }
    }

    /// A standalone `NAME=value` (or one in `export`) that changes what later code runs.
    pub(crate) fn standalone_assignment(&mut self, name: &str) {
        if let Some(reason) = code_variable_reason(name) {
            self.facts.runs_arbitrary_code = true;
            self.facts.arbitrary_code_reasons.push(reason);
        }
    }

    /// The finished facts, commands in source order.
    pub(crate) fn finish(mut self) -> ShellFacts {
        self.commands.sort_by_key(|(pos, _)| *pos);
        for (_, cmd) in &self.commands {
            if let Some(reason) = &cmd.runs_arbitrary_code {
                self.facts.runs_arbitrary_code = true;
                let label = if cmd.basename.is_empty() {
                    &cmd.program
                } else {
                    &cmd.basename
                };
                self.facts
                    .arbitrary_code_reasons
                    .push(format!("{label}: {reason}"));
            }
        }
        self.facts.commands = self.commands.into_iter().map(|(_, c)| c).collect();
        self.facts
    }
}

/// Environment variables whose value decides which code runs: the loader's
/// (`LD_PRELOAD`), the shells' (`BASH_ENV`), interpreters' search paths and options,
/// `PATH`, and variables that name a pager, editor or command.
fn code_variable_reason(name: &str) -> Option<String> {
    const EXACT: &[&str] = &[
        "PATH",
        "BASH_ENV",
        "ENV",
        "PROMPT_COMMAND",
        "PS4",
        "SHELLOPTS",
        "BASHOPTS",
        "IFS",
        "PAGER",
        "MANPAGER",
        "EDITOR",
        "VISUAL",
        "BROWSER",
        "LESSOPEN",
        "LESSCLOSE",
        "SHELL",
        "RUSTC",
        "RUSTC_WRAPPER",
        "CARGO_BUILD_RUSTC",
        "CARGO_BUILD_RUSTC_WRAPPER",
        "CC",
        "CXX",
        "MAKEFLAGS",
        "TAR_OPTIONS",
        "RSYNC_RSH",
        "GCONV_PATH",
        "HOSTALIASES",
        "ZDOTDIR",
        "HOME",
        "GIT_SSH",
        "GIT_EXTERNAL_DIFF",
        "GIT_EXEC_PATH",
        "GIT_TEMPLATE_DIR",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "PYTHONHOME",
        "PYTHONUSERBASE",
        "PERL5OPT",
        "PERL5LIB",
        "PERLLIB",
        "PERL5DB",
        "RUBYOPT",
        "RUBYLIB",
        "NODE_OPTIONS",
        "NODE_PATH",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "TCLLIBPATH",
    ];
    const PREFIXES: &[&str] = &[
        "LD_",
        "DYLD_",
        "GIT_CONFIG",
        "BASH_FUNC_",
        "LUA_",
        "NPM_CONFIG_SCRIPT",
    ];
    const SUFFIXES: &[&str] = &["_PAGER", "_EDITOR", "_COMMAND", "ASKPASS", "_RSH", "_SSH"];
    let hit = EXACT.contains(&name)
        || PREFIXES.iter().any(|p| name.starts_with(p))
        || SUFFIXES.iter().any(|s| name.ends_with(s));
    hit.then(|| format!("sets {name}, which changes what code runs"))
}

/// Analyze one simple command given as words (program first) and report it and
/// everything it runs.
pub(crate) fn analyze(
    c: &mut Collector,
    words: Vec<Word>,
    prefix: &[String],
    scope: &Scope,
    pos: usize,
) {
    let Some((program, args)) = words.split_first() else {
        return;
    };
    let basename = if program.dynamic {
        String::new()
    } else {
        program
            .text
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string()
    };
    let mut ins = if program.dynamic {
        Inspection::arbitrary("the program word is dynamic")
    } else {
        wrappers::inspect(&basename, args)
            .or_else(|| code_runners::inspect(&basename, args))
            .unwrap_or_default()
    };
    if !program.dynamic && program.text.contains('/') && !program.text.starts_with('/') {
        ins.arbitrary =
            Some("the program is a relative path (a script in the working directory)".into());
    }
    if !program.dynamic && basename.is_empty() {
        ins.set_arbitrary("the program word names a directory");
    }
    if basename == "export"
        || basename == "declare"
        || basename == "typeset"
        || basename == "readonly"
    {
        for a in args {
            let name = a.text.split(['=', '+']).next().unwrap_or_default();
            if let Some(reason) = code_variable_reason(name) {
                ins.set_arbitrary(reason);
            }
        }
    }
    let env_reason = prefix
        .iter()
        .chain(ins.assignments.iter())
        .find_map(|name| code_variable_reason(name));
    if let Some(reason) = env_reason {
        ins.set_arbitrary(reason);
    }
    if ins
        .inner
        .iter()
        .any(|i| matches!(i, Inner::Script(w) if w.dynamic))
    {
        ins.set_arbitrary("runs a command string that is only known at run time");
    }
    let own_args = ins.own_args.take().unwrap_or_else(|| args.to_vec());
    let resolved_path = if program.dynamic {
        None
    } else {
        normalize_absolute(&program.text)
    };
    c.commands.push((
        pos,
        SimpleCommand {
            program: program.text.clone(),
            basename: basename.clone(),
            resolved_path,
            args: args.iter().map(|a| a.text.clone()).collect(),
            options: option_facts(&basename, &own_args),
            dynamic_program: program.dynamic,
            via: scope.via.clone(),
            runs_arbitrary_code: ins.arbitrary.clone(),
        },
    ));
    c.facts.redirections.extend(ins.file_effects);
    c.facts.assignments.extend(ins.assignments);
    if ins.inner.is_empty() {
        return;
    }
    let dialect = script_dialect(&basename, scope.dialect);
    let mut via = scope.via.clone();
    via.push(if basename.is_empty() {
        program.text.clone()
    } else {
        basename
    });
    let argv_scope = Scope {
        via: via.clone(),
        depth: scope.depth + 1,
        anchor: Some(pos),
        dialect: scope.dialect,
    };
    let child = Scope {
        via,
        depth: scope.depth + 1,
        anchor: Some(pos),
        dialect,
    };
    if child.depth > MAX_DEPTH {
        c.unparsed(too_deep());
        return;
    }
    for inner in ins.inner {
        match inner {
            Inner::Argv(words) => analyze(c, words, &[], &argv_scope, pos),
            Inner::Script(word) if !word.dynamic => parse_into(c, &word.text, &child),
            Inner::Script(_) => {}
        }
    }
}
