//! The host's loaded policy and config, kept warm and swapped whole when their files change.
//!
//! Every second the host looks at the files a load reads (the profile's policy directory,
//! `policy/local/`, `net-rules.toml`, `airlock.toml`: names, sizes, times, inodes). When any
//! differ it loads them anew through the same code as every command
//! ([`crate::policies::load`], [`crate::config::load`]), which validates them and records the
//! change in the audit log (old and new hash of each file, and whether the change loosens,
//! by the policy probes). Only a load that succeeded replaces what is in force, in one
//! swap; a broken edit leaves the old set deciding, and its error, which names the file and
//! line, is logged, recorded and shown by `airlock status` until an edit loads.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use airlock_core::gate::Gate;
use airlock_core::policy::Profile;

use crate::config::Config;
use crate::home::Home;
use crate::service::status::PolicyStatus;

/// What the files looked like when they were last read: (path, size, mtime, inode).
pub(crate) type Fingerprint = Vec<(PathBuf, u64, i64, i64, u64)>;

struct Loaded<T> {
    value: Arc<T>,
    fingerprint: Fingerprint,
    loaded_at: u64,
    refused_edit: Option<String>,
}

struct WarmGate {
    gate: Arc<Gate>,
    hash: String,
}

pub struct Warm {
    home: Home,
    /// The host's one writer, for the records of refused edits.
    audit: Arc<super::audit_writer::HostAudit>,
    config: RwLock<Loaded<Config>>,
    gates: RwLock<HashMap<&'static str, Loaded<WarmGate>>>,
}

fn stat_into(out: &mut Fingerprint, path: &Path) {
    use std::os::unix::fs::MetadataExt;
    if let Ok(m) = std::fs::symlink_metadata(path) {
        out.push((
            path.to_path_buf(),
            m.size(),
            m.mtime(),
            m.mtime_nsec(),
            m.ino(),
        ));
    }
}

fn dir_into(out: &mut Fingerprint, dir: &Path) {
    stat_into(out, dir);
    if let Ok(rd) = std::fs::read_dir(dir) {
        let mut names: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
        names.sort();
        for p in names {
            stat_into(out, &p);
        }
    }
}

/// The files a load of `profile`'s policy reads, as they are now.
pub(crate) fn policy_fingerprint(home: &Home, profile: Profile) -> Fingerprint {
    let mut fp = Vec::new();
    dir_into(&mut fp, &home.policy_dir().join(profile.name()));
    dir_into(&mut fp, &home.policy_dir().join("local"));
    stat_into(&mut fp, &home.config.join(airlock_proxy::RULES_FILE));
    fp
}

fn config_fingerprint(home: &Home) -> Fingerprint {
    let mut fp = Vec::new();
    stat_into(&mut fp, &home.config_file());
    fp
}

fn load_gate(home: &Home, profile: Profile) -> anyhow::Result<WarmGate> {
    let loaded = crate::policies::load(home, profile)?;
    // The workspace is set per request (`Gate::with_config`).
    let gate = Gate::new(
        loaded.engine,
        airlock_core::facts::GateConfig::new(home.state.clone()),
    );
    Ok(WarmGate {
        gate: Arc::new(gate),
        hash: loaded.hash,
    })
}

impl Warm {
    /// Load the config and the configured profile; an error here stops the host's start.
    pub fn load(home: &Home, audit: Arc<super::audit_writer::HostAudit>) -> anyhow::Result<Warm> {
        let fingerprint = config_fingerprint(home);
        let cfg = crate::config::load(&home.config_file())?;
        let profile = crate::policies::pick_profile(None, &cfg.policy.profile)?;
        let warm = Warm {
            home: home.clone(),
            audit,
            config: RwLock::new(Loaded {
                value: Arc::new(cfg),
                fingerprint,
                loaded_at: crate::runtime::now_unix(),
                refused_edit: None,
            }),
            gates: RwLock::new(HashMap::new()),
        };
        warm.gate(profile)?;
        Ok(warm)
    }

    pub fn config(&self) -> Arc<Config> {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .value
            .clone()
    }

    /// The loaded Gate of `profile` and its hash, loading it on first use.
    pub fn gate(&self, profile: Profile) -> anyhow::Result<(Arc<Gate>, String)> {
        self.gate_as_of(profile).map(|(gate, hash, _)| (gate, hash))
    }

    /// [`Warm::gate`], with what its files looked like before it was loaded from them: a
    /// [`crate::live_gate::LiveGate`] started from it reloads on any edit since.
    pub fn gate_as_of(&self, profile: Profile) -> anyhow::Result<(Arc<Gate>, String, Fingerprint)> {
        if let Some(g) = self
            .gates
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(profile.name())
        {
            return Ok((
                g.value.gate.clone(),
                g.value.hash.clone(),
                g.fingerprint.clone(),
            ));
        }
        let fingerprint = policy_fingerprint(&self.home, profile);
        let loaded = load_gate(&self.home, profile)?;
        let out = (
            loaded.gate.clone(),
            loaded.hash.clone(),
            fingerprint.clone(),
        );
        self.gates
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .entry(profile.name())
            .or_insert(Loaded {
                value: Arc::new(loaded),
                fingerprint,
                loaded_at: crate::runtime::now_unix(),
                refused_edit: None,
            });
        Ok(out)
    }

    pub fn policy_status(&self) -> Vec<PolicyStatus> {
        let gates = self.gates.read().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<PolicyStatus> = gates
            .iter()
            .map(|(name, g)| PolicyStatus {
                profile: name.to_string(),
                hash: g.value.hash.clone(),
                loaded_at: g.loaded_at,
                refused_edit: g.refused_edit.clone(),
            })
            .collect();
        out.sort_by(|a, b| a.profile.cmp(&b.profile));
        out
    }

    /// The config's refused edit, if the last one was.
    pub fn config_refused_edit(&self) -> Option<String> {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .refused_edit
            .clone()
    }

    /// Reload whatever changed on disk since it was read (see the module documentation).
    pub fn reload_changed(&self) {
        self.reload_config_if_changed();
        self.reload_gates_if_changed();
    }

    /// The config in force, after a look at its file: a request made just after an edit is
    /// decided under it. (A Gate needs no such look: a run's
    /// [`crate::live_gate::LiveGate`] compares the policy files itself before each decision.)
    pub fn current_config(&self) -> Arc<Config> {
        self.reload_config_if_changed();
        self.config()
    }

    fn reload_config_if_changed(&self) {
        let fp = config_fingerprint(&self.home);
        let config_changed = {
            let c = self.config.read().unwrap_or_else(|p| p.into_inner());
            c.fingerprint != fp
        };
        if config_changed {
            let result = crate::config::load(&self.home.config_file());
            let mut c = self.config.write().unwrap_or_else(|p| p.into_inner());
            c.fingerprint = fp;
            match result {
                Ok(cfg) => {
                    tracing::info!(file = %self.home.config_file().display(), "config reloaded");
                    c.value = Arc::new(cfg);
                    c.loaded_at = crate::runtime::now_unix();
                    c.refused_edit = None;
                }
                Err(e) => {
                    let why = format!("{e:#}");
                    tracing::error!(error = %why, "config edit refused; the old config stays in force");
                    self.record_refusal("config", &why);
                    c.refused_edit = Some(why);
                }
            }
        }
    }

    fn reload_gates_if_changed(&self) {
        for profile in Profile::all() {
            let fp = policy_fingerprint(&self.home, profile);
            let changed = {
                let gates = self.gates.read().unwrap_or_else(|p| p.into_inner());
                match gates.get(profile.name()) {
                    Some(g) => g.fingerprint != fp,
                    None => false,
                }
            };
            if !changed {
                continue;
            }
            let result = load_gate(&self.home, profile);
            let mut gates = self.gates.write().unwrap_or_else(|p| p.into_inner());
            let Some(g) = gates.get_mut(profile.name()) else {
                continue;
            };
            g.fingerprint = fp;
            match result {
                Ok(loaded) => {
                    tracing::info!(profile = profile.name(), old = %g.value.hash, new = %loaded.hash, "policy reloaded");
                    g.value = Arc::new(loaded);
                    g.loaded_at = crate::runtime::now_unix();
                    g.refused_edit = None;
                }
                Err(e) => {
                    let why = format!("{e:#}");
                    tracing::error!(profile = profile.name(), kept = %g.value.hash, error = %why, "policy edit refused; the old policy keeps deciding");
                    self.record_refusal(profile.name(), &why);
                    g.refused_edit = Some(why);
                }
            }
        }
    }

    fn record_refusal(&self, what: &str, why: &str) {
        let detail = serde_json::json!({"what": what, "error": why, "kept": "the set in force before the edit"});
        if let Err(e) = self
            .audit
            .record_system(&self.config(), "reload", "reload-refused", detail)
        {
            tracing::error!(error = %format!("{e:#}"), "the refused reload could not be recorded");
        }
    }
}
