//! `airlock replay`: score recorded traces against the Gate (through the host when one
//! runs; see [`crate::service::replay`]).

use std::io::{BufReader, IsTerminal, Write};
use std::path::Path;

use airlock_core::gate::Gate;

use crate::home::Home;
use crate::service::replay::{self as service, ReplayOutput, ReplayRequest};
use crate::{config, policies};

/// Files larger than this get a progress bar on an interactive stderr.
const PROGRESS_THRESHOLD: u64 = 1 << 20;

pub fn run(path: &Path, profile_flag: Option<&str>, as_json: bool) -> anyhow::Result<i32> {
    let home = Home::from_env()?;
    let output = crate::host::client::through_host_or(
        &home,
        |host| {
            let request = ReplayRequest {
                traces: std::path::absolute(path)?,
                profile: profile_flag.map(str::to_string),
                json: as_json,
            };
            host.post::<_, ReplayOutput>("/v1/replay", &request)
        },
        || embedded(&home, path, profile_flag, as_json),
    )?;
    std::io::stdout()
        .lock()
        .write_all(output.stdout.as_bytes())?;
    std::io::stderr()
        .lock()
        .write_all(output.stderr.as_bytes())?;
    Ok(output.exit)
}

fn embedded(
    home: &Home,
    path: &Path,
    profile_flag: Option<&str>,
    as_json: bool,
) -> anyhow::Result<ReplayOutput> {
    let cfg = config::load(&home.config_file())?;
    let profile = policies::pick_profile(profile_flag, &cfg.policy.profile)?;
    let loaded = policies::load(home, profile)?;
    let (file, size) = crate::operator_file::open(path, crate::operator_file::TRACE_FILE)?;
    let bar = (size > PROGRESS_THRESHOLD && std::io::stderr().is_terminal()).then(|| {
        let b = indicatif::ProgressBar::new(size);
        b.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {eta}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    });
    let gate = Gate::new(loaded.engine, service::gate_config());
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let output = service::replay(
        &gate,
        profile.name(),
        &mut BufReader::new(file),
        &mut out,
        as_json,
        &mut |n| {
            if let Some(b) = &bar {
                b.inc(n)
            }
        },
    )?;
    out.flush()?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    Ok(output)
}
