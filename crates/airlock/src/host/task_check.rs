//! A task's pre-check: one command line run before the model is woken, so that "tell me
//! if X changed" costs no model call while X stays the same.
//!
//! It is an `airlock exec` in the host, with the same one implementation
//! ([`crate::service::exec`]): the Gate decides it (there is nobody to ask, so a check
//! the rules would hold is refused), the pooled sandbox runs it with its time limit, and
//! its records go through the host's one writer. It works in a workspace of the task's
//! own (`<state>/sessions/task-<id>/workspace`), kept from run to run so a check can
//! compare with what it saw last time.
//!
//! Its output is read through a pipe: the first [`CHECK_OUTPUT_KEPT`] bytes are kept for
//! the run history and the rest is read and dropped, so a chatty check can neither fill
//! memory nor block on a full pipe. The output is never shown to the model: it may carry
//! untrusted content, and a check decides only whether to wake it.

use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;

use super::Host;
use crate::service::caller::{Attachable, Caller, Notices};
use crate::service::exec::{exec, ExecRequest, Loaded};
use crate::tasks::store::{Check, CheckResult, CHECK_OUTPUT_KEPT};

/// Exit status of a check that found nothing to do.
pub const NOTHING_TO_DO: i32 = 1;

/// The task's own check workspace, created on first use.
fn workspace(host: &Host, task_id: &str) -> anyhow::Result<PathBuf> {
    let dir = host
        .home
        .state
        .join("sessions")
        .join(format!("task-{task_id}"))
        .join("workspace");
    crate::home::create_private_dir(&dir)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
    // Like an owner's `airlock exec` workspace, it stays the host's: the check writes
    // into its run's overlay, and only a commit the Gate allows reaches it.
    Ok(dir)
}

/// Run `check` for the task `task_id`: its exit status and what it printed.
pub fn run(host: &Host, task_id: &str, check: &Check) -> anyhow::Result<CheckResult> {
    let dir = workspace(host, task_id)?;
    let (mut reader, writer) = std::io::pipe()
        .map_err(|e| anyhow::anyhow!("cannot make a pipe for the pre-check: {e}"))?;
    let writer = Arc::new(std::fs::File::from(std::os::fd::OwnedFd::from(writer)));
    let notes = Attachable::new();
    let caller = Caller {
        // Nobody is there to answer a prompt: a check that would be held is refused.
        stdin: Some(
            std::fs::File::open("/dev/null")
                .map_err(|e| anyhow::anyhow!("cannot open /dev/null: {e}"))?,
        ),
        output: airlock_sandbox::OutputMode::Forward(airlock_sandbox::ForwardTo {
            stdout: writer.clone(),
            stderr: writer,
        }),
        notices: Notices::Attachable(notes.clone()),
        hang_up: None,
    };
    let kept = std::thread::Builder::new()
        .name("airlock-task-check".into())
        .spawn(move || {
            let mut kept = Vec::new();
            let mut buf = [0u8; 8192];
            loop {
                match reader.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let room = CHECK_OUTPUT_KEPT.saturating_sub(kept.len());
                        kept.extend_from_slice(&buf[..n.min(room)]);
                    }
                }
            }
            kept
        })?;
    let request = ExecRequest {
        command: check.command.clone(),
        workspace: Some(dir.clone()),
        cwd: dir,
        timeout: Some(check.timeout_secs),
        profile: None,
        secrets: Vec::new(),
    };
    let status = exec(
        &host.home,
        Loaded::Warm {
            warm: &host.warm,
            store: &host.run_store,
            audit: &host.audit,
            pool: Some(&host.pool),
        },
        &request,
        // The run lets it go (every copy of the pipe's write end), so the reader ends.
        caller,
        |_| {},
    );
    let output = kept.join().unwrap_or_default();
    let exit = status?;
    let mut output = String::from_utf8_lossy(&output).into_owned();
    let said = notes.take();
    if !said.is_empty() {
        output.push_str(&said);
    }
    Ok(CheckResult {
        exit,
        woke: exit == 0,
        output: crate::proxy_fetch::cut(output, CHECK_OUTPUT_KEPT),
    })
}
