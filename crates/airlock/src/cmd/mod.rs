//! One module per subcommand.

pub mod approvals;
pub mod audit;
pub mod channel;
pub mod chat;
pub mod check;
pub mod checkpoints;
pub mod demo;
pub mod doctor;
pub mod exec;
pub mod grants;
pub mod init;
pub mod kill;
pub mod memory;
pub mod net;
pub mod policy;
pub mod replay;
pub mod run;
pub mod sandbox;
pub mod secret;
pub mod serve;
pub mod service;
pub mod tasks;
pub mod web;
