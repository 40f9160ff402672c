//! The plan as a table, for `airlock doctor`.

use std::fmt;

use super::{MountPlan, MountStep, RebindReason};

/// `n` bytes in the largest unit that divides it (`256 KiB`, `1 MiB`, `4000 bytes`).
fn size(n: u64) -> String {
    match n {
        0 => "0 bytes".into(),
        n if n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

/// The last column of a step's row.
fn details(step: &MountStep) -> String {
    match step {
        MountStep::Tmpfs {
            size_bytes, mode, ..
        } => format!("size={} mode={mode:o} nosuid,nodev", size(*size_bytes)),
        MountStep::Bind {
            source,
            recursive,
            devices,
            ..
        } => format!(
            "from host {}{}{}",
            source.display(),
            if *recursive { ", recursive" } else { "" },
            if *devices {
                ", nosuid,noexec (device)"
            } else {
                ", nosuid,nodev"
            }
        ),
        MountStep::Proc { .. } => "new instance for the pid namespace".into(),
        MountStep::Devpts { .. } => "newinstance, ptmxmode=0666".into(),
        MountStep::Symlink { points_to, .. } => format!("-> {}", points_to.display()),
        MountStep::File { len, mode, .. } => {
            format!("{len} bytes, mode {mode:o}, in the read-only root")
        }
        MountStep::Copy {
            source,
            max_len,
            mode,
            ..
        } => format!(
            "of host {} (at most {}), mode {mode:o}, in the read-only root",
            source.display(),
            size(*max_len)
        ),
        MountStep::Overlay {
            lower, upper, work, ..
        } => format!(
            "lower: host {} (read-only bind); upper: {}; work: {}; {}, nosuid,nodev",
            lower.display(),
            upper.display(),
            work.display(),
            crate::overlay::options_text()
        ),
        MountStep::Rebind { reason, .. } => match reason {
            RebindReason::Protected => "protected path, no symlinks followed".into(),
            RebindReason::Pin => "pinned (cannot be renamed or removed)".into(),
            RebindReason::KernelInterface => "kernel interface".into(),
        },
    }
}

impl fmt::Display for MountPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{:<28} {:<10} {:<4} details", "path", "kind", "mode")?;
        for step in &self.steps {
            let target = step.target().display().to_string();
            let mode = if !step.is_mount() {
                "-"
            } else if step.read_only() {
                "ro"
            } else {
                "rw"
            };
            let kind = step.kind_name();
            writeln!(f, "{target:<28} {kind:<10} {mode:<4} {}", details(step))?;
        }
        if self.overlay().is_some() {
            writeln!(
                f,
                "(git metadata and protected paths are not bound read-only: writes to them land in the upper layer like any other, and the commit decision holds them)"
            )?;
        }
        Ok(())
    }
}
