//! What a program does with its arguments, as found by the wrapper and code-runner rules.

use super::words::Word;
use super::{RedirectKind, Redirection};

/// A command that a program runs on the caller's behalf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Inner {
    /// An argument vector run directly (`env ls -l`, `find -exec rm {} ;`).
    Argv(Vec<Word>),
    /// A string run by a shell (`sh -c '…'`, `watch 'ls | wc'`, `su -c`).
    Script(Word),
}

/// The facts one rule found about a program invocation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Inspection {
    /// The arguments that belong to the program itself, for option facts
    /// (a wrapper's options end where the wrapped command begins).
    pub own_args: Option<Vec<Word>>,
    /// Commands run on the caller's behalf.
    pub inner: Vec<Inner>,
    /// Why the program runs code that cannot be seen, if it does.
    pub arbitrary: Option<String>,
    /// Files the program reads or writes because of its script (`sed w`, `awk print >`).
    pub file_effects: Vec<Redirection>,
    /// Environment names the program sets for the wrapped command (`env NAME=value`).
    pub assignments: Vec<String>,
}

impl Inspection {
    /// An inspection whose only finding is a reason for arbitrary code.
    pub(crate) fn arbitrary(reason: impl Into<String>) -> Self {
        Inspection {
            arbitrary: Some(reason.into()),
            ..Inspection::default()
        }
    }

    /// Record a file effect of `kind` on `target`.
    pub(crate) fn file(&mut self, kind: RedirectKind, target: &Word) {
        self.file_effects.push(Redirection {
            kind,
            target: target.text.clone(),
            dynamic: target.dynamic,
        });
    }

    /// Keep the first reason found; later ones add nothing the policy needs.
    pub(crate) fn set_arbitrary(&mut self, reason: impl Into<String>) {
        if self.arbitrary.is_none() {
            self.arbitrary = Some(reason.into());
        }
    }
}

/// Join words the way `eval`, `watch` and `ssh` join their arguments: with single spaces.
/// `None` if any word is dynamic, because the joined string is then unknown.
pub(crate) fn join_static(words: &[Word]) -> Option<Word> {
    if words.iter().any(|w| w.dynamic) {
        return None;
    }
    let text = words
        .iter()
        .map(|w| w.text.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    Some(Word::literal(text))
}

/// Join words into a script; a dynamic word makes the whole script dynamic.
pub(crate) fn join_script(words: &[Word]) -> Word {
    join_static(words).unwrap_or_else(|| Word {
        text: words
            .iter()
            .map(|w| w.text.as_str())
            .collect::<Vec<_>>()
            .join(" "),
        dynamic: true,
    })
}

/// `NAME=value` with a valid shell name, as `env` and `sudo` accept before the command.
pub(crate) fn env_assignment_name(word: &Word) -> Option<&str> {
    if word.dynamic {
        return None;
    }
    let (name, _) = word.text.split_once('=')?;
    let mut chars = name.chars();
    let first = chars.next()?;
    if (first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        Some(name)
    } else {
        None
    }
}

/// Arguments that only ask a program for its version or usage.
pub(crate) fn only_info_flags(args: &[Word]) -> bool {
    !args.is_empty()
        && args.iter().all(|a| {
            !a.dynamic
                && matches!(
                    a.text.as_str(),
                    "--version" | "-V" | "-version" | "--help" | "-h" | "-help"
                )
        })
}
