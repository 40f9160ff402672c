//! The attestation's check of the workspace overlay: the mount at the workspace is the
//! run's overlay, on the layers the host made, and nothing else of the workspace's file
//! system is writable.

use super::{shortfall, Attestation, HostView, Shortfall};
use crate::mount_plan::{MountPlan, MountStep};
use crate::profile::SandboxProfile;

const FEATURE: &str = "workspace overlay";
const BUG: &str = "this is a bug in airlock-sandbox-init or a hostile mount; the run never writes through to the workspace";

/// The value of `key=` in comma-separated mount options.
fn option<'a>(options: &'a str, key: &str) -> Option<&'a str> {
    options
        .split(',')
        .find_map(|o| o.strip_prefix(key)?.strip_prefix('='))
}

impl Attestation {
    pub(super) fn verify_overlay(
        &self,
        profile: &SandboxProfile,
        plan: &MountPlan,
        host: &HostView,
        out: &mut Vec<Shortfall>,
    ) {
        let mut bad = |detail: String, help: &str| out.push(shortfall(FEATURE, detail, help));
        let (overlay, report) = match (&profile.workspace_overlay, &self.overlay) {
            (None, None) => return,
            (None, Some(_)) => {
                bad(
                    "the sandbox reports an overlay the profile does not ask for".into(),
                    BUG,
                );
                return;
            }
            (Some(_), None) => {
                bad(
                    "the profile asks for a workspace overlay and the sandbox reports none".into(),
                    BUG,
                );
                return;
            }
            (Some(o), Some(r)) => (o, r),
        };
        let Some(MountStep::Overlay { target, .. }) = plan.overlay() else {
            bad("the mount plan has no overlay step".into(), BUG);
            return;
        };
        match self.mounts.iter().rev().find(|m| &m.mount_point == target) {
            None => bad(format!("nothing is mounted at {}", target.display()), BUG),
            Some(m) if m.fs_type != "overlay" => bad(
                format!(
                    "{} is a {} mount, not the overlay",
                    target.display(),
                    m.fs_type
                ),
                BUG,
            ),
            Some(m) => {
                let opts = m.super_options.as_str();
                if !opts.split(',').any(|o| o == "userxattr") {
                    bad(
                        format!("the overlay at {} lacks userxattr ({opts})", target.display()),
                        "overlayfs in a user namespace needs the userxattr option (Linux 5.11 or newer)",
                    );
                }
                if option(opts, "redirect_dir") != Some("nofollow")
                    || option(opts, "metacopy") == Some("on")
                {
                    bad(
                        format!(
                            "the overlay at {} follows redirects or copies metadata only ({opts})",
                            target.display()
                        ),
                        BUG,
                    );
                }
                for (key, dir) in [("upperdir", &overlay.upper), ("workdir", &overlay.work)] {
                    let named = option(opts, key).and_then(|v| v.rsplit('/').next());
                    let want = dir.file_name().and_then(|n| n.to_str());
                    if named.is_none() || named != want {
                        bad(
                            format!(
                                "the overlay's {key} is {:?}, not {}",
                                option(opts, key),
                                dir.display()
                            ),
                            BUG,
                        );
                    }
                }
            }
        }
        let Some(expected) = &host.overlay else {
            bad(
                "the host has no record of the layers it made".into(),
                "this is a bug in the launcher",
            );
            return;
        };
        for (name, got, want) in [
            ("lower layer (the workspace)", report.lower, expected.lower),
            ("upper layer", report.upper, expected.upper),
            ("work directory", report.work, expected.work),
        ] {
            if got != want {
                bad(
                    format!(
                        "the overlay's {name} is inode {}:{}, the host made {}:{}",
                        got.dev, got.ino, want.dev, want.ino
                    ),
                    BUG,
                );
            }
        }
        // The workspace must not be writable by any other way than through the overlay.
        let device = expected.lower.device_text();
        for m in &self.mounts {
            if !m.read_only && m.fs_type != "overlay" && m.device == device {
                bad(
                    format!(
                        "{} is a writable mount of the workspace's file system ({device}, root {})",
                        m.mount_point.display(),
                        m.root.display()
                    ),
                    BUG,
                );
            }
        }
    }
}
