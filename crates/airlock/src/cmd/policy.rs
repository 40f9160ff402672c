//! `airlock policy check` and `airlock policy diff`.

use airlock_core::terminal_text::escape_line;

use crate::home::Home;
use crate::{config, policies};

pub fn check(profile_flag: Option<&str>) -> anyhow::Result<i32> {
    let home = Home::from_env()?;
    let cfg = config::load(&home.config_file())?;
    let profile = policies::pick_profile(profile_flag, &cfg.policy.profile)?;
    let loaded = policies::load(&home, profile)?;
    let s = loaded.engine.summary(loaded.files.clone());
    crate::out!(
        "profile {}: {} policies valid against the Airlock schema",
        profile.name(),
        s.ids.len()
    );
    for f in &s.files {
        crate::out!("  file   {}", escape_line(f));
    }
    crate::out!(
        "  permit {}   ask {}   forbid {}",
        s.permits,
        s.asks,
        s.forbids
    );
    for id in &s.ids {
        crate::out!("  - {}", escape_line(id));
    }
    Ok(0)
}

/// Exit status of `policy diff` when the files on disk would loosen the policy.
pub const EXIT_LOOSENS: i32 = 3;

/// Show what loading the files on disk would change against the last loaded set, without
/// loading them (so without recording anything).
pub fn diff(profile_flag: Option<&str>) -> anyhow::Result<i32> {
    let home = Home::from_env()?;
    let cfg = config::load(&home.config_file())?;
    let profile = policies::pick_profile(profile_flag, &cfg.policy.profile)?;
    let change = policies::diff(&home, profile)?;
    std::io::Write::write_all(
        &mut std::io::stdout().lock(),
        crate::policy_change::describe(change.as_ref()).as_bytes(),
    )?;
    Ok(match change {
        Some(c) if c.comparison.loosens() => EXIT_LOOSENS,
        _ => 0,
    })
}
