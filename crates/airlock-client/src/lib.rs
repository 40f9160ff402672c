//! The small front of the `airlock` command, and what it shares with the full program.
//!
//! `airlock` is two binaries. `airlock-full` is the whole program: the CLI, the host, the
//! web page, the channels. Loading it costs about 3 ms before `main` (a 49 MB binary with
//! some 70,000 relocations and OpenSSL to link), which for `airlock exec` through a running
//! host was most of the client's share of the call. `airlock` is this crate's front
//! ([`front`]): it sends an `exec` to a running host itself, and hands every other command
//! line, unchanged, to `airlock-full` beside it.
//!
//! - [`dirs`]: where the config and state dirs are;
//! - [`host`]: whether a host holds the state dir, and its sockets;
//! - [`wire`]: the exec socket's requests and answers;
//! - [`peer`]: whether the process listening on a host's socket is one to talk to;
//! - [`send`]: one request with the caller's descriptors, and its answer.

pub mod dirs;
pub mod front;
pub mod host;
pub mod peer;
pub mod send;
pub mod wire;
