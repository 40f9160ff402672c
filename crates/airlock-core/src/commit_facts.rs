//! The facts of a `workspace.commit`: what a run's change set does to the workspace, as
//! counts and flags the policy judges, and the paths behind each flag for the reasons.
//!
//! The binary computes the change set and fills [`WorkspaceCommitAction`]; this module
//! only turns it into the Cedar context and names what would hold it. It reads no files.

use serde_json::{json, Value};

use crate::action::{CommitPaths, WorkspaceCommitAction};

/// Most paths a reason names before it says how many more there are.
const REASON_PATHS: usize = 5;

/// The `commit` record of the Cedar context (see `policy/airlock.cedarschema`).
pub fn commit_context(c: &WorkspaceCommitAction) -> Value {
    let long = |n: u64| n.min(i64::MAX as u64) as i64;
    let changed = c
        .files_added
        .saturating_add(c.files_modified)
        .saturating_add(c.files_deleted);
    json!({
        "files_added": long(c.files_added),
        "files_modified": long(c.files_modified),
        "files_deleted": long(c.files_deleted),
        "files_changed": long(changed),
        "bytes": long(c.bytes),
        "deletes_preexisting": long(c.deletes_preexisting.count),
        "overwrites_preexisting": long(c.overwrites_preexisting.count),
        "touches_sensitive": !c.touches_sensitive.is_empty(),
        "creates_git": !c.creates_git.is_empty(),
        "creates_protected": !c.creates_protected.is_empty(),
        "symlink_out_of_workspace": !c.symlink_out_of_workspace.is_empty(),
        "conflicts": long(c.conflicts.count),
        "exceeds_limits": !c.exceeds_limits.is_empty(),
        "paths": c.paths,
        "sensitive_paths": c.touches_sensitive.paths,
    })
}

/// What in the change set can hold it, one line per property present, each naming its
/// paths. The Gate adds these to an ask or a deny so the reason says what triggered it.
pub fn triggers(c: &WorkspaceCommitAction) -> Vec<String> {
    let mut out = Vec::new();
    let mut add = |what: &str, p: &CommitPaths| {
        if !p.is_empty() {
            out.push(format!("{what}: {}", name_paths(p)));
        }
    };
    add(
        "deletes files that existed before the session",
        &c.deletes_preexisting,
    );
    add(
        "overwrites files that existed before the session",
        &c.overwrites_preexisting,
    );
    add("touches sensitive paths", &c.touches_sensitive);
    add("creates .git where there was none", &c.creates_git);
    add(
        "creates protected paths that did not exist",
        &c.creates_protected,
    );
    add(
        "has symbolic links that point out of the workspace",
        &c.symlink_out_of_workspace,
    );
    add(
        "changes files the owner changed during the run (conflicts)",
        &c.conflicts,
    );
    if !c.exceeds_limits.is_empty() {
        out.push(format!(
            "exceeds the per-run limits: {}",
            c.exceeds_limits.join(", ")
        ));
    }
    out
}

/// `a, b, c (and 7 more)`, each path quoted as JSON so a newline or an escape in a name
/// stays visible and cannot break the line.
fn name_paths(p: &CommitPaths) -> String {
    let shown: Vec<String> = p
        .paths
        .iter()
        .take(REASON_PATHS)
        .map(|s| serde_json::to_string(s).unwrap_or_default())
        .collect();
    let more = p.count.saturating_sub(shown.len() as u64);
    let mut text = if shown.is_empty() {
        format!("{} paths", p.count)
    } else {
        shown.join(", ")
    };
    if more > 0 && !shown.is_empty() {
        text.push_str(&format!(" (and {more} more)"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triggers_name_their_paths_quoted_and_counted() {
        let c = WorkspaceCommitAction {
            deletes_preexisting: CommitPaths::new(
                9,
                (0..9).map(|i| format!("f{i}")).collect::<Vec<_>>(),
            ),
            creates_git: CommitPaths::of(vec!["sub/.git\n\u{1b}[2J".into()]),
            exceeds_limits: vec!["files_deleted: 9 > 5".into()],
            ..Default::default()
        };
        let t = triggers(&c);
        assert_eq!(t.len(), 3, "{t:?}");
        assert!(
            t[0].contains("\"f0\"") && t[0].contains("(and 4 more)"),
            "{t:?}"
        );
        assert!(t[1].contains(r#""sub/.git\n\u001b[2J""#), "{t:?}");
        assert!(!t.iter().any(|l| l.contains('\n') || l.contains('\u{1b}')));
        assert!(t[2].contains("files_deleted: 9 > 5"));
        assert!(triggers(&WorkspaceCommitAction::default()).is_empty());
    }
}
