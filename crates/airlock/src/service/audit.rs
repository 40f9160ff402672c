//! The last records of the audit log, for `airlock audit tail` embedded and the host's
//! streamed `POST /v1/audit/tail`. The records are read back from the end of the file and
//! handed on one at a time, so a long tail is never held whole.

use serde::{Deserialize, Serialize};

use crate::home::Home;
use crate::service::fault;

/// The most records one tail may ask for: only the offsets of the lines asked for are held,
/// and this bounds them.
pub const MAX_TAIL: usize = 1_000_000;

/// What the tail asks for.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TailInput {
    /// How many of the last records.
    pub n: usize,
}

/// One line of the tail: a record, a line of the log that is not one, or (through the
/// host, whose answer is already under way) the error that ended the tail.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TailLine {
    Record(serde_json::Value),
    Unreadable {
        offset: u64,
        bytes: u64,
        reason: String,
    },
    Error(String),
}

/// Hand the last `input.n` records to `each`, oldest first. An error of `each` (a reader
/// that went away) ends the tail with that error.
pub fn tail(
    home: &Home,
    input: &TailInput,
    mut each: impl FnMut(TailLine) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let n = input.n;
    if n > MAX_TAIL {
        anyhow::bail!(
            "-n {n} asks for more than {MAX_TAIL} records\nhelp: give -n {MAX_TAIL} or fewer, or read the log file itself"
        );
    }
    airlock_audit::for_each_tail_record(&home.audit_dir(), n, |r| {
        each(match r {
            airlock_audit::TailRecord::Record(v) => TailLine::Record(v),
            airlock_audit::TailRecord::Unreadable {
                offset,
                bytes,
                reason,
            } => TailLine::Unreadable {
                offset,
                bytes,
                reason,
            },
        })
    })
    .map_err(|e| fault(anyhow::anyhow!("{e}")))?
}

/// Verify the home's audit log against its public key and high-water mark, as `airlock
/// audit verify` and the web page's audit timeline show it.
pub fn verify(home: &Home) -> anyhow::Result<airlock_audit::VerifyReport> {
    let key_path = airlock_audit::public_key_path(&home.audit_key());
    let key = airlock_audit::load_verifier(&key_path)
        .map_err(|e| anyhow::anyhow!("{e}\nhelp: run `airlock init` first"))?;
    let mark = home.audit_mark();
    let trust = airlock_audit::Trust {
        key: &key,
        mark: Some(&mark),
    };
    airlock_audit::verify_with(&home.audit_dir(), &trust).map_err(|e| fault(anyhow::anyhow!("{e}")))
}
