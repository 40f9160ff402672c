//! What a change set is computed against: the sensitive-path list, the per-run limits, the
//! diff bounds and the time the run started.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::RelPath;

/// Files a host tool reads or runs on the owner's machine without the owner choosing to
/// run project code, so that a change to them would run the attacker's code later:
///
/// - `.git` anywhere (hooks, `config` with `core.fsmonitor`/`core.pager`, nested repos that
///   a `git status` in the parent walks into);
/// - `.envrc` anywhere (direnv runs it on `cd`);
/// - editor settings that run tasks on open (`.vscode`, `.idea`, anywhere);
/// - build and tool configuration that names programs to run: `.cargo/config(.toml)`
///   (`rustc-wrapper`, runners), `rust-toolchain(.toml)` (a toolchain `path`), `.npmrc`,
///   `.yarnrc(.yml)`, `package.json` (install scripts run by `npm install`), `.gitmodules`
///   and `.gitattributes` (submodule URLs and filter selection), `.pre-commit-config.yaml`;
/// - the build entry points the owner types by habit: `Makefile`, `makefile`,
///   `GNUmakefile`;
/// - CI definitions, which run with the repository's secrets on the next push:
///   `.github/workflows`, `.gitlab-ci.yml`.
///
/// Source files are not on the list: running the project's own code is the owner's choice.
pub const DEFAULT_SENSITIVE: &[&str] = &[
    "**/.git",
    "**/.git/**",
    "**/.envrc",
    "**/.vscode/**",
    "**/.vscode",
    "**/.idea/**",
    "**/.idea",
    "**/.cargo/config",
    "**/.cargo/config.toml",
    "rust-toolchain",
    "rust-toolchain.toml",
    "**/.npmrc",
    "**/.yarnrc",
    "**/.yarnrc.yml",
    "**/package.json",
    ".gitmodules",
    "**/.gitattributes",
    ".pre-commit-config.yaml",
    "**/Makefile",
    "**/makefile",
    "**/GNUmakefile",
    ".github/workflows/**",
    ".gitlab-ci.yml",
];

/// A list of path patterns. A pattern is `/`-separated: `**` matches any number of
/// components (none included), `*` any run of bytes within one component, anything else
/// itself. A pattern with no `*` also matches everything below it, as `protected_paths`
/// entries always have (`secrets` covers `secrets/key`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathPatterns(Vec<String>);

impl PathPatterns {
    /// Patterns from strings (a leading `./` or `/` is ignored: all are workspace-relative).
    pub fn new<I, S>(patterns: I) -> PathPatterns
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        PathPatterns(
            patterns
                .into_iter()
                .map(|p| {
                    let p: String = p.into();
                    p.trim_start_matches("./")
                        .trim_start_matches('/')
                        .trim_end_matches('/')
                        .to_string()
                })
                .filter(|p| !p.is_empty())
                .collect(),
        )
    }

    /// The default sensitive list ([`DEFAULT_SENSITIVE`]).
    pub fn default_sensitive() -> PathPatterns {
        // The Gate's protected paths are sensitive here too, by construction: a file tool's
        // write to one is staged (`path.staged`) on the promise that its commit is held.
        PathPatterns::new(
            DEFAULT_SENSITIVE
                .iter()
                .chain(airlock_core::paths::DEFAULT_PROTECTED)
                .copied(),
        )
    }

    /// Add patterns.
    pub fn extend<I, S>(&mut self, more: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.0.extend(PathPatterns::new(more).0);
    }

    /// The patterns.
    pub fn patterns(&self) -> &[String] {
        &self.0
    }

    /// Whether `path` matches any pattern.
    pub fn matches(&self, path: &RelPath) -> bool {
        let comps: Vec<&[u8]> = path.components().collect();
        self.0.iter().any(|p| {
            let pat: Vec<&[u8]> = p.as_bytes().split(|b| *b == b'/').collect();
            if !p.contains('*') {
                // A plain path: itself and everything below it.
                return comps.len() >= pat.len() && comps[..pat.len()] == pat[..];
            }
            match_components(&pat, &comps)
        })
    }

    /// Whether some path at or below the directory `dir` matches a pattern with one of
    /// `dir`'s own components taking part in the match (named by the pattern, not only
    /// passed over by a `**`). Those are the matches that a workspace rooted at `dir` would
    /// lose, since it judges paths from `dir`: `.github/workflows/**` reaches into
    /// `.github`, `**/.cargo/config` into `x/.cargo`, `secrets` into `secrets/a`, while
    /// `**/.git/**` does not reach into `reports` (a workspace rooted there still sees its
    /// `.git/hooks/x` as a match). So when this is false for `dir`, every path below it
    /// that matches from the top matches from `dir` too.
    pub fn reaches_into(&self, dir: &RelPath) -> bool {
        let comps: Vec<&[u8]> = dir.components().collect();
        self.0.iter().any(|p| {
            let pat: Vec<&[u8]> = p.as_bytes().split(|b| *b == b'/').collect();
            if !p.contains('*') {
                // A plain path covers itself and everything below: it reaches into `dir`
                // when either is a prefix of the other.
                let n = pat.len().min(comps.len());
                return comps[..n] == pat[..n];
            }
            reaches(&pat, &comps)
        })
    }
}

/// Whether `pat` can consume all of `dir` (and then go on below it) with one of `dir`'s
/// components matched by a name rather than passed over by a `**`.
fn reaches(pat: &[&[u8]], dir: &[&[u8]]) -> bool {
    // Each (pattern position, dir position, named yet) is tried once: a pattern with many
    // `**` against a deep `dir` stays quadratic, never exponential.
    let mut tried = vec![false; (pat.len() + 1) * (dir.len() + 1) * 2];
    reaches_from(pat, dir, 0, 0, false, &mut tried)
}

fn reaches_from(
    pat: &[&[u8]],
    dir: &[&[u8]],
    i: usize,
    j: usize,
    named: bool,
    tried: &mut [bool],
) -> bool {
    if j == dir.len() {
        // `dir` is used up; what is left of the pattern can match something below it.
        return named;
    }
    let key = ((i * (dir.len() + 1)) + j) * 2 + usize::from(named);
    if tried.get(key).copied().unwrap_or(true) {
        return false;
    }
    tried[key] = true;
    match pat.get(i) {
        None => false,
        Some(first) if *first == b"**" => {
            reaches_from(pat, dir, i + 1, j, named, tried)
                || reaches_from(pat, dir, i, j + 1, named, tried)
        }
        Some(first) => {
            match_name(first, dir[j]) && reaches_from(pat, dir, i + 1, j + 1, true, tried)
        }
    }
}

fn match_components(pat: &[&[u8]], path: &[&[u8]]) -> bool {
    match pat.split_first() {
        None => path.is_empty(),
        Some((first, rest)) if *first == b"**" => {
            (0..=path.len()).any(|skip| match_components(rest, &path[skip..]))
        }
        Some((first, rest)) => match path.split_first() {
            Some((name, tail)) => match_name(first, name) && match_components(rest, tail),
            None => false,
        },
    }
}

fn match_name(pat: &[u8], name: &[u8]) -> bool {
    match pat.split_first() {
        None => name.is_empty(),
        Some((b'*', rest)) => (0..=name.len()).any(|skip| match_name(rest, &name[skip..])),
        Some((c, rest)) => name.first() == Some(c) && match_name(rest, &name[1..]),
    }
}

/// Per-run caps. A change set over any of them is flagged in
/// [`CommitSummary::exceeds_limits`](crate::CommitSummary) so the Gate holds it whole; it is
/// never committed piecemeal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Bytes of file content the commit writes (added and modified files).
    pub max_bytes_written: u64,
    /// Files (and links) added, modified, deleted or changed in mode.
    pub max_files_changed: usize,
    /// Files (and links) deleted.
    pub max_files_deleted: usize,
    /// Upper-layer entries (and lower entries under deleted or opaque directories) the
    /// scan reads before it stops; a change set cut there is incomplete and cannot commit.
    pub max_scan_entries: usize,
}

impl Default for Limits {
    /// 256 MiB, 2,000 files changed, 500 deleted, 200,000 entries scanned: far above what
    /// an agent's edit session writes, far below a run gone wrong.
    fn default() -> Self {
        Limits {
            max_bytes_written: 256 * 1024 * 1024,
            max_files_changed: 2_000,
            max_files_deleted: 500,
            max_scan_entries: 200_000,
        }
    }
}

/// Bounds on the diffs a change set carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiffLimits {
    /// Files larger than this (either side) are shown by size and hash only.
    pub max_file_bytes: u64,
    /// Diff lines kept per file; the rest is cut with a note.
    pub max_lines_per_file: usize,
    /// Diff lines kept in the whole change set.
    pub max_total_lines: usize,
}

impl Default for DiffLimits {
    fn default() -> Self {
        DiffLimits {
            max_file_bytes: 1024 * 1024,
            max_lines_per_file: 400,
            max_total_lines: 4_000,
        }
    }
}

/// Inputs of [`ChangeSet::compute`](crate::ChangeSet::compute).
#[derive(Debug, Clone)]
pub struct ChangeSetOptions {
    /// Paths whose change the Gate should see as sensitive (defaults plus protected).
    pub sensitive: PathPatterns,
    /// The operator's `protected_paths` (also counted as sensitive); creating one that did
    /// not exist sets `creates_protected`.
    pub protected: PathPatterns,
    /// Per-run caps.
    pub limits: Limits,
    /// Diff bounds.
    pub diff: DiffLimits,
    /// When the run started. A lower-layer file whose change time is later was edited on
    /// the host during the run: a conflict. `None` turns conflict detection off (for
    /// host-side writes staged and committed at once).
    pub run_started: Option<SystemTime>,
}

impl Default for ChangeSetOptions {
    fn default() -> Self {
        ChangeSetOptions {
            sensitive: PathPatterns::default_sensitive(),
            protected: PathPatterns::new(Vec::<String>::new()),
            limits: Limits::default(),
            diff: DiffLimits::default(),
            run_started: None,
        }
    }
}

impl ChangeSetOptions {
    /// Defaults plus the operator's `protected_paths`, for a run that started at `started`.
    pub fn new(protected_paths: &[String], started: Option<SystemTime>) -> ChangeSetOptions {
        ChangeSetOptions {
            protected: PathPatterns::new(protected_paths.iter().cloned()),
            run_started: started,
            ..ChangeSetOptions::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> RelPath {
        RelPath::new(s).unwrap()
    }

    #[test]
    fn default_list_covers_nested_git_and_entry_points() {
        let s = PathPatterns::default_sensitive();
        for hit in [
            ".git",
            ".git/hooks/post-checkout",
            "sub/dir/.git/config",
            "x/.envrc",
            ".envrc",
            ".vscode/tasks.json",
            "Makefile",
            "lib/Makefile",
            ".github/workflows/ci.yml",
            "web/package.json",
        ] {
            assert!(s.matches(&p(hit)), "{hit}");
        }
        for miss in [
            "src/main.rs",
            ".gitignore",
            "git/x",
            "Makefile.bak",
            ".github/README",
        ] {
            assert!(!s.matches(&p(miss)), "{miss}");
        }
    }

    #[test]
    fn a_pattern_reaches_into_a_folder_only_through_its_own_names() {
        let mut s = PathPatterns::default_sensitive();
        s.extend(["vendor/keys"]);
        for hit in [
            ".git",
            ".git/hooks",
            "a/.git",
            ".github",
            ".github/workflows",
            "x/.cargo",
            ".vscode",
            ".airlock",
            "vendor",
            "vendor/keys/deep",
            "Makefile",
        ] {
            assert!(s.reaches_into(&p(hit)), "{hit}");
        }
        for miss in [
            "reports",
            "reports/q1",
            "src",
            "x/.cargo/registry",
            "docs/github",
        ] {
            assert!(!s.reaches_into(&p(miss)), "{miss}");
        }
        // Many `**` against a deep folder: answered, not explored without end.
        let deep = vec!["d"; 200].join("/");
        let many = PathPatterns::new(["**/a/**/a/**/a/**/a/**/a/**/a/**/b"]);
        assert!(!many.reaches_into(&p(&deep)));
    }

    #[test]
    fn plain_patterns_are_prefixes_by_component() {
        let s = PathPatterns::new(["secrets", "./conf/app.toml"]);
        assert!(s.matches(&p("secrets")));
        assert!(s.matches(&p("secrets/key")));
        assert!(!s.matches(&p("secretsx")));
        assert!(s.matches(&p("conf/app.toml")));
        let g = PathPatterns::new(["*.pem", "a/*/b"]);
        assert!(g.matches(&p("key.pem")));
        assert!(!g.matches(&p("d/key.pem")));
        assert!(g.matches(&p("a/x/b")));
    }
}
