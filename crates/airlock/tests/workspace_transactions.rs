//! Every run a transaction: the real binary, sandbox (with its overlay), Gate, approvals
//! queue, checkpoints and audit log. A run's writes reach the workspace only as a
//! `workspace.commit` the Gate allowed or the owner approved; `airlock undo` reverts one.

mod exec_fixture;
mod https_run_fixture;

#[path = "workspace_transactions/support.rs"]
mod support;

#[path = "workspace_transactions/held.rs"]
mod held;

#[path = "workspace_transactions/undo.rs"]
mod undo;

#[path = "workspace_transactions/names.rs"]
mod names;

#[path = "workspace_transactions/crash.rs"]
mod crash;

#[path = "workspace_transactions/files.rs"]
mod files;

#[path = "workspace_transactions/owners.rs"]
mod owners;
