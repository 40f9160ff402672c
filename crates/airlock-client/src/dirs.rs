//! Where Airlock keeps its config and its state: `AIRLOCK_HOME/{config,state}`, else the
//! XDG dirs (`$XDG_CONFIG_HOME/airlock`, `$XDG_DATA_HOME/airlock`), else their defaults
//! under `$HOME`.

use std::path::PathBuf;

/// The two dirs, as the environment names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dirs {
    pub config: PathBuf,
    pub state: PathBuf,
}

impl Dirs {
    pub fn from_env() -> anyhow::Result<Dirs> {
        if let Some(h) = std::env::var_os("AIRLOCK_HOME").filter(|v| !v.is_empty()) {
            let h = PathBuf::from(h);
            return Ok(Dirs {
                config: h.join("config"),
                state: h.join("state"),
            });
        }
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let xdg = |var: &str, fallback: &str| -> anyhow::Result<PathBuf> {
            if let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) {
                return Ok(PathBuf::from(v).join("airlock"));
            }
            match &home {
                Some(h) => Ok(h.join(fallback).join("airlock")),
                None => anyhow::bail!("neither AIRLOCK_HOME nor HOME is set\nhelp: set AIRLOCK_HOME to the directory Airlock should use"),
            }
        };
        Ok(Dirs {
            config: xdg("XDG_CONFIG_HOME", ".config")?,
            state: xdg("XDG_DATA_HOME", ".local/share")?,
        })
    }
}
