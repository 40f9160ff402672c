//! Run one command in the sandbox from the command line, for manual checks, benchmarks and
//! the unprivileged-caller tests. Mints its token with airlock-core's `testing` feature, so
//! it is an example (built only with dev-dependencies), never part of a release.
//!
//! usage: sandbox-run [--init PATH] [--profile JSON] [--overlay RUNS_DIR] [--capture] [--attestation] WORKSPACE -- COMMAND
//! Exits with the command's status; prints the error and exits 70 when the run was refused.
//!
//! `--overlay RUNS_DIR` runs the command on a workspace overlay made for this run in
//! `RUNS_DIR` ([`airlock_sandbox::WorkspaceOverlay::create`]) and removes the overlay's
//! layers afterwards, as a host would after deciding on the change set (the benchmark's
//! overlay rows time exactly this).

use airlock_core::action::ExecAction;
use airlock_core::testing::authorize_for_tests;
use airlock_sandbox::{OutputMode, Sandbox, SandboxProfile, WorkspaceOverlay};

fn main() {
    let mut args = std::env::args().skip(1).peekable();
    let mut init = None;
    let mut profile_json = None;
    let mut output = OutputMode::Inherit;
    let mut print_attestation = false;
    let mut overlay_runs: Option<String> = None;
    while let Some(a) = args.peek().cloned() {
        match a.as_str() {
            "--init" => {
                args.next();
                init = args.next();
            }
            "--profile" => {
                args.next();
                profile_json = args.next();
            }
            "--overlay" => {
                args.next();
                overlay_runs = args.next();
            }
            "--capture" => {
                args.next();
                output = OutputMode::Capture;
            }
            "--attestation" => {
                args.next();
                print_attestation = true;
            }
            _ => break,
        }
    }
    let Some(workspace) = args.next() else {
        eprintln!("usage: sandbox-run [--init PATH] [--profile JSON] [--overlay RUNS_DIR] [--capture] [--attestation] WORKSPACE -- COMMAND");
        std::process::exit(64);
    };
    if args.peek().map(String::as_str) == Some("--") {
        args.next();
    }
    let command = args.collect::<Vec<_>>().join(" ");
    let mut profile = match profile_json {
        Some(j) => match serde_json::from_str::<SandboxProfile>(&j) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("error: --profile: {e}");
                std::process::exit(64);
            }
        },
        None => SandboxProfile::new(&workspace),
    };
    profile.workspace = workspace.into();
    if let Some(runs) = &overlay_runs {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let id = format!("run-{}-{nanos}", std::process::id());
        match WorkspaceOverlay::create(
            std::path::Path::new(runs),
            &id,
            profile.sandbox_uid,
            profile.sandbox_gid,
        ) {
            Ok(o) => profile.workspace_overlay = Some(o),
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(70);
            }
        }
    }
    let sandbox = match init {
        Some(p) => Sandbox::with_init(p.into()),
        None => Sandbox::locate(),
    };
    let auth = authorize_for_tests(ExecAction {
        command,
        cwd: String::new(),
        env: vec![],
    });
    let result = sandbox.and_then(|s| s.run(&auth, &profile, output.clone()));
    // Only the layers this run made itself; an overlay named by --profile is the caller's.
    if let Some(overlay) = profile
        .workspace_overlay
        .as_ref()
        .filter(|_| overlay_runs.is_some())
    {
        if let Err(e) = overlay.remove() {
            eprintln!("error: {e}");
            std::process::exit(70);
        }
    }
    match result {
        Ok(outcome) => {
            if matches!(output, OutputMode::Capture) {
                use std::io::Write;
                let _ = std::io::stdout().write_all(&outcome.stdout);
                let _ = std::io::stderr().write_all(&outcome.stderr);
            }
            if print_attestation {
                eprintln!(
                    "{}",
                    serde_json::to_string_pretty(&outcome.attestation).unwrap_or_default()
                );
            }
            std::process::exit(outcome.status);
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(70);
        }
    }
}
