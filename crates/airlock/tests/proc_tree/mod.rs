//! Processes as `/proc` shows them, for the tests that check a kill leaves nothing behind.
#![allow(dead_code)]

use std::collections::BTreeMap;

/// `(state, ppid, starttime)` of a process from `/proc/<pid>/stat`.
pub fn stat(pid: u32) -> Option<(char, u32, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest: Vec<&str> = s[s.rfind(')')? + 1..].split_whitespace().collect();
    Some((
        rest.first()?.chars().next()?,
        rest.get(1)?.parse().ok()?,
        rest.get(19)?.parse().ok()?,
    ))
}

/// The process's command name.
pub fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// Alive and not a zombie.
pub fn live(pid: u32) -> bool {
    matches!(stat(pid), Some((s, _, _)) if s != 'Z' && s != 'X')
}

/// Still the same live process (same pid and start time, not a zombie)?
pub fn still_running(pid: u32, start: u64) -> bool {
    matches!(stat(pid), Some((s, _, st)) if st == start && s != 'Z' && s != 'X')
}

/// Every pid in `/proc`.
pub fn all_pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok()))
        .collect()
}

/// `root` and every descendant, with their start times.
pub fn process_tree(root: u32) -> BTreeMap<u32, u64> {
    let parents: Vec<(u32, u32, u64)> = all_pids()
        .into_iter()
        .filter_map(|p| stat(p).map(|(_, ppid, st)| (p, ppid, st)))
        .collect();
    let mut tree = BTreeMap::new();
    if let Some((_, _, st)) = stat(root) {
        tree.insert(root, st);
    }
    loop {
        let before = tree.len();
        for (pid, ppid, st) in &parents {
            if tree.contains_key(ppid) {
                tree.insert(*pid, *st);
            }
        }
        if tree.len() == before {
            return tree;
        }
    }
}
