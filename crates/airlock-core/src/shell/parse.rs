//! Tree walking: a tree-sitter-bash parse becomes simple commands, redirections,
//! assignments and structure flags in a [`Collector`].
//!
//! The walk is iterative (an explicit stack), so a deeply nested or very long command
//! line cannot overflow the stack; only word evaluation recurses, and it is bounded.

use std::collections::HashSet;

use tree_sitter::{Node, ParseOptions, Parser};

use super::analyze::{analyze, Collector, Dialect, Scope};
use super::bounds;
use super::words::{eval_word, is_word_kind, Word};
use super::{RedirectKind, Redirection};

/// Parse `src` and add its facts to `c`, in the given scope.
pub(crate) fn parse_into(c: &mut Collector, src: &str, scope: &Scope) {
    if c.facts.unparsed.is_some() {
        return;
    }
    // Every string parsed (the command line, `sh -c` strings, eval's words, backquotes in
    // here-documents) passes the same bounds: a decoded `$'…'` can hold a control
    // character that the outer text did not.
    if let Some(reason) = bounds::precheck(src) {
        c.unparsed(reason);
        return;
    }
    let mut parser = Parser::new();
    if parser
        .set_language(&tree_sitter_bash::LANGUAGE.into())
        .is_err()
    {
        c.unparsed("the bash grammar could not be loaded".into());
        return;
    }
    // The grammar's external scanner passes characters to C `isdigit`/`isalpha`, which
    // is undefined (and crashes) for code points above 255. The parser therefore sees
    // each non-ASCII byte as `%`, an ordinary word character to bash as non-ASCII
    // letters are, and offsets stay equal so every node's text is read from `src`.
    let ascii: Vec<u8> = src
        .bytes()
        .map(|b| if b.is_ascii() { b } else { b'%' })
        .collect();
    // tree-sitter calls back every 100 operations; the work of all the parses of one
    // command line is bounded together, and a parse that would exceed it is cut off.
    const OPS_PER_CALL: usize = 100;
    let spent_before = c.parse_ops;
    let mut spent = spent_before;
    let mut progress = |_: &tree_sitter::ParseState| {
        spent += OPS_PER_CALL;
        spent > bounds::MAX_PARSE_OPS
    };
    let mut input = |at: usize, _| ascii.get(at..).unwrap_or_default();
    let tree = parser.parse_with_options(
        &mut input,
        None,
        Some(ParseOptions::new().progress_callback(&mut progress)),
    );
    c.parse_ops = spent;
    let Some(tree) = tree else {
        c.unparsed(if spent > bounds::MAX_PARSE_OPS {
            format!(
                "the command needs more parsing work than the {} operations allowed",
                bounds::MAX_PARSE_OPS
            )
        } else {
            "the parser gave no result".into()
        });
        return;
    };
    let root = tree.root_node();
    c.nodes = c.nodes.saturating_add(root.descendant_count());
    if c.nodes > bounds::MAX_NODES {
        c.unparsed(format!(
            "the command has more than {} syntax nodes",
            bounds::MAX_NODES
        ));
        return;
    }
    Walker {
        c,
        src,
        scope,
        skip: HashSet::new(),
        herestrings: HashSet::new(),
        read_write: HashSet::new(),
    }
    .walk(root);
}

struct Walker<'a, 'c> {
    c: &'c mut Collector,
    src: &'a str,
    scope: &'a Scope,
    /// ERROR nodes explained by a known grammar gap (see [`Walker::repair_redirects`]).
    skip: HashSet<usize>,
    /// `file_redirect` nodes that are really the tail of a `<<<` here-string.
    herestrings: HashSet<usize>,
    /// `file_redirect` nodes that are really the tail of a `<>` read-write redirect.
    read_write: HashSet<usize>,
}

/// Bash's reserved words (but `time` and `coproc`, which are handled as commands).
const RESERVED_WORDS: &[&str] = &[
    "!", "{", "}", "[[", "]]", "case", "do", "done", "elif", "else", "esac", "fi", "for",
    "function", "if", "in", "select", "then", "until", "while",
];

/// Statement node kinds, for counting list members.
fn is_statement(kind: &str) -> bool {
    matches!(
        kind,
        "command"
            | "pipeline"
            | "list"
            | "subshell"
            | "compound_statement"
            | "redirected_statement"
            | "if_statement"
            | "for_statement"
            | "c_style_for_statement"
            | "while_statement"
            | "case_statement"
            | "function_definition"
            | "declaration_command"
            | "unset_command"
            | "test_command"
            | "negated_command"
            | "variable_assignment"
            | "variable_assignments"
    )
}

impl Walker<'_, '_> {
    fn text(&self, node: Node) -> &str {
        super::words::source(self.src, node).unwrap_or("\u{fffd}")
    }

    fn pos(&self, node: Node) -> usize {
        self.scope.anchor.unwrap_or(node.start_byte())
    }

    fn word(&mut self, node: Node) -> Word {
        match eval_word(node, self.src) {
            Ok(w) => w,
            Err(_) => {
                self.c.unparsed("a word is nested too deeply".into());
                Word {
                    text: self.text(node).to_string(),
                    dynamic: true,
                }
            }
        }
    }

    fn walk(&mut self, root: Node) {
        // Parents travel with their children: `Node::parent` searches from the root,
        // which would make long lists quadratic.
        let mut stack: Vec<(Node, Option<Node>)> = vec![(root, None)];
        while let Some((node, parent)) = stack.pop() {
            if self.c.facts.unparsed.is_some() {
                return;
            }
            if node.is_error() && !self.skip.contains(&node.id()) {
                let snippet: String = self.text(node).chars().take(40).collect();
                self.c.unparsed(format!(
                    "syntax error at byte {} near `{snippet}`",
                    node.start_byte()
                ));
                return;
            }
            if node.is_missing() {
                self.c.unparsed(format!(
                    "incomplete command: missing `{}` at byte {}",
                    node.kind(),
                    node.start_byte()
                ));
                return;
            }
            self.visit(node, parent);
            let mut cursor = node.walk();
            let children: Vec<Node> = node.children(&mut cursor).collect();
            stack.extend(children.into_iter().rev().map(|c| (c, Some(node))));
        }
    }

    fn visit(&mut self, node: Node, parent: Option<Node>) {
        let kind = node.kind();
        if self.scope.dialect == Dialect::Posix {
            if let Some(what) = bash_only(node, self.text(node)) {
                self.c.unparsed(format!(
                    "{what} in a string run by a POSIX shell, which reads it differently than bash"
                ));
                return;
            }
        }
        if kind == "ansi_c_string" && !ansi_c_string_ends_at_its_end(self.text(node)) {
            self.c.unparsed(format!(
                "the `$'…'` string at byte {} ends earlier for bash than for the parser",
                node.start_byte()
            ));
            return;
        }
        // The grammar reads `==` or `=~` as the start of a regular expression even where
        // no `[[ … ]]` test is open (`$(echo == ; rm -rf y)`), and the "regex" then
        // swallows the rest of the command: bash runs `rm`, the tree shows one argument.
        // A regex belongs only on the right of a test's binary operator, or as the pattern
        // of a parameter expansion (`${f%.txt}`, `${x/a/b}`).
        if kind == "regex"
            && !parent.is_some_and(|p| matches!(p.kind(), "binary_expression" | "expansion"))
        {
            self.c.unparsed(format!(
                "the parser read the text at byte {} as a regular expression outside a \
                 `[[ … ]]` test; bash reads words and commands there",
                node.start_byte()
            ));
            return;
        }
        if kind == "command_substitution"
            && self.text(node).starts_with('`')
            && self.text(node).contains('\\')
        {
            // Inside backquotes bash removes the backslash of `\\`, `\``, `\$` before
            // it parses the text again; the grammar parses the raw text.
            self.c.unparsed(format!(
                "the backquoted substitution at byte {} holds a backslash, which bash \
                 removes before it reads the command; use $(…) instead",
                node.start_byte()
            ));
            return;
        }
        let stray_backquote = match kind {
            "word" => has_unescaped_backquote(self.text(node)),
            // A bare piece of a concatenation is literal text to the Gate.
            _ if !node.is_named() => {
                parent.is_some_and(|p| p.kind() == "concatenation")
                    && has_unescaped_backquote(self.text(node))
            }
            _ => false,
        };
        if stray_backquote {
            // An unquoted backquote always starts or ends a substitution in bash; in a
            // plain word it means the grammar paired the backquotes differently
            // (`` `date ` `id` `` read as one substitution running `date` `id`).
            self.c.unparsed(format!(
                "the parser paired the backquotes near byte {} differently than bash",
                node.start_byte()
            ));
            return;
        }
        if kind == "command" {
            if let Some(at) = self.line_break_between_words(node) {
                self.c.unparsed(format!(
                    "the parser read the line break at byte {at} as a blank inside one \
                     command; bash ends the command there"
                ));
                return;
            }
            if let Some(at) = self.separator_inside_a_word(node) {
                self.c.unparsed(format!(
                    "the parser read the operator at byte {at} as part of a word of one \
                     command; bash ends the word (and maybe the command) there"
                ));
                return;
            }
        }
        if let Some(at) = self.continuation_inside_a_word(node) {
            self.c.unparsed(format!(
                "the words at byte {at} are one word for bash, joined by a line \
                 continuation; the parser read them apart"
            ));
            return;
        }
        if kind == "heredoc_end" && !self.alone_on_its_line(node) {
            self.c.unparsed(format!(
                "the here-document delimiter at byte {} shares its line with other text; \
                 bash ends a here-document only at a line holding the delimiter alone",
                node.start_byte()
            ));
            return;
        }
        if !node.is_named() {
            if kind == "&" {
                self.c.facts.has_background = true;
            }
            return;
        }
        self.count_statements(node);
        match kind {
            "command" => self.command(node, parent),
            "declaration_command" | "unset_command" => self.declaration(node),
            "test_command" => self.test_command(node),
            "variable_assignment" => self.assignment(node, parent),
            "file_redirect" => self.file_redirect(node),
            "heredoc_redirect" | "herestring_redirect" => self.c.facts.has_heredoc = true,
            "heredoc_body" => self.heredoc_body(node, parent),
            "pipeline" => self.c.facts.has_pipeline = true,
            "list" => self.c.facts.has_list = true,
            "subshell" => self.c.facts.has_subshell = true,
            "command_substitution" => self.c.facts.has_command_substitution = true,
            "process_substitution" => self.c.facts.has_process_substitution = true,
            "if_statement"
            | "for_statement"
            | "c_style_for_statement"
            | "while_statement"
            | "case_statement"
            | "function_definition" => {
                self.c.facts.has_compound = true;
            }
            "arithmetic_expansion" => {
                self.c.facts.has_compound = true;
                self.arithmetic(node);
            }
            "compound_statement" if node.child(0).is_some_and(|c| c.kind() == "((") => {
                self.c.facts.has_compound = true;
                self.arithmetic(node);
            }
            _ => {}
        }
        if kind == "redirected_statement" {
            self.repair_redirects(node);
        }
    }

    /// Arithmetic that names a variable runs code the Gate cannot see: bash evaluates the
    /// variable's value as an expression in turn, and an array subscript inside it runs
    /// command substitutions (`x='a[$(id)]'; echo $((x))` runs `id`). Arithmetic on
    /// literal numbers only is harmless.
    fn arithmetic(&mut self, node: Node) {
        let text = &self.src[node.byte_range()];
        let names_a_variable = text
            .trim_start_matches(['$', '('])
            .bytes()
            .any(|b| b.is_ascii_alphabetic() || b == b'_');
        if names_a_variable {
            self.c.facts.runs_arbitrary_code = true;
            self.c.facts.arbitrary_code_reasons.push(
                "arithmetic on a variable: bash evaluates its value, and a subscript in it can run commands"
                    .into(),
            );
        }
    }

    /// A newline between two words of one simple command, other than a line
    /// continuation. tree-sitter-bash reads `a | b | c⏎cat <<EOF` as `c cat`, hiding
    /// `cat`; bash ends a command at an unescaped newline.
    fn line_break_between_words(&self, command: Node) -> Option<usize> {
        let bytes = self.src.as_bytes();
        let mut cursor = command.walk();
        let children: Vec<Node> = command.children(&mut cursor).collect();
        for pair in children.windows(2) {
            let (from, to) = (pair[0].end_byte(), pair[1].start_byte());
            for at in from..to.min(bytes.len()) {
                if bytes[at] == b'\n' && (at == 0 || bytes[at - 1] != b'\\') {
                    return Some(at);
                }
            }
        }
        None
    }

    /// An unescaped operator character inside a plain word of `command`, or of a
    /// concatenation in it. Bash ends a word at `;`, `&`, `|`, `(`, `)`, `<`, `>` (and a
    /// command at most of them), so a word of the tree that holds one is a misreading: the
    /// grammar once took `== ; rm -rf y` inside `$(…)` for one regular expression and hid
    /// `rm`. This is the general check behind that one; quoted text, substitutions and
    /// expansions are separate nodes and are not looked into here (their own commands
    /// are checked when the walk reaches them).
    fn separator_inside_a_word(&self, command: Node) -> Option<usize> {
        let bytes = self.src.as_bytes();
        let mut stack: Vec<Node> = {
            let mut cursor = command.walk();
            command.children(&mut cursor).collect()
        };
        while let Some(n) = stack.pop() {
            match n.kind() {
                "concatenation" | "command_name" => {
                    let mut cursor = n.walk();
                    stack.extend(n.children(&mut cursor));
                }
                "word" | "regex" | "extglob_pattern" => {
                    let mut escaped = false;
                    let start = n.start_byte().min(bytes.len());
                    let end = n.end_byte().min(bytes.len());
                    for (i, b) in bytes[start..end].iter().enumerate() {
                        match b {
                            _ if escaped => escaped = false,
                            b'\\' => escaped = true,
                            b';' | b'&' | b'|' | b'(' | b')' | b'<' | b'>' => {
                                return Some(start + i)
                            }
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        None
    }

    /// A line continuation between two children of `node` with no blank on either side.
    /// Bash removes a backslash-newline before it splits words, so `r\⏎m -rf x`
    /// runs `rm`; tree-sitter-bash reads the continuation as a blank (`r` with argument
    /// `m`), which hid the program from the Gate.
    fn continuation_inside_a_word(&self, node: Node) -> Option<usize> {
        let bytes = self.src.as_bytes();
        // Blanks and operators end a word for bash too.
        let blank = |b: u8| b" \t\n;&|()<>".contains(&b);
        let mut cursor = node.walk();
        let children: Vec<Node> = node.children(&mut cursor).collect();
        for pair in children.windows(2) {
            let (from, to) = (pair[0].end_byte(), pair[1].start_byte().min(bytes.len()));
            if from >= to || from == 0 || to >= bytes.len() {
                continue;
            }
            let gap = &bytes[from..to];
            let only_continuations = !gap.is_empty() && gap.chunks(2).all(|c| c == b"\\\n");
            if only_continuations && !blank(bytes[from - 1]) && !blank(bytes[to]) {
                return Some(from);
            }
        }
        None
    }

    /// Whether `node` is alone on its line, but for leading tabs (`<<-` strips them).
    fn alone_on_its_line(&self, node: Node) -> bool {
        let bytes = self.src.as_bytes();
        let before = &bytes[..node.start_byte().min(bytes.len())];
        let line_start = before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        let after = &bytes[node.end_byte().min(bytes.len())..];
        let rest = after
            .iter()
            .position(|&b| b == b'\n')
            .map_or(after, |i| &after[..i]);
        before[line_start..].iter().all(|&b| b == b'\t') && rest.is_empty()
    }

    /// More than one statement in one body is a list (`a; b`, newline-separated).
    fn count_statements(&mut self, node: Node) {
        let mut cursor = node.walk();
        let mut count = 0;
        for (i, child) in node.children(&mut cursor).enumerate() {
            let field = node.field_name_for_child(i as u32);
            if child.is_named() && is_statement(child.kind()) && field.is_none() {
                count += 1;
            }
        }
        if count > 1 && node.kind() != "pipeline" && node.kind() != "list" {
            self.c.facts.has_list = true;
        }
    }

    /// tree-sitter-bash gaps with a certain reading: `2>&1 <<< word` parses as an ERROR
    /// `<<` followed by `< word`; `<> file` as `<`, ERROR `>`, `file` (handled in
    /// [`Walker::file_redirect`]) or, after an argument, as ERROR `<` followed by `> file`.
    fn repair_redirects(&mut self, node: Node) {
        let mut cursor = node.walk();
        let children: Vec<Node> = node.children(&mut cursor).collect();
        for pair in children.windows(2) {
            let (err, next) = (pair[0], pair[1]);
            if err.is_error()
                && self.text(err) == "<<"
                && next.kind() == "file_redirect"
                && next.start_byte() == err.end_byte()
                && self.text(next).starts_with('<')
            {
                self.skip.insert(err.id());
                self.herestrings.insert(next.id());
            }
            let err_text = self.text(err);
            if err.is_error()
                && err_text.ends_with('<')
                && err_text[..err_text.len() - 1]
                    .chars()
                    .all(|c| c.is_ascii_digit())
                && next.kind() == "file_redirect"
                && next.start_byte() == err.end_byte()
                && self.text(next).starts_with('>')
                && !self.text(next).starts_with(">>")
                && !self.text(next).starts_with(">&")
            {
                self.skip.insert(err.id());
                self.read_write.insert(next.id());
            }
        }
    }

    fn command(&mut self, node: Node, parent: Option<Node>) {
        let mut words = Vec::new();
        let mut prefix = Vec::new();
        let mut cursor = node.walk();
        let mut has_name = false;
        let mut last_word_end = None;
        for (i, child) in node.children(&mut cursor).enumerate() {
            let field = node.field_name_for_child(i as u32);
            let end = child.end_byte();
            let last_end = last_word_end;
            if matches!(field, Some("name" | "argument")) {
                last_word_end = Some(end);
            }
            let last_word_end = last_end;
            match field {
                Some("name") => {
                    has_name = true;
                    let raw = self.text(child);
                    if RESERVED_WORDS.contains(&raw) {
                        // Bash reads an unquoted reserved word in command position as
                        // syntax, never as a program: the grammar misread the structure
                        // (`! { rm -rf x; }` came out as a program `{` with arguments).
                        self.c.unparsed(format!(
                            "the reserved word `{raw}` at byte {} stands where the parser \
                             expected a program",
                            child.start_byte()
                        ));
                        return;
                    }
                    if let Some(w) = child.named_child(0) {
                        let word = self.word(w);
                        words.push(word);
                    }
                }
                Some("argument") => {
                    if last_word_end == Some(child.start_byte()) {
                        // Two words with nothing between them are one word to bash; the
                        // grammar splits `$"…"` so (`echo $"a"b`: arguments `$` and `ab`).
                        self.c.unparsed(format!(
                            "the words at byte {} are one word for bash; the parser read \
                             them apart",
                            child.start_byte()
                        ));
                        return;
                    }
                    let word = self.word(child);
                    words.push(word);
                }
                _ => {
                    if child.kind() == "variable_assignment" {
                        if let Some(name) = assignment_name(child, self.src) {
                            prefix.push(name);
                        }
                    }
                }
            }
        }
        if !has_name || words.is_empty() {
            return;
        }
        // tree-sitter-bash attaches words after a redirect target to the redirect
        // (`cat > f a b`); bash passes them to the command.
        for redirect in self.redirects_of(node, parent) {
            let mut rc = redirect.walk();
            let extra: Vec<Node> = redirect
                .children_by_field_name("destination", &mut rc)
                .skip(1)
                .collect();
            for e in extra {
                let word = self.word(e);
                words.push(word);
            }
        }
        if words[0].text == "coproc" && !words[0].dynamic {
            self.c.unparsed("`coproc` is not supported".into());
            return;
        }
        let pos = self.pos(node);
        analyze(self.c, words, &prefix, self.scope, pos);
    }

    /// Redirects that apply to `command`: its own and its redirected_statement's.
    fn redirects_of<'t>(&self, command: Node<'t>, parent: Option<Node<'t>>) -> Vec<Node<'t>> {
        let mut out = Vec::new();
        let mut cursor = command.walk();
        out.extend(
            command
                .children(&mut cursor)
                .filter(|c| c.kind() == "file_redirect"),
        );
        if let Some(parent) = parent {
            let is_body = parent.kind() == "redirected_statement"
                && parent
                    .child_by_field_name("body")
                    .is_some_and(|b| b.id() == command.id());
            if is_body {
                let mut pc = parent.walk();
                out.extend(
                    parent
                        .children(&mut pc)
                        .filter(|c| c.kind() == "file_redirect"),
                );
            }
        }
        out
    }

    /// `export A=1`, `declare -x B`, `local c`, `unset d`: reported as commands.
    fn declaration(&mut self, node: Node) {
        let mut words = Vec::new();
        let mut cursor = node.walk();
        for child in node.children(&mut cursor) {
            if !child.is_named() {
                words.push(Word::literal(self.text(child)));
            } else if is_word_kind(child.kind()) {
                let w = self.word(child);
                words.push(w);
            } else {
                // Assignments and bare names keep their source text as arguments.
                let text = self.text(child).to_string();
                let dynamic = child.kind() == "variable_assignment"
                    && child
                        .child_by_field_name("value")
                        .is_some_and(|v| self.word(v).dynamic);
                words.push(Word { text, dynamic });
            }
        }
        if words.is_empty() {
            return;
        }
        let pos = self.pos(node);
        analyze(self.c, words, &[], self.scope, pos);
    }

    /// `[ … ]` and `[[ … ]]` are reported as commands named `[` / `[[`.
    fn test_command(&mut self, node: Node) {
        let open = node
            .child(0)
            .map(|c| self.text(c).to_string())
            .unwrap_or_default();
        let mut words = vec![Word::literal(open)];
        let mut stack: Vec<Node> = Vec::new();
        let mut cursor = node.walk();
        stack.extend(
            node.named_children(&mut cursor)
                .collect::<Vec<_>>()
                .into_iter()
                .rev(),
        );
        while let Some(n) = stack.pop() {
            if is_word_kind(n.kind()) || n.kind() == "test_operator" || n.kind() == "regex" {
                let w = self.word(n);
                words.push(w);
            } else {
                let mut cc = n.walk();
                let children: Vec<Node> = n.children(&mut cc).collect();
                for child in children.into_iter().rev() {
                    // Grouping parentheses are structure, not arguments.
                    if child.is_named() || !matches!(self.text(child), "(" | ")") {
                        stack.push(child);
                    }
                }
                if !n.is_named() {
                    words.push(Word::literal(self.text(n)));
                }
            }
        }
        let pos = self.pos(node);
        analyze(self.c, words, &[], self.scope, pos);
    }

    fn assignment(&mut self, node: Node, parent: Option<Node>) {
        if let Some(name) = assignment_name(node, self.src) {
            let in_command = parent.is_some_and(|p| p.kind() == "command");
            if !in_command {
                self.c.standalone_assignment(&name);
            }
            self.c.facts.assignments.push(name);
        }
    }

    fn file_redirect(&mut self, node: Node) {
        let mut cursor = node.walk();
        let children: Vec<Node> = node.children(&mut cursor).collect();
        let op = children
            .iter()
            .find(|c| !c.is_named())
            .map(|c| self.text(*c).to_string())
            .unwrap_or_default();
        // `<>`: the grammar reads `<` then an ERROR `>`.
        let mut read_write = op == "<"
            && children
                .iter()
                .any(|c| c.is_error() && self.text(*c) == ">");
        if read_write {
            for c in children.iter().filter(|c| c.is_error()) {
                self.skip.insert(c.id());
            }
        }
        read_write |= self.read_write.contains(&node.id());
        let Some(dest) = node.child_by_field_name("destination") else {
            return;
        };
        let target = self.word(dest);
        if self.herestrings.contains(&node.id()) {
            self.c.facts.has_heredoc = true;
            return;
        }
        let is_fd = !target.dynamic
            && (target.text == "-" || target.text.chars().all(|c| c.is_ascii_digit()));
        let kind = match op.as_str() {
            _ if read_write => RedirectKind::Write,
            "<" => RedirectKind::Read,
            ">>" | "&>>" => RedirectKind::Append,
            "<&" | "<&-" if is_fd => RedirectKind::Dup,
            ">&" | ">&-" if is_fd => RedirectKind::Dup,
            "<&" => RedirectKind::Read,
            _ => RedirectKind::Write,
        };
        self.c.facts.redirections.push(Redirection {
            kind,
            target: target.text,
            dynamic: target.dynamic,
        });
    }

    /// Unquoted here-document bodies are expanded: `$(…)` is in the tree, but the
    /// grammar leaves backquotes as text, so they are parsed here.
    fn heredoc_body(&mut self, node: Node, parent: Option<Node>) {
        let quoted = parent
            .and_then(|p| {
                let mut c = p.walk();
                let start = p.children(&mut c).find(|n| n.kind() == "heredoc_start");
                start
            })
            .is_some_and(|s| self.text(s).contains(['\'', '"', '\\']));
        if quoted {
            return;
        }
        // Backquotes are found in the whole body at once: an expansion inside them
        // (`` `echo x >> "$HOME/f"` ``) splits the body into several content nodes
        // around it, and no one of those holds the whole command.
        let mut cursor = node.walk();
        let end = node
            .children(&mut cursor)
            .find(|c| c.kind() == "heredoc_end")
            .map_or(node.end_byte(), |c| c.start_byte());
        let start = node.start_byte();
        let body = self.src.get(start..end).unwrap_or_default().to_string();
        for (offset, inner) in backquoted(&body) {
            self.c.facts.has_command_substitution = true;
            let scope = Scope {
                via: self.scope.via.clone(),
                depth: self.scope.depth + 1,
                anchor: Some(self.scope.anchor.unwrap_or(start + offset)),
                dialect: self.scope.dialect,
            };
            if scope.depth > super::analyze::MAX_DEPTH {
                self.c.unparsed(super::analyze::too_deep());
                return;
            }
            parse_into(self.c, &inner, &scope);
        }
    }
}

/// Syntax that bash reads one way and a POSIX shell (dash, the sandbox's `/bin/sh`)
/// another: `echo $'\' ; id ; # '` is one `echo` to bash and three commands to dash.
/// Named by what the operator would recognise.
fn bash_only(node: Node, text: &str) -> Option<&'static str> {
    if !node.is_named() {
        return match node.kind() {
            "[[" => Some("`[[`"),
            "((" => Some("`((`"),
            "|&" => Some("`|&`"),
            "&>" | "&>>" => Some("`&>`"),
            "<<<" => Some("`<<<`"),
            ";&" | ";;&" => Some("a `case` fall-through"),
            "function" => Some("`function`"),
            "select" => Some("`select`"),
            "=~" => Some("`=~`"),
            "$[" => Some("`$[`"),
            _ => None,
        };
    }
    match node.kind() {
        "ansi_c_string" => Some("`$'…'`"),
        "translated_string" => Some("`$\"…\"`"),
        "brace_expression" => Some("brace expansion"),
        "herestring_redirect" => Some("`<<<`"),
        "process_substitution" => Some("process substitution"),
        "c_style_for_statement" => Some("`for ((…))`"),
        "array" | "subscript" => Some("an array"),
        "extglob_pattern" => Some("an extended glob"),
        "regex" => Some("`=~`"),
        "arithmetic_expansion" if !text.starts_with("$((") => Some("`$[…]`"),
        "expansion" if !posix_expansion(text) => Some("a bash parameter expansion"),
        "test_command" if text.starts_with("[[") => Some("`[[`"),
        "compound_statement" if text.starts_with("((") => Some("`((`"),
        "string" if text.starts_with("$\"") => Some("`$\"…\"`"),
        _ => None,
    }
}

/// An unescaped backquote in unquoted word text.
fn has_unescaped_backquote(text: &str) -> bool {
    let mut escaped = false;
    for b in text.bytes() {
        match b {
            _ if escaped => escaped = false,
            b'\\' => escaped = true,
            b'`' => return true,
            _ => {}
        }
    }
    false
}

/// Whether the `$'…'` string `text` ends at its last byte as bash reads it: a backslash
/// escapes the next character, the first other `'` ends the string. The grammar's rule
/// lets `\\'` escape the quote, so `$'\\' ; id ; # '` would hide `id` from the Gate.
fn ansi_c_string_ends_at_its_end(text: &str) -> bool {
    let Some(body) = text.strip_prefix("$'") else {
        return false;
    };
    let bytes = body.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'\'' => return i + 1 == bytes.len(),
            _ => i += 1,
        }
    }
    false
}

/// `${name}`, `${#name}` and `${name<op>word}` with a POSIX operator.
fn posix_expansion(text: &str) -> bool {
    let Some(inner) = text.strip_prefix("${") else {
        return false;
    };
    let inner = inner
        .strip_prefix('#')
        .filter(|r| !r.starts_with('}'))
        .unwrap_or(inner);
    let name_len = if inner.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        inner
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(inner.len())
    } else if inner.starts_with(|c: char| c.is_ascii_digit()) {
        inner
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(inner.len())
    } else if inner.starts_with(['@', '*', '#', '?', '$', '!', '-']) {
        1
    } else {
        return false;
    };
    let rest = &inner[name_len..];
    rest.starts_with('}')
        || [":-", ":=", ":?", ":+", "-", "=", "?", "+", "%", "#"]
            .iter()
            .any(|op| rest.starts_with(op))
}

fn assignment_name(node: Node, src: &str) -> Option<String> {
    let name = node.child_by_field_name("name")?;
    let name = if name.kind() == "subscript" {
        name.child_by_field_name("name").unwrap_or(name)
    } else {
        name
    };
    super::words::source(src, name).map(str::to_string)
}

/// The contents of unescaped backquote pairs in `text`, with the byte offset of each.
fn backquoted(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    let mut chars = text.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '\\' => {
                let next = chars.next();
                if let (Some((_, buf)), Some((_, n))) = (current.as_mut(), next) {
                    buf.push(n);
                }
            }
            '`' => match current.take() {
                Some(done) => out.push(done),
                None => current = Some((at, String::new())),
            },
            _ => {
                if let Some((_, buf)) = current.as_mut() {
                    buf.push(c);
                }
            }
        }
    }
    out
}
