//! `airlock-probes`: run the escape probes and report each result.
//!
//! Exit status: 0 when every selected probe passed, 1 when any failed, 2 on bad arguments.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;

use airlock_probes::context::Ctx;
use airlock_probes::probe::{Probe, ProbeResult};
use airlock_probes::probes::{self, leaks};
use airlock_probes::report::{self, Summary};
use airlock_probes::sys::status_field;

/// Attempt escapes from the Airlock sandbox and check that each fails for the right reason.
#[derive(Debug, Parser)]
#[command(name = "airlock-probes", version)]
struct Args {
    /// Print one JSON object per probe and a final `{"summary": …}` line.
    #[arg(long)]
    json: bool,
    /// List the probes without running them.
    #[arg(long)]
    list: bool,
    /// Run only these probes (comma-separated names; see --list).
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    only: Vec<String>,
    /// TCP port of a listener on the host's 127.0.0.1 that must stay unreachable.
    #[arg(long, value_name = "PORT")]
    host_tcp: Option<u16>,
    /// UDP port of an echo socket on the host's 127.0.0.1 that must stay unreachable.
    #[arg(long, value_name = "PORT")]
    host_udp: Option<u16>,
    /// Name of a host abstract UNIX socket (without the leading '@') that must stay unreachable.
    #[arg(long, value_name = "NAME")]
    host_abstract: Option<String>,
    /// Path of a host UNIX socket (e.g. one listening in the workspace) that must stay
    /// unreachable.
    #[arg(long, value_name = "PATH")]
    host_unix_path: Option<PathBuf>,
    /// Pid of a host process that must be invisible.
    #[arg(long, value_name = "PID")]
    host_pid: Option<i32>,
    /// A host file outside the workspace, target of the planted symlink and hard link.
    #[arg(long, value_name = "PATH")]
    outside_path: Option<PathBuf>,
    /// The read-write workspace (default: the current directory).
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// An extra mount point the sandbox is expected to have, e.g. a read-only tool bind
    /// (repeatable). The probe binary's own path is always allowed.
    #[arg(long, value_name = "PATH")]
    allowed_mount: Vec<PathBuf>,
    /// A workspace path that must be read-only (repeatable; relative to the workspace).
    #[arg(long, value_name = "PATH")]
    protected: Vec<PathBuf>,
}

fn main() -> ExitCode {
    // Before anything opens a descriptor of its own.
    let inherited_fds = leaks::inherited_fds();
    let args = Args::parse();
    let catalogue = probes::all();
    let selected = match select(&catalogue, &args.only) {
        Ok(selected) => selected,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let mut out = std::io::stdout().lock();
    if args.list {
        return match report::catalogue(&mut out, &selected, args.json) {
            Ok(()) => ExitCode::SUCCESS,
            Err(_) => ExitCode::from(2),
        };
    }
    let json = args.json;
    let ctx = match context(args, inherited_fds) {
        Ok(ctx) => ctx,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    match run(&mut out, &selected, &ctx, json) {
        Ok(summary) if summary.failed == 0 => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: cannot write results: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(
    out: &mut impl Write,
    selected: &[Probe],
    ctx: &Ctx,
    json: bool,
) -> std::io::Result<Summary> {
    let mut results: Vec<ProbeResult> = Vec::with_capacity(selected.len());
    for probe in selected {
        let result = probe.execute(ctx);
        report::result_line(out, &result, json)?;
        results.push(result);
    }
    let summary = Summary::of(&results);
    report::summary_line(out, &summary, json)?;
    Ok(summary)
}

/// The probes named by `--only`, in catalogue order; all of them when none is named.
fn select(catalogue: &[Probe], only: &[String]) -> Result<Vec<Probe>, String> {
    if only.is_empty() {
        return Ok(catalogue.to_vec());
    }
    if let Some(unknown) = only
        .iter()
        .find(|n| !catalogue.iter().any(|p| p.name == n.as_str()))
    {
        return Err(format!(
            "error: unknown probe `{unknown}` in --only\nhelp: run `airlock-probes --list` to see the probe names"
        ));
    }
    Ok(catalogue
        .iter()
        .filter(|p| only.iter().any(|n| n == p.name))
        .copied()
        .collect())
}

fn context(args: Args, inherited_fds: Vec<(i32, String)>) -> Result<Ctx, String> {
    let cwd = std::env::current_dir().map_err(|e| {
        format!("error: cannot read the current directory: {e}\nhelp: pass --workspace DIR")
    })?;
    let workspace = absolute(&cwd, args.workspace.as_deref().unwrap_or(&cwd));
    if !workspace.is_dir() {
        return Err(format!(
            "error: workspace {} is not a directory\nhelp: pass --workspace with the sandbox's read-write directory",
            workspace.display()
        ));
    }
    let protected = args
        .protected
        .iter()
        .map(|p| absolute(&workspace, p))
        .collect();
    let outside_path = args.outside_path.as_deref().map(|p| absolute(&cwd, p));
    let privileged = status_field("CapEff")
        .map(|v| u64::from_str_radix(&v, 16) != Ok(0))
        .unwrap_or(true);
    Ok(Ctx {
        host_tcp: args.host_tcp,
        host_udp: args.host_udp,
        host_abstract: args.host_abstract,
        host_unix_path: args.host_unix_path.as_deref().map(|p| absolute(&cwd, p)),
        host_pid: args.host_pid,
        outside_path,
        workspace,
        protected,
        allowed_mounts: args.allowed_mount,
        inherited_fds,
        privileged,
    })
}

fn absolute(base: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        base.join(path)
    }
}
