//! Attacker-shaped file names: shown escaped, committed to the exact name, never elsewhere.

use super::fixture::{fx, meta, os, rb};

const NAMES: &[&[u8]] = &[
    b"line\nbreak",
    b"\x1b[2J\x1b[1;1Hfake prompt",
    b"..\n",
    b".. ",
    b"...",
    b"cr\rover",
    b"bidi\xe2\x80\xaereversed",
    b"bad-utf8-\xff\xfe",
    b"back\\slash",
];

#[test]
fn attacker_names_are_shown_escaped_and_committed_to_the_right_path() {
    let f = fx();
    std::fs::create_dir(f.upper.join("sub")).unwrap();
    std::fs::create_dir(f.ws.join("sub")).unwrap();
    for n in NAMES {
        std::fs::write(f.upper.join("sub").join(os(n)), b"payload").unwrap();
    }
    let cs = f.compute();
    assert_eq!(cs.entries.len(), NAMES.len());
    let shown = cs.render();
    for bad in ['\n', '\r', '\x1b', '\u{202e}'] {
        // The only raw newlines are the render's own line ends.
        if bad == '\n' {
            assert_eq!(shown.matches('\n').count(), shown.lines().count());
            continue;
        }
        assert!(
            !shown.contains(bad),
            "{bad:?} reached the terminal: {shown}"
        );
    }
    assert!(shown.contains("A sub/line\\nbreak"), "{shown}");
    assert!(
        shown.contains("A sub/\\u{1b}[2J\\u{1b}[1;1Hfake prompt"),
        "{shown}"
    );
    assert!(shown.contains("A sub/..\\n "), "{shown}");
    assert!(shown.contains("A sub/bad-utf8-\\x{ff}\\x{fe}"), "{shown}");
    assert!(shown.contains("A sub/back\\\\slash"), "{shown}");
    let ws = f.open();
    ws.commit(&cs, &f.upper, meta("names")).unwrap();
    for n in NAMES {
        let p = f.ws.join("sub").join(os(n));
        assert_eq!(
            std::fs::read(&p).unwrap(),
            b"payload",
            "{}",
            rb(&[b"sub/", *n].concat())
        );
    }
    // Exactly those names, nothing next to the workspace or above `sub`.
    assert_eq!(
        std::fs::read_dir(f.ws.join("sub")).unwrap().count(),
        NAMES.len()
    );
    assert_eq!(std::fs::read_dir(&f.ws).unwrap().count(), 1);
    let parent = f.ws.parent().unwrap();
    let mut beside: Vec<_> = std::fs::read_dir(parent)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    beside.sort();
    assert_eq!(beside, ["merged", "state", "upper", "work", "ws"]);
}

#[test]
fn the_rendered_change_set_is_bounded() {
    let f = fx();
    // Many entries, many dropped FIFOs, long diffs: the prompt stays readable.
    f.overlay(
        "for i in $(seq 1 700); do echo $i > f$i; done; for i in $(seq 1 300); do mkfifo p$i; done; \
         seq 1 100000 > long.txt",
    );
    let cs = f.compute();
    assert_eq!(cs.entries.len(), 701);
    assert_eq!(cs.dropped.len(), 300);
    let r = cs.render();
    assert!(r.contains("… 201 more entries not shown"), "entries cut");
    assert!(r.contains("300 items dropped; the first 100:"));
    assert_eq!(r.matches("dropped p").count(), 100);
    let long = cs
        .entries
        .iter()
        .find(|e| e.path.as_bytes() == b"long.txt")
        .unwrap();
    let d = long.diff.as_ref().unwrap();
    assert!(
        d.cut_lines > 0 && d.lines.len() <= 400,
        "{} lines",
        d.lines.len()
    );
    assert!(r.len() < 200_000, "{} bytes", r.len());
}
