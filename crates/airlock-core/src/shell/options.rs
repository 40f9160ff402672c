//! Option facts and a small getopt-style scanner shared by the wrapper and code-runner rules.
//!
//! # The option-token rule
//!
//! For every argument before `--` (dynamic arguments are skipped, their value is unknown):
//! - `--name` and `--name=value` give `prog:--name` (cut at the first `=`).
//! - `-x…` gives the whole token cut at the first `=` (`tar:-xvf`, `find:-exec`,
//!   `java:-Dkey`), **and**, unless the token is a number (`head -20`), one `prog:-c`
//!   for each ASCII letter or digit of the cluster up to the first other character
//!   (`tar:-x`, `tar:-v`, `tar:-f`). Both are kept because whether `-exec` is one long
//!   option or the cluster `-e -x -e -c` depends on the program; a policy can match either.
//! - A lone `-` (standard input) is an operand, not an option.
//! - Each option is listed once per command, in order of first appearance.

use super::words::Word;

/// Option facts for `args` of program `basename`, following the module's rule.
pub(crate) fn option_facts(basename: &str, args: &[Word]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut push = |opt: &str| {
        let fact = format!("{basename}:{opt}");
        if !out.contains(&fact) {
            out.push(fact);
        }
    };
    for arg in args {
        if arg.dynamic {
            // `--name=*.o`: the value is dynamic, the option name is not.
            if let Some((name, _)) = arg.text.strip_prefix("--").and_then(|l| l.split_once('=')) {
                if !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                {
                    push(&format!("--{name}"));
                }
            }
            continue;
        }
        let text = arg.text.as_str();
        if text == "--" {
            break;
        }
        if let Some(long) = text.strip_prefix("--") {
            if !long.is_empty() {
                push(&format!("--{}", long.split('=').next().unwrap_or(long)));
            }
            continue;
        }
        let Some(cluster) = text.strip_prefix('-') else {
            continue;
        };
        if cluster.is_empty() {
            continue;
        }
        let head = cluster.split('=').next().unwrap_or(cluster);
        push(&format!("-{head}"));
        if head.chars().all(|c| c.is_ascii_digit() || c == '.') {
            continue;
        }
        if head.chars().count() > 1 {
            for c in head.chars().take_while(char::is_ascii_alphanumeric) {
                push(&format!("-{c}"));
            }
        }
    }
    out
}

/// How a program parses its options, for the scanner.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct OptionSyntax {
    /// Short option letters that take an argument (`-n 5` or `-n5`).
    pub short_with_arg: &'static str,
    /// Long option names (without `--`) that take an argument (`--user root`).
    pub long_with_arg: &'static [&'static str],
    /// Single-dash long options that take an argument (`-ex cmd` for gdb).
    pub single_dash_long_with_arg: &'static [&'static str],
    /// Options may follow operands (GNU permutation). Wrappers use `false`: their
    /// options end at the first operand, which is usually the command.
    pub permute: bool,
}

/// One option occurrence found by [`scan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FoundOption {
    /// `-c`, `--name` or a single-dash long name, without the argument.
    pub name: String,
    /// The option's argument, if it takes one and it was present.
    pub value: Option<Word>,
    /// Index in `args` of the option token.
    pub index: usize,
}

/// Result of scanning an argument list.
#[derive(Debug, Clone, Default)]
pub(crate) struct Scan {
    pub options: Vec<FoundOption>,
    /// Indices of operands, in order.
    pub operands: Vec<usize>,
    /// Index just past the option section when `permute` is false
    /// (the first operand, or `args.len()`).
    pub first_operand: usize,
}

impl Scan {
    /// The first option named any of `names`.
    pub(crate) fn find(&self, names: &[&str]) -> Option<&FoundOption> {
        self.options
            .iter()
            .find(|o| names.contains(&o.name.as_str()))
    }

    /// Whether any option named any of `names` is present.
    pub(crate) fn has(&self, names: &[&str]) -> bool {
        self.find(names).is_some()
    }
}

/// Scan `args` as `syntax` describes. Dynamic words are treated as operands.
pub(crate) fn scan(args: &[Word], syntax: &OptionSyntax) -> Scan {
    let mut scan = Scan {
        first_operand: args.len(),
        ..Scan::default()
    };
    let mut i = 0;
    let mut options_done = false;
    while i < args.len() {
        let arg = &args[i];
        let text = arg.text.as_str();
        if options_done || arg.dynamic || !text.starts_with('-') || text == "-" {
            if !options_done && !syntax.permute {
                scan.first_operand = i;
                scan.operands.extend(i..args.len());
                return scan;
            }
            scan.operands.push(i);
            i += 1;
            continue;
        }
        if text == "--" {
            options_done = true;
            if !syntax.permute {
                scan.first_operand = i + 1;
                scan.operands.extend(i + 1..args.len());
                return scan;
            }
            i += 1;
            continue;
        }
        if let Some(long) = text.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(Word::literal(v))),
                None => (long, None),
            };
            let index = i;
            let mut value = inline;
            if value.is_none() && syntax.long_with_arg.contains(&name) {
                value = args.get(i + 1).cloned();
                i += 1;
            }
            scan.options.push(FoundOption {
                name: format!("--{name}"),
                value,
                index,
            });
            i += 1;
            continue;
        }
        let cluster = &text[1..];
        if syntax.single_dash_long_with_arg.contains(&cluster) {
            scan.options.push(FoundOption {
                name: text.to_string(),
                value: args.get(i + 1).cloned(),
                index: i,
            });
            i += 2;
            continue;
        }
        let mut consumed_next = false;
        for (pos, c) in cluster.char_indices() {
            if syntax.short_with_arg.contains(c) {
                let rest = &cluster[pos + c.len_utf8()..];
                let value = if rest.is_empty() {
                    consumed_next = true;
                    args.get(i + 1).cloned()
                } else {
                    Some(Word::literal(rest))
                };
                scan.options.push(FoundOption {
                    name: format!("-{c}"),
                    value,
                    index: i,
                });
                break;
            }
            scan.options.push(FoundOption {
                name: format!("-{c}"),
                value: None,
                index: i,
            });
        }
        i += if consumed_next { 2 } else { 1 };
    }
    scan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(list: &[&str]) -> Vec<Word> {
        list.iter().map(|s| Word::literal(*s)).collect()
    }

    #[test]
    fn clusters_are_kept_whole_and_split() {
        let facts = option_facts("tar", &words(&["-xvf", "a.tar", "--to-command=sh", "-"]));
        assert_eq!(
            facts,
            ["tar:-xvf", "tar:-x", "tar:-v", "tar:-f", "tar:--to-command"]
        );
    }

    #[test]
    fn find_style_long_options_and_double_dash() {
        let facts = option_facts("find", &words(&[".", "-exec", "rm", "{}", ";", "--", "-x"]));
        assert_eq!(facts, ["find:-exec", "find:-e", "find:-x", "find:-c"]);
        assert_eq!(option_facts("head", &words(&["-20"])), ["head:-20"]);
        assert_eq!(
            option_facts("java", &words(&["-Dk=v"])),
            ["java:-Dk", "java:-D", "java:-k"]
        );
    }

    #[test]
    fn scanner_handles_attached_and_separate_arguments() {
        let syntax = OptionSyntax {
            short_with_arg: "nu",
            long_with_arg: &["user"],
            ..OptionSyntax::default()
        };
        let scan = scan(
            &words(&["-n5", "-u", "root", "--user", "x", "-E", "ls", "-n"]),
            &syntax,
        );
        assert_eq!(scan.first_operand, 6);
        assert_eq!(
            scan.find(&["-n"]).and_then(|o| o.value.clone()),
            Some(Word::literal("5"))
        );
        assert_eq!(
            scan.find(&["-u"]).and_then(|o| o.value.clone()),
            Some(Word::literal("root"))
        );
        assert_eq!(
            scan.find(&["--user"]).and_then(|o| o.value.clone()),
            Some(Word::literal("x"))
        );
        assert!(scan.has(&["-E"]));
    }
}
