//! `airlock policy check`.

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
