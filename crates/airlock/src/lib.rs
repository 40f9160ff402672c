//! The `airlock` binary's library half: command-line handling and wiring. It holds no
//! policy logic of its own; decisions come from `airlock-core`, records go to
//! `airlock-audit`.

pub mod cli;
pub mod cmd;
pub mod config;
pub mod home;
pub mod policies;
pub mod replay;
pub mod runtime;
