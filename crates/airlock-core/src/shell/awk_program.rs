//! A scanner for awk programs that finds what reaches beyond the input: `system()`,
//! pipes to or from commands (`print | "cmd"`, `"cmd" | getline`, `|&` coprocesses
//! and gawk's `/inet/` sockets), and output redirected to files (`print > "f"`).
//!
//! Written by hand because no crate parses awk; it only has to tell string literals,
//! regex literals and comments from code, then look for those operators in the code.

/// What an awk program does besides reading input and printing to standard output.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct AwkEffects {
    /// Why the program runs or talks to something outside, if it does.
    pub runs: Option<&'static str>,
    /// Files written by `print > target` / `printf … >> target`; the bool is "append".
    /// A target that is not a string literal is reported as its source text.
    pub writes: Vec<(String, bool, bool)>,
}

/// Scan an awk program.
pub(crate) fn scan(program: &str) -> AwkEffects {
    let code = code_only(program);
    let mut fx = AwkEffects::default();
    if program.contains("/inet/") {
        fx.runs = Some("awk opens a network socket (/inet/)");
    } else if contains_word_call(&code.text, "system") {
        fx.runs = Some("awk program calls system()");
    } else if code.text.contains("|&") {
        fx.runs = Some("awk program runs a coprocess (|&)");
    } else if has_single_pipe(&code.text) {
        fx.runs = Some("awk program pipes to or from a command");
    }
    find_output_redirections(&code, &mut fx);
    fx
}

/// The program with string, regex and comment contents blanked, plus the literals.
struct Code {
    /// Same length in chars as the program; literal contents replaced by spaces,
    /// each string literal's opening quote kept as `"`.
    text: String,
    /// String literal values, by the char index of their opening quote.
    literals: Vec<(usize, String)>,
}

fn code_only(program: &str) -> Code {
    let chars: Vec<char> = program.chars().collect();
    let mut text = String::with_capacity(program.len());
    let mut literals = Vec::new();
    let mut i = 0;
    // Whether a `/` here would start a regex (after an operator or at the start).
    let mut regex_allowed = true;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' => {
                let start = i;
                let mut value = String::new();
                text.push('"');
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' && i + 1 < chars.len() {
                        value.push(chars[i + 1]);
                        text.push(' ');
                        i += 1;
                    } else {
                        value.push(chars[i]);
                    }
                    text.push(' ');
                    i += 1;
                }
                if i < chars.len() {
                    text.push('"');
                    i += 1;
                }
                literals.push((start, value));
                regex_allowed = false;
                continue;
            }
            '/' if regex_allowed => {
                text.push(' ');
                i += 1;
                while i < chars.len() && chars[i] != '/' && chars[i] != '\n' {
                    if chars[i] == '\\' && i + 1 < chars.len() {
                        text.push(' ');
                        i += 1;
                    }
                    text.push(' ');
                    i += 1;
                }
                if i < chars.len() {
                    text.push(' ');
                    i += 1;
                }
                regex_allowed = false;
                continue;
            }
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    text.push(' ');
                    i += 1;
                }
                continue;
            }
            _ => {}
        }
        if !c.is_whitespace() {
            regex_allowed = !(c.is_alphanumeric() || c == '_' || c == ')' || c == ']' || c == '$');
        }
        text.push(c);
        i += 1;
    }
    Code { text, literals }
}

fn contains_word_call(code: &str, name: &str) -> bool {
    let chars: Vec<char> = code.chars().collect();
    let needle: Vec<char> = name.chars().collect();
    let mut i = 0;
    while i + needle.len() <= chars.len() {
        if chars[i..i + needle.len()] == needle[..] {
            let before_ok = i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
            let mut j = i + needle.len();
            while j < chars.len() && chars[j].is_whitespace() {
                j += 1;
            }
            if before_ok && chars.get(j) == Some(&'(') {
                return true;
            }
        }
        i += 1;
    }
    false
}

/// A `|` that is not part of `||`.
fn has_single_pipe(code: &str) -> bool {
    let bytes = code.as_bytes();
    bytes.iter().enumerate().any(|(i, &b)| {
        b == b'|' && bytes.get(i + 1) != Some(&b'|') && (i == 0 || bytes[i - 1] != b'|')
    })
}

/// `print … > target` and `printf … >> target`, where the `>` follows a print statement
/// with no `(` left open (inside parentheses `>` compares).
fn find_output_redirections(code: &Code, fx: &mut AwkEffects) {
    let chars: Vec<char> = code.text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let at_print = chars[i..].starts_with(&['p', 'r', 'i', 'n', 't'])
            && (i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_'));
        if !at_print {
            i += 1;
            continue;
        }
        let mut j = i + 5;
        let mut depth = 0i32;
        while j < chars.len() && !matches!(chars[j], ';' | '\n' | '}') {
            match chars[j] {
                '(' => depth += 1,
                ')' => depth -= 1,
                '>' if depth == 0 => {
                    let append = chars.get(j + 1) == Some(&'>');
                    let mut k = j + if append { 2 } else { 1 };
                    while chars.get(k).is_some_and(|c| c.is_whitespace()) {
                        k += 1;
                    }
                    let (target, literal) = match code.literals.iter().find(|(s, _)| *s == k) {
                        Some((_, value)) => (value.clone(), true),
                        None => {
                            let end = (k..chars.len())
                                .find(|&e| matches!(chars[e], ';' | '\n' | '}' | ' '))
                                .unwrap_or(chars.len());
                            (chars[k..end].iter().collect::<String>(), false)
                        }
                    };
                    fx.writes.push((target, append, !literal));
                    break;
                }
                _ => {}
            }
            j += 1;
        }
        i = j.max(i + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_programs() {
        let fx = scan("{ print $1 } /a|b/ { n++ } END { if (n > 2 || x) print n }");
        assert_eq!(fx, AwkEffects::default());
        assert_eq!(scan("{ print \"system(x) | y\" }"), AwkEffects::default());
    }

    #[test]
    fn commands_and_sockets() {
        assert!(scan("BEGIN { system(\"id\") }").runs.is_some());
        assert!(scan("BEGIN { \"id\" | getline x }").runs.is_some());
        assert!(scan("{ print | \"sort\" }").runs.is_some());
        assert!(scan("BEGIN { s = \"/inet/tcp/0/h/1\"; print 1 |& s }")
            .runs
            .is_some());
    }

    #[test]
    fn file_writes() {
        let fx = scan("{ print $0 > \"out.txt\"; printf \"x\" >> f }");
        assert_eq!(
            fx.writes,
            [
                ("out.txt".to_string(), false, false),
                ("f".to_string(), true, true)
            ]
        );
        assert!(scan("{ print ($1 > 3) }").writes.is_empty());
    }
}
