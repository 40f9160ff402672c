//! Where a symlink in the committed tree leads: followed component by component through
//! the merged view (upper over lower), so a chain (`a -> b/..`, `b -> /`) that leaves the
//! workspace is seen even when each link alone looks harmless.

use crate::node::Node;
use crate::RelPath;

/// Most links followed in one resolution, as the kernel's `MAXSYMLINKS`.
const MAX_HOPS: usize = 40;

/// Whether the link at `link` with `target` leaves the workspace (or is absolute, which
/// the sandbox and the host read differently). `lookup` gives the merged view's node at a
/// path (`None` when absent).
pub(crate) fn leaves_workspace(
    link: &RelPath,
    target: &[u8],
    lookup: &mut dyn FnMut(&RelPath) -> Option<Node>,
) -> bool {
    let mut stack: Vec<Vec<u8>> = match link.parent() {
        Some(p) => p.components().map(<[u8]>::to_vec).collect(),
        None => Vec::new(),
    };
    let mut pending: Vec<Vec<u8>> = Vec::new();
    if push_target(target, &mut pending).is_err() {
        return true;
    }
    let mut hops = 0;
    while let Some(comp) = pending.pop() {
        match comp.as_slice() {
            b"" | b"." => continue,
            b".." => {
                if stack.pop().is_none() {
                    return true;
                }
                continue;
            }
            _ => stack.push(comp),
        }
        let Ok(here) = RelPath::from_bytes(&stack.join(&b'/')) else {
            return true;
        };
        if let Some(Node::Symlink { target }) = lookup(&here) {
            hops += 1;
            if hops > MAX_HOPS {
                return true;
            }
            stack.pop();
            if push_target(&target, &mut pending).is_err() {
                return true;
            }
        }
    }
    false
}

/// Push a target's components so that the first is popped first; an absolute target is
/// an error (it leaves the workspace whatever it names).
fn push_target(target: &[u8], pending: &mut Vec<Vec<u8>>) -> Result<(), ()> {
    if target.first() == Some(&b'/') || target.is_empty() {
        return Err(());
    }
    for comp in target.split(|b| *b == b'/').rev() {
        pending.push(comp.to_vec());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn check(links: &[(&str, &str)], link: &str) -> bool {
        let map: HashMap<RelPath, Node> = links
            .iter()
            .map(|(p, t)| {
                (
                    RelPath::new(p).unwrap(),
                    Node::Symlink {
                        target: t.as_bytes().to_vec(),
                    },
                )
            })
            .collect();
        let l = RelPath::new(link).unwrap();
        let Some(Node::Symlink { target }) = map.get(&l).cloned() else {
            panic!("no link {link}")
        };
        leaves_workspace(&l, &target, &mut |p| map.get(p).cloned())
    }

    #[test]
    fn plain_and_chained_escapes() {
        assert!(check(&[("a", "/etc/passwd")], "a"));
        assert!(check(&[("a", "../x")], "a"));
        assert!(check(&[("d/a", "../../x")], "d/a"));
        assert!(!check(&[("d/a", "../x")], "d/a"));
        assert!(!check(&[("a", "b/c")], "a"));
        // Each link looks local; together they climb out.
        assert!(check(&[("up", ".."), ("a", "up/x")], "a"));
        assert!(check(&[("d/up", "../.."), ("a", "d/up/etc")], "a"));
        // A loop is treated as leaving (it cannot be shown to stay).
        assert!(check(&[("l1", "l2"), ("l2", "l1")], "l1"));
        assert!(!check(&[("d/x", "y"), ("d/y", "../z")], "d/x"));
    }
}
