//! Invariant I4 (the agent cannot change the audit log unnoticed): every single change to
//! the log or its checkpoints is reported by `verify`, with a sensible kind and position.

mod common;

use std::fs;

use airlock_audit::{verify, ProblemKind, VerifyReport};
use common::*;
use ed25519_dalek::SigningKey;
use proptest::prelude::*;
use proptest::sample::Index;

/// 10 records, checkpoints every 4: signed at #0 (the first record always is), #4, #8
/// and (on close) #9.
fn ten() -> Fixture {
    Fixture::build(10, 4)
}

fn check(f: &Fixture) -> VerifyReport {
    verify(&f.dir, &test_key()).unwrap()
}

#[track_caller]
fn expect(report: &VerifyReport, kind: ProblemKind, line: u64) {
    let p = report
        .problem
        .as_ref()
        .unwrap_or_else(|| panic!("no problem reported: {report:?}"));
    assert_eq!((p.kind, p.line), (kind, line), "{p}");
}

#[test]
fn intact_log_verifies_fully_signed() {
    let f = ten();
    let r = check(&f);
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(r.records, 10);
    assert_eq!(r.checkpoints, 4);
    assert_eq!(r.last_seq, Some(9));
    assert_eq!(r.last_checkpoint_seq, Some(9));
    assert_eq!(r.unsigned_tail, 0);
}

#[test]
fn changed_byte_is_modified_at_its_line() {
    let f = ten();
    let mut lines = read_lines(&f.log());
    let text = String::from_utf8(lines[3].clone()).unwrap();
    lines[3] = text.replace("echo 3", "echo 4").into_bytes();
    write_lines(&f.log(), &lines);
    let r = check(&f);
    expect(&r, ProblemKind::Modified, 4);
    let p = r.problem.unwrap();
    assert_eq!(p.seq, Some(3));
    assert!(p.message.contains("hash"), "{}", p.message);
    assert!(p.to_string().contains("log.jsonl:4: Modified"), "{p}");
    assert_eq!(r.records, 3);
}

#[test]
fn deleted_line_is_deleted_at_its_position() {
    let f = ten();
    let mut lines = read_lines(&f.log());
    lines.remove(4);
    write_lines(&f.log(), &lines);
    let r = check(&f);
    expect(&r, ProblemKind::Deleted, 5);
    assert_eq!(r.problem.unwrap().seq, Some(4));
}

#[test]
fn deleted_first_line_is_deleted_at_line_one() {
    let f = ten();
    let mut lines = read_lines(&f.log());
    lines.remove(0);
    write_lines(&f.log(), &lines);
    expect(&check(&f), ProblemKind::Deleted, 1);
}

#[test]
fn swapped_lines_5_and_6_are_reordered_at_line_5() {
    let f = ten();
    let mut lines = read_lines(&f.log());
    lines.swap(4, 5);
    write_lines(&f.log(), &lines);
    expect(&check(&f), ProblemKind::Reordered, 5);
}

#[test]
fn distant_swap_is_reordered_at_the_first_line() {
    let f = ten();
    let mut lines = read_lines(&f.log());
    lines.swap(1, 8);
    write_lines(&f.log(), &lines);
    expect(&check(&f), ProblemKind::Reordered, 2);
}

#[test]
fn copied_line_is_inserted_where_the_copy_is() {
    let f = ten();
    let orig = read_lines(&f.log());
    let mut later = orig.clone();
    later.insert(7, orig[2].clone());
    write_lines(&f.log(), &later);
    expect(&check(&f), ProblemKind::Inserted, 8);

    let mut adjacent = orig.clone();
    adjacent.insert(3, orig[2].clone());
    write_lines(&f.log(), &adjacent);
    expect(&check(&f), ProblemKind::Inserted, 4);

    let mut earlier = orig.clone();
    earlier.insert(1, orig[6].clone());
    write_lines(&f.log(), &earlier);
    expect(&check(&f), ProblemKind::Inserted, 2);
}

#[test]
fn fabricated_chained_record_is_inserted_at_its_line() {
    let f = ten();
    let mut lines = read_lines(&f.log());
    let fake = fabricate_record(4, &hash_of(&lines[3]), "attacker");
    lines.insert(4, fake);
    write_lines(&f.log(), &lines);
    expect(&check(&f), ProblemKind::Inserted, 5);
}

#[test]
fn fabricated_record_that_does_not_chain_is_inserted() {
    let f = ten();
    let mut lines = read_lines(&f.log());
    let fake = fabricate_record(4, &"ab".repeat(32), "attacker");
    lines[4] = fake;
    write_lines(&f.log(), &lines);
    let r = check(&f);
    expect(&r, ProblemKind::Inserted, 5);
}

#[test]
fn cut_records_are_truncated_one_past_the_end() {
    let f = ten();
    let mut lines = read_lines(&f.log());
    lines.truncate(8);
    write_lines(&f.log(), &lines);
    let r = check(&f);
    expect(&r, ProblemKind::Truncated, 9);
    assert_eq!(r.problem.unwrap().seq, Some(8));

    write_lines(&f.log(), &[]);
    expect(&check(&f), ProblemKind::Truncated, 1);
}

#[test]
fn cut_mid_line_is_truncated_at_that_line() {
    let f = ten();
    let bytes = fs::read(f.log()).unwrap();
    let lines = read_lines(&f.log());
    let upto: usize = lines[..6].iter().map(Vec::len).sum::<usize>() + 10;
    fs::write(f.log(), &bytes[..upto]).unwrap();
    expect(&check(&f), ProblemKind::Truncated, 7);
}

#[test]
fn rewritten_chain_is_caught_by_the_signed_checkpoint() {
    // The attacker rewrites records #5..#9 with a fully valid chain of their own.
    let f = ten();
    let mut lines = read_lines(&f.log());
    let mut prev = hash_of(&lines[4]);
    for seq in 5..10u64 {
        let fake = fabricate_record(seq, &prev, "rewritten");
        prev = hash_of(&fake);
        lines[seq as usize] = fake;
    }
    write_lines(&f.log(), &lines);
    let r = check(&f);
    expect(&r, ProblemKind::Truncated, 9);
    assert!(r.problem.unwrap().message.contains("checkpoint"));
}

#[test]
fn checkpoint_tampering_is_bad_checkpoint() {
    let f = ten();
    let orig = read_lines(&f.checkpoints());
    assert_eq!(orig.len(), 4);

    let mut forged = orig.clone();
    let text = String::from_utf8(forged[1].clone()).unwrap();
    forged[1] = text.replace("\"records\":5", "\"records\":6").into_bytes();
    write_lines(&f.checkpoints(), &forged);
    expect(&check(&f), ProblemKind::BadCheckpoint, 2);

    let mut dropped = orig.clone();
    dropped.remove(1);
    write_lines(&f.checkpoints(), &dropped);
    expect(&check(&f), ProblemKind::BadCheckpoint, 2);

    let mut swapped = orig.clone();
    swapped.swap(0, 1);
    write_lines(&f.checkpoints(), &swapped);
    expect(&check(&f), ProblemKind::BadCheckpoint, 1);

    fs::remove_file(f.checkpoints()).unwrap();
    expect(&check(&f), ProblemKind::BadCheckpoint, 0);
}

#[test]
fn checkpoints_from_another_key_are_refused() {
    let f = ten();
    let other = SigningKey::from_bytes(&[7; 32]).verifying_key();
    let r = verify(&f.dir, &other).unwrap();
    expect(&r, ProblemKind::BadCheckpoint, 1);
    assert!(r.problem.unwrap().message.contains("key"));
}

#[test]
fn removed_final_checkpoint_shows_as_unsigned_tail() {
    // Indistinguishable from a crash before the final checkpoint: reported, not an error.
    let f = ten();
    let mut lines = read_lines(&f.checkpoints());
    lines.pop();
    write_lines(&f.checkpoints(), &lines);
    let r = check(&f);
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(r.unsigned_tail, 1);
}

#[test]
fn garbage_never_panics() {
    let f = ten();
    for content in [
        b"\xff\xfe\x00garbage\n\x00\x01".to_vec(),
        vec![0u8; 100_000],
        b"\n\n\n".to_vec(),
        b"[1,2,3]\n{\"seq\":-1}\n".to_vec(),
        b"{\"seq\":18446744073709551615}\n".to_vec(),
    ] {
        fs::write(f.log(), &content).unwrap();
        let r = check(&f);
        assert!(r.problem.is_some(), "{content:?}");
        fs::write(f.checkpoints(), &content).unwrap();
        assert!(check(&f).problem.is_some());
    }
}

#[test]
fn huge_line_is_modified_without_reading_it_whole() {
    let f = ten();
    let mut bytes = read_lines(&f.log()).concat();
    bytes.extend(std::iter::repeat_n(
        b'x',
        airlock_audit::MAX_RECORD_BYTES + 10,
    ));
    bytes.push(b'\n');
    fs::write(f.log(), &bytes).unwrap();
    expect(&check(&f), ProblemKind::Modified, 11);
}

#[derive(Debug, Clone)]
enum Change {
    Flip {
        at: Index,
        mask: u8,
    },
    DeleteLine(Index),
    SwapLines(Index, Index),
    InsertCopy {
        from: Index,
        at: Index,
    },
    InsertChainedFake {
        at: Index,
    },
    InsertRandomFake {
        seq: u64,
        prev_from: Index,
        at: Index,
    },
    TruncateAt(Index),
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        (any::<Index>(), 1u8..=255).prop_map(|(at, mask)| Change::Flip { at, mask }),
        any::<Index>().prop_map(Change::DeleteLine),
        (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Change::SwapLines(a, b)),
        (any::<Index>(), any::<Index>()).prop_map(|(from, at)| Change::InsertCopy { from, at }),
        any::<Index>().prop_map(|at| Change::InsertChainedFake { at }),
        (0u64..40, any::<Index>(), any::<Index>())
            .prop_map(|(seq, prev_from, at)| Change::InsertRandomFake { seq, prev_from, at }),
        any::<Index>().prop_map(Change::TruncateAt),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]

    #[test]
    fn any_single_change_is_detected(
        n in 1usize..24,
        every in 1u64..7,
        in_checkpoints in any::<bool>(),
        change in change(),
    ) {
        let f = Fixture::build(n, every);
        prop_assert!(check(&f).is_ok());
        let path = if in_checkpoints { f.checkpoints() } else { f.log() };
        let mut lines = read_lines(&path);
        let bytes = lines.concat();
        use ProblemKind::*;
        // Kinds that make sense for this change; `tail_ok` when the only possible trace is
        // an unsigned tail (the final checkpoint removed, or a valid record appended).
        let (allowed, tail_ok): (Vec<ProblemKind>, bool) = match change {
            Change::Flip { at, mask } => {
                let mut b = bytes.clone();
                let i = at.index(b.len());
                b[i] ^= mask;
                fs::write(&path, &b).unwrap();
                (if in_checkpoints { vec![BadCheckpoint] } else { vec![Modified, Truncated] }, false)
            }
            Change::DeleteLine(i) => {
                let i = i.index(lines.len());
                let last = i + 1 == lines.len();
                lines.remove(i);
                write_lines(&path, &lines);
                match (in_checkpoints, last) {
                    (true, true) => (vec![], true),
                    (true, false) => (vec![BadCheckpoint], false),
                    (false, true) => (vec![Truncated], false),
                    (false, false) => (vec![Deleted], false),
                }
            }
            Change::SwapLines(a, b) => {
                let (a, b) = (a.index(lines.len()), b.index(lines.len()));
                prop_assume!(lines[a] != lines[b]);
                lines.swap(a, b);
                write_lines(&path, &lines);
                (if in_checkpoints { vec![BadCheckpoint] } else { vec![Reordered] }, false)
            }
            Change::InsertCopy { from, at } => {
                let copy = lines[from.index(lines.len())].clone();
                lines.insert(at.index(lines.len() + 1), copy);
                write_lines(&path, &lines);
                (if in_checkpoints { vec![BadCheckpoint] } else { vec![Inserted] }, false)
            }
            Change::InsertChainedFake { at } => {
                prop_assume!(!in_checkpoints);
                let at = at.index(lines.len() + 1);
                let prev = if at == 0 { airlock_audit::ZERO_HASH.to_string() } else { hash_of(&lines[at - 1]) };
                lines.insert(at, fabricate_record(at as u64, &prev, "attacker"));
                write_lines(&path, &lines);
                // Appended at the very end it is a valid extension that no key vouches for.
                (vec![Inserted], at == n)
            }
            Change::InsertRandomFake { seq, prev_from, at } => {
                prop_assume!(!in_checkpoints);
                let prev = hash_of(&lines[prev_from.index(lines.len())]);
                lines.insert(at.index(lines.len() + 1), fabricate_record(seq, &prev, "x"));
                write_lines(&path, &lines);
                (vec![Inserted, Deleted, Reordered, Truncated], true)
            }
            Change::TruncateAt(at) => {
                let cut = at.index(bytes.len());
                fs::write(&path, &bytes[..cut]).unwrap();
                let at_boundary = cut == 0 || bytes[cut - 1] == b'\n';
                if in_checkpoints {
                    (if at_boundary { vec![] } else { vec![BadCheckpoint] }, at_boundary)
                } else {
                    (vec![Truncated], false)
                }
            }
        };
        let r = check(&f);
        match &r.problem {
            Some(p) => prop_assert!(allowed.contains(&p.kind), "{:?} not in {:?}: {}", p.kind, allowed, p),
            None => prop_assert!(tail_ok && r.unsigned_tail > 0, "change not detected: {:?}", r),
        }
    }
}

#[path = "tamper/wipes_and_keys.rs"]
mod wipes_and_keys;
