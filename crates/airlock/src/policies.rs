//! Loading the operator's policy files (or the built-in profile when none were written).

use std::path::{Path, PathBuf};

use airlock_core::policy::{builtin_sources, CompiledPolicy, PolicyEngine, PolicySource, Profile};

use crate::home::Home;
use crate::operator_file;
use crate::policy_change;

/// The loaded engine and the files it came from.
pub struct LoadedPolicy {
    pub engine: PolicyEngine,
    pub files: Vec<String>,
    pub profile: Profile,
    /// `sha256:` over every source's name and text, in load order: which policy decided.
    pub hash: String,
}

/// The hash of a policy set as loaded (see [`LoadedPolicy::hash`]).
fn sources_hash(sources: &[PolicySource]) -> String {
    let mut all = Vec::new();
    for s in sources {
        // Lengths first, so that no two different sets run together into the same bytes.
        for part in [s.name.as_bytes(), s.text.as_bytes()] {
            all.extend_from_slice(&(part.len() as u64).to_le_bytes());
            all.extend_from_slice(part);
        }
    }
    format!("sha256:{}", airlock_core::canonical::sha256_hex(&all))
}

fn cedar_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    match std::fs::read_dir(dir) {
        Ok(rd) => {
            for entry in rd {
                let p = entry?.path();
                if p.extension().is_some_and(|e| e == "cedar") {
                    files.push(p);
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => anyhow::bail!("cannot read policy directory {}: {e}", dir.display()),
    }
    files.sort();
    Ok(files)
}

fn read_sources(files: &[PathBuf]) -> anyhow::Result<Vec<PolicySource>> {
    files
        .iter()
        .map(|p| {
            let text = operator_file::read_text(p, operator_file::POLICY_FILE)?;
            Ok(PolicySource {
                name: p.display().to_string(),
                text,
            })
        })
        .collect()
}

/// What `profile` loads from disk: the operator's copy in `policy/<profile>/` if
/// `airlock init` wrote one, else the built-in set; plus every file in `policy/local/` and
/// the Cedar form of the net rules. Also the hosts the net rules name.
fn current_sources(
    home: &Home,
    profile: Profile,
) -> anyhow::Result<(Vec<PolicySource>, Vec<String>)> {
    let own = cedar_files(&home.policy_dir().join(profile.name()))?;
    let mut sources = if own.is_empty() {
        builtin_sources(profile)
    } else {
        read_sources(&own)?
    };
    sources.extend(read_sources(&cedar_files(
        &home.policy_dir().join("local"),
    )?)?);
    // `airlock net allow` rules become Cedar permits evaluated with everything else.
    let rules = airlock_proxy::NetRules::load(&home.config).map_err(|e| anyhow::anyhow!("{e}"))?;
    let generated = airlock_proxy::rules_to_cedar(&rules);
    if !generated.trim().is_empty() {
        sources.push(PolicySource {
            name: airlock_proxy::RULES_POLICY_NAME.to_string(),
            text: generated,
        });
    }
    let hosts = rules.rules.iter().map(|r| r.host.clone()).collect();
    Ok((sources, hosts))
}

/// Load `profile` (see [`current_sources`]). When the files differ from those the last
/// load used, the change is recorded in the audit log with each file's old and new hash,
/// and a change that loosens (see [`airlock_core::policy_probe`]) is printed as a warning
/// and flagged in its record.
pub fn load(home: &Home, profile: Profile) -> anyhow::Result<LoadedPolicy> {
    let (sources, hosts) = current_sources(home, profile)?;
    let files = sources.iter().map(|s| s.name.clone()).collect();
    let engine = load_compiled(home, profile, &sources)?;
    policy_change::note_load(home, profile, &sources, &hosts)?;
    Ok(LoadedPolicy {
        engine,
        files,
        profile,
        hash: sources_hash(&sources),
    })
}

/// What would change against the last loaded set if the files on disk were loaded now;
/// `None` when nothing was loaded before. Writes nothing.
pub fn diff(home: &Home, profile: Profile) -> anyhow::Result<Option<policy_change::PolicyChange>> {
    let (sources, hosts) = current_sources(home, profile)?;
    policy_change::against_last(home, profile, &sources, &hosts)
}

/// The engine for `sources`, from the compiled form kept in the config dir's `cache/` when
/// it was made from exactly these sources; else parsed, validated and compiled anew (and
/// the compiled form kept for the next run). The cache lives beside the policies because
/// it is as trusted as they are: the state dir holds session workspaces, the config dir
/// is never mounted into a sandbox.
fn load_compiled(
    home: &Home,
    profile: Profile,
    sources: &[PolicySource],
) -> anyhow::Result<PolicyEngine> {
    let path = compiled_path(home, profile);
    let build = build_stamp();
    let cached = operator_file::read(&path, operator_file::POLICY_CACHE)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<CachedPolicy>(&bytes).ok())
        .filter(|cached| !build.is_empty() && cached.build == build)
        .and_then(|cached| PolicyEngine::from_compiled(sources, cached.compiled));
    if let Some(engine) = cached {
        return Ok(engine);
    }
    let (engine, compiled) = PolicyEngine::compile(sources).map_err(|e| anyhow::anyhow!("{e}"))?;
    // Only an optimisation: a cache that cannot be written costs the next run a parse.
    let _ = store_compiled(&path, &CachedPolicy { build, compiled });
    Ok(engine)
}

/// Where the compiled form of `profile`'s policies is kept.
pub fn compiled_path(home: &Home, profile: Profile) -> PathBuf {
    home.config
        .join("cache")
        .join(format!("policy-{}.json", profile.name()))
}

/// Write the compiled form atomically, so that concurrent runs never read half of one.
fn store_compiled(path: &Path, cached: &CachedPolicy) -> anyhow::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| anyhow::anyhow!("no parent directory"))?;
    crate::home::create_private_dir(dir)?;
    airlock_proxy::write_atomic(path, &serde_json::to_vec(cached)?, 0o600)?;
    Ok(())
}

/// The compiled policies as kept on disk, with the binary that compiled them.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CachedPolicy {
    /// [`build_stamp`] of the binary that validated and wrote them.
    build: String,
    compiled: CompiledPolicy,
}

/// What tells this binary from another build of the same version: the size and the
/// modification time of the executable. A cache written by another build (whose
/// validation, or Cedar, may differ) is never used; the policies are validated again.
fn build_stamp() -> String {
    use std::os::unix::fs::MetadataExt;
    std::env::current_exe()
        .and_then(std::fs::metadata)
        .map(|m| format!("{}:{}.{}", m.size(), m.mtime(), m.mtime_nsec()))
        .unwrap_or_default()
}

/// Resolve the profile: `--profile` beats `airlock.toml`.
pub fn pick_profile(flag: Option<&str>, configured: &str) -> anyhow::Result<Profile> {
    let name = flag.unwrap_or(configured);
    Profile::parse(name).ok_or_else(|| {
        anyhow::anyhow!("unknown profile {name:?}\nhelp: use --profile default or --profile strict")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn home() -> (tempfile::TempDir, Home) {
        let dir = tempfile::tempdir().unwrap();
        let home = Home {
            config: dir.path().join("config"),
            state: dir.path().join("state"),
        };
        (dir, home)
    }

    fn cached(home: &Home) -> serde_json::Value {
        let path = compiled_path(home, Profile::Default);
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    }

    #[test]
    fn the_cache_is_used_only_by_the_build_that_wrote_it() {
        let (_d, home) = home();
        let path = compiled_path(&home, Profile::Default);
        load(&home, Profile::Default).unwrap();
        assert_eq!(cached(&home)["build"], build_stamp());
        // Same build, same sources: read, not written again.
        let inode = std::fs::metadata(&path).unwrap().ino();
        load(&home, Profile::Default).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().ino(), inode);
        // Written by another build: validated again and replaced.
        let mut other = cached(&home);
        other["build"] = "another build".into();
        std::fs::write(&path, serde_json::to_vec(&other).unwrap()).unwrap();
        let inode = std::fs::metadata(&path).unwrap().ino();
        load(&home, Profile::Default).unwrap();
        assert_ne!(std::fs::metadata(&path).unwrap().ino(), inode);
        assert_eq!(cached(&home)["build"], build_stamp());
    }
}
