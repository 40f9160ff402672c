//! A grammar-based generator of harmless shell commands, with mutations that mix in the
//! tricks that once split the Gate from the shell.

/// Programs the generator runs: harmless in a sandbox, quick, and not interactive.
/// External programs show up in the exec trace; builtins exercise structure.
const PROGRAMS: &[&str] = &[
    "ls",
    "cat",
    "wc",
    "head",
    "id",
    "touch",
    "sort",
    "basename",
    "date",
    "uname",
    "printf",
    "echo",
    "true",
    "/bin/echo",
    "/usr/bin/true",
    "dirname",
    "tail",
    "uniq",
    "expr",
    "pwd",
];

/// Programs that `xargs`, `find -exec`, `env`, `nice`, `timeout` and `command` run.
const INNER: &[&str] = &[
    "ls",
    "wc",
    "id",
    "/bin/echo",
    "basename",
    "uname",
    "touch",
    "cat",
];

/// Words used when the corpus gives none of a kind.
const FIXED_WORDS: &[&str] = &[
    "a.txt",
    "b.txt",
    "sub",
    "sub/c.txt",
    "-l",
    "-a",
    "-1",
    "x",
    "marker",
    "out.txt",
    "hello",
    "--",
    "1",
    "2",
    "%s",
    "-n",
];

/// Words from the GTFOBins development set (`../shared/eval/gtfobins/dev.jsonl`, beside the
/// checkout as the other evaluation tests expect), limited to characters that need no
/// quoting, without `/` (no host paths as arguments) and short.
pub fn corpus_words() -> Vec<String> {
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
    let mut words: Vec<String> = Vec::new();
    for line in text.lines() {
        let Ok(case) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let Some(cmd) = case["command"].as_str() else {
            continue;
        };
        for w in cmd.split_whitespace() {
            let plain = w
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.,:@%+=-".contains(c));
            if plain && !w.is_empty() && w.len() <= 20 && !words.iter().any(|x| x == w) {
                words.push(w.to_string());
            }
        }
    }
    assert!(words.len() > 100, "too few corpus words: {}", words.len());
    words.extend(FIXED_WORDS.iter().map(|w| w.to_string()));
    words
}

/// splitmix64: small, seedable, and the same everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

pub struct Generator<'w> {
    rng: Rng,
    words: &'w [String],
}

impl<'w> Generator<'w> {
    pub fn new(seed: u64, words: &'w [String]) -> Self {
        Generator {
            rng: Rng(seed),
            words,
        }
    }

    /// One command line.
    pub fn command(&mut self) -> String {
        let base = self.list(0);
        if self.rng.chance(30) {
            self.mutate(base)
        } else {
            base
        }
    }

    fn word(&mut self) -> String {
        self.rng.pick(self.words).clone()
    }

    /// A word in one of bash's quoting forms, or with an expansion.
    fn quoted_word(&mut self, depth: usize) -> String {
        let w = self.word();
        match self.rng.below(14) {
            0 => format!("'{w}'"),
            1 => format!("\"{w}\""),
            2 => format!("$'{w}'"),
            3 => format!("$'{w}\\x41\\n'"),
            4 => format!("\\{w}"),
            5 => format!("${{UNSET_VAR:-{w}}}"),
            6 => "$HOME".to_string(),
            7 if depth < 3 => format!("\"$({})\"", self.simple(depth + 1)),
            8 if depth < 3 => format!("`{}`", self.simple(depth + 1)),
            9 => format!("{w}{{1,2}}"),
            10 => "*.txt".to_string(),
            11 => format!("$((1+{}))", self.rng.below(9)),
            _ => w,
        }
    }

    fn program(&mut self) -> String {
        self.rng.pick(PROGRAMS).to_string()
    }

    /// A simple command, possibly through a wrapper or another shell.
    fn simple(&mut self, depth: usize) -> String {
        let args: Vec<String> = (0..self.rng.below(4))
            .map(|_| self.quoted_word(depth))
            .collect();
        let args = args.join(" ");
        let inner = self.rng.pick(INNER).to_string();
        match self.rng.below(22) {
            0 => format!("env X=1 {inner} {args}"),
            1 => format!("nice {inner} {args}"),
            2 => format!("timeout 5 {inner} {args}"),
            3 => format!("echo {} | xargs {inner}", self.word()),
            4 => format!("find . -maxdepth 1 -name '*.txt' -exec {inner} {{}} \\;"),
            5 => format!("command {inner} {args}"),
            6 if depth < 3 => format!("sh -c {}", single_quoted(&self.list(depth + 1))),
            7 if depth < 3 => format!("bash -c {}", single_quoted(&self.list(depth + 1))),
            8 if depth < 3 => format!("dash -c {}", single_quoted(&self.list(depth + 1))),
            9 if depth < 3 => format!("eval {}", single_quoted(&self.list(depth + 1))),
            10 => format!("X={} {inner} {args}", self.word()),
            _ => format!("{} {args}", self.program()),
        }
    }

    /// A pipeline, compound command or redirected command.
    fn statement(&mut self, depth: usize) -> String {
        let deeper = depth < 3;
        match self.rng.below(20) {
            0 => format!("{} | {}", self.simple(depth), self.simple(depth)),
            1 if deeper => format!("( {} )", self.list(depth + 1)),
            2 if deeper => format!("{{ {}; }}", self.list(depth + 1)),
            3 if deeper => format!(
                "if {}; then {}; else {}; fi",
                self.simple(depth),
                self.list(depth + 1),
                self.simple(depth)
            ),
            4 if deeper => format!(
                "for v in {} {}; do {}; done",
                self.word(),
                self.word(),
                self.list(depth + 1)
            ),
            5 if deeper => format!(
                "case {} in {}) {};; *) {};; esac",
                self.word(),
                self.word(),
                self.simple(depth),
                self.simple(depth)
            ),
            6 if deeper => format!("f() {{ {}; }}; f", self.list(depth + 1)),
            7 => format!("{} > out.txt", self.simple(depth)),
            8 => format!("{} 2>&1 < a.txt", self.simple(depth)),
            // The delimiter stands alone on its line; `true` carries what follows.
            9 => format!(
                "cat <<EOF\n{} $({})\nEOF\ntrue",
                self.word(),
                self.simple(depth + 1)
            ),
            10 => format!(
                "cat <<'EOF'\n{} $({})\nEOF\ntrue",
                self.word(),
                self.simple(depth + 1)
            ),
            11 => format!("cat <<< {}", self.quoted_word(depth)),
            12 => format!(
                "[[ -n {} ]] && {}",
                self.quoted_word(depth),
                self.simple(depth)
            ),
            13 => format!("(( {} > 1 )) || {}", self.rng.below(3), self.simple(depth)),
            14 => format!("{} # {}", self.simple(depth), self.word()),
            15 => format!("{} & wait", self.simple(depth)),
            16 => format!("! {}", self.simple(depth)),
            _ => self.simple(depth),
        }
    }

    /// Statements joined by list operators.
    fn list(&mut self, depth: usize) -> String {
        let n = 1 + self.rng.below(3);
        let mut out = self.statement(depth);
        for _ in 1..n {
            let op = *self.rng.pick(&["; ", " && ", " || ", "\n"]);
            out.push_str(op);
            out.push_str(&self.statement(depth));
        }
        out
    }

    /// The tricks: text after which bash (or dash) runs more than a naive reading shows.
    fn mutate(&mut self, base: String) -> String {
        const CONTROLS: &[char] = &['\r', '\x0c', '\x0b', '\x1b', '\x01', '\x7f', '\u{85}'];
        let hidden = self
            .rng
            .pick(&["id", "uname -a", "ls sub", "touch hidden"])
            .to_string();
        match self.rng.below(9) {
            0 => {
                let c = self.rng.pick(CONTROLS);
                format!("{base}{c}# ; {hidden}")
            }
            1 => {
                let c = self.rng.pick(CONTROLS);
                format!("{base}{c}; {hidden}")
            }
            2 => format!("echo $'\\\\' ; {hidden} ; # ' ; {base}"),
            3 => format!("sh -c \"echo \\$'\\\\' ; {hidden} ; # '\""),
            4 => format!("sh -c '[[ -n x && {hidden} ]]'"),
            5 => {
                // A line continuation or a comment at a random word boundary.
                let spaces: Vec<usize> = base.match_indices(' ').map(|(i, _)| i).collect();
                if spaces.is_empty() {
                    return base;
                }
                let at = *self.rng.pick(&spaces);
                let insert = self.rng.pick(&[" \\\n", " #", " \\", "\\\n "]);
                format!("{}{insert}{}", &base[..at], &base[at..])
            }
            6 => {
                // Delete or duplicate one character.
                let cuts: Vec<usize> = base.char_indices().map(|(i, _)| i).collect();
                let at = *self.rng.pick(&cuts);
                let c = base[at..].chars().next().unwrap_or(' ');
                if self.rng.chance(50) {
                    format!("{}{}", &base[..at], &base[at + c.len_utf8()..])
                } else {
                    format!("{}{c}{}", &base[..at], &base[at..])
                }
            }
            7 => format!("dash -c {}", single_quoted(&format!("{base}; {hidden}"))),
            _ => {
                let c = self.rng.pick(CONTROLS);
                format!(
                    "bash -c $'{}\\x{:02x}# ; {hidden}'",
                    base.replace(['\\', '\''], ""),
                    *c as u32 & 0xff
                )
            }
        }
    }
}

/// `text` as one single-quoted shell word.
fn single_quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}
