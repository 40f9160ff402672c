//! The change set as text for an approval prompt: every path, link target and diff line
//! escaped (no byte from the run reaches the terminal raw), bounded in length.

use std::fmt::Write;

use crate::changeset::{ChangeKind, DroppedKind};
use crate::node::Node;
use crate::rel_path::display_bytes;
use crate::ChangeSet;

/// Most entries listed; the rest are counted.
const MAX_ENTRIES_SHOWN: usize = 500;
/// Most dropped items, conflicts and sensitive paths listed; the rest are counted.
const MAX_NOTES_SHOWN: usize = 100;

/// `items` joined by ", ", at most [`MAX_NOTES_SHOWN`] of them.
fn bounded_list(items: &[String]) -> String {
    let mut out = items
        .iter()
        .take(MAX_NOTES_SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > MAX_NOTES_SHOWN {
        let _ = write!(out, " … and {} more", items.len() - MAX_NOTES_SHOWN);
    }
    out
}

impl ChangeSet {
    /// The change set with its diffs, for an approval prompt.
    pub fn render(&self) -> String {
        let s = self.summary();
        let mut out = String::new();
        let _ = writeln!(
            out,
            "workspace change: {} added, {} modified, {} deleted, {} renamed, {} mode changes, {} bytes written",
            s.files_added, s.files_modified, s.files_deleted, s.files_renamed, s.mode_changed, s.bytes_written
        );
        if !self.complete {
            let _ = writeln!(
                out,
                "INCOMPLETE: the scan stopped after {} entries; this change cannot be committed",
                self.scanned
            );
        }
        for l in &s.exceeds_limits {
            let _ = writeln!(
                out,
                "over limit: {}",
                serde_json::to_string(l).unwrap_or_default()
            );
        }
        if s.touches_sensitive {
            let _ = writeln!(out, "sensitive paths: {}", bounded_list(&s.sensitive_paths));
        }
        if s.creates_git {
            let _ = writeln!(out, "creates a .git where there was none");
        }
        if s.creates_protected {
            let _ = writeln!(out, "creates a protected path that did not exist");
        }
        if self.conflicts.len() > MAX_NOTES_SHOWN {
            let _ = writeln!(
                out,
                "{} conflicts; the first {MAX_NOTES_SHOWN}:",
                self.conflicts.len()
            );
        }
        for c in self.conflicts.iter().take(MAX_NOTES_SHOWN) {
            let when = match (&c.owner, c.changed_after_start_ms) {
                // A deletion leaves no time behind (see `Scan::deleted_by_the_owner`).
                (None, _) => "gone from the workspace though the run changed it (deleted on the host during the run, or renamed and changed by the run)".to_string(),
                (Some(_), ms) => format!("changed on the host {ms} ms after the run started"),
            };
            let _ = writeln!(
                out,
                "CONFLICT {}: {when}; owner's version: {}; run's version: {}",
                c.path.display(),
                c.owner.as_ref().map_or("(deleted)".into(), Node::describe),
                c.run.as_ref().map_or("(deleted)".into(), Node::describe),
            );
        }
        for (i, e) in self.entries.iter().enumerate() {
            if i == MAX_ENTRIES_SHOWN {
                let _ = writeln!(out, "… {} more entries not shown", self.entries.len() - i);
                break;
            }
            let tag = match e.kind() {
                ChangeKind::Added => "A",
                ChangeKind::Renamed => "R",
                ChangeKind::Modified => "M",
                ChangeKind::ModeChanged => "P",
                ChangeKind::Deleted => "D",
            };
            let _ = write!(out, "{tag} {}", e.path.display());
            if let Some(from) = &e.renamed_from {
                let _ = write!(out, " (from {})", from.display());
            }
            match (&e.before, &e.after) {
                (_, Some(Node::Symlink { target })) => {
                    let _ = write!(out, " -> {}", display_bytes(target));
                    if e.link_leaves_workspace {
                        let _ = write!(out, " [LEAVES THE WORKSPACE]");
                    }
                }
                (Some(b), Some(a)) if e.kind() == ChangeKind::ModeChanged => {
                    let _ = write!(
                        out,
                        " mode {:o} -> {:o}",
                        b.mode().unwrap_or(0),
                        a.mode().unwrap_or(0)
                    );
                }
                (Some(b), Some(a)) => {
                    let _ = write!(out, " ({} => {})", b.describe(), a.describe());
                }
                (None, Some(a)) => {
                    let _ = write!(out, " ({})", a.describe());
                }
                (Some(b), None) => {
                    let _ = write!(out, " ({})", b.describe());
                }
                (None, None) => {}
            }
            if e.stripped_mode_bits != 0 {
                let _ = write!(out, " [mode bits {:o} stripped]", e.stripped_mode_bits);
            }
            if e.sensitive {
                let _ = write!(out, " [sensitive]");
            }
            out.push('\n');
            if let Some(d) = &e.diff {
                for l in &d.lines {
                    let _ = writeln!(out, "    {l}");
                }
                if d.cut_lines > 0 {
                    let _ = writeln!(out, "    … {} more diff lines not shown", d.cut_lines);
                }
            }
        }
        if self.dropped.len() > MAX_NOTES_SHOWN {
            let _ = writeln!(
                out,
                "{} items dropped; the first {MAX_NOTES_SHOWN}:",
                self.dropped.len()
            );
        }
        for d in self.dropped.iter().take(MAX_NOTES_SHOWN) {
            let what = match &d.what {
                DroppedKind::Special { what } => what.name().to_string(),
                DroppedKind::Xattr { name } => {
                    format!("extended attribute {}", display_bytes(name))
                }
            };
            let _ = writeln!(out, "dropped {}: {what}", d.path.display());
        }
        out
    }
}
