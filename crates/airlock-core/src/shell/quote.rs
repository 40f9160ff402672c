//! Turning a word list (what follows `--` on the command line) into the one command string
//! the Gate parses and the sandbox's bash runs.
//!
//! One word is a shell command line already (`airlock exec -- 'ls -la | wc -l'`). Several
//! words are an argument vector, as `sudo` or `bwrap` take one: `airlock exec -- sh -c 'a b'`
//! must run `sh` with the two arguments `-c` and `a b`. Joining the words with spaces would
//! hand bash `sh -c a b` instead, so each word is quoted so that bash splits the line back
//! into exactly those words and expands nothing in them.

/// The command line for `words`: the word itself when there is one, otherwise every word
/// quoted for bash and joined with spaces. An empty list gives an empty line.
///
/// ```
/// use airlock_core::shell::command_line_from_words;
/// assert_eq!(command_line_from_words(&["ls -la | wc -l"]), "ls -la | wc -l");
/// assert_eq!(command_line_from_words(&["sh", "-c", "a b"]), "sh -c 'a b'");
/// assert_eq!(command_line_from_words(&["echo", "it's"]), r"echo 'it'\''s'");
/// ```
pub fn command_line_from_words<S: AsRef<str>>(words: &[S]) -> String {
    match words {
        [one] => one.as_ref().to_string(),
        _ => words
            .iter()
            .map(|w| quote_word(w.as_ref()))
            .collect::<Vec<_>>()
            .join(" "),
    }
}

/// `word` as one bash word with no expansion: left bare when every character is one bash
/// never treats specially (letters, digits and `_@%+:,./-`), otherwise in single quotes (inside which bash interprets
/// nothing), with each `'` written as `'\''`.
pub fn quote_word(word: &str) -> String {
    // `=` is left out: a bare `A=b` as the first word would be an assignment, not a program.
    let bare = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_@%+:,./-".contains(c));
    if bare {
        return word.to_string();
    }
    let mut out = String::with_capacity(word.len() + 2);
    out.push('\'');
    for c in word.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_word_is_a_command_line() {
        assert_eq!(command_line_from_words(&["a; b"]), "a; b");
    }

    #[test]
    fn several_words_are_quoted_one_by_one() {
        assert_eq!(
            command_line_from_words(&["sh", "-c", "echo $HOME; id", "", "A=b", "~"]),
            "sh -c 'echo $HOME; id' '' 'A=b' '~'"
        );
        assert_eq!(
            command_line_from_words(&["printf", r"%s\n", "it's"]),
            r"printf '%s\n' 'it'\''s'"
        );
        assert_eq!(command_line_from_words::<&str>(&[]), "");
    }

    /// What the Gate sees is the argument vector given: one command, these words.
    #[test]
    fn the_gate_reads_back_the_same_words() {
        let cases: &[&[&str]] = &[
            &["sh", "-c", "a b"],
            &[
                "echo", "$(id)", "`id`", "a;b", "x|y", "*", "?", "[a]", "{a,b}",
            ],
            &[
                "printf",
                "%s\\n",
                "it's",
                "\"quoted\"",
                "tab\there",
                "new\nline",
            ],
            &["A=b", "c"],
            &["grep", "-e", "", "--", "-x"],
        ];
        for words in cases {
            let line = command_line_from_words(words);
            let facts = super::super::normalize(&line);
            assert_eq!(facts.unparsed, None, "{line}");
            assert!(
                facts.assignments.is_empty(),
                "{line}: {:?}",
                facts.assignments
            );
            // Only the first command is one the line itself runs; any other is what the
            // Gate unwrapped from it (`sh -c 'a b'` runs `a`).
            let top: Vec<_> = facts.commands.iter().filter(|c| c.via.is_empty()).collect();
            assert_eq!(top.len(), 1, "{line}: {:?}", facts.commands);
            let cmd = &facts.commands[0];
            assert_eq!(cmd.program, words[0], "{line}");
            assert_eq!(cmd.args, words[1..], "{line}");
            assert!(!cmd.dynamic_program, "{line}");
        }
    }

    /// And bash splits the line into exactly those words, expanding nothing.
    #[test]
    fn bash_reads_back_the_same_words() {
        let words = [
            "printf", "%s\\0", "$HOME", "it's", "a b", "", "~", "*", "!x", "A=b",
        ];
        let line = command_line_from_words(&words);
        let out = std::process::Command::new("/bin/bash")
            .args(["--noprofile", "--norc", "-c", &line])
            .output()
            .expect("bash runs");
        assert!(out.status.success(), "{line}");
        let got: Vec<&[u8]> = out.stdout.split(|b| *b == 0).collect();
        let want: Vec<&[u8]> = words[2..]
            .iter()
            .map(|w| w.as_bytes())
            .chain([&b""[..]])
            .collect();
        assert_eq!(got, want, "{line}");
    }
}
