//! `airlock replay`: score recorded traces against the Gate.

use std::io::{BufReader, IsTerminal, Write};
use std::path::Path;

use airlock_core::facts::GateConfig;
use airlock_core::gate::Gate;

use crate::home::Home;
use crate::replay::metrics::Comparison;
use crate::{config, policies, replay};

/// Files larger than this get a progress bar on an interactive stderr.
const PROGRESS_THRESHOLD: u64 = 1 << 20;

pub fn run(path: &Path, profile_flag: Option<&str>, as_json: bool) -> anyhow::Result<i32> {
    let home = Home::from_env()?;
    let cfg = config::load(&home.config_file())?;
    let profile = policies::pick_profile(profile_flag, &cfg.policy.profile)?;
    let loaded = policies::load(&home, profile)?;
    let (file, size) = crate::operator_file::open(path, crate::operator_file::TRACE_FILE)?;
    let bar = (size > PROGRESS_THRESHOLD && std::io::stderr().is_terminal()).then(|| {
        let b = indicatif::ProgressBar::new(size);
        b.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {eta}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    });
    let gate = Gate::new(loaded.engine, GateConfig::new("/workspace"));
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let report = replay::replay(
        &gate,
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
    let mut err = std::io::stderr().lock();
    for e in &report.errors {
        writeln!(
            err,
            "error: {}",
            airlock_core::terminal_text::escape_block(e)
        )?;
    }
    writeln!(
        err,
        "replayed {} traces, {} calls, profile {}",
        report.traces,
        report.calls,
        profile.name()
    )?;
    let cmp = Comparison {
        columns: vec![
            (profile.name(), &report.gate),
            ("allow-all", &report.allow_all),
            ("rule-of-two", &report.rule_of_two),
        ],
    };
    write!(err, "{cmp}")?;
    Ok(if report.errors.is_empty() { 0 } else { 2 })
}
