//! Every kind of entry a real overlay's upper layer can hold, read into a change set.

use std::os::unix::fs::PermissionsExt;

use airlock_workspace::{ChangeKind, DroppedKind, Node, SpecialKind};

use super::fixture::{fx, is_root, rp};

#[test]
fn added_modified_deleted_renamed_and_mode_changed() {
    let f = fx();
    f.put("keep.txt", b"same\n");
    f.put("edit.txt", b"one\ntwo\nthree\n");
    f.put("gone.txt", b"bye\n");
    f.put("old-name.bin", b"\x00\x01binary content");
    f.put("tool.sh", b"echo hi\n");
    f.put("dir/a", b"a\n");
    f.put("dir/sub/b", b"b\n");
    f.overlay(
        "echo new > new.txt; printf 'one\\nTWO\\nthree\\n' > edit.txt; rm gone.txt; \
         mv old-name.bin new-name.bin; chmod 755 tool.sh; rm -r dir; touch keep.txt",
    );
    let cs = f.compute();
    let kind = |p: &str| cs.entry(&rp(p)).map(|e| e.kind());
    assert_eq!(kind("new.txt"), Some(ChangeKind::Added));
    assert_eq!(kind("edit.txt"), Some(ChangeKind::Modified));
    assert_eq!(kind("gone.txt"), Some(ChangeKind::Deleted));
    assert_eq!(kind("new-name.bin"), Some(ChangeKind::Renamed));
    assert_eq!(
        cs.entry(&rp("new-name.bin")).unwrap().renamed_from,
        Some(rp("old-name.bin"))
    );
    assert_eq!(kind("tool.sh"), Some(ChangeKind::ModeChanged));
    // A whole directory removed: every file in it, and the directories.
    for p in ["dir", "dir/a", "dir/sub", "dir/sub/b"] {
        assert_eq!(kind(p), Some(ChangeKind::Deleted), "{p}");
    }
    // `touch` copies up but changes nothing the commit carries.
    assert_eq!(kind("keep.txt"), None);
    let d = cs.entry(&rp("edit.txt")).unwrap().diff.as_ref().unwrap();
    assert!(
        d.lines.contains(&"-two".to_string()) && d.lines.contains(&"+TWO".to_string()),
        "{d:?}"
    );
    let s = cs.summary();
    assert_eq!(
        (
            s.files_added,
            s.files_modified,
            s.files_deleted,
            s.files_renamed
        ),
        (1, 1, 3, 1)
    );
    assert_eq!(s.deletes_preexisting, 3);
    assert_eq!(s.overwrites_preexisting, 1);
    // Binary files are shown by size and hash.
    let r = cs.render();
    assert!(r.contains("R new-name.bin (from old-name.bin)"), "{r}");
    assert!(r.contains("mode 644 -> 755"), "{r}");
}

#[test]
fn opaque_directory_replaces_the_lower_one() {
    let f = fx();
    f.put("d/old1", b"1");
    f.put("d/old2", b"2");
    f.put("d/kept-name", b"lower");
    // rm -r then mkdir makes an opaque directory in the upper layer.
    f.overlay("rm -r d; mkdir d; echo upper > d/kept-name; echo n > d/new");
    let cs = f.compute();
    let kind = |p: &str| cs.entry(&rp(p)).map(|e| e.kind());
    assert_eq!(kind("d/old1"), Some(ChangeKind::Deleted));
    assert_eq!(kind("d/old2"), Some(ChangeKind::Deleted));
    assert_eq!(kind("d/kept-name"), Some(ChangeKind::Modified));
    assert_eq!(kind("d/new"), Some(ChangeKind::Added));
    assert_eq!(kind("d"), None, "the directory itself stays a directory");
}

#[test]
fn directory_over_a_file_and_file_over_a_directory() {
    let f = fx();
    f.put("x", b"was a file");
    f.put("y/inner", b"was in a dir");
    f.overlay("rm x; mkdir x; echo in > x/f; rm -r y; echo now-a-file > y");
    let cs = f.compute();
    let e = cs.entry(&rp("x")).unwrap();
    assert!(
        matches!(e.before, Some(Node::File { .. })) && matches!(e.after, Some(Node::Dir { .. }))
    );
    assert_eq!(cs.entry(&rp("x/f")).unwrap().kind(), ChangeKind::Added);
    assert_eq!(
        cs.entry(&rp("y/inner")).unwrap().kind(),
        ChangeKind::Deleted
    );
    let y = cs.entry(&rp("y")).unwrap();
    assert!(
        matches!(y.before, Some(Node::Dir { .. })) && matches!(y.after, Some(Node::File { .. }))
    );
}

#[test]
fn symlinks_carry_their_target_and_whether_they_leave() {
    let f = fx();
    f.put("d/file", b"x");
    f.overlay(
        "ln -s d/file inside; ln -s /etc/passwd abs; ln -s ../../outside climb; \
         ln -s .. up; ln -s up/etc chained",
    );
    let cs = f.compute();
    let leaves = |p: &str| cs.entry(&rp(p)).unwrap().link_leaves_workspace;
    assert!(!leaves("inside"));
    assert!(leaves("abs"));
    assert!(leaves("climb"));
    assert!(leaves("up"));
    assert!(
        leaves("chained"),
        "a chain through another link that climbs out"
    );
    assert!(cs.summary().symlink_out_of_workspace);
    let r = cs.render();
    assert!(
        r.contains("A abs -> /etc/passwd [LEAVES THE WORKSPACE]"),
        "{r}"
    );
}

#[test]
fn setuid_is_stripped_and_specials_and_xattrs_are_dropped() {
    let mut f = fx();
    f.put("prog", b"#!/bin/sh\n");
    f.overlay(
        "chmod 4755 prog; echo s > sgid; chmod 2755 sgid; mkfifo fifo; \
         echo x > tagged; python3 -c \"import os; os.setxattr('tagged', 'user.evil', b'1')\"",
    );
    // A socket and (as root) a device node, made in the upper layer directly: no overlay
    // lets a user namespace create them.
    let _sock = std::os::unix::net::UnixListener::bind(f.upper.join("sock")).unwrap();
    if is_root() {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            f.upper.join("null"),
            rustix::fs::FileType::CharacterDevice,
            rustix::fs::Mode::from_raw_mode(0o666),
            rustix::fs::makedev(1, 3),
        )
        .unwrap();
    } else {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "CI runs as root"
        );
    }
    let cs = f.compute();
    let prog = cs.entry(&rp("prog")).unwrap();
    assert_eq!(prog.stripped_mode_bits, 0o4000);
    assert_eq!(prog.after.as_ref().unwrap().mode(), Some(0o755));
    assert_eq!(cs.entry(&rp("sgid")).unwrap().stripped_mode_bits, 0o2000);
    let dropped = |p: &str| {
        cs.dropped
            .iter()
            .find(|d| d.path == rp(p))
            .map(|d| d.what.clone())
    };
    assert_eq!(
        dropped("fifo"),
        Some(DroppedKind::Special {
            what: SpecialKind::Fifo
        })
    );
    assert_eq!(
        dropped("sock"),
        Some(DroppedKind::Special {
            what: SpecialKind::Socket
        })
    );
    if is_root() {
        assert_eq!(
            dropped("null"),
            Some(DroppedKind::Special {
                what: SpecialKind::CharDevice
            })
        );
    }
    assert_eq!(
        dropped("tagged"),
        Some(DroppedKind::Xattr {
            name: b"user.evil".to_vec()
        })
    );
    assert!(cs.entry(&rp("fifo")).is_none() && cs.entry(&rp("sock")).is_none());
    // Committed: the bits are gone, the specials are not in the workspace.
    let ws = f.open();
    ws.commit(&cs, &f.upper, super::fixture::meta("t")).unwrap();
    let mode = std::fs::metadata(f.ws.join("prog"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755);
    assert_eq!(
        std::fs::metadata(f.ws.join("sgid"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777,
        0o755
    );
    assert!(
        !f.ws.join("fifo").exists() && !f.ws.join("sock").exists() && !f.ws.join("null").exists()
    );
    assert!(
        xattr_names(&f.ws.join("tagged")).is_empty(),
        "xattr dropped"
    );
    f.next_run();
}

fn xattr_names(p: &std::path::Path) -> Vec<u8> {
    let mut buf = vec![0u8; 4096];
    let n = rustix::fs::listxattr(p, &mut buf[..]).unwrap();
    buf.truncate(n);
    buf
}

#[test]
fn upper_layers_with_redirects_or_metacopy_are_refused() {
    let f = fx();
    std::fs::create_dir(f.upper.join("moved")).unwrap();
    rustix::fs::setxattr(
        f.upper.join("moved"),
        "user.overlay.redirect",
        b"/orig",
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
    let err =
        airlock_workspace::ChangeSet::compute(&f.ws, &f.upper, &Default::default()).unwrap_err();
    assert!(err.to_string().contains("redirect_dir"), "{err}");
    assert!(err.to_string().contains("help:"), "{err}");
}

#[test]
fn xattr_whiteouts_are_read_as_whiteouts() {
    let f = fx();
    f.put("a", b"x");
    std::fs::write(f.upper.join("a"), b"").unwrap();
    rustix::fs::setxattr(
        f.upper.join("a"),
        "user.overlay.whiteout",
        b"y",
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
    let cs = f.compute();
    assert_eq!(cs.entry(&rp("a")).unwrap().kind(), ChangeKind::Deleted);
    // The same zero-size file without the attribute is a truncation, not a deletion.
    let g = fx();
    g.put("a", b"x");
    std::fs::write(g.upper.join("a"), b"").unwrap();
    assert_eq!(
        g.compute().entry(&rp("a")).unwrap().kind(),
        ChangeKind::Modified
    );
}

#[test]
fn a_payload_cannot_forge_the_overlays_own_attributes() {
    let f = fx();
    f.put("d/keep", b"lower file");
    // The payload sets `user.overlay.opaque` itself: overlayfs stores it escaped, and it
    // must not make the directory opaque (which would delete `d/keep`).
    f.overlay(
        "echo n > d/new; python3 -c \"import os; os.setxattr('d', 'user.overlay.opaque', b'y')\"",
    );
    let cs = f.compute();
    assert!(cs.entry(&rp("d/keep")).is_none(), "{:?}", cs.entries);
    assert_eq!(cs.entry(&rp("d/new")).unwrap().kind(), ChangeKind::Added);
    assert!(
        cs.dropped.iter().any(|d| d.path == rp("d")
            && matches!(&d.what, DroppedKind::Xattr { name } if name == b"user.overlay.overlay.opaque")),
        "{:?}",
        cs.dropped
    );
}
