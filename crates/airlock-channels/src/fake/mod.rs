//! Local stand-ins for the platforms, for tests: each speaks its platform's real wire
//! format (HTTP JSON, and for Slack and Discord the WebSocket handshakes, heartbeats and
//! reconnects) on a loopback port, and keeps a log of what the adapter did.

pub mod discord;
pub mod slack;
pub mod telegram;
pub mod tls;

pub use telegram::FakeTelegram;

use serde_json::Value;

/// Wait up to a minute for a call in `calls()` that `matches` (by its method or route)
/// and whose body satisfies `pred`: its body. Panics with every call listed otherwise.
pub(crate) fn wait_for_call(
    what: &str,
    calls: impl Fn() -> Vec<(String, Value)>,
    matches: impl Fn(&str) -> bool,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let all = calls();
        if let Some((_, b)) = all.iter().find(|(m, b)| matches(m) && pred(b)) {
            return b.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no {what} call as wanted; the calls were: {all:#?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
