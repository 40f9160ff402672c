//! Policy files that changed since the last load: detected when policies load, compared
//! with the probe set of [`airlock_core::policy_probe`], warned about when they loosen,
//! and recorded in the audit log with each file's old and new hash.
//!
//! The last loaded set (names, hashes and texts, and the hosts the net rules named) is
//! kept in the config dir's `cache/`, beside the compiled policies: as trusted as the
//! policies themselves and never mounted into a sandbox. The texts are kept because the
//! old policy must be decided again to tell whether the new one is more permissive.

use std::path::PathBuf;

use airlock_core::canonical::sha256_hex;
use airlock_core::policy::{PolicyEngine, PolicySource, Profile};
use airlock_core::policy_probe::{compare_engines, probe_set, PolicyComparison};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::home::Home;
use crate::operator_file;

/// One policy source as it was loaded.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LoadedFile {
    name: String,
    sha256: String,
    text: String,
}

/// What the last load used.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LastLoaded {
    files: Vec<LoadedFile>,
    hosts: Vec<String>,
}

/// One file that was added, removed or edited: its hash before and after (`None`: absent).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FileChange {
    pub name: String,
    pub old: Option<String>,
    pub new: Option<String>,
}

/// The difference between the last loaded policy set and the one on disk.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PolicyChange {
    pub profile: String,
    pub files: Vec<FileChange>,
    pub comparison: PolicyComparison,
}

/// Where the last loaded set of `profile` is kept.
pub fn last_loaded_path(home: &Home, profile: Profile) -> PathBuf {
    home.config
        .join("cache")
        .join(format!("policy-{}-loaded.json", profile.name()))
}

fn snapshot(sources: &[PolicySource], hosts: &[String]) -> LastLoaded {
    LastLoaded {
        files: sources
            .iter()
            .map(|s| LoadedFile {
                name: s.name.clone(),
                sha256: format!("sha256:{}", sha256_hex(s.text.as_bytes())),
                text: s.text.clone(),
            })
            .collect(),
        hosts: hosts.to_vec(),
    }
}

fn read_last(home: &Home, profile: Profile) -> anyhow::Result<Option<LastLoaded>> {
    let path = last_loaded_path(home, profile);
    let bytes = match operator_file::read(&path, operator_file::POLICY_CACHE) {
        Ok(b) => b,
        Err(operator_file::OperatorFileError::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    // A damaged record of the last load cannot tell what changed: say so rather than
    // silently treating every file as new.
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        anyhow::anyhow!(
            "{}: the record of the last loaded policies is damaged ({e})\nhelp: delete it; the next load records the current policies as the baseline",
            path.display()
        )
    })
}

fn file_changes(old: &LastLoaded, new: &LastLoaded) -> Vec<FileChange> {
    let mut out = Vec::new();
    for f in &old.files {
        let now = new.files.iter().find(|n| n.name == f.name);
        if now.map(|n| &n.sha256) != Some(&f.sha256) {
            out.push(FileChange {
                name: f.name.clone(),
                old: Some(f.sha256.clone()),
                new: now.map(|n| n.sha256.clone()),
            });
        }
    }
    for n in &new.files {
        if !old.files.iter().any(|f| f.name == n.name) {
            out.push(FileChange {
                name: n.name.clone(),
                old: None,
                new: Some(n.sha256.clone()),
            });
        }
    }
    out
}

fn engine_of(files: &[LoadedFile]) -> anyhow::Result<PolicyEngine> {
    let sources: Vec<PolicySource> = files
        .iter()
        .map(|f| PolicySource {
            name: f.name.clone(),
            text: f.text.clone(),
        })
        .collect();
    PolicyEngine::load(&sources).map_err(|e| anyhow::anyhow!("{e}"))
}

fn change_between(
    profile: Profile,
    old: &LastLoaded,
    new: &LastLoaded,
) -> anyhow::Result<Option<PolicyChange>> {
    let files = file_changes(old, new);
    if files.is_empty() {
        return Ok(None);
    }
    let mut hosts = old.hosts.clone();
    hosts.extend(new.hosts.iter().cloned());
    // The old set loaded before, so it compiles; if this build's Cedar refuses it now,
    // every probe counts as denied before, and anything the new set permits shows.
    let old_engine = engine_of(&old.files).or_else(|_| engine_of(&[]))?;
    let new_engine = engine_of(&new.files)?;
    let comparison = compare_engines(old_engine, new_engine, &probe_set(&hosts));
    Ok(Some(PolicyChange {
        profile: profile.name().to_string(),
        files,
        comparison,
    }))
}

/// The change from the last loaded set to `sources`; `None` when nothing was loaded
/// before or nothing changed.
pub fn against_last(
    home: &Home,
    profile: Profile,
    sources: &[PolicySource],
    hosts: &[String],
) -> anyhow::Result<Option<PolicyChange>> {
    match read_last(home, profile)? {
        None => Ok(None),
        Some(old) => change_between(profile, &old, &snapshot(sources, hosts)),
    }
}

/// After a load of `sources`: warn about and record a change since the last load, then
/// make `sources` the last loaded set. The first load only sets the baseline.
pub fn note_load(
    home: &Home,
    profile: Profile,
    sources: &[PolicySource],
    hosts: &[String],
) -> anyhow::Result<()> {
    let new = snapshot(sources, hosts);
    let path = last_loaded_path(home, profile);
    if let Some(dir) = path.parent() {
        crate::home::create_private_dir(dir)?;
    }
    // Several processes load the same edit (the host, each running session, commands):
    // comparing, recording and moving the baseline under one lock records it once.
    let _lock = lock_beside(&path)?;
    if let Some(old) = read_last(home, profile)? {
        if let Some(change) = change_between(profile, &old, &new)? {
            warn(&change);
            crate::config_audit::record(home, "policy-changed", record_detail(&change))?;
        }
    }
    airlock_proxy::write_atomic(&path, &serde_json::to_vec(&new)?, 0o600)?;
    Ok(())
}

/// An exclusive lock on `<path>.lock`, held until dropped.
pub(crate) fn lock_beside(
    path: &std::path::Path,
) -> anyhow::Result<nix::fcntl::Flock<std::fs::File>> {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&name)
        .map_err(|e| {
            anyhow::anyhow!("cannot open {}: {e}", std::path::Path::new(&name).display())
        })?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive).map_err(|(_, e)| {
        anyhow::anyhow!("cannot lock {}: {e}", std::path::Path::new(&name).display())
    })
}

fn record_detail(change: &PolicyChange) -> serde_json::Value {
    json!({
        "profile": change.profile,
        "files": change.files,
        "loosens": change.comparison.loosens(),
        "loosened": change.comparison.loosened,
        "tightened": change.comparison.tightened,
        "probes": change.comparison.probes,
    })
}

fn warn(change: &PolicyChange) {
    if !change.comparison.loosens() {
        return;
    }
    eprintln!(
        "airlock: warning: the {} policy changed since the last run and now permits more:",
        change.profile
    );
    for c in &change.comparison.loosened {
        eprintln!(
            "  {}: {}",
            airlock_core::terminal_text::escape_line(&c.probe),
            c.arrow()
        );
    }
    eprintln!("help: review the change with `airlock audit tail`; `airlock policy diff` shows such differences before they load");
}

/// The text `airlock policy diff` prints.
pub fn describe(change: Option<&PolicyChange>) -> String {
    let Some(change) = change else {
        return "no policy change since the last load (or nothing was loaded yet)\n".into();
    };
    let esc = airlock_core::terminal_text::escape_line;
    let mut out = String::new();
    out.push_str(&format!("profile {}\n", change.profile));
    for f in &change.files {
        out.push_str(&format!(
            "  file {}: {} -> {}\n",
            esc(&f.name),
            f.old.as_deref().unwrap_or("(absent)"),
            f.new.as_deref().unwrap_or("(absent)")
        ));
    }
    let c = &change.comparison;
    if c.loosened.is_empty() && c.tightened.is_empty() {
        out.push_str(&format!(
            "no probe's decision changes ({} probes)\n",
            c.probes
        ));
    }
    for l in &c.loosened {
        out.push_str(&format!("  loosens  {}: {}\n", esc(&l.probe), l.arrow()));
    }
    for t in &c.tightened {
        out.push_str(&format!("  tightens {}: {}\n", esc(&t.probe), t.arrow()));
    }
    if c.loosens() {
        out.push_str("this change loosens the policy\n");
    }
    out
}
