//! The Gate reads a command as the shell that runs it does, or calls it unparsed.
//!
//! The sandbox runs the command line with bash. Text that bash and tree-sitter-bash read
//! differently (control characters, `$'…'` escapes the grammar gets wrong) and text
//! that a string-running program hands to `/bin/sh` (dash), which reads bash syntax
//! differently, must never produce a list of commands shorter than what runs.

use airlock_core::shell::normalize;

fn unparsed_because(cmd: &str, why: &str) {
    let f = normalize(cmd);
    let reason = f
        .unparsed
        .unwrap_or_else(|| panic!("{cmd:?} was parsed as {:?}", f.commands));
    assert!(reason.contains(why), "{cmd:?}: {reason}");
}

/// `text` as one single-quoted shell word.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

#[test]
fn i2_control_characters_make_a_command_unparsed() {
    for c in [
        '\r', '\x0c', '\x0b', '\x1b', '\x7f', '\x01', '\0', '\u{85}', '\u{9b}',
    ] {
        unparsed_because(&format!("ls{c}# ; rm -rf ./important"), "control character");
        unparsed_because(&format!("echo a{c}b"), "control character");
        // Inside a string that another shell runs, after decoding.
        unparsed_because(
            &format!("sh -c 'ls{c}# ; rm -rf ./important'"),
            "control character",
        );
    }
    // `$'\r'` that decodes into a string a shell runs.
    unparsed_because(
        "bash -c $'ls\\r# ; rm -rf ./important'",
        "control character",
    );
    unparsed_because("sh -c $'ls\\f# ; rm -rf ./important'", "control character");
    unparsed_because("eval $'ls\\v# ; rm -rf ./important'", "control character");
    // As an argument, a decoded control character is data, not syntax.
    let f = normalize("printf $'a\\rb'");
    assert_eq!(f.unparsed, None);
    // Tab and newline are the shell's own blanks.
    let f = normalize("ls\t-l\necho ok");
    assert_eq!(f.unparsed, None);
    assert_eq!(f.commands.len(), 2);
}

#[test]
fn i2_an_ansi_c_string_ends_where_bash_ends_it() {
    // tree-sitter-bash lets `\\'` escape the quote; bash ends the string there and runs
    // the rest.
    unparsed_because("echo $'\\\\' ; rm -rf ./important ; # '", "ends earlier");
    unparsed_because("echo $'a\\\\' ; id ; # '", "ends earlier");
    for ok in [
        "echo $'a\\'b'",
        "echo $'\\\\'",
        "echo $'it\\'s'",
        "echo $''",
    ] {
        let f = normalize(ok);
        assert_eq!(f.unparsed, None, "{ok:?}");
        assert_eq!(f.commands.len(), 1, "{ok:?}");
    }
}

#[test]
fn i2_bash_syntax_in_a_string_for_a_posix_shell_is_unparsed() {
    // One `echo` to bash, three commands to dash.
    unparsed_because(
        "sh -c \"echo \\$'\\\\' ; echo HIDDEN ; # '\"",
        "POSIX shell",
    );
    for (inner, what) in [
        ("echo $'x'", "`$'…'`"),
        ("[[ a && b ]]", "`[[`"),
        ("((x=1))", "`((`"),
        ("cat <<< x", "`<<<`"),
        ("ls |& cat", "`|&`"),
        ("ls &> out", "`&>`"),
        ("a=(1 2)", "array"),
        ("echo ${x:1:2}", "parameter expansion"),
        ("echo ${x/a/b}", "parameter expansion"),
        ("echo ${!x}", "parameter expansion"),
        ("echo $[1+2]", "`$[…]`"),
        ("function f { id; }", "`function`"),
        ("for ((i=0;i<2;i++)); do id; done", "`for ((…))`"),
        ("diff <(ls) <(ls)", "process substitution"),
    ] {
        for runner in ["sh -c", "dash -c", "su -c", "watch", "flock /tmp/l -c"] {
            let cmd = format!("{runner} {}", quoted(inner));
            unparsed_because(&cmd, what);
        }
        // bash runs its own syntax; the same string parses there.
        let f = normalize(&format!("bash -c {}", quoted(inner)));
        assert_eq!(f.unparsed, None, "bash -c '{inner}'");
    }
    // eval runs in the shell it is in.
    unparsed_because("sh -c \"eval 'echo \\$[1]'\"", "POSIX shell");
    assert_eq!(normalize("eval 'echo $[1]'").unparsed, None);
    // What bash and dash read alike still parses inside `sh -c`.
    let f = normalize("sh -c 'ls -l | wc -l; echo ${HOME:-/} $((1+2)) \"$(id -u)\"'");
    assert_eq!(f.unparsed, None);
    let names: Vec<&str> = f.commands.iter().map(|c| c.basename.as_str()).collect();
    assert_eq!(names, ["sh", "ls", "wc", "echo", "id"]);
}

#[test]
fn i2_shells_with_their_own_grammar_run_arbitrary_code() {
    for shell in ["zsh", "ksh", "mksh", "fish", "csh", "tcsh", "yash"] {
        let f = normalize(&format!("{shell} -c 'echo *(e:id:)'"));
        assert!(f.runs_arbitrary_code, "{shell}: {f:?}");
    }
    for shell in ["sh", "bash", "dash"] {
        let f = normalize(&format!("{shell} -c 'ls'"));
        assert!(!f.runs_arbitrary_code, "{shell}: {f:?}");
    }
}

/// Found by the differential test: tree-sitter-bash ends a here-document at a line that
/// starts with the delimiter (`EOF || id`), bash only at a line holding it alone, so
/// everything after stays in the (expanded) body and its substitutions run.
#[test]
fn i2_a_here_document_ends_only_where_bash_ends_it() {
    unparsed_because(
        "cat <<EOF\nx\nEOF || ls\n$(id)\n",
        "here-document delimiter",
    );
    unparsed_because("cat <<EOF\nx\nEOF; echo $(id)\n", "here-document delimiter");
    unparsed_because("cat <<'EOF'\nx\n EOF\n", "");
    for ok in [
        "cat <<EOF\nx $(id)\nEOF\necho done",
        "cat <<-EOF\n\tx\n\tEOF\necho done",
        "cat <<'EOF' > out\nx\nEOF",
    ] {
        let f = normalize(ok);
        assert_eq!(f.unparsed, None, "{ok:?}");
    }
}

/// Found by the differential test: inside backquotes bash unescapes `\\`, `` \` `` and
/// `\$` before parsing, the grammar does not, so the two could see other commands.
#[test]
fn i2_a_backquoted_substitution_with_a_backslash_is_unparsed() {
    unparsed_because(
        "echo `timeout 5 wc \"$(bash -c 'sort '\\''x'\\'' ')\"`",
        "backquoted",
    );
    unparsed_because("echo `echo \\`id\\``", "backquoted");
    unparsed_because("echo `echo \\$(id)`", "backquoted");
    let f = normalize("echo `id -u` $(echo \\$x)");
    assert_eq!(f.unparsed, None);
}

/// Found by the differential test: after a pipeline of three commands, tree-sitter-bash
/// reads a newline as a blank, so `c⏎cat <<EOF` became `c cat`; bash runs `cat`.
#[test]
fn i2_a_line_break_ends_a_command_for_the_gate_as_for_bash() {
    unparsed_because("a | b | c\ncat <<EOF\nx\nEOF\ntrue", "line break");
    let f = normalize("ls -l \\\n  -a\necho ok");
    assert_eq!(f.unparsed, None);
    assert_eq!(f.commands.len(), 2);
    let f = normalize("a | b\ncat <<EOF\nx\nEOF\ntrue");
    assert_eq!(f.unparsed, None);
    assert_eq!(f.commands.len(), 4);
}

/// Found by the differential test: `` `date ` `dirname x` `` was one substitution whose
/// program was the word "date` `dirname"; bash runs `date` and `dirname`.
#[test]
fn i2_backquotes_pair_for_the_gate_as_for_bash() {
    unparsed_because("cat `date ` `dirname x`", "backquotes");
    unparsed_because("cat `date` `dirname x`", "backquotes");
    let f = normalize("cat `date` x `dirname x`");
    assert_eq!(f.unparsed, None);
    let names: Vec<&str> = f.commands.iter().map(|c| c.basename.as_str()).collect();
    assert_eq!(names, ["cat", "date", "dirname"]);
}

/// Bash evaluates a variable named in arithmetic as an expression, and a subscript in its
/// value runs command substitutions, so the programs such a command runs are not all in
/// the text: it runs arbitrary code. Arithmetic on literal numbers stays plain.
#[test]
fn i2_arithmetic_on_a_variable_runs_arbitrary_code() {
    for cmd in [
        "x='a[$(id)]'; echo $((x))",
        "x='a[$(id)]'; (( x ))",
        "echo $(( y + 1 ))",
        "echo $(( $n * 2 ))",
    ] {
        let f = airlock_core::shell::normalize(cmd);
        assert!(f.unparsed.is_none(), "{cmd}: {:?}", f.unparsed);
        assert!(f.runs_arbitrary_code, "{cmd}: {f:?}");
        assert!(
            f.arbitrary_code_reasons
                .iter()
                .any(|r| r.contains("arithmetic on a variable")),
            "{cmd}: {:?}",
            f.arbitrary_code_reasons
        );
    }
    for cmd in ["echo $((1+7))", "(( 2 > 1 )) && echo yes"] {
        let f = airlock_core::shell::normalize(cmd);
        assert!(
            !f.runs_arbitrary_code,
            "{cmd}: {:?}",
            f.arbitrary_code_reasons
        );
    }
}
