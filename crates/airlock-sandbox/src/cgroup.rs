//! cgroup v2 limits for one run, when this process has a delegated cgroup.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::attestation::CgroupReport;
use crate::host_support::{cgroup_delegation, own_cgroup_v2_dir};
use crate::profile::CgroupLimits;

/// A child cgroup holding one sandbox; removed on drop.
pub(crate) struct RunCgroup {
    dir: PathBuf,
}

static NEXT: AtomicU64 = AtomicU64::new(0);

impl RunCgroup {
    /// Create a child cgroup with `limits`, or say why none is available.
    pub(crate) fn create(limits: &CgroupLimits) -> (Option<RunCgroup>, CgroupReport) {
        let support = cgroup_delegation();
        let Some(parent) = own_cgroup_v2_dir().filter(|_| support.available) else {
            return (
                None,
                CgroupReport::Unavailable {
                    reason: support.detail,
                },
            );
        };
        let name = format!(
            "airlock-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let dir = parent.join(&name);
        let result = (|| -> std::io::Result<()> {
            std::fs::create_dir(&dir)?;
            std::fs::write(dir.join("memory.max"), limits.memory_max_bytes.to_string())?;
            // Optional: absent when swap accounting is off.
            let _ = std::fs::write(dir.join("memory.swap.max"), "0");
            std::fs::write(dir.join("pids.max"), limits.pids_max.to_string())?;
            let period = 100_000u64;
            let quota = period * u64::from(limits.cpu_percent) / 100;
            std::fs::write(dir.join("cpu.max"), format!("{quota} {period}"))?;
            Ok(())
        })();
        match result {
            Ok(()) => {
                let report = CgroupReport::Applied {
                    cgroup: dir.display().to_string(),
                };
                (Some(RunCgroup { dir }), report)
            }
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                (
                    None,
                    CgroupReport::Unavailable {
                        reason: format!("{}: {e}", dir.display()),
                    },
                )
            }
        }
    }

    /// Move `pid` (the helper, before it builds the sandbox) into the cgroup.
    pub(crate) fn add(&self, pid: u32) -> std::io::Result<()> {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string())
    }
}

impl Drop for RunCgroup {
    fn drop(&mut self) {
        // The last process has been reaped by the time the run returns.
        let _ = std::fs::remove_dir(&self.dir);
    }
}
