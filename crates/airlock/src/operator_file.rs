//! Reading a file the operator (or something with the operator's rights) put in front of
//! the CLI: a config file, a policy, a memory schema, a trace, standard input.
//!
//! Every such read is bounded. A path can name `/dev/zero`, a FIFO nobody writes to, a
//! directory or a file of many gigabytes, and a read that trusts it runs the host out of
//! memory or hangs. So the file is opened without blocking (a FIFO with no writer would
//! otherwise wait forever), the *opened* descriptor is inspected (no race with a rename),
//! anything but a regular file is refused, and at most `cap + 1` bytes are read, because a
//! file can grow after it was inspected.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use airlock_core::terminal_text::escape_line;

/// What kind of file is read, with its cap; named in every error.
#[derive(Debug, Clone, Copy)]
pub struct FileKind {
    /// What the file is, for people: "config file", "policy file".
    pub what: &'static str,
    /// The most bytes accepted.
    pub cap: u64,
    /// Whether a symbolic link at the path is followed. A file named on the command line
    /// may be a link; a file found by listing a directory that Airlock trusts (a policy
    /// directory) may not, so that a link cannot make Airlock read, and quote in an error,
    /// a file that was never meant for it.
    pub follow_symlink: bool,
}

/// `airlock.toml`.
pub const CONFIG_FILE: FileKind = FileKind {
    what: "config file",
    cap: 1 << 20,
    follow_symlink: true,
};

/// One `.cedar` file of a policy directory.
pub const POLICY_FILE: FileKind = FileKind {
    what: "policy file",
    cap: 1 << 20,
    follow_symlink: false,
};

/// The compiled policy cache Airlock writes itself.
pub const POLICY_CACHE: FileKind = FileKind {
    what: "compiled policy cache",
    cap: 64 << 20,
    follow_symlink: false,
};

/// A JSON Schema given to `airlock memory schema add`.
pub const MEMORY_SCHEMA: FileKind = FileKind {
    what: "memory schema",
    cap: 1 << 20,
    follow_symlink: true,
};

/// A PEM certificate file (Airlock's CA, or debug upstream roots).
pub const CERTIFICATE: FileKind = FileKind {
    what: "certificate file",
    cap: 1 << 20,
    follow_symlink: true,
};

/// A trace file for `airlock replay`. It is streamed line by line with a bound per line,
/// so this cap bounds only how long a replay may take, not its memory.
pub const TRACE_FILE: FileKind = FileKind {
    what: "trace file",
    cap: 16 << 30,
    follow_symlink: true,
};

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
pub enum OperatorFileError {
    /// The path does not exist (some callers fall back to defaults).
    #[error("{what} {path}: not found\nhelp: check the path")]
    NotFound { what: &'static str, path: String },
    /// Anything else, with its `help:` line.
    #[error("{what} {path}: {detail}\nhelp: {help}")]
    Refused {
        what: &'static str,
        path: String,
        detail: String,
        help: String,
    },
}

impl OperatorFileError {
    fn refused(kind: FileKind, path: &Path, detail: String, help: String) -> Self {
        OperatorFileError::Refused {
            what: kind.what,
            path: shown(path),
            detail,
            help,
        }
    }
}

/// A path as it may be shown: escaped, so a file name cannot carry terminal controls.
fn shown(path: &Path) -> String {
    escape_line(&path.to_string_lossy())
}

/// Open `path` for reading as `kind` says: without blocking, refusing a symbolic link
/// where `kind` does, and refusing anything that is not a regular file of at most
/// `kind.cap` bytes. The file's size is checked on the opened descriptor.
pub fn open(path: &Path, kind: FileKind) -> Result<(File, u64), OperatorFileError> {
    let mut flags = nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY | nix::libc::O_CLOEXEC;
    if !kind.follow_symlink {
        flags |= nix::libc::O_NOFOLLOW;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|e| open_error(path, kind, e))?;
    let meta = file.metadata().map_err(|e| {
        OperatorFileError::refused(
            kind,
            path,
            format!("cannot inspect it: {e}"),
            "check the file's permissions".into(),
        )
    })?;
    let ft = meta.file_type();
    if !ft.is_file() {
        let what = if ft.is_dir() {
            "a directory"
        } else if ft.is_fifo() {
            "a FIFO (named pipe)"
        } else if ft.is_char_device() {
            "a character device"
        } else if ft.is_block_device() {
            "a block device"
        } else if ft.is_socket() {
            "a socket"
        } else {
            "not a regular file"
        };
        return Err(OperatorFileError::refused(
            kind,
            path,
            format!("is {what}; only a regular file is read"),
            format!("give the path of a regular {} file", kind.what),
        ));
    }
    if meta.len() > kind.cap {
        return Err(too_large(path, kind, meta.len()));
    }
    Ok((file, meta.len()))
}

/// The whole of `path`, read as [`open`] says.
pub fn read(path: &Path, kind: FileKind) -> Result<Vec<u8>, OperatorFileError> {
    let (file, len) = open(path, kind)?;
    let mut buf = Vec::with_capacity(len as usize);
    file.take(kind.cap + 1).read_to_end(&mut buf).map_err(|e| {
        OperatorFileError::refused(
            kind,
            path,
            format!("cannot read it: {e}"),
            "check the file".into(),
        )
    })?;
    // It may have grown since it was inspected.
    if buf.len() as u64 > kind.cap {
        return Err(too_large(path, kind, buf.len() as u64));
    }
    Ok(buf)
}

/// The whole of `path` as UTF-8 text.
pub fn read_text(path: &Path, kind: FileKind) -> Result<String, OperatorFileError> {
    String::from_utf8(read(path, kind)?).map_err(|e| {
        OperatorFileError::refused(
            kind,
            path,
            format!(
                "is not valid UTF-8 (at byte {})",
                e.utf8_error().valid_up_to()
            ),
            format!("save the {} as UTF-8 text", kind.what),
        )
    })
}

/// Standard input, at most `cap` bytes; more is refused, never cut silently.
pub fn read_stdin(what: &'static str, cap: u64) -> anyhow::Result<Vec<u8>> {
    let mut buf = Vec::new();
    io::stdin()
        .lock()
        .take(cap + 1)
        .read_to_end(&mut buf)
        .map_err(|e| anyhow::anyhow!("cannot read {what} from standard input: {e}"))?;
    if buf.len() as u64 > cap {
        anyhow::bail!(
            "{what} on standard input is longer than {cap} bytes\nhelp: give at most {cap} bytes"
        );
    }
    Ok(buf)
}

fn too_large(path: &Path, kind: FileKind, len: u64) -> OperatorFileError {
    OperatorFileError::refused(
        kind,
        path,
        format!(
            "is {}{len} bytes, more than the {} bytes a {} may have",
            if len > kind.cap { "at least " } else { "" },
            kind.cap,
            kind.what
        ),
        format!("give a smaller {} file", kind.what),
    )
}

fn open_error(path: &Path, kind: FileKind, e: io::Error) -> OperatorFileError {
    if e.kind() == io::ErrorKind::NotFound {
        return OperatorFileError::NotFound {
            what: kind.what,
            path: shown(path),
        };
    }
    if e.raw_os_error() == Some(nix::libc::ELOOP) && !kind.follow_symlink {
        return OperatorFileError::refused(
            kind,
            path,
            "is a symbolic link; a link here is never followed".into(),
            format!("copy the {} into place instead of linking to it", kind.what),
        );
    }
    OperatorFileError::refused(
        kind,
        path,
        format!("cannot open it: {e}"),
        "check that the path is right and readable".into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: FileKind = FileKind {
        what: "test file",
        cap: 16,
        follow_symlink: false,
    };

    fn refused(r: Result<Vec<u8>, OperatorFileError>) -> String {
        match r {
            Err(e @ OperatorFileError::Refused { .. }) => e.to_string(),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn hostile_paths_are_refused_for_the_right_reason() {
        let dir = tempfile::tempdir().unwrap();
        let err = refused(read(Path::new("/dev/zero"), SMALL));
        assert!(
            err.contains("a character device") && err.contains("help:"),
            "{err}"
        );
        let err = refused(read(dir.path(), SMALL));
        assert!(err.contains("a directory"), "{err}");
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        // No writer: a blocking open would wait here forever.
        let err = refused(read(&fifo, SMALL));
        assert!(err.contains("FIFO"), "{err}");
        let big = dir.path().join("big");
        std::fs::write(&big, [b'x'; 17]).unwrap();
        let err = refused(read(&big, SMALL));
        assert!(
            err.contains("17 bytes") && err.contains("16 bytes"),
            "{err}"
        );
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("/etc/passwd", &link).unwrap();
        let err = refused(read(&link, SMALL));
        assert!(err.contains("symbolic link"), "{err}");
        assert!(matches!(
            read(&dir.path().join("absent"), SMALL),
            Err(OperatorFileError::NotFound { .. })
        ));
        let ok = dir.path().join("ok");
        std::fs::write(&ok, b"sixteen bytes ok").unwrap();
        assert_eq!(read(&ok, SMALL).unwrap(), b"sixteen bytes ok");
    }
}
