//! Loading the operator's policy files (or the built-in profile when none were written).

use std::path::{Path, PathBuf};

use airlock_core::policy::{builtin_sources, PolicyEngine, PolicySource, Profile};

use crate::home::Home;

/// The loaded engine and the files it came from.
pub struct LoadedPolicy {
    pub engine: PolicyEngine,
    pub files: Vec<String>,
    pub profile: Profile,
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
            let text = std::fs::read_to_string(p)
                .map_err(|e| anyhow::anyhow!("cannot read policy file {}: {e}", p.display()))?;
            Ok(PolicySource {
                name: p.display().to_string(),
                text,
            })
        })
        .collect()
}

/// Load `profile`: the operator's copy in `policy/<profile>/` if `airlock init` wrote one,
/// else the built-in set; plus every file in `policy/local/`.
pub fn load(home: &Home, profile: Profile) -> anyhow::Result<LoadedPolicy> {
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
    let files = sources.iter().map(|s| s.name.clone()).collect();
    let engine = PolicyEngine::load(&sources).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(LoadedPolicy {
        engine,
        files,
        profile,
    })
}

/// Resolve the profile: `--profile` beats `airlock.toml`.
pub fn pick_profile(flag: Option<&str>, configured: &str) -> anyhow::Result<Profile> {
    let name = flag.unwrap_or(configured);
    Profile::parse(name).ok_or_else(|| {
        anyhow::anyhow!("unknown profile {name:?}\nhelp: use --profile default or --profile strict")
    })
}
