//! Workspace-relative paths kept as the raw bytes the file system holds.
//!
//! A name in the upper layer can hold any byte but `/` and NUL: newlines, terminal escape
//! sequences, invalid UTF-8, names that look like `..` (`.. `, `..\n`). A [`RelPath`] keeps
//! those bytes exactly, so a commit writes to the very name the run created, and shows them
//! only through [`RelPath::display`], which escapes every control, invisible character,
//! backslash and invalid byte.

use std::ffi::OsStr;
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::WorkspaceError;

/// A path inside the workspace: non-empty components separated by `/`, none of them
/// empty, `.` or `..`, and no NUL. Proven at construction, so nothing built from one can
/// climb out of the root lexically (links are the kernel's job: see the commit path).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RelPath(Vec<u8>);

impl RelPath {
    /// Validate raw bytes as a workspace-relative path.
    pub fn from_bytes(bytes: &[u8]) -> Result<RelPath, WorkspaceError> {
        let bad = |why| WorkspaceError::BadPath {
            path: display_bytes(bytes),
            why,
        };
        if bytes.is_empty() {
            return Err(bad("it is empty"));
        }
        if bytes.contains(&0) {
            return Err(bad("it contains a NUL byte"));
        }
        if bytes[0] == b'/' {
            return Err(bad("it is absolute"));
        }
        for comp in bytes.split(|b| *b == b'/') {
            match comp {
                b"" => return Err(bad("it has an empty component")),
                b"." | b".." => return Err(bad("it has a `.` or `..` component")),
                _ => {}
            }
        }
        Ok(RelPath(bytes.to_vec()))
    }

    /// Validate a [`Path`] as a workspace-relative path.
    pub fn new(path: impl AsRef<Path>) -> Result<RelPath, WorkspaceError> {
        RelPath::from_bytes(path.as_ref().as_os_str().as_bytes())
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The path as a [`Path`] (for `*at` calls relative to the workspace's descriptor).
    pub fn as_path(&self) -> &Path {
        Path::new(OsStr::from_bytes(&self.0))
    }

    /// `self/name`, where `name` is one component (no `/`, not `.`/`..`).
    pub fn join(&self, name: &[u8]) -> Result<RelPath, WorkspaceError> {
        let mut v = self.0.clone();
        v.push(b'/');
        v.extend_from_slice(name);
        RelPath::from_bytes(&v)
    }

    /// A one-component path.
    pub fn single(name: &[u8]) -> Result<RelPath, WorkspaceError> {
        if name.contains(&b'/') {
            return Err(WorkspaceError::BadPath {
                path: display_bytes(name),
                why: "a file name cannot hold `/`",
            });
        }
        RelPath::from_bytes(name)
    }

    /// The parent, or `None` for a top-level name.
    pub fn parent(&self) -> Option<RelPath> {
        let cut = self.0.iter().rposition(|b| *b == b'/')?;
        Some(RelPath(self.0[..cut].to_vec()))
    }

    /// The last component.
    pub fn file_name(&self) -> &[u8] {
        match self.0.iter().rposition(|b| *b == b'/') {
            Some(cut) => &self.0[cut + 1..],
            None => &self.0,
        }
    }

    /// The components, in order.
    pub fn components(&self) -> impl Iterator<Item = &[u8]> {
        self.0.split(|b| *b == b'/')
    }

    /// How many components.
    pub fn depth(&self) -> usize {
        self.components().count()
    }

    /// Whether `self` is `other` or lies below it.
    pub fn is_within(&self, other: &RelPath) -> bool {
        self.0 == other.0
            || (self.0.starts_with(&other.0) && self.0.get(other.0.len()) == Some(&b'/'))
    }

    /// The path for a terminal: valid UTF-8 through `terminal_text::escape_line`, each
    /// invalid byte as `\x{NN}` (a backslash in a name is doubled, so that cannot be forged).
    pub fn display(&self) -> String {
        display_bytes(&self.0)
    }
}

/// Escape arbitrary bytes (a path, a link target) for one terminal line.
pub fn display_bytes(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.utf8_chunks() {
        out.push_str(&airlock_core::terminal_text::escape_line(chunk.valid()));
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{{{b:02x}}}"));
        }
    }
    out
}

impl fmt::Debug for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RelPath({})", self.display())
    }
}

impl fmt::Display for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display())
    }
}

/// Raw bytes in JSON: a string when they are UTF-8, else `{"hex": "…"}`, so records stay
/// readable and still round-trip every name exactly.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum BytesRepr {
    Text(String),
    Hex { hex: String },
}

pub(crate) fn ser_bytes<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
    match std::str::from_utf8(bytes) {
        Ok(t) => BytesRepr::Text(t.to_string()),
        Err(_) => BytesRepr::Hex {
            hex: hex::encode(bytes),
        },
    }
    .serialize(s)
}

pub(crate) fn de_bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    match BytesRepr::deserialize(d)? {
        BytesRepr::Text(t) => Ok(t.into_bytes()),
        BytesRepr::Hex { hex } => hex::decode(hex).map_err(serde::de::Error::custom),
    }
}

impl Serialize for RelPath {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        ser_bytes(&self.0, s)
    }
}

impl<'de> Deserialize<'de> for RelPath {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let bytes = de_bytes(d)?;
        RelPath::from_bytes(&bytes).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_climbing_and_odd_shapes() {
        for bad in [
            &b""[..],
            b"/etc",
            b"a/../b",
            b"..",
            b".",
            b"a//b",
            b"a/",
            b"a\0b",
        ] {
            assert!(RelPath::from_bytes(bad).is_err(), "{bad:?}");
        }
        for good in [
            &b"a"[..],
            b"a/b",
            b".. ",
            b"..\n",
            b"...",
            b"\x1b[2J",
            b"\xff\xfe",
        ] {
            assert!(RelPath::from_bytes(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn display_escapes_everything_a_terminal_obeys() {
        let p = RelPath::from_bytes(b"a\nb/\x1b[2Kc\\d/\xff").unwrap();
        assert_eq!(p.display(), "a\\nb/\\u{1b}[2Kc\\\\d/\\x{ff}");
    }

    #[test]
    fn json_round_trips_invalid_utf8() {
        let p = RelPath::from_bytes(b"ok/\xff\n").unwrap();
        let j = serde_json::to_string(&p).unwrap();
        assert!(j.contains("hex"), "{j}");
        let back: RelPath = serde_json::from_str(&j).unwrap();
        assert_eq!(back, p);
        let q = RelPath::from_bytes("plain/ü".as_bytes()).unwrap();
        assert_eq!(serde_json::to_string(&q).unwrap(), "\"plain/ü\"");
        assert!(serde_json::from_str::<RelPath>("\"../x\"").is_err());
    }

    #[test]
    fn within_is_by_component() {
        let a = RelPath::new("a/b").unwrap();
        assert!(RelPath::new("a/b/c").unwrap().is_within(&a));
        assert!(a.is_within(&a));
        assert!(!RelPath::new("a/bc").unwrap().is_within(&a));
    }
}
