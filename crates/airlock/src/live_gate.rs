//! The Gate of a running session, reloaded when the operator changes the policy.
//!
//! A chat can run for hours. An operator who edits a policy file or takes a host back
//! (`airlock net revoke`, whose rules are policies too) means it for the sessions already
//! running, from their next decision on, not from their next start. So a session's
//! [`LiveGate`] looks at the files a policy load reads (the same fingerprint the host
//! watches: names, sizes, times, inodes) before each decision, and loads them anew when any
//! differ, through the same code as every command (validated, and recorded when changed).
//! A broken edit is refused: the session keeps deciding with the policy before it, and
//! says so once on stderr. `airlock.toml` is read once per session and is not reloaded.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use airlock_agent::agent::{CurrentGate, GateSource};
use airlock_core::gate::Gate;
use airlock_core::policy::Profile;

use crate::config::Config;
use crate::home::Home;
use crate::host::warm::{policy_fingerprint, Fingerprint};

struct InForce {
    gate: Arc<Gate>,
    fingerprint: Fingerprint,
    /// The error of the last edit that did not load, once said.
    refused: Option<String>,
}

pub struct LiveGate {
    home: Home,
    cfg: Config,
    profile: Profile,
    workspace: PathBuf,
    in_force: Mutex<InForce>,
}

impl LiveGate {
    pub fn open(
        home: &Home,
        cfg: &Config,
        profile: Profile,
        workspace: &std::path::Path,
    ) -> anyhow::Result<LiveGate> {
        let fingerprint = policy_fingerprint(home, profile);
        let gate = crate::runtime::gate_for(home, cfg, profile, workspace)?;
        Ok(LiveGate::from_loaded(
            home,
            cfg,
            profile,
            workspace,
            gate,
            fingerprint,
        ))
    }

    /// A live Gate starting from `gate` (for `workspace`), which was loaded from the files
    /// as `fingerprint` saw them (taken before the load, so no edit slips between).
    pub fn from_loaded(
        home: &Home,
        cfg: &Config,
        profile: Profile,
        workspace: &std::path::Path,
        gate: Gate,
        fingerprint: Fingerprint,
    ) -> LiveGate {
        LiveGate {
            home: home.clone(),
            cfg: cfg.clone(),
            profile,
            workspace: workspace.to_path_buf(),
            in_force: Mutex::new(InForce {
                gate: Arc::new(gate),
                fingerprint,
                refused: None,
            }),
        }
    }

    /// The Gate to decide with now: the one in force, reloaded first if its files changed.
    pub fn gate(&self) -> Arc<Gate> {
        let mut in_force = self.in_force.lock().unwrap_or_else(|p| p.into_inner());
        let now = policy_fingerprint(&self.home, self.profile);
        if now != in_force.fingerprint {
            match crate::runtime::gate_for(&self.home, &self.cfg, self.profile, &self.workspace) {
                Ok(gate) => {
                    in_force.gate = Arc::new(gate);
                    in_force.refused = None;
                }
                Err(e) => {
                    let error = format!("{e:#}");
                    if in_force.refused.as_deref() != Some(error.as_str()) {
                        eprintln!(
                            "airlock: warning: the edited policy does not load, so this session keeps deciding with the policy before it: {}",
                            airlock_core::terminal_text::escape_block(&error)
                        );
                        in_force.refused = Some(error);
                    }
                }
            }
            // Either way this edit has been seen: a refused one is not retried (and said
            // again) at every decision, only once the files change again.
            in_force.fingerprint = now;
        }
        in_force.gate.clone()
    }
}

impl GateSource for LiveGate {
    fn current(&self) -> CurrentGate<'_> {
        CurrentGate::Shared(self.gate())
    }
}
