//! The `airlock` binary's library half: command-line handling and wiring. It holds no
//! policy logic of its own; decisions come from `airlock-core`, records go to
//! `airlock-audit`.

/// `println!` that returns the write error instead of panicking, so a closed pipe
/// (`airlock check … | head`) ends the command quietly (see `cli::main`).
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        std::io::Write::write_fmt(&mut std::io::stdout().lock(), format_args!("{}\n", format_args!($($arg)*)))?
    };
}

pub mod agent_executors;
pub mod agent_host;
pub mod audit_export;
pub mod channels;
pub mod cli;
pub mod cmd;
pub mod config;
pub mod config_audit;
pub mod demo_world;
pub mod egress;
pub mod home;
pub mod host;
pub mod inline_approvals;
pub mod live_gate;
pub mod memory_executor;
pub mod operator_file;
pub mod policies;
pub mod policy_change;
pub mod proxy_fetch;
pub mod replay;
pub mod runtime;
pub mod sampled_refusals;
pub mod sandbox_helper;
pub mod service;
pub mod subagents;
pub mod tasks;
pub mod transaction;
pub mod web;
