//! Semantic fuzzing of the file actions with the shipped profiles: a path is generated as
//! a target (git metadata, Airlock's own directory, a place outside the workspace, or a
//! plain source file) spelled the many ways a path can be spelled (`./`, doubled slashes,
//! `x/../` detours, the workspace's absolute path in front), and the real Gate decides it.
//!
//! Properties, for `fs.write` and `fs.delete` under the default and the strict profile:
//! - outside the workspace, never allowed, whether writes are staged or not (and `fs.read`
//!   neither);
//! - a protected target (the workspace's or a nested repository's git metadata, `.airlock`)
//!   never allowed where writes are not staged;
//! - the control: a plain source file, spelled the same ways, is allowed by the default
//!   profile, so the properties cannot hold because everything is refused.

use airlock_core::action::{Action, FsWriteAction, PathAction};
use airlock_core::facts::GateConfig;
use airlock_core::gate::{Gate, Session};
use airlock_core::policy::{PolicyEngine, Profile};
use airlock_core::DecisionKind;
use proptest::prelude::*;

const WORKSPACE: &str = "/w";

const PROTECTED: &[&str] = &[
    ".git",
    ".git/hooks/pre-commit",
    ".git/config",
    ".git/info/attributes",
    ".git/modules/lib/config",
    ".airlock/state",
    "sub/.git",
    "vendor/lib/.git/hooks/post-checkout",
    "vendor/lib/.git/config",
    "a/b/.git/config.worktree",
    "sub/.git/modules/x/hooks/pre-push",
    "deep/er/.git/info/attributes",
];

const OUTSIDE: &[&str] = &[
    "/etc/passwd",
    "/w2/x",
    "/wx/y",
    "/",
    "/root/.ssh/authorized_keys",
];

const PLAIN: &[&str] = &["src/lib.rs", "docs/a.md", ".gitignore", "git/config.txt"];

/// One way of writing a path relative to the workspace: a prefix, and between components a
/// separator with optional detours.
#[derive(Debug, Clone)]
struct Spelling {
    prefix: &'static str,
    /// Per gap between components: 0 plain `/`, 1 `//`, 2 `/./`, 3 `/d/../`.
    gaps: Vec<u8>,
    trailing_slash: bool,
}

fn spelling() -> impl Strategy<Value = Spelling> {
    (
        prop::sample::select(vec!["", "./", "/w/", "/w/./", "x/../", "/w//", "./d/../"]),
        prop::collection::vec(0u8..4, 0..8),
        any::<bool>(),
    )
        .prop_map(|(prefix, gaps, trailing_slash)| Spelling {
            prefix,
            gaps,
            trailing_slash,
        })
}

/// `target` (workspace-relative, or absolute for a place outside) spelled as `how` says.
fn spell(target: &str, how: &Spelling) -> String {
    let (mut out, rest) = match target.strip_prefix('/') {
        // An absolute target keeps its own root; only the gaps vary.
        Some(rest) => (String::from("/"), rest),
        None => (how.prefix.to_string(), target),
    };
    for (i, part) in rest.split('/').filter(|p| !p.is_empty()).enumerate() {
        if i > 0 {
            out.push_str(match how.gaps.get(i - 1).copied().unwrap_or(0) {
                1 => "//",
                2 => "/./",
                3 => "/d/../",
                _ => "/",
            });
        }
        out.push_str(part);
    }
    if how.trailing_slash && !out.ends_with('/') {
        out.push('/');
    }
    out
}

/// The shipped profile's Gate, loaded once per (profile, staged) for every case.
fn gate(profile: Profile, staged: bool) -> &'static Gate {
    static GATES: std::sync::OnceLock<Vec<((Profile, bool), Gate)>> = std::sync::OnceLock::new();
    let gates = GATES.get_or_init(|| {
        let mut all = Vec::new();
        for p in [Profile::Default, Profile::Strict] {
            for s in [false, true] {
                let mut config = GateConfig::new(WORKSPACE);
                config.staged_writes = s;
                all.push(((p, s), Gate::new(PolicyEngine::builtin(p).unwrap(), config)));
            }
        }
        all
    });
    &gates
        .iter()
        .find(|(k, _)| *k == (profile, staged))
        .expect("every profile is loaded")
        .1
}

fn changes(path: &str) -> [Action; 2] {
    [
        Action::FsWrite(FsWriteAction {
            path: path.into(),
            content_sha256: Some(format!("sha256:{}", "0".repeat(64))),
            bytes: Some(3),
        }),
        Action::FsDelete(PathAction { path: path.into() }),
    ]
}

fn decision(g: &Gate, a: &Action) -> DecisionKind {
    g.evaluate(&Session::new("fuzz", "owner"), a).decision
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn a_change_outside_the_workspace_is_never_allowed(
        target in prop::sample::select(OUTSIDE.to_vec()),
        how in spelling(),
    ) {
        let path = spell(target, &how);
        for profile in [Profile::Default, Profile::Strict] {
            for staged in [false, true] {
                let g = gate(profile, staged);
                for a in changes(&path) {
                    prop_assert_ne!(decision(g, &a), DecisionKind::Allow, "{:?} {}: {:?}", profile, path, a);
                }
                let read = Action::FsRead(PathAction { path: path.clone() });
                prop_assert_ne!(decision(g, &read), DecisionKind::Allow, "{:?} read {}", profile, path);
            }
        }
    }

    #[test]
    fn a_protected_change_is_never_allowed_unless_writes_are_staged(
        target in prop::sample::select(PROTECTED.to_vec()),
        how in spelling(),
    ) {
        let path = spell(target, &how);
        for profile in [Profile::Default, Profile::Strict] {
            let g = gate(profile, false);
            for a in changes(&path) {
                prop_assert_ne!(decision(g, &a), DecisionKind::Allow, "{:?} {}: {:?}", profile, path, a);
            }
        }
    }

    #[test]
    fn the_control_a_plain_file_spelled_the_same_ways_is_allowed(
        target in prop::sample::select(PLAIN.to_vec()),
        how in spelling(),
    ) {
        let path = spell(target, &how);
        let g = gate(Profile::Default, false);
        for a in changes(&path) {
            prop_assert_eq!(decision(g, &a), DecisionKind::Allow, "{}: {:?}", path, a);
        }
    }
}

#[test]
fn the_spellings_are_what_they_say() {
    let how = Spelling {
        prefix: "/w/./",
        gaps: vec![1, 3],
        trailing_slash: true,
    };
    assert_eq!(
        spell(".git/hooks/pre-commit", &how),
        "/w/./.git//hooks/d/../pre-commit/"
    );
    assert_eq!(spell("/etc/passwd", &how), "/etc//passwd/");
}
