//! The shell normalizer against real command lines: each construct, each wrapper and
//! code runner, the GTFOBins development set, and random input.

use airlock_core::shell::{normalize, resolve_programs, RedirectKind, ShellFacts, SimpleCommand};
use proptest::prelude::*;

#[path = "shell_normalizer/bounded_parse.rs"]
mod bounded_parse;
#[path = "shell_normalizer/gate_fuzz.rs"]
mod gate_fuzz;
#[path = "shell_normalizer/shell_dialects.rs"]
mod shell_dialects;

fn parsed(cmd: &str) -> ShellFacts {
    let facts = normalize(cmd);
    assert_eq!(facts.unparsed, None, "{cmd:?} should parse");
    facts
}

fn names(facts: &ShellFacts) -> Vec<&str> {
    facts.commands.iter().map(|c| c.basename.as_str()).collect()
}

fn command<'f>(facts: &'f ShellFacts, basename: &str) -> &'f SimpleCommand {
    facts
        .commands
        .iter()
        .find(|c| c.basename == basename)
        .unwrap_or_else(|| panic!("no command {basename} in {:?}", names(facts)))
}

#[test]
fn pipelines_lists_and_background() {
    let f = parsed("ls -la | grep x && echo ok || echo no; sleep 1 &");
    assert_eq!(names(&f), ["ls", "grep", "echo", "echo", "sleep"]);
    assert!(f.has_pipeline && f.has_list && f.has_background);
    assert!(!f.runs_arbitrary_code);
    let f = parsed("a\nb");
    assert_eq!(names(&f), ["a", "b"]);
    assert!(f.has_list);
}

#[test]
fn subshells_groups_and_substitutions() {
    let f = parsed("(cd x && make) ; { id; } ; echo \"$(whoami) `hostname`\" > \"$(mktemp)\"");
    assert_eq!(
        names(&f),
        ["cd", "make", "id", "echo", "whoami", "hostname", "mktemp"]
    );
    assert!(f.has_subshell && f.has_command_substitution);
    let echo = command(&f, "echo");
    assert_eq!(echo.args, ["\"$(whoami) `hostname`\""]);
    assert!(f.redirections[0].dynamic);
    let f = parsed("X=$(curl -s u) Y=`id`; diff <(sort a) >(tee b)");
    assert_eq!(names(&f), ["curl", "id", "diff", "sort", "tee"]);
    assert_eq!(f.assignments, ["X", "Y"]);
    assert!(f.has_process_substitution);
}

#[test]
fn heredocs_and_herestrings() {
    let f = parsed("cat <<EOF > out.txt\nuser: $(id -un) `hostname`\nEOF\nwc -l <<< \"a b\"");
    assert_eq!(names(&f), ["cat", "id", "hostname", "wc"]);
    assert!(f.has_heredoc && f.has_command_substitution);
    assert_eq!(f.redirections.len(), 1);
    assert_eq!(f.redirections[0].target, "out.txt");
    let f = parsed("cat <<'EOF'\n$(id) `x`\nEOF");
    assert_eq!(names(&f), ["cat"]);
    let f = parsed("grep a 2>&1 <<< \"$x\"");
    assert!(f.has_heredoc);
    assert_eq!(f.redirections.len(), 1);
}

/// Found by the Gate fuzzer: a here-document body with no `$` is one token to the grammar
/// (no content children), and its backquotes went unseen while bash runs them, so strict
/// allowed `cat <<EOF` around `` `rm -rf victim` ``.
#[test]
fn heredoc_body_without_dollar_still_runs_its_backquotes() {
    for body in [
        "`rm -rf victim`",
        "a\n`rm -rf victim` b",
        "x `rm -rf victim`",
    ] {
        let f = parsed(&format!("cat <<EOF\n{body}\nEOF"));
        assert_eq!(names(&f), ["cat", "rm"], "{body}");
        assert!(f.has_command_substitution, "{body}");
    }
    let f = parsed("cat <<'EOF'\n`rm -rf victim`\nEOF");
    assert_eq!(names(&f), ["cat"]);
    let f = parsed("cat <<EOF0\n`find . -name x -delete`\nEOF0");
    assert!(command(&f, "find")
        .options
        .contains(&"find:-delete".to_string()));
}

/// Found by the Gate fuzzer: an expansion inside a here-document's backquotes
/// (`` `echo x >> "$HOME/.bashrc"` ``) split the body into pieces around it, none holding
/// the whole backquoted command, so its write went unseen (in `sh -c` and at top level).
#[test]
fn backquotes_around_an_expansion_in_a_heredoc_body_are_seen() {
    for script in [
        "cat <<EOF0\n`echo x >> \"$HOME/.bashrc\"`\nEOF0",
        "cat <<EOF0\n`echo x >> \"$HOME/.bashrc\"`\nEOF0\n",
        "cat <<EOF\nbefore $USER `rm -rf \"$d\"` after ${x}\nEOF",
        "sh -c 'cat <<EOF0\n`env env echo x >> \"$HOME/.bashrc\"`\nEOF0'",
    ] {
        let f = parsed(script);
        let programs = names(&f);
        assert!(
            programs.contains(&"echo") || programs.contains(&"rm"),
            "{script:?}: {programs:?}"
        );
        assert!(f.has_command_substitution, "{script:?}");
    }
    let f = parsed("cat <<EOF0\n`echo x >> \"$HOME/.bashrc\"`\nEOF0");
    assert!(
        f.redirections.iter().any(|r| r.target.contains(".bashrc")),
        "{:?}",
        f.redirections
    );
}

/// The rest of the class above: a `<<-` body with leading tabs, and backquotes that hold a
/// `$(…)` or an arithmetic `$((…))` instead of a plain expansion. Each hidden program
/// must be seen, or the command must be unparsed (which asks); never parsed and missed.
#[test]
fn backquotes_in_other_heredoc_bodies_are_seen_or_unparsed() {
    for (script, hidden) in [
        ("cat <<-EOF\n\t`rm -rf \"$d\"`\n\tEOF", "rm"),
        ("cat <<-EOF\n\tline $x\n\t\t`rm -rf victim`\n\tEOF\n", "rm"),
        ("cat <<EOF\n`echo $(rm -rf victim)`\nEOF", "rm"),
        ("cat <<EOF\n`rm -rf $(pwd)/victim`\nEOF", "rm"),
        ("cat <<EOF\n`rm -rf victim$((1+2))`\nEOF", "rm"),
        ("cat <<EOF\n$((1+2)) `rm -rf victim`\nEOF", "rm"),
        ("sh -c 'cat <<-EOF\n\t`rm -rf \"$HOME\"`\n\tEOF'", "rm"),
    ] {
        let f = normalize(script);
        if f.unparsed.is_some() {
            continue;
        }
        assert!(
            names(&f).contains(&hidden),
            "{script:?} parsed without {hidden}: {:?}",
            names(&f)
        );
        assert!(f.has_command_substitution, "{script:?}");
    }
    // A quoted delimiter turns the body into plain text: nothing in it runs.
    let f = parsed("cat <<-'EOF'\n\t`rm -rf victim`\n\tEOF");
    assert_eq!(names(&f), ["cat"]);
}

/// The general check behind the one above: a plain word of a command never holds an
/// unescaped operator character, so a word the grammar glued across one is unparsed,
/// while escaped and quoted operators stay ordinary arguments.
#[test]
fn an_operator_inside_a_word_is_a_misreading() {
    for ok in [
        "find . -name '*.o' -exec rm {} \\;",
        "echo a\\;b \\| \\& \\( \\)",
        "echo 'a;b|c&d' \"x<y>z\"",
        "ls -la 2>&1 | grep x && echo ok",
    ] {
        assert!(
            normalize(ok).unparsed.is_none(),
            "{ok}: {:?}",
            normalize(ok).unparsed
        );
    }
}

/// Found by the differential test: inside a substitution the grammar reads `==` or `=~`
/// as the start of a `[[ … ]]` regular expression, which swallows the rest of the
/// command, so `$(echo == ; rm -rf y)` showed only `echo`. A regex outside a test's binary
/// operator is unparsed; inside `[[ … ]]` it stays a regex.
#[test]
fn a_regex_outside_a_test_is_unparsed() {
    for cmd in [
        "echo $(echo == ; rm -rf y)",
        "echo $(echo =~ | xargs rm)",
        "echo \"$(true == && rm y)\"",
        "x=$(echo == ; rm -rf y)",
        "echo $(echo == && rm -rf y)",
        "echo $(echo =~ & rm -rf y)",
        "echo \"$(true == || rm -rf y)\"",
        "cat <<EOF\n- $(echo == | xargs basename)\nEOF",
        "sh -c 'echo $(echo == ; rm -rf y)'",
    ] {
        let f = normalize(cmd);
        assert!(
            f.unparsed.is_some() || names(&f).contains(&"rm") || names(&f).contains(&"xargs"),
            "{cmd:?} parsed without its hidden program: {:?}",
            names(&f)
        );
    }
    let f = normalize("echo $(echo == ; rm -rf y)");
    assert!(
        f.unparsed
            .as_deref()
            .is_some_and(|r| r.contains("regular expression") || r.contains("part of a word")),
        "{:?}",
        f.unparsed
    );
    for ok in ["[[ $x =~ ^a.*$ ]] && echo ok", "[[ $x == a* ]] && echo ok"] {
        let f = parsed(ok);
        assert!(names(&f).contains(&"echo"), "{ok}");
    }
}

/// Found by the Gate fuzzer: a line break inside a double-quoted string was dropped from
/// the word's value, so the script of `sh -c "cat a.txt<newline>rm -rf victim"` read as
/// `cat a.txtrm -rf victim` and `rm` went unseen.
#[test]
fn line_breaks_in_double_quotes_are_kept() {
    let f = parsed("sh -c \"cat a.txt\nrm -rf victim\"");
    assert_eq!(names(&f), ["sh", "cat", "rm"]);
    let f = parsed("printf %s \"a\nb\" \"c\\\nd\"");
    assert_eq!(command(&f, "printf").args, ["%s", "a\nb", "cd"]);
}

/// Found by the Gate fuzzer: bash removes a backslash-newline before it splits words, so
/// `r\⏎m -rf victim` runs `rm`; the grammar read `r` with an argument `m`.
#[test]
fn words_the_grammar_splits_but_bash_joins_are_unparsed() {
    for cmd in [
        "r\\\nm -rf victim",
        "sh -c 'r\\\nm -rf victim'",
        "echo ok && ca\\\nt a.txt",
        // The grammar splits `$"…"` from what follows: `$` and `-c` for bash's `-c`.
        "git $\"-c\" core.pager=sh log",
        "echo $\"a\"b",
    ] {
        let f = normalize(cmd);
        assert!(
            f.unparsed
                .as_deref()
                .is_some_and(|r| r.contains("one word for bash")),
            "{cmd:?}: {:?}",
            f.unparsed
        );
    }
    // Between words, and around operators, a continuation is a blank to both.
    let f = parsed("ls \\\n-la a.txt &&\\\ncat a.txt");
    assert_eq!(names(&f), ["ls", "cat"]);
}

/// Found by the Gate fuzzer: the grammar reads `! { … }` as a program `{` whose arguments
/// are the group's commands, so `! { rm -rf victim; }` hid `rm`. A reserved word where
/// the parser expects a program is unparsed.
#[test]
fn a_reserved_word_in_program_position_is_unparsed() {
    for cmd in [
        "! { rm -rf victim; }",
        "x=$(! { rm -rf victim; })",
        "echo $(! {\nrm -rf victim\n}\n)",
    ] {
        let f = normalize(cmd);
        assert!(
            f.unparsed
                .as_deref()
                .is_some_and(|r| r.contains("reserved word")),
            "{cmd:?}: {:?}",
            names(&f)
        );
    }
    let f = parsed("! grep -q x a.txt && { cat a.txt; }");
    assert_eq!(names(&f), ["grep", "cat"]);
}

#[test]
fn compound_statements_expose_their_commands() {
    let f = parsed(
        "if test -f a; then rm a; elif true; then :; else touch a; fi\n\
         for f in *.rs; do wc -l \"$f\"; done\n\
         while read l; do echo \"$l\"; done < list\n\
         case $1 in start) run;; *) stop;; esac\n\
         cleanup() { rm -rf tmp; }\n\
         (( n++ ))\n\
         [[ -d x ]] && ls x",
    );
    for n in [
        "test", "rm", "true", ":", "touch", "wc", "read", "echo", "run", "stop", "ls", "[[",
    ] {
        command(&f, n);
    }
    assert!(f.has_compound);
    assert_eq!(command(&f, "rm").args, ["a"]);
    assert!(f
        .commands
        .iter()
        .any(|c| c.basename == "rm" && c.args == ["-rf", "tmp"]));
    assert_eq!(f.redirections[0].kind, RedirectKind::Read);
}

#[test]
fn quote_removal_and_dynamic_words() {
    let f = parsed(r#"'/usr/bin/e'"cho" 'a b' "c\"d" $'e\tf' g\ h ~/x *.c {a,b} "$HOME""#);
    let c = &f.commands[0];
    assert_eq!(c.program, "/usr/bin/echo");
    assert_eq!(c.basename, "echo");
    assert_eq!(c.resolved_path.as_deref(), Some("/usr/bin/echo"));
    assert_eq!(
        c.args,
        [
            "a b",
            "c\"d",
            "e\tf",
            "g h",
            "~/x",
            "*.c",
            "{a,b}",
            "\"$HOME\""
        ]
    );
    let f = parsed("$EDITOR file; \"$(which python)\" -V; ${CC:-cc} x.c");
    assert!(f.commands.iter().filter(|c| c.dynamic_program).count() == 3);
    assert!(f
        .commands
        .iter()
        .filter(|c| c.dynamic_program)
        .all(|c| c.basename.is_empty()));
    assert!(f.runs_arbitrary_code);
}

#[test]
fn options_rule() {
    let f = parsed("tar -xvf a.tar --exclude=*.o -C dir -- -notanoption");
    assert_eq!(
        command(&f, "tar").options,
        [
            "tar:-xvf",
            "tar:-x",
            "tar:-v",
            "tar:-f",
            "tar:--exclude",
            "tar:-C"
        ]
    );
    let f = parsed("find . -type f -delete");
    let opts = &command(&f, "find").options;
    assert!(opts.contains(&"find:-delete".to_string()) && opts.contains(&"find:-type".to_string()));
    let f = parsed("sudo -u bob rm -rf /tmp/x");
    assert_eq!(command(&f, "sudo").options, ["sudo:-u"]);
    assert_eq!(command(&f, "rm").options, ["rm:-rf", "rm:-r", "rm:-f"]);
}

#[test]
fn redirection_facts() {
    // `>&-` closes a descriptor: no file, so no fact.
    let f =
        parsed("cmd < in > out >> log 2>&1 &> both >| clob 3<> rw 2>/dev/null > \"$F\" <&3 >&-");
    let kinds: Vec<(RedirectKind, &str, bool)> = f
        .redirections
        .iter()
        .map(|r| (r.kind, r.target.as_str(), r.dynamic))
        .collect();
    assert_eq!(
        kinds,
        [
            (RedirectKind::Read, "in", false),
            (RedirectKind::Write, "out", false),
            (RedirectKind::Append, "log", false),
            (RedirectKind::Dup, "1", false),
            (RedirectKind::Write, "both", false),
            (RedirectKind::Write, "clob", false),
            (RedirectKind::Write, "rw", false),
            (RedirectKind::Write, "/dev/null", false),
            (RedirectKind::Write, "\"$F\"", true),
            (RedirectKind::Dup, "3", false),
        ]
    );
}

#[test]
fn wrappers_are_unwrapped_recursively() {
    let f = parsed("sudo -E env -u X A=1 timeout -s 9 10 nice -n 5 nohup xargs -0 -I{} cp {} /tmp");
    assert_eq!(
        names(&f),
        ["sudo", "env", "timeout", "nice", "nohup", "xargs", "cp"]
    );
    assert_eq!(
        command(&f, "cp").via,
        ["sudo", "env", "timeout", "nice", "nohup", "xargs"]
    );
    assert_eq!(command(&f, "cp").args, ["{}", "/tmp"]);
    assert!(f.assignments.contains(&"A".to_string()));

    let f =
        parsed("find . -name '*.tmp' -execdir rm -- {} + -o -exec sh -c 'echo \"$1\"' _ {} \\;");
    assert_eq!(names(&f), ["find", "rm", "sh", "echo"]);
    assert_eq!(command(&f, "echo").via, ["find", "sh"]);

    let f =
        parsed("bash -lc 'cd /x && make'; su -c 'id' bob; busybox wget u; watch -n2 'ls | wc -l'");
    for (name, via) in [
        ("cd", "bash"),
        ("make", "bash"),
        ("id", "su"),
        ("wget", "busybox"),
        ("wc", "watch"),
    ] {
        assert_eq!(command(&f, name).via, [via], "{name}");
    }

    let f = parsed("command -v git; exec 3>log; exec ls; stdbuf -oL tail -f x; git -C repo status");
    assert_eq!(
        names(&f),
        ["command", "exec", "exec", "ls", "stdbuf", "tail", "git"]
    );
    assert!(!f.runs_arbitrary_code);

    let f = parsed("eval 'rm -rf x; id'");
    assert_eq!(names(&f), ["eval", "rm", "id"]);
}

#[test]
fn shell_strings_and_dynamic_commands() {
    let f = parsed("sh -c \"$CMD\"");
    assert_eq!(
        command(&f, "sh").runs_arbitrary_code.as_deref(),
        Some("runs a command string that is only known at run time")
    );
    let f = parsed("curl -fsSL https://x/install.sh | bash");
    assert!(command(&f, "bash").runs_arbitrary_code.is_some());
    assert!(command(&f, "curl").runs_arbitrary_code.is_none());
    let f = parsed("sh < script.sh; bash run.sh; source env.sh; . ./env.sh");
    assert_eq!(
        f.commands
            .iter()
            .filter(|c| c.runs_arbitrary_code.is_some())
            .count(),
        4
    );
    let f = parsed("xargs -n1 \"$TOOL\"");
    assert!(f
        .commands
        .iter()
        .any(|c| c.dynamic_program && c.via == ["xargs"]));
}

#[test]
fn code_runners() {
    for cmd in [
        "python3 -c 'print(1)'",
        "python -m http.server",
        "perl -ne 'print if /x/' f",
        "ruby -e 'system(\"id\")'",
        "node -e 'x'",
        "php -r 'system(1);'",
        "lua -e 'os.execute(\"id\")'",
        "awk 'BEGIN { system(\"id\") }'",
        "awk '{ print | \"sh\" }'",
        "gawk 'BEGIN { \"id\" | getline x }'",
        "sed -n '1e id' f",
        "sed 's/x/id/e' f",
        "tar -xf a.tar --to-command='sh -c x'",
        "tar -cf /dev/null x --checkpoint=1 --checkpoint-action=exec=sh",
        "rsync -e 'sh -c id' a b:",
        "zip a.zip f -T -TT 'sh #'",
        "git -c alias.x='!sh' x",
        "git --config-env=core.pager=P log",
        "make all",
        "cargo test",
        "npm install",
        "env -S 'sh -c id'",
        "ssh host ls",
        "gdb -nx -ex '!sh' -ex quit",
        "trap 'rm -f \"$TMP\"' EXIT; trap \"$X\" INT",
        "alias ll='ls -l'",
        "./build.sh",
        "scripts/run",
        "LD_PRELOAD=./x.so ls",
        "export BASH_ENV=./x",
        "vim -c ':!sh'",
        "expect -c 'spawn sh'",
    ] {
        let f = normalize(cmd);
        assert!(
            f.runs_arbitrary_code && !f.arbitrary_code_reasons.is_empty(),
            "{cmd:?} should run arbitrary code: {f:?}"
        );
    }
    for cmd in [
        "awk -F: '{ print $1 }' /etc/passwd",
        "sed -n 's/a/b/gp' f",
        "python3 --version",
        "cargo fmt --check",
        "git log --oneline -n 5",
        "tar -czf out.tgz src",
        "grep -rn TODO src | sort | uniq -c",
        "ls -la ~/x > /dev/null 2>&1",
    ] {
        let f = parsed(cmd);
        assert!(
            !f.runs_arbitrary_code,
            "{cmd:?} should not run arbitrary code: {f:?}"
        );
    }
}

#[test]
fn script_file_effects() {
    let f = parsed("sed -i 's/a/b/w changes.log' src/main.rs");
    let targets: Vec<(RedirectKind, &str)> = f
        .redirections
        .iter()
        .map(|r| (r.kind, r.target.as_str()))
        .collect();
    assert_eq!(
        targets,
        [
            (RedirectKind::Write, "changes.log"),
            (RedirectKind::Write, "src/main.rs")
        ]
    );
    let f = parsed("awk '{ print > \"out.txt\" }' in; find . -fprint list.txt");
    let targets: Vec<&str> = f.redirections.iter().map(|r| r.target.as_str()).collect();
    assert_eq!(targets, ["out.txt", "list.txt"]);
}

#[test]
fn unparsed_inputs() {
    for cmd in [
        "echo \"unterminated",
        "ls &&",
        "if true; then ls",
        "cat <<EOF\nno end",
        "coproc x { ls; }",
        "echo )",
    ] {
        assert!(
            normalize(cmd).unparsed.is_some(),
            "{cmd:?} should be unparsed"
        );
    }
    let within_limit = format!("{}ls", "nice ".repeat(15));
    assert!(normalize(&within_limit).unparsed.is_none());
    let nested = format!("{}ls", "nice ".repeat(20));
    let f = normalize(&nested);
    assert!(
        f.unparsed
            .as_deref()
            .is_some_and(|r| r.contains("nested deeper")),
        "{f:?}"
    );
    let huge = "a".repeat(airlock_core::shell::MAX_COMMAND_BYTES + 1);
    assert!(normalize(&huge).unparsed.is_some());
}

#[test]
fn large_and_deep_inputs_do_not_overflow() {
    // Within the bounds, long and nested commands parse completely.
    let chain = vec!["true"; 2_000].join(" && ");
    let f = normalize(&chain);
    assert_eq!(f.unparsed, None);
    assert_eq!(f.commands.len(), 2_000);
    let parens = format!("{}ls{}", "( ".repeat(60), " )".repeat(60));
    let f = normalize(&parens);
    assert_eq!(f.unparsed, None);
    assert_eq!(names(&f), ["ls"]);
    assert!(f.has_subshell);
    // Beyond them, the command is unparsed, for a reason that names the bound.
    let long_chain = vec!["true"; 50_000].join(" && ");
    let deep_parens = format!("{}ls{}", "( ".repeat(5_000), " )".repeat(5_000));
    let subst = format!("{}id{}", "$(echo ".repeat(2_000), ")".repeat(2_000));
    let expansions = format!("echo {}x{}", "${a:-".repeat(10_000), "}".repeat(10_000));
    for (cmd, bound) in [
        (&long_chain, "parsing work"),
        (&deep_parens, "nest"),
        (&subst, "nest"),
        (&expansions, "nest"),
    ] {
        let f = normalize(cmd);
        assert!(
            f.unparsed.as_deref().is_some_and(|r| r.contains(bound)),
            "{}…: {:?}",
            &cmd[..20],
            f.unparsed
        );
    }
}

#[test]
fn resolve_programs_fills_bare_names_only() {
    let mut f = parsed("ls | /bin/../usr/bin/grep x | $X | ./local");
    resolve_programs(&mut f, &|name| {
        (name == "ls").then(|| "/usr/bin//ls".to_string())
    });
    let resolved: Vec<Option<&str>> = f
        .commands
        .iter()
        .map(|c| c.resolved_path.as_deref())
        .collect();
    assert_eq!(
        resolved,
        [Some("/usr/bin/ls"), Some("/usr/bin/grep"), None, None]
    );
}

/// Programs that only read and print, for the GTFOBins sanity check below.
const READ_ONLY: &[&str] = &[
    "cat", "ls", "head", "tail", "grep", "wc", "sort", "uniq", "cut", "echo", "printf", "true",
    "false", "test", "[", "[[", "pwd", "id", "whoami", "date", "basename", "dirname", "tr",
    "export", "mktemp", "chmod", "stat", "file", "diff", "cmp", "tee", "env", "sleep",
];
const DANGEROUS_OPTIONS: &[&str] = &["-exec", "-execdir", "-ok", "-okdir", "--to-command", "-e"];

#[test]
fn gtfobins_dangerous_functions_show_more_than_plain_reads() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/eval/gtfobins/dev.jsonl"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "cannot read the GTFOBins development set at {path}: {e}\n\
             help: the repository expects `shared/` beside its checkout (../shared/eval/gtfobins/dev.jsonl)"
        )
    });
    let (mut total, mut dangerous, mut unparsed, mut arbitrary) = (0, 0, 0, 0);
    let mut missed = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let case: serde_json::Value = serde_json::from_str(line).expect("dev.jsonl line is JSON");
        let cmd = case["command"].as_str().expect("command is a string");
        let function = case["function"].as_str().expect("function is a string");
        let f = normalize(cmd);
        total += 1;
        unparsed += usize::from(f.unparsed.is_some());
        arbitrary += usize::from(f.runs_arbitrary_code);
        if !matches!(
            function,
            "shell" | "command" | "reverse-shell" | "bind-shell" | "library-load"
        ) {
            continue;
        }
        dangerous += 1;
        let beyond_reads = f.unparsed.is_some()
            || f.runs_arbitrary_code
            || f.commands.iter().any(|c| {
                !READ_ONLY.contains(&c.basename.as_str())
                    || c.options.iter().any(|o| {
                        DANGEROUS_OPTIONS.contains(&o.split_once(':').map_or("", |(_, opt)| opt))
                    })
            });
        if !beyond_reads {
            missed.push(format!("{function}: {cmd}"));
        }
    }
    println!(
        "gtfobins: {total} commands, {dangerous} dangerous, {unparsed} unparsed, {arbitrary} with arbitrary code"
    );
    assert!(
        total > 300,
        "the development set looks truncated: {total} lines"
    );
    assert!(
        missed.is_empty(),
        "dangerous cases that look like plain reads:\n{}",
        missed.join("\n")
    );
}

const TOKENS: &[&str] = &[
    "ls",
    "sh",
    "-c",
    "'",
    "\"",
    "`",
    "$(",
    ")",
    "(",
    "{",
    "}",
    ";",
    "&&",
    "||",
    "|",
    "&",
    ">",
    ">>",
    "<",
    "<<",
    "<<<",
    "EOF",
    "\n",
    "$x",
    "${a:-",
    "\\",
    "find",
    "-exec",
    "\\;",
    "xargs",
    "env",
    "A=1",
    "sudo",
    "if",
    "then",
    "fi",
    "for",
    "do",
    "done",
    "case",
    "esac",
    "*",
    "~",
    "$'",
    "<(",
    ">(",
    "#",
    " ",
    "eval",
    "awk",
    "'{print}'",
    "sed",
    "e",
    "git",
    "-C",
    "2>&1",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn random_strings_never_panic(s in "\\PC{0,200}") {
        let f = normalize(&s);
        prop_assert!(f.unparsed.is_some() || f.commands.iter().all(|c| c.dynamic_program || !c.program.is_empty() || c.runs_arbitrary_code.is_some()));
    }

    #[test]
    fn random_token_soup_never_panics(tokens in proptest::collection::vec(proptest::sample::select(TOKENS), 0..40)) {
        let cmd = tokens.join(" ");
        let f = normalize(&cmd);
        // Facts are internally consistent whatever the input.
        prop_assert_eq!(
            f.runs_arbitrary_code,
            !f.arbitrary_code_reasons.is_empty()
        );
    }
}

#[test]
fn benchmark_corpus_parses_completely() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../benches/corpus/commands.txt"
    );
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read the command corpus at {path}: {e}"));
    let commands: Vec<String> = text.lines().map(|l| l.replace("\\n", "\n")).collect();
    assert!(
        commands.len() >= 1_200,
        "corpus has {} commands",
        commands.len()
    );
    let failed: Vec<String> = commands
        .iter()
        .filter_map(|c| normalize(c).unparsed.map(|why| format!("{c}: {why}")))
        .collect();
    assert!(
        failed.is_empty(),
        "corpus commands that did not parse:\n{}",
        failed.join("\n")
    );
}
