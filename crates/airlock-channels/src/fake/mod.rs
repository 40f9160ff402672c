//! Local stand-ins for the platforms, for tests: each speaks its platform's real wire
//! format (HTTP JSON, and for Slack and Discord the WebSocket handshakes, heartbeats and
//! reconnects) on a loopback port, and keeps a log of what the adapter did.

pub mod discord;
pub mod slack;
pub mod telegram;
pub mod tls;

pub use telegram::FakeTelegram;
