//! A file name chosen by an attacker (a newline, a terminal escape, dots) is shown
//! escaped wherever Airlock prints it, and committed to exactly its own path.

use crate::support::*;

#[test]
fn i6_an_attacker_shaped_name_is_shown_escaped_and_committed_to_its_own_path() {
    let f = home_with(1, "");
    // `..` followed by a newline and a screen-clearing escape, then `..` again.
    let name = "..\n\u{1b}[2J..evil";
    let o = exec(
        &f,
        "n=$(printf '..\\n\\033[2J..evil'); printf data > \"$n\"",
    );
    let all = text(&o);
    assert!(o.status.success(), "{all}");
    assert!(all.contains("committed as checkpoint"), "{all}");
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains('\u{1b}'),
        "{all}"
    );
    // Exactly that one file, in the workspace itself.
    assert_eq!(read(&f.ws, name).as_deref(), Some("data"));
    let entries = tree(&f.ws);
    assert_eq!(entries, vec![std::path::PathBuf::from(name)], "{entries:?}");
    let parent = tree(f.ws.parent().unwrap());
    assert!(
        !parent
            .iter()
            .any(|p| p.to_string_lossy().contains("evil") && !p.starts_with("ws")),
        "{parent:?}"
    );
    // Listing and showing the checkpoint print the name escaped, never raw.
    let id = checkpoint_of(&o);
    for args in [
        &["checkpoints", "list"][..],
        &["checkpoints", "show", &id][..],
        &["checkpoints", "diff", &id][..],
    ] {
        let shown = airlock_in(&f, args);
        let out = String::from_utf8_lossy(&shown.stdout);
        assert!(shown.status.success(), "{}", text(&shown));
        assert!(!out.contains('\u{1b}'), "{args:?}: raw escape in {out:?}");
        assert!(
            !out.contains("..\n"),
            "{args:?}: raw newline in a name: {out:?}"
        );
    }
}
