//! `airlock exec`: one command, decided, sandboxed and recorded ([`crate::service::exec`]).
//! Through the host when one serves the state dir (it runs the same service in its own
//! process, for this process's streams), embedded otherwise.

use std::path::PathBuf;

use crate::home::Home;
use crate::service::caller::Caller;
use crate::service::exec::{ExecRequest, Loaded};

pub struct ExecArgs {
    pub workspace: Option<PathBuf>,
    pub timeout: Option<u64>,
    pub profile: Option<String>,
    /// Secrets whose placeholders the run gets (`--secret NAME`, repeatable).
    pub secrets: Vec<String>,
    pub command: Vec<String>,
}

pub fn run(args: ExecArgs) -> anyhow::Result<i32> {
    if args.command.is_empty() {
        anyhow::bail!("nothing to run\nhelp: airlock exec [--workspace DIR] -- <command…>");
    }
    let home = Home::from_env()?;
    let request = ExecRequest {
        // Several words are an argument vector (as under `sudo` or `bwrap`), one word a
        // shell line.
        command: airlock_core::shell::command_line_from_words(&args.command),
        workspace: args
            .workspace
            .as_deref()
            .map(std::path::absolute)
            .transpose()?,
        cwd: std::env::current_dir()?,
        timeout: args.timeout,
        profile: args.profile,
        secrets: args.secrets,
    };
    // A host serving this state dir runs the command, admitted under its limits.
    if let Some(host) = crate::host::client::find(&home) {
        let request = crate::host::exec_wire::HostRequest::Exec(request);
        return crate::host::exec_client::run(&home, host.pid, &request);
    }
    crate::service::exec::exec(&home, Loaded::Cold, &request, &Caller::this_process())
}
