//! `airlock checkpoints list|show|diff|restore` and `airlock undo`: the workspace's
//! commits, and taking them back. Parsing and printing only; the work is in
//! [`crate::transaction::history`].

use std::path::PathBuf;

use clap::Subcommand;

use airlock_core::terminal_text::{escape_block, escape_line};
use airlock_workspace::{CheckpointInfo, RestoreReport};

use crate::config;
use crate::home::Home;
use crate::transaction::history::{workspace_dir, Checkpoints};

#[derive(Debug, Subcommand)]
pub enum CheckpointsCommand {
    /// Every checkpoint of the workspace, oldest first.
    List {
        /// Only this session's commits.
        #[arg(long)]
        session: Option<String>,
        /// The workspace (default: the current directory).
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
    },
    /// One checkpoint: who made it, and each path before and after.
    Show {
        id: String,
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
    },
    /// One checkpoint as a diff.
    Diff {
        id: String,
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
    },
    /// Restore the workspace to before checkpoint ID (reverting it and every later one).
    Restore {
        id: String,
        /// Overwrite files changed outside Airlock since.
        #[arg(long)]
        force: bool,
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
    },
}

/// `airlock undo`'s arguments.
#[derive(Debug, clap::Args)]
pub struct UndoArgs {
    /// How many of the last commits to revert.
    #[arg(default_value_t = 1)]
    pub n: usize,
    /// Overwrite files changed outside Airlock since.
    #[arg(long)]
    pub force: bool,
    /// The workspace (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
}

fn open(workspace: Option<&std::path::Path>) -> anyhow::Result<Checkpoints> {
    let home = Home::from_env()?;
    let cfg = config::load(&home.config_file())?;
    Checkpoints::open(&home, &cfg, &workspace_dir(workspace)?)
}

pub fn run(cmd: CheckpointsCommand) -> anyhow::Result<i32> {
    match cmd {
        CheckpointsCommand::List { session, workspace } => {
            let c = open(workspace.as_deref())?;
            let list = c.list(session.as_deref())?;
            if list.is_empty() {
                crate::out!("no checkpoints");
            }
            for info in &list {
                print_info(info)?;
            }
            c.close()?;
        }
        CheckpointsCommand::Show { id, workspace } => {
            let c = open(workspace.as_deref())?;
            let d = c.show(&id)?;
            print_info(&d.info)?;
            for op in &d.changes {
                crate::out!(
                    "  {}: {} -> {}",
                    op.path.display(),
                    describe(op.before.is_some()),
                    describe(op.after.is_some())
                );
            }
            c.close()?;
        }
        CheckpointsCommand::Diff { id, workspace } => {
            let c = open(workspace.as_deref())?;
            crate::out!("{}", escape_block(&c.diff(&id)?));
            c.close()?;
        }
        CheckpointsCommand::Restore {
            id,
            force,
            workspace,
        } => {
            let c = open(workspace.as_deref())?;
            let r = c.restore(&id, force)?;
            print_report(&r)?;
            c.close()?;
        }
    }
    Ok(0)
}

pub fn undo(args: UndoArgs) -> anyhow::Result<i32> {
    let c = open(args.workspace.as_deref())?;
    let r = c.undo(args.n, args.force)?;
    print_report(&r)?;
    c.close()?;
    Ok(0)
}

fn describe(present: bool) -> &'static str {
    if present {
        "present"
    } else {
        "absent"
    }
}

fn print_info(c: &CheckpointInfo) -> anyhow::Result<()> {
    let when = humantime::format_rfc3339_seconds(c.time);
    let state = match (c.restore_of, c.undone) {
        (Some(of), _) => format!("restore to before {of}"),
        (None, true) => "commit (undone)".into(),
        (None, false) => "commit".into(),
    };
    crate::out!(
        "{}  {when}  {state}  {:?}  +{} ~{} -{}  {} bytes  session {}  by {}  {}",
        c.id,
        c.status,
        c.added,
        c.modified,
        c.deleted,
        c.bytes_written,
        escape_line(&c.session),
        escape_line(&c.principal),
        escape_line(&c.note)
    );
    // Paths are kept escaped by the workspace crate already.
    for p in c.paths.iter().take(20) {
        crate::out!("    {p}");
    }
    if c.paths.len() > 20 {
        crate::out!("    … {} more", c.paths.len() - 20);
    }
    Ok(())
}

fn print_report(r: &RestoreReport) -> anyhow::Result<()> {
    let reverted: Vec<String> = r.reverted.iter().map(|c| c.to_string()).collect();
    crate::out!(
        "restored the workspace to before checkpoint {} (reverted {}); {} paths put back{}",
        r.restored_to_before,
        reverted.join(", "),
        r.paths.len(),
        r.checkpoint
            .map(|c| format!("; this restore is checkpoint {c}"))
            .unwrap_or_default()
    );
    for p in &r.paths {
        crate::out!("    {p}");
    }
    if !r.forced.is_empty() {
        crate::out!(
            "overwrote changes made outside Airlock (--force): {}",
            r.forced.join(", ")
        );
    }
    Ok(())
}
