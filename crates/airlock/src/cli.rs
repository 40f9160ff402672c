//! Command-line interface.

use clap::{Parser, Subcommand};

use crate::cmd;

#[derive(Debug, Parser)]
#[command(
    name = "airlock",
    version,
    about = "A personal AI agent host that is secure by default"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Write the config dir: airlock.toml, editable policy copies, the audit signing key.
    Init {
        /// Overwrite existing policy copies and config.
        #[arg(long)]
        force: bool,
    },
    /// Inspect the policy.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Run the host in the foreground: the policy kept loaded, the API on a UNIX socket in
    /// the state dir. Commands find it by themselves. Stops on SIGTERM or SIGINT.
    Serve,
    /// Show the host (if one runs), the active sessions, pending approvals and the policy.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Decide an action in a fresh, untainted session and print the decision.
    /// Exit status: 0 allow, 10 ask, 20 deny, other on error.
    Check {
        #[arg(long)]
        profile: Option<String>,
        #[arg(long)]
        json: bool,
        /// Decide this action (JSON) instead of an exec command; `-` reads it from stdin.
        #[arg(long, conflicts_with = "command")]
        action: Option<String>,
        /// Workspace the action is judged against (default: current directory).
        #[arg(long)]
        workspace: Option<std::path::PathBuf>,
        /// The command, after `--`.
        #[arg(last = true)]
        command: Vec<String>,
    },
    /// Replay recorded agent traces (JSON lines) through the Gate and score them.
    Replay {
        traces: std::path::PathBuf,
        #[arg(long)]
        profile: Option<String>,
        /// One JSON line per call on stdout.
        #[arg(long)]
        json: bool,
    },
    /// The audit log.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// The operator's egress allowlist (hosts, methods, paths, pass-through, SSRF exceptions).
    #[command(subcommand)]
    Net(cmd::net::NetCommand),
    /// Credentials the proxy adds at the boundary; the sandbox only ever sees placeholders.
    #[command(subcommand)]
    Secret(cmd::secret::SecretCommand),
    /// Chat channels the host listens on (Telegram), and pairing their owner.
    #[command(subcommand)]
    Channel(cmd::channel::ChannelCommand),
    /// Show what this machine supports, the sandbox profile, and run the escape probes.
    Doctor,
    /// A systemd unit that runs `airlock serve`: install, uninstall, status.
    #[command(subcommand)]
    Service(cmd::service::ServiceCommand),
    /// The sandbox helper: pin the installed one.
    #[command(subcommand)]
    Sandbox(cmd::sandbox::SandboxCommand),
    /// The workspace's checkpoints (every commit of a run's changes): list, show, diff,
    /// restore one.
    #[command(subcommand)]
    Checkpoints(cmd::checkpoints::CheckpointsCommand),
    /// Restore the workspace to before its last N commits (default 1), whichever sessions
    /// made them. Refuses to overwrite files changed outside Airlock unless --force.
    Undo(cmd::checkpoints::UndoArgs),
    /// The approvals queue: list, show, approve or deny held actions.
    #[command(subcommand)]
    Approvals(cmd::approvals::ApprovalsCommand),
    /// The agent's memory: list, show, history, review held changes, approve or reject
    /// them, roll back, purge, export.
    #[command(subcommand)]
    Memory(cmd::memory::MemoryCommand),
    /// Standing grants made by approvals: list them, revoke one or all.
    #[command(subcommand)]
    Grants(cmd::grants::GrantsCommand),
    /// Scheduled tasks the host runs: add, list, show, pause, resume, run-now, cancel,
    /// history (docs/tasks.md).
    #[command(subcommand)]
    Tasks(cmd::tasks::TasksCommand),
    /// The kill switch: stop a session (or all), its sandboxes, approvals, grants and egress.
    Kill(cmd::kill::KillArgs),
    /// Print a one-time login link for the host's web page (it works once, within a
    /// minute), and open it in a browser where there is a display; with `--enroll`, a
    /// link that enrols a passkey for the page served remotely.
    Web(cmd::web::WebArgs),
    /// Run one task with the configured model, without interaction. Approvals go to the
    /// queue and are denied at the timeout. Exit status: 0 completed, 3 a budget or limit
    /// was reached, 137 killed, 4 the model provider failed, 1 on error.
    Run {
        /// Continue this session instead of starting a new one.
        #[arg(long)]
        session: Option<String>,
        /// Seconds to wait for each approval before treating it as denied
        /// (default: `approval_timeout_secs` under `[agent]`).
        #[arg(long, value_name = "SECS")]
        approval_timeout: Option<u64>,
        #[arg(long)]
        profile: Option<String>,
        /// Print one JSON object instead of the transcript.
        #[arg(long)]
        json: bool,
        /// With --json: first a line naming the session, then one JSON line per piece of
        /// the model's reply as it comes, then the report (the host's web page reads it).
        #[arg(long, requires = "json", hide = true)]
        stream_events: bool,
        /// Work on this directory instead of a fresh session workspace. Every change is
        /// a checkpoint (`airlock undo`); config, state and system directories are refused.
        #[arg(long, value_name = "DIR", conflicts_with = "session")]
        workspace: Option<std::path::PathBuf>,
        /// What to do.
        prompt: String,
    },
    /// Start here: a scripted model (no API key) plays a task through the real Gate,
    /// sandbox, egress proxy and audit log, while a web page tries to steal a file.
    /// Exit status 0 when the demo ran as designed.
    Demo {
        /// Keep the demo's state in this directory (new, empty, or an earlier demo's)
        /// instead of a throwaway one.
        #[arg(long, value_name = "DIR")]
        home: Option<std::path::PathBuf>,
        /// Approve what the policy holds, without asking.
        #[arg(long, conflicts_with = "no")]
        yes: bool,
        /// Deny what the policy holds, without asking (the default when stdin is not a
        /// terminal).
        #[arg(long)]
        no: bool,
    },
    /// Talk with the configured model at the terminal: streamed replies, each tool call with
    /// its decision, approvals answered inline. `/quit` leaves; `--session` resumes.
    Chat {
        /// Continue this session instead of starting a new one.
        #[arg(long)]
        session: Option<String>,
        /// Seconds each approval waits for an answer before it is denied
        /// (default: `approval_timeout_secs` under `[agent]`).
        #[arg(long, value_name = "SECS")]
        approval_timeout: Option<u64>,
        #[arg(long)]
        profile: Option<String>,
        /// Work on this directory instead of a fresh session workspace. Every change is
        /// a checkpoint (`airlock undo`); config, state and system directories are refused.
        #[arg(long, value_name = "DIR", conflicts_with = "session")]
        workspace: Option<std::path::PathBuf>,
    },
    /// Decide a command at the Gate, then run it in the verified sandbox. The exit status
    /// is the command's (128+signal if killed), or 126 when it was refused.
    Exec(ExecCli),
}

/// `exec`'s options. (The small `airlock` front reads the usual shapes of these itself;
/// a test below keeps the two readings the same.)
#[derive(Debug, clap::Args)]
pub struct ExecCli {
    /// Directory mounted read-write at the same path (default: current directory).
    #[arg(long)]
    workspace: Option<std::path::PathBuf>,
    /// Kill the whole process tree after this many seconds.
    #[arg(long)]
    timeout: Option<u64>,
    #[arg(long)]
    profile: Option<String>,
    /// Give the run this secret's placeholder (repeatable). It appears as an environment
    /// variable named after the secret in upper case, `-` and `.` as `_`; the proxy
    /// swaps it for the value only in requests to the secret's bound host and path.
    #[arg(long = "secret", value_name = "NAME")]
    secrets: Vec<String>,
    /// The command, after `--`.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

impl From<ExecCli> for cmd::exec::ExecArgs {
    fn from(c: ExecCli) -> Self {
        cmd::exec::ExecArgs {
            workspace: c.workspace,
            timeout: c.timeout,
            profile: c.profile,
            secrets: c.secrets,
            command: c.command,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Parse and validate the policies and print a summary.
    Check {
        #[arg(long)]
        profile: Option<String>,
    },
    /// Compare the policy files on disk with the last loaded set on a fixed probe set of
    /// actions, before the change loads; exits 3 when it loosens.
    Diff {
        #[arg(long)]
        profile: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Check the hash chain and signed checkpoints; exit non-zero on the first problem.
    Verify {
        /// Check a file `airlock audit export` wrote (either format) instead of the log.
        #[arg(long, value_name = "FILE")]
        export: Option<std::path::PathBuf>,
    },
    /// Export every record and signed checkpoint for a log pipeline: JSON lines, or
    /// OpenTelemetry logs (OTLP/JSON) to a file, stdout, or a collector.
    Export(cmd::audit::ExportArgs),
    /// Show the last records.
    Tail {
        #[arg(short = 'n', default_value_t = 20)]
        n: usize,
        #[arg(long)]
        json: bool,
    },
    /// Replace the checkpoint signing key: the old key (if it is still there) signs a record
    /// naming the new one, and the new key signs from then on. Verify follows the change.
    RotateKey,
}

/// Run the CLI and return the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    match run(cli) {
        Ok(code) => code,
        Err(e) if is_broken_pipe(&e) => 128 + 13,
        Err(e) => {
            // An error can quote input (a file name, a command, a record): every line of
            // it is shown, none of its controls obeyed.
            eprintln!(
                "error: {}",
                airlock_core::terminal_text::escape_block(&format!("{e:#}"))
            );
            1
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Init { force } => cmd::init::run(force),
        Command::Policy(PolicyCommand::Check { profile }) => cmd::policy::check(profile.as_deref()),
        Command::Policy(PolicyCommand::Diff { profile }) => cmd::policy::diff(profile.as_deref()),
        Command::Check {
            profile,
            json,
            action,
            workspace,
            command,
        } => cmd::check::run(
            profile.as_deref(),
            json,
            action.as_deref(),
            workspace,
            &command,
        ),
        Command::Replay {
            traces,
            profile,
            json,
        } => cmd::replay::run(&traces, profile.as_deref(), json),
        Command::Audit(AuditCommand::Verify { export: None }) => cmd::audit::verify(),
        Command::Audit(AuditCommand::Verify { export: Some(f) }) => cmd::audit::verify_export(&f),
        Command::Audit(AuditCommand::Export(a)) => cmd::audit::export(a),
        Command::Audit(AuditCommand::Tail { n, json }) => cmd::audit::tail(n, json),
        Command::Audit(AuditCommand::RotateKey) => cmd::audit::rotate_key(),
        Command::Doctor => cmd::doctor::run(),
        Command::Serve => cmd::serve::serve(),
        Command::Status { json } => cmd::serve::status(json),
        Command::Sandbox(c) => cmd::sandbox::run(c),
        Command::Service(c) => cmd::service::run(c),
        Command::Checkpoints(c) => cmd::checkpoints::run(c),
        Command::Undo(a) => cmd::checkpoints::undo(a),
        Command::Approvals(c) => cmd::approvals::run(c),
        Command::Memory(c) => cmd::memory::run(c),
        Command::Grants(c) => cmd::grants::run(c),
        Command::Kill(a) => cmd::kill::run(a),
        Command::Tasks(c) => cmd::tasks::run(c),
        Command::Web(a) => cmd::web::run(a),
        Command::Net(c) => cmd::net::run(c),
        Command::Secret(c) => cmd::secret::run(c),
        Command::Channel(c) => cmd::channel::run(c),
        Command::Run {
            session,
            approval_timeout,
            profile,
            json,
            stream_events,
            workspace,
            prompt,
        } => cmd::run::run(cmd::run::RunArgs {
            session,
            approval_timeout,
            profile,
            json,
            stream_events,
            workspace,
            prompt,
        }),
        Command::Demo { home, yes, no } => cmd::demo::run(cmd::demo::DemoArgs { home, yes, no }),
        Command::Chat {
            session,
            approval_timeout,
            profile,
            workspace,
        } => cmd::chat::run(cmd::chat::ChatArgs {
            session,
            approval_timeout,
            profile,
            workspace,
        }),
        Command::Exec(args) => cmd::exec::run(args.into()),
    }
}

/// The reader of our output went away (`airlock audit tail | head`): exit like a shell
/// does on SIGPIPE, without an error message.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_client::front::ExecLine;
    use proptest::prelude::*;

    /// What the full program's parser makes of `words` (after the program's name), when it
    /// is an `exec`.
    fn parsed_by_clap(words: &[String]) -> Option<ExecLine> {
        let cli = Cli::try_parse_from(
            std::iter::once("airlock".to_string()).chain(words.iter().cloned()),
        )
        .ok()?;
        match cli.command {
            Command::Exec(args) => Some(args.into()),
            _ => None,
        }
    }

    fn parsed_by_front(words: &[String]) -> Option<ExecLine> {
        let args: Vec<std::ffi::OsString> = std::iter::once("airlock".into())
            .chain(words.iter().map(Into::into))
            .collect();
        ExecLine::parse(&args)
    }

    proptest! {
        /// The small front sends an `exec` to the host only when it reads the command line
        /// exactly as this parser does; anything else it hands to this program.
        #[test]
        fn the_front_reads_an_exec_only_as_the_full_parser_does(
            words in proptest::collection::vec(
                proptest::sample::select(vec![
                    "exec", "--", "--workspace", "--workspace=ws", "--workspace=", "ws",
                    "--timeout", "--timeout=7", "7", "+7", "-7", "07", "--profile",
                    "--profile=strict", "strict", "--secret", "--secret=a=b", "gh", "-x",
                    "--help", "-h", "/bin/true", "a b", "", "=", "--=", "status",
                    "\u{1b}[2J", "a\rb", "é", "--profile=\u{7}", "--workspace=\n",
                ]),
                0..9,
            )
        ) {
            let words: Vec<String> = words.into_iter().map(str::to_string).collect();
            if let Some(front) = parsed_by_front(&words) {
                prop_assert_eq!(Some(front), parsed_by_clap(&words), "{:?}", words);
            }
        }
    }

    #[test]
    fn the_front_reads_the_usual_exec_lines() {
        for line in [
            "exec -- /bin/true",
            "exec --workspace ws --timeout 7 --profile strict --secret gh -- git push",
            "exec --workspace=ws --secret=a --secret b -- sh -c 'x'",
        ] {
            let words: Vec<String> = line.split(' ').map(str::to_string).collect();
            let front = parsed_by_front(&words);
            assert!(front.is_some(), "{line}");
            assert_eq!(front, parsed_by_clap(&words), "{line}");
        }
    }
}
