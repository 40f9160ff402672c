//! How long memory lives: every record expires, at a time set by its kind, and sooner when
//! it is recall content written by a tainted session that no operator vouched for.
//!
//! A record's expiry is computed from its current version (when it was written, its kind,
//! tier and trust), never stored, so a database from before expiry existed loads with every
//! record's expiry already defined, and an operator who shortens a limit in `airlock.toml`
//! shortens it for the records already kept too. Writing a new version of a record starts
//! its time again. An expired record is neither recalled (search, get) nor loaded (pinned
//! context); it stays in the store, where `airlock memory list` shows it as expired and the
//! operator can purge it.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::record::MemoryKind;
use super::types::{MemoryVersion, Tier};
use crate::time::Timestamp;

/// Longest any limit may be, in days (ten years).
pub const MAX_RETENTION_DAYS: u32 = 3650;

/// The clock memory reads expiry against. Production uses [`Timestamp::now`]; tests pass
/// one they control.
pub type MemoryClock = Arc<dyn Fn() -> Timestamp + Send + Sync>;

/// Days each kind of record lives after its last write (`[memory.retention]` in
/// `airlock.toml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MemoryRetention {
    pub note_days: u32,
    pub fact_days: u32,
    pub preference_days: u32,
    pub contact_days: u32,
    pub task_state_days: u32,
    /// Recall records written after untrusted content, unless an operator approved them:
    /// the content an injection is most likely to have planted, kept the shortest.
    pub tainted_recall_days: u32,
}

impl Default for MemoryRetention {
    fn default() -> Self {
        MemoryRetention {
            note_days: 180,
            fact_days: 365,
            preference_days: 365,
            contact_days: 365,
            task_state_days: 30,
            tainted_recall_days: 14,
        }
    }
}

impl MemoryRetention {
    /// Refuse a limit of zero days (a record that expires as it is written) or past
    /// [`MAX_RETENTION_DAYS`], naming the field.
    pub fn validate(&self) -> Result<(), String> {
        let fields = [
            ("note_days", self.note_days),
            ("fact_days", self.fact_days),
            ("preference_days", self.preference_days),
            ("contact_days", self.contact_days),
            ("task_state_days", self.task_state_days),
            ("tainted_recall_days", self.tainted_recall_days),
        ];
        for (name, days) in fields {
            if days == 0 || days > MAX_RETENTION_DAYS {
                return Err(format!(
                    "[memory.retention] {name} = {days} is out of range\nhelp: use 1 to {MAX_RETENTION_DAYS} days"
                ));
            }
        }
        Ok(())
    }

    fn kind_days(&self, kind: MemoryKind) -> u32 {
        match kind {
            MemoryKind::Note => self.note_days,
            MemoryKind::Fact => self.fact_days,
            MemoryKind::Preference => self.preference_days,
            MemoryKind::Contact => self.contact_days,
            MemoryKind::TaskState => self.task_state_days,
        }
    }

    /// How long `v` lives after it was written; `None` for a tombstone (already gone).
    pub fn lifetime(&self, v: &MemoryVersion) -> Option<Duration> {
        let record = v.record.as_ref()?;
        let mut days = self.kind_days(record.kind());
        if v.tier == Tier::Recall && v.untrusted() {
            days = days.min(self.tainted_recall_days);
        }
        Some(Duration::from_secs(u64::from(days) * 86_400))
    }

    /// When `v` expires; `None` for a tombstone.
    pub fn expires_at(&self, v: &MemoryVersion) -> Option<Timestamp> {
        self.lifetime(v).map(|d| v.written_at.plus(d))
    }

    /// Whether `v` has expired at `now`. A tombstone counts as expired.
    pub fn is_expired(&self, v: &MemoryVersion, now: Timestamp) -> bool {
        self.expires_at(v).is_none_or(|at| at <= now)
    }
}
